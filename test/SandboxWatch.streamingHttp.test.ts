/**
 * Streaming lists (rules 16–18 of `src/internal/watchMachine.ts`) end to end: `SandboxWatch` in its
 * default `auto` mode on `KubeClient` over real HTTP against the simulated API server, which serves
 * `sendInitialEvents` as 1.34+ does (and refuses it as a server with the WatchList gate off, when
 * told), ignores it (answers it as a plain watch and closes), or loses its CRD for a while. Pauses
 * are TestClock's; only the sockets are real. test/apiserver/streamingList.test.ts and
 * test/apiserver/crdReRegistered.test.ts hold the same behaviour to the real servers.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Logger, Ref, TestClock } from "effect"
import * as SandboxWatch from "../src/SandboxWatch.ts"
import * as SimulatedApiServer from "../src/SimulatedApiServer.ts"
import { provideCluster, record, sandboxObject } from "./support/simulatedCluster.ts"
import { nextPause, passNextPause } from "./support/waiting.ts"

const seeded = (names: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const server = yield* SimulatedApiServer.SimulatedApiServer
    for (const name of names) yield* server.create(sandboxObject(name))
    return server
  })

/** The watch in its default list mode (`auto`). */
const startWatch = SandboxWatch.make({ namespace: "ns", jitter: false })

/** A logger that keeps every line the watch writes; the lines, to read. */
const keptLines = Effect.gen(function*() {
  const lines = yield* Ref.make<ReadonlyArray<string>>([])
  const logger = Logger.make(({ message }) => {
    Effect.runSync(
      Ref.update(lines, (all) => [...all, Array.isArray(message) ? message.map(String).join(" ") : String(message)])
    )
  })
  return { lines: Ref.get(lines), layer: Logger.replace(Logger.defaultLogger, logger) }
})

