/**
 * `deploy/try-it/` is what the README's "Try it on a local cluster" section applies: the CRD the
 * tests install, Sandboxes of which the program's default selector picks all but one, and statuses
 * that are only statuses. The README's commands name these files, word for word. (That both real
 * servers take them and the program shows them: test/apiserver/tryIt.test.ts.)
 */
import { describe, expect, it } from "@effect/vitest"
import { Either, Schema } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { matchesLabels, parseLabelSelector } from "../src/internal/labelSelector.ts"
import * as KubeResource from "../src/KubeResource.ts"
import { DefaultLabelSelector, SandboxResource, SandboxSpec, SandboxStatus } from "../src/Sandbox.ts"
import { sandboxCrd } from "./apiserver/RealApiServer.ts"
import { readTryIt, RepoRoot, TryItFiles, TryItNamespace } from "./support/tryItManifests.ts"

const tryIt = readTryIt()
const defaultSelector = Either.getOrThrow(parseLabelSelector(DefaultLabelSelector))
const labelsOf = (manifest: { readonly metadata: object }) =>
  (manifest.metadata as { readonly labels?: Record<string, string> }).labels
const sandboxNamed = (name: string) => tryIt.sandboxes.find((s) => s.metadata.name === name)

/** The README's section, from its heading to the next. */
const readmeSection = (): string => {
  const readme = fs.readFileSync(path.join(RepoRoot, "README.md"), "utf8")
  const start = readme.indexOf("\n## Try it on a local cluster\n")
  if (start < 0) throw new Error("README.md has no section \"Try it on a local cluster\"")
  const end = readme.indexOf("\n## ", start + 1)
  return readme.slice(start, end < 0 ? undefined : end)
}

