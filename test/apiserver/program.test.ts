/**
 * The program itself, `sandbox-watch --output ndjson`, against the real kube-apiserver through the
 * fault proxy, configured as a person would: a kubeconfig with the server URL (the proxy), the CA
 * data and a bearer token. Checks the NDJSON contract and that the token never shows.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { stringify } from "yaml"
import { SandboxResource } from "../../src/Sandbox.ts"
import * as FaultProxy from "../support/FaultProxy.ts"
import * as Program from "../support/ProgramProcess.ts"
import * as Facts from "./ApiServerFacts.ts"
import { clientOn, sandboxBody } from "./watchSupport.ts"

const facts = Facts.load()
const ns = facts.namespace
const run = "program"
/** Starting a child costs seconds on a loaded machine (loading `effect` alone): room for it. */
const ProcessTimeout = 90_000

const tempDir = Effect.acquireRelease(
  Effect.sync(() => mkdtempSync(join(tmpdir(), "sandbox-watch-program-real-"))),
  (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
)

interface Line {
  readonly event: string
  readonly name?: string
  readonly sandbox?: {
    readonly metadata: { readonly name: string; readonly namespace?: string; readonly resourceVersion: string }
    readonly status?: { readonly phase?: string }
  } | null
}
const parse = (line: string): Line => JSON.parse(line) as Line
/** `name phase`, `name -` without a phase, `name gone`; or the event. */
const short = (line: string): string => {
  const l = parse(line)
  return l.event !== "change" ? l.event : `${l.name} ${l.sandbox === null ? "gone" : (l.sandbox?.status?.phase ?? "-")}`
}
const changeOf = (name: string, what: (l: Line) => boolean) => (line: string) => {
  const l = parse(line)
  return l.event === "change" && l.name === name && what(l)
}

describe("sandbox-watch --output ndjson against the real kube-apiserver", () => {
  it.scopedLive(
    "tells the first list, synced, then every change; a cut connection is ridden through; a delete is null; the token never shows",
    () =>
      Effect.gen(function*() {
        const admin = yield* clientOn(Facts.connection(facts))
        const status = (name: string, phase: string) =>
          admin.mergePatch(SandboxResource, ns, name, { status: { phase } }, { subresource: "status" })
        yield* admin.create(SandboxResource, ns, sandboxBody(ns, "prog-a", run))
        yield* status("prog-a", "Pending")
        yield* admin.create(SandboxResource, ns, sandboxBody(ns, "prog-b", run))
        // Another run's Sandbox: never told.
        yield* admin.create(SandboxResource, ns, sandboxBody(ns, "prog-other", `${run}-other`))

        const proxy = yield* FaultProxy.make({ targetPort: facts.port })
        const dir = yield* tempDir
        const kubeconfig = join(dir, "kubeconfig")
        writeFileSync(
          kubeconfig,
          stringify({
            apiVersion: "v1",
            kind: "Config",
            "current-context": "real",
            clusters: [{
              name: "real",
              cluster: {
                server: proxy.url("https"),
                "certificate-authority-data": Buffer.from(facts.caPem).toString("base64")
              }
            }],
            contexts: [{ name: "real", context: { cluster: "real", user: "admin", namespace: ns } }],
            users: [{ name: "admin", user: { token: facts.adminToken } }]
          }),
          { mode: 0o600 }
        )

        const program = yield* Program.start(
          ["--kubeconfig", kubeconfig, "--output", "ndjson", "--selector", `jr2.dev/run=${run}`],
          { HOME: dir }
        )
        const synced = yield* program.awaitStdout((line) => line === `{"event":"synced"}`)
        expect((yield* program.stdout).slice(0, synced).map(short).sort()).toEqual(["prog-a Pending", "prog-b -"])

        yield* admin.create(SandboxResource, ns, sandboxBody(ns, "prog-c", run))
        yield* program.awaitStdout(changeOf("prog-c", (l) => l.sandbox !== null), synced)
        yield* status("prog-a", "Ready")
        yield* program.awaitStdout(changeOf("prog-a", (l) => l.sandbox?.status?.phase === "Ready"), synced)
        // The connection under the watch is cut: the program resumes and hears what followed.
        expect(yield* proxy.resetAll).toBeGreaterThanOrEqual(1)
        yield* admin.delete(SandboxResource, ns, "prog-b")
        yield* program.awaitStdout(changeOf("prog-b", (l) => l.sandbox === null), synced)
        // A Sandbox that stops matching the selector is gone as far as the watch can say.
        yield* admin.mergePatch(SandboxResource, ns, "prog-c", { metadata: { labels: { "jr2.dev/run": null } } })
        yield* program.awaitStdout(changeOf("prog-c", (l) => l.sandbox === null), synced)

        yield* program.kill("SIGTERM")
        expect(yield* program.exited).toStrictEqual({ code: 0, signal: null })

        const stdout = yield* program.stdout
        // Every line is one JSON object: `synced` once, then changes.
        const lines = stdout.filter((l) => l !== "").map(parse)
        expect(lines.filter((l) => l.event === "synced")).toHaveLength(1)
        expect(lines.every((l) => l.event === "synced" || l.event === "change")).toBe(true)
        expect(stdout.slice(synced).filter((l) => l !== "").map(short)).toEqual([
          "synced",
          "prog-c -",
          "prog-a Ready",
          "prog-b gone",
          "prog-c gone"
        ])
        expect(stdout.some((l) => l.includes("prog-other"))).toBe(false)
        const ready = parse(stdout.find(changeOf("prog-a", (l) => l.sandbox?.status?.phase === "Ready"))!)
        expect(ready.sandbox).toMatchObject({
          metadata: { name: "prog-a", namespace: ns, labels: { "jr2.dev/run": run } },
          spec: { resources: { limits: { memory: "2Gi" } } },
          status: { phase: "Ready" }
        })
        expect(ready.sandbox?.metadata.resourceVersion).toMatch(/^\d+$/)

        const stderr = yield* program.stderr
        expect(stderr[0]).toBe(
          `sandbox-watch: watching Sandboxes in namespace ${ns} (selector jr2.dev/run=${run}) on ${
            proxy.url("https")
          }, from kubeconfig ${kubeconfig}, context real`
        )
        // The cut was noticed and said so, on stderr (what, and that it resumes).
        expect(stderr.some((l) => /resuming from resourceVersion \d+/.test(l))).toBe(true)
        expect([...stdout, ...stderr].some((l) => l.includes(facts.adminToken))).toBe(false)
      }),
    ProcessTimeout
  )
})
