/**
 * Issue 47 §2: `deploy/try-it/` as the README's "Try it on a local cluster" applies it. No kubectl
 * here: each file is sent as kubectl sends it (the object as JSON, which is YAML, and kubectl's
 * field manager), so the apiserver validates it as it would on a kind cluster:
 *   `kubectl apply --server-side -f FILE`  PATCH application/apply-patch+yaml, fieldManager=kubectl;
 *   `... --subresource=status` (kubectl 1.32+) the same on /status;
 *   `kubectl patch ... --subresource=status --type=merge --patch-file FILE` (1.24+, the README's)
 *                                          PATCH application/merge-patch+json on /status;
 *   `kubectl label`                        a merge patch of the labels.
 * Then the bundled program (`npm start`'s) runs with deploy/rbac's ServiceAccount's token alone,
 * the default selector, and the context's namespace, and says what the files say.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { stringify } from "yaml"
import { collectionPath, objectPath } from "../../src/KubeResource.ts"
import { DefaultLabelSelector, SandboxResource } from "../../src/Sandbox.ts"
import * as Program from "../support/ProgramProcess.ts"
import type { Manifest } from "../support/rbacManifests.ts"
import { readTryIt } from "../support/tryItManifests.ts"
import * as Facts from "./ApiServerFacts.ts"
import type { Http } from "./ApiServerFacts.ts"
import * as Rbac from "./rbacSupport.ts"
import { poll } from "./watchSupport.ts"

const facts = Facts.load()
const tryIt = readTryIt()
/** Bundling and starting a child cost seconds on a loaded machine. */
const ProcessTimeout = 120_000
const crdPath = `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${tryIt.crd.metadata.name}`

