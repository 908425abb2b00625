/**
 * `deploy/rbac/` read as `kubectl apply -k` reads it: the kustomization's resources, in order, each
 * YAML document an object. Shared by the manifests' own test and the real-server tests that apply them.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { parseAllDocuments, parseDocument } from "yaml"

/** The manifests under test. */
export const RbacDir = fileURLToPath(new URL("../../deploy/rbac", import.meta.url))

export interface Manifest {
  readonly apiVersion: string
  readonly kind: string
  readonly metadata: { readonly name: string; readonly namespace?: string }
  readonly [field: string]: unknown
}

/**
 * The kustomization's resources, in its order. Only a kustomization that lists resources is read:
 * anything more (a `namespace:`, a patch) fails the test rather than being silently ignored.
 */
export const readManifests = (dir: string = RbacDir): ReadonlyArray<Manifest> => {
  const kustomization = parseDocument(fs.readFileSync(path.join(dir, "kustomization.yaml"), "utf8")).toJS() as Record<
    string,
    unknown
  >
  const unknown = Object.keys(kustomization).filter((key) => !["apiVersion", "kind", "resources"].includes(key))
  if (unknown.length > 0) throw new Error(`${dir}/kustomization.yaml: the tests cannot apply ${unknown.join(", ")}`)
  const resources = kustomization.resources as ReadonlyArray<string>
  return resources.flatMap((file) =>
    parseAllDocuments(fs.readFileSync(path.join(dir, file), "utf8")).map((doc) => doc.toJS() as Manifest)
  )
}

export const manifestOf = (manifests: ReadonlyArray<Manifest>, kind: string): Manifest => {
  const found = manifests.filter((m) => m.kind === kind)
  if (found.length !== 1) throw new Error(`deploy/rbac should hold one ${kind}, holds ${found.length}`)
  return found[0]!
}
