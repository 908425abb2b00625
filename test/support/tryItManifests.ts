/**
 * `deploy/try-it/` read as kubectl reads it: each YAML document an object. Shared by its own test
 * (test/DeployTryIt.test.ts, the shape) and the real-server test that applies it
 * (test/apiserver/tryIt.test.ts, that both servers take it and the program shows it).
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { parseAllDocuments } from "yaml"
import type { Manifest } from "./rbacManifests.ts"

/** The checkout's root: the README's paths are relative to it. */
export const RepoRoot = fileURLToPath(new URL("../../", import.meta.url))

/** The files, as the README's commands name them (relative to the root). */
export const TryItFiles = {
  crd: "deploy/try-it/crd.yaml",
  sandboxes: "deploy/try-it/sandboxes.yaml",
  statusDir: "deploy/try-it/status"
} as const

/** The namespace the README's commands use. */
export const TryItNamespace = "sandbox-try-it"

/** One status file: where it is, and the object it applies to the status subresource. */
export interface StatusFile {
  /** Relative to the root, as the README names it. */
  readonly file: string
  readonly manifest: Manifest
}

export interface TryIt {
  readonly crd: Manifest
  readonly sandboxes: ReadonlyArray<Manifest>
  /** In file-name order. */
  readonly statuses: ReadonlyArray<StatusFile>
  /** Every file under deploy/try-it, relative to the root: whatever is there must be one of the above. */
  readonly files: ReadonlyArray<string>
}

const documents = (file: string): ReadonlyArray<Manifest> =>
  parseAllDocuments(fs.readFileSync(path.join(RepoRoot, file), "utf8")).map((doc) => {
    if (doc.errors.length > 0) throw new Error(`${file}: ${doc.errors.map((e) => e.message).join("; ")}`)
    return doc.toJS() as Manifest
  })

const only = (file: string): Manifest => {
  const found = documents(file)
  if (found.length !== 1) throw new Error(`${file} should hold one object, holds ${found.length}`)
  return found[0]!
}

const filesUnder = (dir: string): ReadonlyArray<string> =>
  fs.readdirSync(path.join(RepoRoot, dir), { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory() ? filesUnder(`${dir}/${entry.name}`) : [`${dir}/${entry.name}`]
  )

export const readTryIt = (): TryIt => {
  const statusFiles = fs.readdirSync(path.join(RepoRoot, TryItFiles.statusDir)).sort()
  return {
    crd: only(TryItFiles.crd),
    sandboxes: documents(TryItFiles.sandboxes),
    statuses: statusFiles.map((name) => {
      const file = `${TryItFiles.statusDir}/${name}`
      return { file, manifest: only(file) }
    }),
    files: filesUnder("deploy/try-it").slice().sort()
  }
}