const tempDir = Effect.acquireRelease(
  Effect.sync(() => mkdtempSync(join(tmpdir(), "sandbox-watch-try-it-"))),
  (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
)

/** An answer with the status expected, else the test dies saying what the server answered. */
const answered = (what: string, status: number) => (response: Facts.JsonResponse) =>
  response.status === status
    ? Effect.succeed(response.json)
    : Effect.dieMessage(`${what} answered ${response.status}, not ${status}: ${JSON.stringify(response.json)}`)

/** `kubectl apply --server-side -f`: the object as JSON, field manager `kubectl`, no force. */
const serverSideApply = (http: Http, path: string, manifest: Manifest) =>
  Facts.request(http, "PATCH", `${path}?fieldManager=kubectl`, {
    token: facts.adminToken,
    body: manifest,
    contentType: "application/apply-patch+yaml"
  })

/** `kubectl patch --type=merge --patch-file` (and `kubectl label`): the file as JSON, a merge patch. */
const mergePatch = (http: Http, path: string, patch: unknown, fieldManager: string) =>
  Facts.request(http, "PATCH", `${path}?fieldManager=${fieldManager}`, {
    token: facts.adminToken,
    body: patch,
    contentType: "application/merge-patch+json"
  })

const sandboxPath = (namespace: string, name: string) => objectPath(SandboxResource, namespace, name)
const statusOf = (name: string) => tryIt.statuses.find((s) => s.manifest.metadata.name === name)?.manifest.status
const labelsOf = (manifest: Manifest) => (manifest.metadata as { readonly labels?: unknown }).labels
const sandboxLabels = (name: string) => labelsOf(tryIt.sandboxes.find((s) => s.metadata.name === name)!)

/** `kubectl apply --server-side -f deploy/try-it/sandboxes.yaml -n <namespace>`: each created, no status. */
const applySandboxes = (http: Http, namespace: string) =>
  Effect.forEach(
    tryIt.sandboxes,
    (sandbox) =>
      serverSideApply(http, sandboxPath(namespace, sandbox.metadata.name), sandbox).pipe(
        Effect.flatMap(answered(`applying Sandbox ${sandbox.metadata.name}`, 201)),
        Effect.tap((stored) => {
          expect(stored.metadata.labels).toEqual(labelsOf(sandbox))
          expect(stored.spec).toEqual(sandbox.spec)
          expect(stored.status).toBeUndefined()
        })
      )
  )

interface ManagedFieldsEntry {
  readonly manager: string
  readonly operation: string
  /** Since 1.22. */
  readonly subresource?: string
  readonly fieldsV1: Record<string, unknown>
}

interface Line {
  readonly event: string
  readonly name?: string
  readonly sandbox?: {
    readonly metadata: { readonly namespace?: string; readonly labels?: Record<string, string> }
    readonly status?: unknown
  } | null
}

describe("deploy/try-it on the real kube-apiserver, as the README's \"Try it on a local cluster\" applies it", () => {
  it.scopedLive(
    "server-side applied, the program as deploy/rbac's ServiceAccount shows try-ready Ready and try-pending Pending, " +
      "not try-unlabelled until it is labelled",
    () =>
      Effect.gen(function*() {
        // kubectl create namespace …; kubectl apply -k deploy/rbac -n …
        const applied = yield* Rbac.applyToFreshNamespace(facts, "try-it")
        const { http, namespace } = applied

        // kubectl apply --server-side -f deploy/try-it/crd.yaml: the server's bootstrap made the same
        // CRD, so this applies over it; a field that differed would be a 409 conflict.
        const crd = yield* serverSideApply(http, crdPath, tryIt.crd).pipe(
          Effect.flatMap(answered("applying deploy/try-it/crd.yaml", 200))
        )
        expect(crd.spec).toMatchObject(tryIt.crd.spec as object)
        // kubectl wait --for condition=established crd/sandboxes.jr2.dev
        yield* poll(
          Facts.request(http, "GET", crdPath, { token: facts.adminToken }),
          (r) => (r.json?.status?.conditions ?? []).some((c: any) => c.type === "Established" && c.status === "True"),
          "the CRD to be Established"
        )

        yield* applySandboxes(http, namespace)
        // kubectl apply --server-side --subresource=status -f deploy/try-it/status/<name>.yaml
        for (const { file, manifest } of tryIt.statuses) {
          const stored = yield* serverSideApply(
            http,
            `${sandboxPath(namespace, manifest.metadata.name)}/status`,
            manifest
          )
            .pipe(Effect.flatMap(answered(`applying ${file} to the status subresource`, 200)))
          expect(stored.status).toEqual(manifest.status)
          // A status write leaves the rest as it was.
          expect(stored.metadata.labels).toEqual(sandboxLabels(manifest.metadata.name))
        }
        // Where the servers differ: what kubectl is then recorded as owning. 1.22+ keeps an apply to
        // /status apart (`subresource: status`); 1.20 keeps one Apply entry a manager, so the status
        // apply took kubectl's over, and the labels and spec it applied are left owned by no one (they
        // stay: a status write cannot change them). The README patches statuses (`kubectl-patch`, an
        // Update) and so shares no entry with `kubectl apply` on either.
        const ready = yield* Facts.request(http, "GET", sandboxPath(namespace, "try-ready"), {
          token: facts.adminToken
        }).pipe(Effect.flatMap(answered("reading try-ready", 200)))
        const ownedByKubectl = (ready.metadata.managedFields as ReadonlyArray<ManagedFieldsEntry>)
          .filter((entry) => entry.manager === "kubectl" && entry.operation === "Apply")
          .map((entry) => ({ subresource: entry.subresource ?? "(none)", fields: Object.keys(entry.fieldsV1).sort() }))
        expect(ownedByKubectl).toEqual(
          facts.minor >= 22
            ? [
              { subresource: "(none)", fields: ["f:metadata", "f:spec"] },
              { subresource: "status", fields: ["f:status"] }
            ]
            : [{ subresource: "(none)", fields: ["f:status"] }]
        )

        // The README's other path: a token of the ServiceAccount in a kubeconfig whose context names
        // the namespace (what its `kubectl config set-credentials/set-context` lines make).
        const token = yield* Rbac.mintToken(facts, applied)
        const dir = yield* tempDir
        const kubeconfig = join(dir, "kubeconfig")
        writeFileSync(
          kubeconfig,
          stringify({
            apiVersion: "v1",
            kind: "Config",
            "current-context": "try-it",
            clusters: [{
              name: "real",
              cluster: { server: facts.url, "certificate-authority-data": Buffer.from(facts.caPem).toString("base64") }
            }],
            contexts: [{ name: "try-it", context: { cluster: "real", user: "sandbox-watch", namespace } }],
            users: [{ name: "sandbox-watch", user: { token } }]
          }),
          { mode: 0o600 }
        )
        // npm start -- --kubeconfig …: the bundle, no --selector, no --namespace.
        yield* Program.bundle
        const program = yield* Program.start(
          ["--kubeconfig", kubeconfig, "--output", "ndjson"],
          { HOME: dir },
          Program.Bundled
        )
        const synced = yield* program.awaitStdout((line) => line === `{"event":"synced"}`)
        const listed = (yield* program.stdout).slice(0, synced)
        expect(listed.map(Rbac.shortLine).sort()).toEqual(["try-pending Pending", "try-ready Ready"])
        for (const line of listed.map((l) => JSON.parse(l) as Line)) {
          expect(line.sandbox?.metadata).toMatchObject({ namespace, labels: { "jr2.dev/run": "try-it" } })
          // Each status exactly as its file says it, no field lost to the watch's schema.
          expect(line.sandbox?.status).toEqual(statusOf(line.name!))
        }
        const stderr = yield* program.stderr
        expect(stderr[0]).toBe(
          `sandbox-watch: watching Sandboxes in namespace ${namespace} (selector jr2.dev/run) on ${facts.url}, ` +
            `from kubeconfig ${kubeconfig}, context try-it`
        )

        // kubectl label sandbox try-unlabelled jr2.dev/run=try-it -n …: the selector picks it, live.
        yield* mergePatch(
          http,
          sandboxPath(namespace, "try-unlabelled"),
          { metadata: { labels: { "jr2.dev/run": "try-it" } } },
          "kubectl-label"
        ).pipe(Effect.flatMap(answered("labelling try-unlabelled", 200)))
        yield* program.awaitStdout((line) => Rbac.shortLine(line) === "try-unlabelled -", synced)

        yield* program.kill("SIGTERM")
        expect(yield* program.exited).toStrictEqual({ code: 0, signal: null })
        const stdout = yield* program.stdout
        expect(stdout.slice(synced).filter((l) => l !== "").map(Rbac.shortLine)).toEqual([
          "synced",
          "try-unlabelled -"
        ])
        expect([...stdout, ...(yield* program.stderr)].some((l) => l.includes(token))).toBe(false)
      }),
    ProcessTimeout
  )

  it.scopedLive(
    "the statuses as the README patches them (`kubectl patch --subresource=status --type=merge --patch-file`) " +
      "are stored as the files say",
    () =>
      Effect.gen(function*() {
        const applied = yield* Rbac.applyToFreshNamespace(facts, "try-it-patch")
        const { http, namespace } = applied
        yield* applySandboxes(http, namespace)
        for (const { file, manifest } of tryIt.statuses) {
          // The whole file is the patch: apiVersion, kind and name are the stored ones, so only the status changes.
          const stored = yield* mergePatch(
            http,
            `${sandboxPath(namespace, manifest.metadata.name)}/status`,
            manifest,
            "kubectl-patch"
          ).pipe(Effect.flatMap(answered(`patching ${file} onto the status subresource`, 200)))
          expect(stored.status).toEqual(manifest.status)
          expect(stored.metadata.labels).toEqual(sandboxLabels(manifest.metadata.name))
        }
        // Read back as the program lists them: deploy/rbac's ServiceAccount, the default selector.
        const listed = yield* Facts.request(
          http,
          "GET",
          `${collectionPath(SandboxResource, namespace)}?labelSelector=${encodeURIComponent(DefaultLabelSelector)}`,
          { token: yield* Rbac.mintToken(facts, applied) }
        ).pipe(Effect.flatMap(answered("listing the Sandboxes", 200)))
        const items = (listed.items as ReadonlyArray<{ metadata: { name: string }; status?: { phase?: string } }>)
          .slice()
          .sort((a, b) => a.metadata.name.localeCompare(b.metadata.name))
        expect(items.map((s) => `${s.metadata.name} ${s.status?.phase}`)).toEqual([
          "try-pending Pending",
          "try-ready Ready"
        ])
        for (const item of items) expect(item.status).toEqual(statusOf(item.metadata.name))
      }),
    ProcessTimeout
  )
})
