/**
 * The watch end to end: `SandboxWatch` on `KubeClient` over real HTTP against the simulated API
 * server, with its faults. Every test asserts what subscribers were told, in order. Pauses are
 * TestClock's; only the sockets are real.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer, Option, Ref, TestClock } from "effect"
import * as KubeClient from "../src/KubeClient.ts"
import * as KubeConfig from "../src/KubeConfig.ts"
import { SandboxResource } from "../src/Sandbox.ts"
import * as SandboxWatch from "../src/SandboxWatch.ts"
import * as SimulatedApiServer from "../src/SimulatedApiServer.ts"
import { rotatingTokenConnection } from "./support/rotatingToken.ts"
import { provideCluster, record, sandboxObject } from "./support/simulatedCluster.ts"
import { eventually, passNextPause } from "./support/waiting.ts"

/** A simulated cluster with `names` in it, and a watch over it. */
const cluster = (names: ReadonlyArray<string>, options: Partial<SandboxWatch.SandboxWatchOptions> = {}) =>
  Effect.gen(function*() {
    const server = yield* SimulatedApiServer.SimulatedApiServer
    for (const name of names) yield* server.create(sandboxObject(name))
    // These tests count and read list requests; streaming lists over HTTP have a describe of their own.
    const watch = yield* SandboxWatch.make({ namespace: "ns", jitter: false, listMode: "paged", ...options })
    yield* watch.synced
    yield* server.awaitOpenWatches(1)
    return { server, watch }
  })