/** Every command the section gives: each line of its `sh` blocks (less a trailing comment), and each inline `kubectl ...`. */
const commandsOf = (section: string): ReadonlyArray<string> => {
  const blocks = [...section.matchAll(/```sh\n([\s\S]*?)```/g)].flatMap((m) => m[1]!.split("\n"))
  const inline = [...section.matchAll(/`(kubectl [^`]+)`/g)].map((m) => m[1]!)
  return [...blocks.map((line) => line.replace(/\s+#.*$/, "").trim()), ...inline].filter((c) => c !== "")
}

describe("deploy/try-it", () => {
  it("holds the CRD, the Sandboxes and one status file for each status, nothing else", () => {
    expect(tryIt.files).toEqual([
      TryItFiles.crd,
      TryItFiles.sandboxes,
      `${TryItFiles.statusDir}/try-pending.yaml`,
      `${TryItFiles.statusDir}/try-ready.yaml`
    ])
  })

  it("the CRD is the one the real-server tests install, for the resource the watch asks for", () => {
    expect(tryIt.crd).toEqual(sandboxCrd)
    const spec = sandboxCrd.spec
    expect(spec.group).toBe(SandboxResource.group)
    expect(spec.names.plural).toBe(SandboxResource.plural)
    expect(spec.scope === "Namespaced").toBe(SandboxResource.namespaced)
    expect(spec.versions.map((v) => v.name)).toEqual([SandboxResource.version])
    // Only a write to /status sets a status, as the operator writes it: the status files rely on it.
    expect(spec.versions[0].subresources).toEqual({ status: {} })
  })

  it("the Sandboxes name no namespace and carry no status; the default selector picks all but try-unlabelled", () => {
    expect(tryIt.sandboxes.map((s) => `${s.apiVersion} ${s.kind} ${s.metadata.name}`)).toEqual([
      `${KubeResource.apiVersion(SandboxResource)} Sandbox try-ready`,
      `${KubeResource.apiVersion(SandboxResource)} Sandbox try-pending`,
      `${KubeResource.apiVersion(SandboxResource)} Sandbox try-unlabelled`
    ])
    expect(tryIt.sandboxes.filter((s) => s.metadata.namespace !== undefined)).toEqual([])
    expect(tryIt.sandboxes.filter((s) => s.status !== undefined)).toEqual([])
    expect(
      tryIt.sandboxes.filter((s) => matchesLabels(defaultSelector, labelsOf(s))).map((s) => s.metadata.name)
    ).toEqual(["try-ready", "try-pending"])
  })

  it("each Sandbox is one the watch decodes whole: every field it holds is one the watch reads", () => {
    for (const sandbox of tryIt.sandboxes) {
      expect({ name: sandbox.metadata.name, spec: Schema.decodeUnknownSync(SandboxSpec)(sandbox.spec) }).toEqual({
        name: sandbox.metadata.name,
        spec: sandbox.spec
      })
    }
  })

  it("each status file is only a status, named after its Sandbox, one Ready and one Pending, decoded whole", () => {
    for (const { file, manifest } of tryIt.statuses) {
      expect(file).toBe(`${TryItFiles.statusDir}/${manifest.metadata.name}.yaml`)
      // What the status subresource keeps of a write: anything more would be dropped unsaid.
      expect(Object.keys(manifest).sort()).toEqual(["apiVersion", "kind", "metadata", "status"])
      expect(manifest.metadata).toEqual({ name: manifest.metadata.name })
      const sandbox = sandboxNamed(manifest.metadata.name)
      expect(sandbox, `${file} names a Sandbox that sandboxes.yaml holds`).toBeDefined()
      expect(`${manifest.apiVersion} ${manifest.kind}`).toBe(`${sandbox!.apiVersion} ${sandbox!.kind}`)
      expect(Schema.decodeUnknownSync(SandboxStatus)(manifest.status)).toEqual(manifest.status)
    }
    expect(tryIt.statuses.map((s) => `${s.manifest.metadata.name} ${(s.manifest.status as { phase: string }).phase}`))
      .toEqual(["try-pending Pending", "try-ready Ready"])
  })
})

describe("the README's \"Try it on a local cluster\"", () => {
  const commands = commandsOf(readmeSection())

  it("names every file of deploy/try-it, and only files that are there", () => {
    const named = new Set(commands.flatMap((c) => [...c.matchAll(/deploy\/[\w./-]+/g)].map((m) => m[0])))
    for (const file of tryIt.files) expect(named, file).toContain(file)
    for (const file of named) expect(fs.existsSync(path.join(RepoRoot, file)), `${file} exists`).toBe(true)
  })

  it("patches each status onto the Sandbox its file names, through the status subresource", () => {
    const patches = commands.filter((c) => c.startsWith("kubectl patch "))
    expect(patches).toHaveLength(tryIt.statuses.length)
    for (const { file, manifest } of tryIt.statuses) {
      const command = patches.find((c) => c.includes(`--patch-file ${file}`))
      expect(command, `a patch command with ${file}`).toBeDefined()
      expect(command).toMatch(new RegExp(`^kubectl patch sandbox ${manifest.metadata.name} `))
      expect(command).toContain("--subresource=status")
      // A custom resource takes no strategic merge patch (kubectl's default): 415.
      expect(command).toContain("--type=merge")
    }
  })

  it("works in one namespace throughout", () => {
    const namespaces = commands.flatMap((c) =>
      [...c.matchAll(/(?:^|\s)(?:-n|--namespace)[ =]([\w.-]+)/g)].map((m) => m[1])
    )
    expect(namespaces.length).toBeGreaterThan(5)
    expect(new Set(namespaces)).toEqual(new Set([TryItNamespace]))
    expect(commands).toContain(`kubectl create namespace ${TryItNamespace}`)
  })

  it("labels try-unlabelled so that the default selector picks it", () => {
    const label = commands.find((c) => c.startsWith("kubectl label sandbox try-unlabelled "))
    expect(label).toBeDefined()
    const [key, value] = label!.split(" ").find((word) => word.includes("="))!.split("=")
    expect(labelsOf(sandboxNamed("try-unlabelled")!)).toBeUndefined()
    expect(matchesLabels(defaultSelector, { [key!]: value! })).toBe(true)
  })
})
