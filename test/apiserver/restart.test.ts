/**
 * kube-apiserver killed and started again on the same port and etcd: what a watch sees. Runs in
 * its own file because it takes the shared server away for a few seconds.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Logger, Ref } from "effect"
import * as KubeClient from "../../src/KubeClient.ts"
import { collectionPath } from "../../src/KubeResource.ts"
import { SandboxResource } from "../../src/Sandbox.ts"
import * as SandboxWatch from "../../src/SandboxWatch.ts"
import * as Facts from "./ApiServerFacts.ts"
import type { Http } from "./ApiServerFacts.ts"
import { readTruth } from "./truthReads.ts"
import { backInStep, clientOn, falselyGone, poll, probe, recordAll, seedPending } from "./watchSupport.ts"

const facts = Facts.load()
const ns = facts.namespace
const sandboxes = collectionPath(SandboxResource, ns)
const admin = facts.adminToken

describe("real kube-apiserver restart", () => {
  it.live("a crash breaks open watches; after it, a resourceVersion older than its watch cache is 410", () =>
    Effect.scoped(Effect.gen(function*() {
      const agent = yield* Facts.agent(facts)
      const http: Http = { agent, base: facts.url }
      const created = yield* Facts.request(http, "POST", sandboxes, {
        token: admin,
        body: {
          apiVersion: "jr2.dev/v1alpha1",
          kind: "Sandbox",
          metadata: { name: "restart-a", labels: { "jr2.dev/run": "restart" } }
        }
      })
      expect(created.status).toBe(201)
      const rv = created.json.metadata.resourceVersion as string
      // Another write moves etcd's revision past the Sandbox's, so the restarted server's watch
      // cache starts after `rv`.
      const other = yield* Facts.request(http, "POST", `/api/v1/namespaces/${ns}/configmaps`, {
        token: admin,
        body: { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "restart-bump" }, data: { a: "b" } }
      })
      expect(other.status).toBe(201)

      const before = yield* Facts.openWatch(http, `${sandboxes}?watch=true&resourceVersion=${rv}`, admin)
      expect(before.status).toBe(200)

      const { readyMs } = yield* Facts.restartApiServer(facts, "SIGKILL")
      expect(readyMs).toBeGreaterThan(0)
      // SIGKILL: the kernel closes the socket (a FIN, no TLS close_notify, no last chunk), so the
      // body ends unfinished: undici calls that "other side closed", not a clean end.
      const ended = yield* before.next
      expect(ended).toEqual({ _tag: "Broken", error: "UND_ERR_SOCKET" })

      const freshAgent = yield* Facts.agent(facts)
      const fresh: Http = { agent: freshAgent, base: facts.url }
      // 1.37 answers a watch that comes before its watch cache has caught up after the start with
      // 429 and a Retry-After (1.31+); 1.20 holds it until the cache is ready and answers 200.
      const statuses: Array<number> = []
      const refusals: Array<unknown> = []
      let after = yield* Facts.openWatch(fresh, `${sandboxes}?watch=true&resourceVersion=${rv}`, admin)
      while (after.status === 429 && statuses.length < 50) {
        statuses.push(after.status)
        const refusal = yield* after.next
        if (refusal._tag === "Line") refusals.push(refusal.event)
        // A real server warming up: a real pause between tries (harness time, not the watch's).
        yield* Effect.sleep("200 millis")
        after = yield* Facts.openWatch(fresh, `${sandboxes}?watch=true&resourceVersion=${rv}`, admin)
      }
      expect(after.status).toBe(200)
      if (facts.minor < 31) expect(statuses).toEqual([])
      // What the simulator's StorageInitializing fault answers (test/SimulatedApiServer.test.ts).
      for (const refusal of refusals) {
        expect(refusal).toMatchObject({
          kind: "Status",
          status: "Failure",
          code: 429,
          reason: "TooManyRequests",
          message: expect.stringMatching(/^storage is \(re\)initializing/),
          details: { retryAfterSeconds: expect.any(Number) }
        })
      }
      const steps = yield* Facts.take(after, 2)
      const first = steps[0]
      expect(first?._tag).toBe("Line")
      const status = first?._tag === "Line" ? first.event : undefined
      expect([status?.type, status?.object?.code, status?.object?.reason]).toEqual(["ERROR", 410, "Expired"])
      expect(steps[1]).toEqual({ _tag: "End" })

      // The object itself survived in etcd.
      const got = yield* Facts.request(fresh, "GET", `${sandboxes}/restart-a`, { token: admin })
      expect([got.status, got.json.metadata.resourceVersion]).toEqual([200, rv])
    })))

  it.live(
    "a watch started while the watch cache warms waits each Retry-After, lists once it may; a synced watch tells nobody gone",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const run = "restart-warm"
        const names = ["warm-a", "warm-b"]
        const admin = yield* clientOn(Facts.connection(facts))
        const setPhase = yield* seedPending(admin, ns, run, names)
        const watchOn = (client: KubeClient.KubeClientService, pauses: Partial<SandboxWatch.SandboxWatchOptions>) =>
          SandboxWatch.make({
            namespace: ns,
            labelSelector: `jr2.dev/run=${run}`,
            ...pauses,
            // These tests read the paged list's requests; streamingList.test.ts has the streaming lists.
            listMode: "paged"
          }).pipe(Effect.provideService(KubeClient.KubeClient, client))
        // The watch open across the crash has the pauses a user gets: how soon it is back is printed.
        const synced = yield* watchOn(yield* clientOn(Facts.connection(facts)), {})
        yield* synced.synced
        const before = yield* recordAll(synced)
        yield* before.awaitShorts(names.length)

        yield* Facts.restartApiServer(facts, "SIGKILL")
        const restarted = Date.now()
        // A change the moment the server says ready (the write, too, waits until it is served).
        yield* readTruth(setPhase("warm-b", "Restarted"))
        // Started the moment the server says ready: 1.37's watch cache may not have caught up yet.
        const lines = yield* Ref.make<ReadonlyArray<string>>([])
        const logger = Logger.make(({ message }) => {
          Effect.runSync(
            Ref.update(lines, (all) => [...all, Array.isArray(message) ? message.join(" ") : String(message)])
          )
        })
        const wire = yield* probe(yield* clientOn(Facts.connection(facts)))
        const starting = yield* watchOn(wire.client, {
          backoffFloor: "50 millis",
          backoffCap: "5 seconds",
          jitter: false
        }).pipe(
          Effect.provide(Logger.replace(Logger.defaultLogger, logger))
        )
        const after = yield* recordAll(starting)
        yield* starting.synced
        expect(yield* after.awaitShorts(names.length)).toEqual(["warm-a:Pending", "warm-b:Restarted"])
        const log = yield* wire.await((l) => l.watches.at(-1)?.outcome === "open", "the new watch to open")
        const refusals = [...log.lists.map((l) => l.outcome), ...log.watches.map((w) => w.outcome)]
          .filter((o) => o !== "open" && !(typeof o === "object" && o._tag === "Listed"))
        // 1.20 holds a request until its cache is ready; 1.37 refuses it with 429 and Retry-After
        // (and only that: no re-list storm, no other failure); the watch waits what it is told.
        if (facts.minor < 31) expect(refusals).toEqual([])
        for (const refusal of refusals) {
          expect(refusal).toEqual(
            typeof refusal === "object" ? { _tag: "Failed", failure: "KubeStatusError 429" } : "KubeStatusError 429"
          )
        }
        const waits = (yield* Ref.get(lines)).filter((l) => l.includes("429"))
        expect(waits.length).toBe(refusals.length)
        for (const line of waits) expect(line).toMatch(/Retry-After \d+s/)
        expect((yield* starting.health).relists).toBe(0)

        yield* backInStep(`restart, a watch open across a SIGKILL (kube-apiserver ${facts.version})`, before, restarted)
        // Both hear a change; the one synced before the crash never told a Sandbox gone.
        const ready = yield* setPhase("warm-a", "Ready")
        yield* before.awaitLast("warm-a", ready)
        yield* after.awaitLast("warm-a", ready)
        expect(falselyGone(yield* before.told, names)).toEqual([])
        expect(falselyGone(yield* after.told, names)).toEqual([])
        yield* poll(synced.health, (h) => h.synced && h.cached === names.length, "the first watch to hold both")
      })),
    90_000
  )
})