describe("SandboxWatch over HTTP against the simulated API server", () => {
  it.scoped("lists page by page, then tells creates, status updates, a label removal and a delete, in order", () =>
    provideCluster()(
      Effect.gen(function*() {
        const { server, watch } = yield* cluster(["s1", "s2", "s3", "s4", "s5"], { pageSize: 2 })
        const lists = yield* server.requestsOf("list")
        expect(lists.map((r) => [r.query.limit, r.query.continue !== undefined, r.query.resourceVersion])).toEqual([
          ["2", false, undefined],
          ["2", true, undefined],
          ["2", true, undefined]
        ])
        const [firstWatch] = yield* server.requestsOf("watch")
        expect(firstWatch?.query).toMatchObject({
          allowWatchBookmarks: "true",
          timeoutSeconds: "240",
          labelSelector: "jr2.dev/run"
        })

        const s1 = yield* record(watch.changes("s1"))
        const s2 = yield* record(watch.changes("s2"))
        const s6 = yield* record(watch.changes("s6"))
        yield* s6.awaitTold(1)
        yield* server.mergePatch("s1", { status: { phase: "Ready" } }, { subresource: "status" })
        yield* s1.awaitTold(2)
        yield* server.mergePatch("s2", { metadata: { labels: { "jr2.dev/run": null } } })
        yield* server.create(sandboxObject("s6"))
        yield* server.delete("s1")
        expect(yield* s1.awaitTold(3)).toEqual(["s1:Pending", "s1:Ready", "gone"])
        expect(yield* s2.awaitTold(2)).toEqual(["s2:Pending", "gone"])
        expect(yield* s6.awaitTold(2)).toEqual(["gone", "s6:Pending"])
        const snapshot = yield* watch.snapshot
        expect([...snapshot.keys()].sort()).toEqual(["s3", "s4", "s5", "s6"])
        expect((yield* server.requestsOf("list")).length).toBe(3)
      })
    ))

  it.scoped("a watch the server closes after a normal run resumes at once from the last resourceVersion, with no re-list", () =>
    provideCluster()(
      Effect.gen(function*() {
        const { server, watch } = yield* cluster(["s1"])
        const s1 = yield* record(watch.changes("s1"))
        yield* server.mergePatch("s1", { status: { phase: "Ready" } }, { subresource: "status" })
        yield* s1.awaitTold(2)
        const rv = yield* server.resourceVersion
        // The watch ran a floor (500 ms) before the close: no beat (rule 3), and the clock stands after.
        yield* TestClock.adjust("500 millis")
        yield* server.closeWatches
        const watches = yield* server.awaitRequests(2, "watch")
        expect(watches[1]?.query.resourceVersion).toBe(rv)
        yield* server.mergePatch("s1", { status: { phase: "Terminating" } }, { subresource: "status" })
        expect(yield* s1.awaitTold(3)).toEqual(["s1:Pending", "s1:Ready", "s1:Terminating"])
        expect((yield* server.requestsOf("list")).length).toBe(1)
      })
    ))

  it.scoped("an apiserver restart with deletes during the outage: 410, a quorum re-list, and only the deleted told gone", () =>
    provideCluster()(
      Effect.gen(function*() {
        const { server, watch } = yield* cluster(["keep", "goes"])
        const keep = yield* record(watch.changes("keep"))
        const goes = yield* record(watch.changes("goes"))
        yield* keep.awaitTold(1)
        yield* goes.awaitTold(1)
        // Writes the watch does not see (its connection stalled), then a restart: the apiserver's
        // window of history now starts after the watch's resourceVersion.
        yield* server.stallWatches
        yield* server.mergePatch("keep", { metadata: { annotations: { touched: "yes" } } })
        yield* server.restart
        yield* server.delete("goes")
        // The restart closed a watch that had said nothing: the back-off's first step (rule 8).
        expect(yield* passNextPause()).toBe(500)
        // The resume meets an expired resourceVersion: HTTP 200 then ERROR 410. The first re-list
        // since the counts were forgotten goes at once, though the silent close took the count's
        // first step (rule 5: an apiserver back from a restart is not kept waiting).
        const [, resumed] = yield* server.awaitRequests(2, "watch")
        expect(resumed?.query.resourceVersion).toBe("3")
        yield* server.awaitRequests(2, "list")
        yield* server.awaitOpenWatches(1)
        expect(yield* goes.awaitTold(2)).toEqual(["goes:Pending", "gone"])
        // keep changed (an annotation) while unseen: the re-list tells it once, with its new state
        expect(yield* keep.awaitTold(2)).toEqual(["keep:Pending", "keep:Pending"])
        const lists = yield* server.requestsOf("list")
        expect(lists.length).toBe(2)
        expect(lists[1]?.query.resourceVersion).toBeUndefined()
        expect((yield* watch.health).relists).toBe(1)
      })
    ))

  it.scoped("faults tell nobody anything, and the watch rides through each: 429, 500, an HTML page, a malformed line, a truncated line, reset connections", () =>
    provideCluster()(
      Effect.gen(function*() {
        const { server, watch } = yield* cluster(["s1", "s2", "noise"])
        const s1 = yield* record(watch.changes("s1"))
        const s2 = yield* record(watch.changes("s2"))
        yield* s1.awaitTold(1)
        let watches = 1
        let noise = 0
        /**
         * A change to another Sandbox, then a floor's run: the open watch has said something (no
         * silent-close pause) and has not closed at once (no beat, rule 3).
         */
        const hearSomething = Effect.gen(function*() {
          noise += 1
          yield* server.mergePatch("noise", { status: { phase: `P${noise}` } }, { subresource: "status" })
          yield* eventually(watch.get("noise"), (n) => Option.isSome(n) && n.value.status?.phase === `P${noise}`)
          yield* TestClock.adjust("500 millis")
        })
        const rideThrough = (fault: Effect.Effect<void>, expectedPause: number | "none") =>
          Effect.gen(function*() {
            yield* hearSomething
            yield* fault
            if (expectedPause !== "none") expect(yield* passNextPause()).toBe(expectedPause)
            watches += 1
            yield* eventually(server.requestsOf("watch"), (w) => w.length >= watches)
            yield* server.awaitOpenWatches(1)
            watches = (yield* server.requestsOf("watch")).length
          })
        const failWatch = (kind: SimulatedApiServer.FaultKind) =>
          Effect.zipRight(server.failNext(1, kind, { verbs: ["watch"], retryAfterSeconds: 2 }), server.closeWatches)

        // Each fault follows a watch that heard something, which resets nothing: the answered
        // failures share one count, growing (the 429 waits its Retry-After, longer than the floor).
        yield* rideThrough(failWatch("TooManyRequests"), 2000)
        yield* rideThrough(failWatch("InternalError"), 1000)
        yield* rideThrough(failWatch("BadGatewayHtml"), 2000)
        yield* rideThrough(server.writeMalformedLine(), 4000)
        // A connection cut mid-watch after it spoke (half a line, then the socket dies; a reset):
        // the first resume since the counts were forgotten goes at once and counts nothing, the
        // next waits the shared count's step (four counted before it: 500 ms x 2^4), so a server
        // that cuts every watch is not asked once a second.
        yield* rideThrough(server.writeTruncatedLine, "none")
        yield* rideThrough(server.dropConnections, 8_000)
        expect(yield* s1.told).toEqual(["s1:Pending"])
        expect(yield* s2.told).toEqual(["s2:Pending"])
        expect((yield* watch.snapshot).size).toBe(3)
        // and it still hears the cluster
        yield* server.mergePatch("s2", { status: { phase: "Ready" } }, { subresource: "status" })
        expect(yield* s2.awaitTold(2)).toEqual(["s2:Pending", "s2:Ready"])
        expect((yield* server.requestsOf("list")).length).toBe(1)
      })
    ))

  it.scoped("a watch cache that warms (429 \"storage is (re)initializing\", Retry-After 1) is waited out: at start each list waits the Retry-After or the growing back-off, unsynced till then; under a synced watch, resumed with no re-list and nothing told", () =>
    provideCluster()(
      Effect.gen(function*() {
        const server = yield* SimulatedApiServer.SimulatedApiServer
        yield* server.create(sandboxObject("s1"))
        yield* server.failNext(3, "StorageInitializing", { verbs: ["list", "watch"], retryAfterSeconds: 1 })
        const watch = yield* SandboxWatch.make({ namespace: "ns", jitter: false, listMode: "paged" })
        // The Retry-After (1 s) while it is longer than the back-off (0.5, 1, 2 s: rule 6).
        for (const [i, pause] of [1000, 1000, 2000].entries()) {
          yield* server.awaitRequests(i + 1, "list")
          expect((yield* watch.health).synced).toBe(false)
          expect(yield* passNextPause()).toBe(pause)
        }
        yield* watch.synced
        expect((yield* server.requestsOf("list")).length).toBe(4)
        yield* server.awaitOpenWatches(1)
        const s1 = yield* record(watch.changes("s1"))
        expect(yield* s1.awaitTold(1)).toEqual(["s1:Pending"])

        // The cache re-initialises (an etcd hiccup) under the synced watch.
        yield* server.failNext(2, "StorageInitializing", { verbs: ["watch"], retryAfterSeconds: 1 })
        yield* server.closeWatches
        const pauses: Array<number> = []
        while ((yield* server.requestsOf("watch")).length < 4) pauses.push(yield* passNextPause())
        yield* server.awaitOpenWatches(1)
        // The closed watch had said nothing (rule 8), then the two refusals: the back-off goes on
        // from where the start left it, nothing between having reset it.
        expect(pauses).toEqual([4000, 8000, 16000])
        const health = yield* watch.health
        expect([health.synced, health.relists, (yield* server.requestsOf("list")).length]).toEqual([true, 0, 4])
        yield* server.mergePatch("s1", { status: { phase: "Ready" } }, { subresource: "status" })
        expect(yield* s1.awaitTold(2)).toEqual(["s1:Pending", "s1:Ready"])
      })
    ))

  it.scoped("403 on watch backs off; granting it heals the watch without a restart", () =>
    provideCluster()(
      Effect.gen(function*() {
        const { server, watch } = yield* cluster(["s1"])
        const s1 = yield* record(watch.changes("s1"))
        yield* s1.awaitTold(1)
        yield* server.forbid("watch")
        yield* server.closeWatches
        // the closed watch had said nothing: the back-off's first step (rule 8); then 403 twice: it
        // doubles on
        expect(yield* passNextPause()).toBe(500)
        yield* server.awaitRequests(2, "watch")
        expect(yield* passNextPause()).toBe(1000)
        yield* server.awaitRequests(3, "watch")
        expect(yield* passNextPause()).toBe(2000)
        yield* server.allow()
        yield* passNextPause()
        yield* server.awaitOpenWatches(1)
        yield* server.mergePatch("s1", { status: { phase: "Ready" } }, { subresource: "status" })
        expect(yield* s1.awaitTold(2)).toEqual(["s1:Pending", "s1:Ready"])
      })
    ))

  it.scoped("a stalled watch is taken for dead after timeoutSeconds plus the margin and resumed", () =>
    provideCluster()(
      Effect.gen(function*() {
        const { server, watch } = yield* cluster(["s1"], { timeoutSeconds: 60, idleMargin: "5 seconds" })
        const s1 = yield* record(watch.changes("s1"))
        yield* s1.awaitTold(1)
        yield* server.stallWatches
        yield* server.mergePatch("s1", { status: { phase: "Ready" } }, { subresource: "status" })
        // The watch heard nothing since it opened at time 0: 60 s + 5 s of silence is the limit.
        yield* TestClock.adjust("64 seconds")
        expect((yield* server.requestsOf("watch")).length).toBe(1)
        yield* TestClock.adjust("1 second")
        yield* server.awaitRequests(2, "watch")
        expect(yield* s1.awaitTold(2)).toEqual(["s1:Pending", "s1:Ready"])
      })
    ))
  it.scoped("9. a 401 makes the client read its credentials afresh: the watch resumes with the rotated token", () =>
    Effect.gen(function*() {
      const server = Context.get(
        yield* Layer.build(
          SimulatedApiServer.layer({ resource: SandboxResource, namespace: "ns", token: "token-generation-0" })
        ),
        SimulatedApiServer.SimulatedApiServer
      )
      // A credential source like a rotated token file: each invalidation reads the next generation.
      const generation = yield* Ref.make(0)
      const connection = Layer.succeed(KubeConfig.KubeConfig, rotatingTokenConnection(server.url, generation))
      yield* server.create(sandboxObject("s1"))
      const client = yield* Layer.build(
        KubeClient.layerWith({ headersTimeout: "1 hour", bodyTimeout: "1 hour" }).pipe(Layer.provide(connection))
      )
      const watch = yield* SandboxWatch.make({ namespace: "ns", jitter: false }).pipe(Effect.provide(client))
      const s1 = yield* record(watch.changes("s1"))
      yield* s1.awaitTold(1)
      yield* server.awaitOpenWatches(1)
      // The server rotates the token; the open watch ends, and the resume meets a 401.
      yield* server.setToken("token-generation-1")
      yield* server.closeWatches
      yield* passNextPause() // the closed watch had said nothing: the back-off's first step
      yield* server.awaitRequests(3) // list, watch, the resume that got the 401
      expect(yield* Ref.get(generation)).toBe(1)
      yield* passNextPause() // the 401's back-off
      yield* server.awaitOpenWatches(1)
      yield* server.mergePatch("s1", { status: { phase: "Ready" } }, { subresource: "status" })
      expect(yield* s1.awaitTold(2)).toEqual(["s1:Pending", "s1:Ready"])
      expect((yield* watch.health).relists).toBe(0)
    }))
})
