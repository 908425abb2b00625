/**
 * Issue 43, section 2: the pod's path against the real kube-apiserver. The program is given what
 * a pod is given and nothing else: `KUBERNETES_SERVICE_HOST`/`_PORT`, and a service-account
 * directory laid out as the kubelet projects it (each file a link through `..data` to a
 * timestamped directory) holding a TokenRequest token of `deploy/rbac`'s ServiceAccount, the
 * server's CA and the namespace.
 *
 * Rotation, as the kubelet does it: the new token is written beside the old and `..data` is
 * swapped to it in one rename. The old token must then stop working: a TokenRequest cannot ask
 * for less than 10 minutes, so the old token is bound to a Secret and the Secret deleted, which
 * the server treats as the token's end (with `--service-account-lookup`, on by default).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { collectionPath } from "../../src/KubeResource.ts"
import { SandboxResource } from "../../src/Sandbox.ts"
import * as Program from "../support/ProgramProcess.ts"
import * as Facts from "./ApiServerFacts.ts"
import * as HttpFaultProxy from "./HttpFaultProxy.ts"
import * as Rbac from "./rbacSupport.ts"
import { poll } from "./watchSupport.ts"

const facts = Facts.load()
/** Starting a child costs seconds on a loaded machine; the rotation waits on the server's token cache. */
const ProcessTimeout = 180_000