describe("SandboxWatch streaming lists over HTTP against the simulated API server", () => {
  it.scoped("16. auto streams the first list: no LIST, synced at the end bookmark, then the same watch tells changes", () =>
    provideCluster()(
      Effect.gen(function*() {
        const server = yield* seeded(["s1", "s2", "s3"])
        const watch = yield* startWatch
        const s1 = yield* record(watch.changes("s1"))
        yield* watch.synced
        expect((yield* watch.health).cached).toBe(3)
        expect(yield* s1.awaitTold(1)).toEqual(["s1:Pending"])
        expect(yield* server.requestsOf("list")).toEqual([])
        const [first] = yield* server.requestsOf("watch")
        expect(first?.query).toMatchObject({
          sendInitialEvents: "true",
          resourceVersionMatch: "NotOlderThan",
          allowWatchBookmarks: "true"
        })
        expect(first?.query.resourceVersion).toBeUndefined()
        yield* server.mergePatch("s1", { status: { phase: "Ready" } }, { subresource: "status" })
        expect(yield* s1.awaitTold(2)).toEqual(["s1:Pending", "s1:Ready"])
        // The change came on the streaming list's own connection.
        expect(yield* server.requestsOf("watch")).toHaveLength(1)
      })
    ))

  it.scoped("16. a resume after the end bookmark is a plain watch from the newest resourceVersion, never the initial events again", () =>
    provideCluster()(
      Effect.gen(function*() {
        const server = yield* seeded(["s1"])
        const watch = yield* startWatch
        const s1 = yield* record(watch.changes("s1"))
        yield* watch.synced
        yield* server.awaitOpenWatches(1)
        const rv = yield* server.resourceVersion
        yield* server.closeWatches
        // A watch that said nothing after its list (the initial events are the list, rule 5) and
        // closed early: one floor before the resume (rule 8).
        expect(yield* passNextPause()).toBe(500)
        const [, resumed] = yield* server.awaitRequests(2, "watch")
        expect(resumed?.query.resourceVersion).toBe(rv)
        expect(resumed?.query.sendInitialEvents).toBeUndefined()
        expect(resumed?.query.resourceVersionMatch).toBeUndefined()
        yield* server.mergePatch("s1", { status: { phase: "Ready" } }, { subresource: "status" })
        // Told once for the reconcile and once for the change: the resume repeated nothing.
        expect(yield* s1.awaitTold(2)).toEqual(["s1:Pending", "s1:Ready"])
        expect(yield* server.requestsOf("list")).toEqual([])
      })
    ))

  it.scoped("17. a connection cut in the middle of the initial events drops the draft: nothing told, not synced; after the back-off it streams again", () =>
    provideCluster()(
      Effect.gen(function*() {
        const server = yield* seeded(["s1", "s2", "s3", "s4"])
        yield* server.failNext(1, "CutMidStream", { verbs: ["watch"] })
        const watch = yield* startWatch
        const s1 = yield* record(watch.changes("s1"))
        yield* server.awaitRequests(1, "watch")
        // The cut streaming list waits the back-off (its floor), unsynced, having told nobody.
        expect(yield* nextPause()).toBe(500)
        expect((yield* watch.health).synced).toBe(false)
        expect((yield* watch.health).cached).toBe(0)
        expect((yield* watch.health).watchRestarts).toBe(1)
        expect(yield* s1.told).toEqual([])
        yield* TestClock.adjust("500 millis")
        const [, again] = yield* server.awaitRequests(2, "watch")
        expect(again?.query).toMatchObject({ sendInitialEvents: "true", resourceVersionMatch: "NotOlderThan" })
        expect(again?.query.resourceVersion).toBeUndefined()
        yield* watch.synced
        expect((yield* watch.health).cached).toBe(4)
        expect(yield* s1.awaitTold(1)).toEqual(["s1:Pending"])
        expect(yield* server.requestsOf("list")).toEqual([])
      })
    ))

  it.scoped("5/16. after an apiserver restart with a delete unseen, the 410 re-lists by streaming again and tells only the deleted gone", () =>
    provideCluster()(
      Effect.gen(function*() {
        const server = yield* seeded(["keep", "goes"])
        const watch = yield* startWatch
        const keep = yield* record(watch.changes("keep"))
        const goes = yield* record(watch.changes("goes"))
        yield* keep.awaitTold(1)
        yield* goes.awaitTold(1)
        yield* server.awaitOpenWatches(1)
        yield* server.stallWatches
        yield* server.mergePatch("keep", { metadata: { annotations: { touched: "yes" } } })
        yield* server.restart
        yield* server.delete("goes")
        // The restart closed a watch that said nothing since its bookmark: the back-off's first step
        // (rule 8); the resume meets the 410, and the first re-list goes at once (rule 5).
        expect(yield* passNextPause()).toBe(500)
        const [, resumed] = yield* server.awaitRequests(2, "watch")
        expect(resumed?.query.sendInitialEvents).toBeUndefined()
        const [, , relisted] = yield* server.awaitRequests(3, "watch")
        expect(relisted?.query).toMatchObject({ sendInitialEvents: "true" })
        expect(yield* goes.awaitTold(2)).toEqual(["goes:Pending", "gone"])
        expect(yield* keep.awaitTold(2)).toEqual(["keep:Pending", "keep:Pending"])
        expect(yield* server.requestsOf("list")).toEqual([])
        expect((yield* watch.health).relists).toBe(1)
      })
    ))

  it.scoped("18. auto against a server with the WatchList gate off: the 422 once, then pages for the watch's life, telling nothing on the way", () =>
    provideCluster({ watchList: false })(
      Effect.gen(function*() {
        const server = yield* seeded(["s1", "s2"])
        const watch = yield* startWatch
        const s1 = yield* record(watch.changes("s1"))
        yield* watch.synced
        expect(yield* s1.awaitTold(1)).toEqual(["s1:Pending"])
        const [refused, ...plain] = yield* server.awaitRequests(2, "watch")
        expect(refused?.query).toMatchObject({ sendInitialEvents: "true" })
        expect(yield* server.requestsOf("list")).toHaveLength(1)
        for (const request of plain) expect(request.query.sendInitialEvents).toBeUndefined()
        // A later list (after a 410) is paged, not streamed first: the fallback holds for the
        // watch's life. (The silent close waits the back-off's first step; the first re-list goes
        // at once.)
        yield* server.awaitOpenWatches(1)
        yield* server.stallWatches
        yield* server.mergePatch("s2", { metadata: { annotations: { touched: "yes" } } })
        yield* server.restart
        expect(yield* passNextPause()).toBe(500)
        yield* server.awaitRequests(3, "watch")
        yield* server.awaitRequests(2, "list")
        const watches = yield* server.requestsOf("watch")
        expect(watches.filter((w) => w.query.sendInitialEvents !== undefined)).toHaveLength(1)
        expect(yield* s1.told).toEqual(["s1:Pending"])
      })
    ))

  it.scoped("18. auto against a server that ignores sendInitialEvents (a plain watch, closed at once): three clean closes, said once, then one paged list syncs and the watch goes on", () =>
    provideCluster({ ignoreSendInitialEvents: true })(
      Effect.gen(function*() {
        const server = yield* seeded(["s1", "s2"])
        const logs = yield* keptLines
        const watch = yield* startWatch.pipe(Effect.provide(logs.layer))
        const s1 = yield* record(watch.changes("s1"))
        // Two clean closes, each after the back-off (floor, then twice it); the third pages at once.
        expect(yield* passNextPause()).toBe(500)
        expect(yield* passNextPause()).toBe(1000)
        yield* watch.synced
        expect(yield* s1.awaitTold(1)).toEqual(["s1:Pending"])
        expect((yield* watch.health).cached).toBe(2)
        const watches = yield* server.requestsOf("watch")
        expect(watches.slice(0, 3).map((w) => w.query.sendInitialEvents)).toEqual(["true", "true", "true"])
        expect(yield* server.requestsOf("list")).toHaveLength(1)
        yield* server.awaitOpenWatches(1)
        yield* server.mergePatch("s1", { status: { phase: "Ready" } }, { subresource: "status" })
        expect(yield* s1.awaitTold(2)).toEqual(["s1:Pending", "s1:Ready"])
        const said = (yield* logs.lines).filter((line) => line.includes("every list is paged from now on"))
        expect(said).toHaveLength(1)
        expect(said[0]).toContain("3 streaming lists in a row")
        expect((yield* server.requestsOf("watch")).filter((w) => w.query.sendInitialEvents !== undefined))
          .toHaveLength(3)
      })
    ))

  it.scoped.each(
    [
      ["a 404 (the CRD not served yet)", "withdrawn"],
      ["a 500", "InternalError"],
      ["a 429 (storage is (re)initializing)", "StorageInitializing"],
      ["a cut in the initial events", "CutMidStream"]
    ] as const
  )(
    "18. %s to the streaming list does not move auto to pages: it streams again and syncs with no LIST",
    ([_what, fault]) =>
      provideCluster()(
        Effect.gen(function*() {
          const server = yield* seeded(["s1", "s2", "s3"])
          if (fault === "withdrawn") yield* server.withdrawResource
          else yield* server.failNext(2, fault, { verbs: ["watch"] })
          const watch = yield* startWatch
          const s1 = yield* record(watch.changes("s1"))
          yield* server.awaitRequests(1, "watch")
          yield* passNextPause()
          yield* server.awaitRequests(2, "watch")
          if (fault === "withdrawn") yield* server.restoreResource
          else yield* passNextPause()
          if (fault === "withdrawn") yield* passNextPause()
          yield* watch.synced
          expect(yield* s1.awaitTold(1)).toEqual(["s1:Pending"])
          expect(yield* server.requestsOf("list")).toEqual([])
          const watches = yield* server.requestsOf("watch")
          expect(watches.every((w) => w.query.sendInitialEvents === "true")).toBe(true)
          expect(watches).toHaveLength(3)
        })
      )
  )

  it.scoped("a CRD that goes and comes back (its objects kept, as across an apiserver restart): the 404 said once in words, nothing told gone, then the watch goes on streaming with no LIST", () =>
    provideCluster()(
      Effect.gen(function*() {
        const server = yield* seeded(["s1", "s2"])
        const logs = yield* keptLines
        const watch = yield* startWatch.pipe(Effect.provide(logs.layer))
        const s1 = yield* record(watch.changes("s1"))
        yield* watch.synced
        expect(yield* s1.awaitTold(1)).toEqual(["s1:Pending"])
        yield* server.awaitOpenWatches(1)
        yield* server.withdrawResource
        // The watch ended cleanly having said nothing: one floor, then the resume meets 404s.
        expect(yield* passNextPause()).toBe(500)
        yield* server.awaitRequests(2, "watch")
        yield* passNextPause()
        yield* server.awaitRequests(3, "watch")
        yield* passNextPause()
        yield* server.awaitRequests(4, "watch")
        yield* server.restoreResource
        // Nothing changed meanwhile: the resume from the newest resourceVersion is served again.
        yield* passNextPause()
        yield* server.awaitOpenWatches(1)
        yield* server.mergePatch("s1", { status: { phase: "Ready" } }, { subresource: "status" })
        expect(yield* s1.awaitTold(2)).toEqual(["s1:Pending", "s1:Ready"])
        expect((yield* watch.health).cached).toBe(2)
        expect(yield* server.requestsOf("list")).toEqual([])
        const lines = yield* logs.lines
        const explained = lines.filter((line) => line.includes("may not be installed"))
        expect(explained).toHaveLength(1)
        expect(explained[0]).toContain(`does not serve sandboxes.jr2.dev/v1alpha1 in namespace "ns"`)
        expect(lines.filter((line) => line.includes("still does not serve")).length).toBeGreaterThanOrEqual(1)
        expect(lines.filter((line) => line.includes("paged"))).toEqual([])
      })
    ))
})
