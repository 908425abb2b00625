/**
 * Issue 43, section 1: `deploy/rbac/` is all the watch needs. Applied to a fresh namespace, with a
 * TokenRequest token of its ServiceAccount and nothing else (admin only sets up and writes the
 * Sandboxes), the library and the program sync and follow changes. Taking `watch`, then `list`,
 * out of the Role: the program says in one line which permission is missing, keeps its cache,
 * and heals without a restart once the Role is put back.
 *
 * The two servers differ in one place: 1.37 streams lists, and RBAC checks a streaming list as a
 * `watch`, so in `auto` there a re-list needs no `list` at all; 1.20 cannot stream, so its lists
 * are pages and need `list`. `--list-mode paged` needs `list` on both.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { stringify } from "yaml"
import * as KubeClient from "../../src/KubeClient.ts"
import * as SandboxWatch from "../../src/SandboxWatch.ts"
import * as Program from "../support/ProgramProcess.ts"
import * as Facts from "./ApiServerFacts.ts"
import * as HttpFaultProxy from "./HttpFaultProxy.ts"
import * as Rbac from "./rbacSupport.ts"
import { clientOn, recordAll } from "./watchSupport.ts"

const facts = Facts.load()
/** Starting a child costs seconds on a loaded machine; each phase waits on RBAC and a back-off. */
const ProcessTimeout = 180_000
/** WatchList is on by default in 1.32 and from 1.34; the suite's servers are 1.20 and 1.37. */
const streamsLists = facts.minor >= 34