const tempDir = Effect.acquireRelease(
  Effect.sync(() => mkdtempSync(join(tmpdir(), "sandbox-watch-pod-"))),
  (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
)

/**
 * A service-account directory as the kubelet projects it: the files in `..<generation>/`, `..data`
 * a link to it, and `token`, `ca.crt`, `namespace` links through `..data`. `rotate` writes a new
 * generation and swaps `..data` to it in one rename, then removes the old one, as the kubelet's
 * atomic writer does.
 */
const projectedVolume = (dir: string, files: Readonly<Record<string, string>>) => {
  let generation = 0
  let current: Record<string, string> = {}
  const write = (next: Readonly<Record<string, string>>) => {
    const previous = `..gen-${generation}`
    generation += 1
    const name = `..gen-${generation}`
    current = { ...current, ...next }
    mkdirSync(join(dir, name))
    for (const [file, content] of Object.entries(current)) {
      writeFileSync(join(dir, name, file), content, { mode: 0o600 })
    }
    symlinkSync(name, join(dir, "..data_tmp"))
    renameSync(join(dir, "..data_tmp"), join(dir, "..data"))
    if (generation > 1) rmSync(join(dir, previous), { recursive: true, force: true })
  }
  mkdirSync(dir)
  write(files)
  for (const file of Object.keys(files)) symlinkSync(join("..data", file), join(dir, file))
  return { rotate: write }
}

/** What a pod's environment holds for the API server, pointed at `port` on loopback. */
const podEnv = (home: string, port: string | number) => ({
  HOME: home,
  KUBERNETES_SERVICE_HOST: "127.0.0.1",
  KUBERNETES_SERVICE_PORT: String(port)
})

describe("the program in a pod's shape against the real kube-apiserver", () => {
  it.scopedLive(
    "a projected service-account directory: synced; the token rotated and the old one revoked, the watch goes on with no restart and nothing lost",
    () =>
      Effect.gen(function*() {
        const applied = yield* Rbac.applyToFreshNamespace(facts, "pod")
        const ns = applied.namespace
        const run = "pod"
        const { create, setPhase } = yield* Rbac.adminIn(facts, ns)
        yield* create("pod-a", run)
        yield* setPhase("pod-a", "Pending")

        const firstToken = yield* Rbac.mintToken(facts, applied, { boundToSecret: "pod-token-1" })
        // Through a proxy, so the watch's connection can be cut: a new request must authenticate anew.
        const proxy = yield* HttpFaultProxy.make(facts)
        const port = new URL(proxy.url).port
        const home = yield* tempDir
        const sa = join(home, "serviceaccount")
        const volume = projectedVolume(sa, { token: firstToken, "ca.crt": facts.caPem, namespace: ns })

        const program = yield* Program.start(
          ["--output", "ndjson", "--selector", `jr2.dev/run=${run}`, "--service-account-dir", sa],
          podEnv(home, port)
        )
        const synced = yield* program.awaitStdout((line) => line === `{"event":"synced"}`)
        expect((yield* program.stdout).slice(0, synced).map(Rbac.shortLine)).toEqual(["pod-a Pending"])
        expect((yield* program.stderr)[0]).toBe(
          `sandbox-watch: watching Sandboxes in namespace ${ns} (selector jr2.dev/run=${run}) on https://127.0.0.1:${port}, ` +
            `from in-cluster service account ${sa} (https://127.0.0.1:${port})`
        )
        yield* create("pod-b", run)
        yield* program.awaitStdout((l) => Rbac.shortLine(l) === "pod-b -", synced)

        // The kubelet rotates: a new token, swapped in atomically; then the old one ends.
        const secondToken = yield* Rbac.mintToken(facts, applied, { boundToSecret: "pod-token-2" })
        volume.rotate({ token: secondToken })
        yield* Rbac.revokeBoundSecret(facts, applied, "pod-token-1")
        const sandboxes = `${collectionPath(SandboxResource, ns)}?limit=1`
        // The server caches a token's success for 10 s: wait until the old one is really refused.
        yield* poll(
          Facts.request(applied.http, "GET", sandboxes, { token: firstToken }),
          (r) => r.status === 401,
          "the revoked token to be refused"
        )
        expect((yield* Facts.request(applied.http, "GET", sandboxes, { token: secondToken })).status).toBe(200)

        // A change while the watch is cut: the program must ask again, and can only with the new token.
        const beforeCut = (yield* program.stdout).length
        expect(yield* proxy.cutOpen).toBeGreaterThanOrEqual(1)
        yield* setPhase("pod-a", "Ready")
        const told = yield* program.awaitStdout((l) => Rbac.shortLine(l) === "pod-a Ready", beforeCut)
        // Resumed, not restarted: no second list, nothing told twice or gone.
        expect((yield* program.stdout).slice(synced, told + 1).map(Rbac.shortLine)).toEqual([
          "synced",
          "pod-b -",
          "pod-a Ready"
        ])

        yield* program.kill("SIGTERM")
        expect(yield* program.exited).toStrictEqual({ code: 0, signal: null })
        const output = [...(yield* program.stdout), ...(yield* program.stderr)]
        expect(output.some((l) => l.includes(firstToken) || l.includes(secondToken))).toBe(false)
      }),
    ProcessTimeout
  )

  it.scopedLive(
    "a CA that is not the server's: the program says, in one line, that it is the CA",
    () =>
      Effect.gen(function*() {
        const applied = yield* Rbac.applyToFreshNamespace(facts, "pod-ca")
        const token = yield* Rbac.mintToken(facts, applied)
        const home = yield* tempDir
        const sa = join(home, "serviceaccount")
        const otherCa = readFileSync(new URL("../fixtures/kubeconfig/pki/ca.pem", import.meta.url), "utf8")
        projectedVolume(sa, { token, "ca.crt": otherCa, namespace: applied.namespace })

        const program = yield* Program.start(
          ["--output", "ndjson", "--service-account-dir", sa],
          podEnv(home, facts.port)
        )
        const said = yield* program.awaitStderr((l) => l.includes("not signed by"))
        const line = (yield* program.stderr)[said]!
        // The text log names the request in a word ("the watch"); the server is named with the CA.
        expect(line).toContain(
          `the watch got no answer: the server's certificate is not signed by the CA of ` +
            `in-cluster service account ${sa} (https://127.0.0.1:${facts.port}); is it this cluster's CA?`
        )
        yield* program.kill("SIGTERM")
        expect(yield* program.exited).toStrictEqual({ code: 0, signal: null })
        // Nothing was heard, so nothing is told.
        expect(yield* program.stdout).toEqual([])
        expect((yield* program.stderr).some((l) => l.includes(token))).toBe(false)
      }),
    ProcessTimeout
  )
})