const tempDir = Effect.acquireRelease(
  Effect.sync(() => mkdtempSync(join(tmpdir(), "sandbox-watch-rbac-"))),
  (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
)

describe("deploy/rbac against the real kube-apiserver, with only its ServiceAccount's token", () => {
  it.live("the library syncs and follows changes", () =>
    Effect.scoped(Effect.gen(function*() {
      const applied = yield* Rbac.applyToFreshNamespace(facts, "rbac-lib")
      const ns = applied.namespace
      const run = "rbac-lib"
      const { create, setPhase } = yield* Rbac.adminIn(facts, ns)
      yield* create("lib-a", run)
      yield* setPhase("lib-a", "Pending")

      const token = yield* Rbac.mintToken(facts, applied)
      const client = yield* clientOn(Facts.connection(facts, { token, namespace: ns }))
      // The defaults a library user gets (`auto`), but for a quick back-off.
      const watch = yield* SandboxWatch.make({
        namespace: ns,
        labelSelector: `jr2.dev/run=${run}`,
        backoffFloor: "50 millis",
        backoffCap: "2 seconds"
      }).pipe(Effect.provideService(KubeClient.KubeClient, client))
      yield* watch.synced
      expect([...(yield* watch.snapshot).keys()]).toEqual(["lib-a"])
      const all = yield* recordAll(watch)

      yield* create("lib-b", run)
      const ready = yield* setPhase("lib-a", "Ready")
      yield* all.awaitLast("lib-a", ready)
      // allChanges starts with what is cached, then each change.
      expect(yield* all.shorts).toEqual(["lib-a:Pending", "lib-b:-", "lib-a:Ready"])
      expect(yield* watch.health).toMatchObject({ synced: true, relists: 0, cached: 2 })
    })), ProcessTimeout)

  const modes: ReadonlyArray<"auto" | "paged"> = streamsLists ? ["auto", "paged"] : ["auto"]
  for (const listMode of modes) {
    // On 1.20, auto pages after the server's first 422: the same requests as paged.
    const relistNeedsList = listMode === "paged" || !streamsLists
    it.scopedLive(
      `the program (--list-mode ${listMode}): synced and following; without watch, then without list, it says which ` +
        "is missing in one line, keeps its cache, and heals when the Role is put back",
      () =>
        Effect.gen(function*() {
          const applied = yield* Rbac.applyToFreshNamespace(facts, `rbac-${listMode}`)
          const ns = applied.namespace
          const run = "rbac-program"
          const { create, setPhase } = yield* Rbac.adminIn(facts, ns)
          yield* create("p1", run)
          yield* setPhase("p1", "Pending")

          const token = yield* Rbac.mintToken(facts, applied)
          // Through a proxy that can cut the watch (so the program must ask again) or answer it 410.
          const proxy = yield* HttpFaultProxy.make(facts)
          const dir = yield* tempDir
          const kubeconfig = join(dir, "kubeconfig")
          writeFileSync(
            kubeconfig,
            stringify({
              apiVersion: "v1",
              kind: "Config",
              "current-context": "sa",
              clusters: [{
                name: "real",
                cluster: {
                  server: proxy.url,
                  "certificate-authority-data": Buffer.from(facts.caPem).toString("base64")
                }
              }],
              contexts: [{ name: "sa", context: { cluster: "real", user: "sandbox-watch", namespace: ns } }],
              users: [{ name: "sandbox-watch", user: { token } }]
            }),
            { mode: 0o600 }
          )
          const program = yield* Program.start([
            "--kubeconfig",
            kubeconfig,
            "--output",
            "ndjson",
            "--selector",
            `jr2.dev/run=${run}`,
            "--list-mode",
            listMode,
            "--metrics-address",
            "127.0.0.1:0"
          ], { HOME: dir })
          const synced = yield* program.awaitStdout((line) => line === `{"event":"synced"}`)
          expect((yield* program.stdout).slice(0, synced).map(Rbac.shortLine)).toEqual(["p1 Pending"])
          const metricsAt = yield* program.awaitStderr((l) => l.includes("metrics at "))
          const metricsLine = (yield* program.stderr)[metricsAt]!
          const metricsUrl = /metrics at (\S+\/metrics)/.exec(metricsLine)![1]!
          /** The program's cached-Sandboxes gauge, read from its own /metrics. */
          const cached = Effect.promise(async () => {
            const text = await (await globalThis.fetch(metricsUrl)).text()
            return Number(/^sandbox_watch_cached_sandboxes(?:\{[^}]*\})? (\d+)/m.exec(text)?.[1] ?? NaN)
          })
          const changeOf = (name: string, phase: string) => (line: string) =>
            Rbac.shortLine(line) === `${name} ${phase}`

          yield* create("p2", run)
          yield* program.awaitStdout(changeOf("p2", "-"), synced)

          // -- watch taken out: the watch is cut, and asking again is refused --------------------
          yield* Rbac.setRoleWithout(facts, applied, "watch")
          yield* Rbac.awaitPermission(applied, token, "watch", false)
          const beforeWatchOut = (yield* program.stderr).length
          expect(yield* proxy.cutOpen).toBeGreaterThanOrEqual(1)
          const watchSaid = yield* program.awaitStderr((l) => l.includes("forbidden to"), beforeWatchOut)
          const watchLine = (yield* program.stderr)[watchSaid]!
          expect(watchLine).toContain(
            `forbidden to watch sandboxes.jr2.dev in namespace "${ns}": grant get, list and watch`
          )
          expect(watchLine).toContain(`cannot watch resource "sandboxes" in API group "jr2.dev"`)
          expect(watchLine).toContain("resuming from resourceVersion")
          // Meanwhile: nothing told gone, the cache kept, and a change the watch cannot hear yet.
          yield* setPhase("p1", "Ready")
          expect(yield* cached).toBe(2)
          const toldBeforeHeal = (yield* program.stdout).length

          yield* Rbac.setRoleWithout(facts, applied, undefined)
          const healed = yield* program.awaitStdout(changeOf("p1", "Ready"), toldBeforeHeal)
          // Resumed where it was: told only the change, no second list or `synced`.
          expect((yield* program.stdout).slice(synced, healed + 1).map(Rbac.shortLine)).toEqual([
            "synced",
            "p2 -",
            "p1 Ready"
          ])

          // -- list taken out: the watch is cut and answered 410, so the program must list again --
          yield* Rbac.setRoleWithout(facts, applied, "list")
          yield* Rbac.awaitPermission(applied, token, "list", false)
          const beforeListOut = (yield* program.stderr).length
          yield* proxy.failNext("watch", 1, { _tag: "ExpiredInStream" })
          expect(yield* proxy.cutOpen).toBeGreaterThanOrEqual(1)
          yield* program.awaitStderr((l) => l.includes("expired"), beforeListOut)
          yield* setPhase("p2", "Ready")
          if (relistNeedsList) {
            const listSaid = yield* program.awaitStderr((l) => l.includes("forbidden to"), beforeListOut)
            const listLine = (yield* program.stderr)[listSaid]!
            expect(listLine).toContain(
              `forbidden to list sandboxes.jr2.dev in namespace "${ns}": grant get, list and watch`
            )
            expect(listLine).toContain(`cannot list resource "sandboxes" in API group "jr2.dev"`)
            expect(listLine).toContain("re-listing in")
            expect(yield* cached).toBe(2)
            expect((yield* program.stdout).slice(healed + 1)).toEqual([])
            yield* Rbac.setRoleWithout(facts, applied, undefined)
          }
          // 1.37 in auto: the re-list streams, which RBAC checks as a watch; `list` is never asked.
          const relisted = yield* program.awaitStdout(changeOf("p2", "Ready"), healed + 1)
          expect((yield* program.stdout).slice(healed + 1, relisted + 1).map(Rbac.shortLine)).toEqual(["p2 Ready"])
          const stderr = yield* program.stderr
          expect(stderr.slice(beforeListOut).some((l) => l.includes("forbidden to"))).toBe(relistNeedsList)
          expect(yield* cached).toBe(2)

          yield* program.kill("SIGTERM")
          expect(yield* program.exited).toStrictEqual({ code: 0, signal: null })
          // One `synced` only: the program was never restarted; and the token never shows.
          expect((yield* program.stdout).filter((l) => l === `{"event":"synced"}`)).toHaveLength(1)
          expect([...(yield* program.stdout), ...stderr].some((l) => l.includes(token))).toBe(false)
        }),
      ProcessTimeout
    )
  }
})
