/**
 * Streaming lists (rules 16–18 of `src/internal/watchMachine.ts`) through the scripted client:
 * the initial events fill a draft that lands at the end bookmark, the same watch goes on, a resume
 * never asks for the initial events again, a stream that does not finish is dropped, and `auto`
 * falls back to pages when the server shows it cannot stream. Time is the TestClock's.
 */
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Exit, Option, Ref, Scope, Stream, TestClock } from "effect"
import type { Sandbox } from "../src/Sandbox.ts"
import * as SandboxWatch from "../src/SandboxWatch.ts"
import type { WatchEvent } from "../src/WatchEvent.ts"
import { InitialEventsEndAnnotation } from "../src/WatchEvent.ts"
import {
  added,
  bookmark,
  errorEvent,
  fullList,
  makeScriptedKubeClient,
  modified,
  sandbox,
  statusError,
  transportError
} from "./support/ScriptedKubeClient.ts"
import { nextPause } from "./support/waiting.ts"

const start = (listMode: "auto" | "stream" | "paged") =>
  Effect.gen(function*() {
    const kube = yield* makeScriptedKubeClient
    const scope = yield* Scope.make()
    const watch = yield* SandboxWatch.make({ namespace: "ns", jitter: false, listMode }).pipe(
      Effect.provide(kube.layer),
      Scope.extend(scope)
    )
    yield* Effect.addFinalizer(() => Scope.close(scope, Exit.void))
    return { kube, watch }
  })

const endBookmark = (resourceVersion: string): WatchEvent<Sandbox> => ({
  type: "BOOKMARK",
  resourceVersion,
  annotations: { [InitialEventsEndAnnotation]: "true" }
})

const settle = Effect.repeatN(Effect.yieldNow(), 50)

const told = (value: Option.Option<Sandbox>) =>
  Option.match(value, {
    onNone: () => "gone",
    onSome: (s) => `${s.metadata.name}@${s.metadata.resourceVersion}:${s.status?.phase ?? "-"}`
  })

const subscribe = (stream: Stream.Stream<Option.Option<Sandbox>>) =>
  Effect.gen(function*() {
    const seen = yield* Ref.make<ReadonlyArray<string>>([])
    yield* Effect.forkScoped(Stream.runForEach(stream, (v) => Ref.update(seen, (all) => [...all, told(v)])))
    yield* settle
    return Ref.get(seen)
  })

const streamingOptions = {
  namespace: "ns",
  labelSelector: "jr2.dev/run",
  sendInitialEvents: true,
  resourceVersionMatch: "NotOlderThan",
  allowWatchBookmarks: true,
  timeoutSeconds: 240,
  idleTimeout: Duration.seconds(270),
  acceptGzip: false
}

describe("SandboxWatch streaming lists", () => {
  it.scoped("16. the initial events fill a draft: nothing is told and nothing is synced until the end bookmark", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* start("stream")
      const a = yield* subscribe(watch.changes("a"))
      const w = yield* kube.nextWatch
      expect(w.options).toEqual(streamingOptions)
      yield* w.emit(added(sandbox("a", "7")), added(sandbox("b", "8")))
      yield* settle
      expect((yield* watch.health).synced).toBe(false)
      expect(yield* a).toEqual([])
      expect(Option.isNone(yield* watch.get("a"))).toBe(true)
      // The end bookmark and a change in one chunk: the list lands, then the watch goes on.
      yield* w.emit(endBookmark("9"), modified(sandbox("a", "10", "Ready")))
      yield* watch.synced
      yield* settle
      expect(yield* a).toEqual(["a@7:Pending", "a@10:Ready"])
      expect(told(yield* watch.get("b"))).toBe("b@8:Pending")
      // No list request at all.
      expect((yield* kube.calls).filter((c) => c.verb === "list")).toEqual([])
    }))

  it.scoped("16. after the end bookmark a dropped watch resumes as a plain watch from the newest resourceVersion", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* start("stream")
      const w = yield* kube.nextWatch
      yield* w.emit(added(sandbox("a", "7")), endBookmark("9"), bookmark("12"))
      yield* watch.synced
      yield* w.end
      const resumed = yield* kube.nextWatch
      expect(resumed.options).toEqual({
        namespace: "ns",
        labelSelector: "jr2.dev/run",
        resourceVersion: "12",
        allowWatchBookmarks: true,
        timeoutSeconds: 240,
        idleTimeout: Duration.seconds(270)
      })
      expect(resumed.options.sendInitialEvents).toBeUndefined()
    }))

  it.scoped("17. a connection that dies before the end bookmark drops the draft: after the back-off, a streaming list again", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* start("stream")
      const a = yield* subscribe(watch.changes("a"))
      const first = yield* kube.nextWatch
      yield* first.emit(added(sandbox("a", "7")))
      yield* first.fail(transportError())
      expect(yield* nextPause()).toBe(500)
      yield* TestClock.adjust(Duration.millis(500))
      const again = yield* kube.nextWatch
      expect(again.options).toEqual(streamingOptions)
      expect(yield* a).toEqual([])
      expect((yield* watch.health).synced).toBe(false)
      // Fails the same way again: the back-off grows (a draft is no healthy stream).
      yield* again.emit(added(sandbox("a", "7")))
      yield* again.fail(transportError())
      expect(yield* nextPause()).toBe(1000)
      yield* TestClock.adjust(Duration.millis(1000))
      const third = yield* kube.nextWatch
      yield* third.emit(added(sandbox("a", "8")), endBookmark("9"))
      yield* watch.synced
      yield* settle
      expect(yield* a).toEqual(["a@8:Pending"])
    }))

  it.scoped("17. an ERROR before the end bookmark (410) drops the draft and streams again after the back-off", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* start("stream")
      const first = yield* kube.nextWatch
      yield* first.emit(added(sandbox("a", "7")), errorEvent(410, "Expired", "too old resource version"))
      expect(yield* nextPause()).toBe(500)
      yield* TestClock.adjust(Duration.millis(500))
      const again = yield* kube.nextWatch
      expect(again.options.sendInitialEvents).toBe(true)
      expect(Option.isNone(yield* watch.get("a"))).toBe(true)
    }))

  it.scoped("16. a re-list of a watch that streamed (410 after the end bookmark) streams again, and tells only what changed", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* start("stream")
      const a = yield* subscribe(watch.changes("a"))
      const w = yield* kube.nextWatch
      yield* w.emit(added(sandbox("a", "7")), added(sandbox("b", "8")), endBookmark("9"))
      yield* watch.synced
      yield* w.emit(errorEvent(410, "Expired", "too old resource version"))
      // Nothing heard since the end bookmark, but the first re-list since then: at once (rule 5).
      const relist = yield* kube.nextWatch
      expect(relist.options).toEqual(streamingOptions)
      const b = yield* subscribe(watch.changes("b"))
      yield* relist.emit(added(sandbox("a", "7")), endBookmark("20"))
      yield* settle
      // a unchanged: told once (the reconcile); b is gone by the complete set.
      expect(yield* a).toEqual(["a@7:Pending"])
      expect(yield* b).toEqual(["b@8:Pending", "gone"])
    }))

  it.scoped("18. auto: a 422 to the streaming request is said once and every list is paged from then on", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* start("auto")
      const refused = yield* kube.nextWatch
      expect(refused.options.sendInitialEvents).toBe(true)
      yield* refused.fail(statusError(422, "Invalid", "resourceVersionMatch is forbidden for watch"))
      yield* settle
      yield* kube.respondList(fullList("10", sandbox("a", "7")))
      const w = yield* kube.nextWatch
      yield* watch.synced
      expect(w.options.resourceVersion).toBe("10")
      expect(w.options.sendInitialEvents).toBeUndefined()
      // A later 410 re-lists in pages, not by streaming.
      yield* w.emit(errorEvent(410, "Expired", "too old resource version"))
      yield* settle
      yield* TestClock.adjust(Duration.seconds(1))
      yield* kube.respondList(fullList("20", sandbox("a", "7")))
      const after = yield* kube.nextWatch
      expect(after.options.resourceVersion).toBe("20")
      expect((yield* kube.calls).filter((c) => c.verb === "list")).toHaveLength(2)
    }))

  it.scoped("18. auto: a bookmark without the end annotation (a server that ignored sendInitialEvents) falls back to pages without telling", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* start("auto")
      const a = yield* subscribe(watch.changes("a"))
      const ignored = yield* kube.nextWatch
      yield* ignored.emit(added(sandbox("a", "7")), bookmark("9"))
      yield* settle
      expect(yield* a).toEqual([])
      expect((yield* watch.health).synced).toBe(false)
      yield* kube.respondList(fullList("10", sandbox("a", "7")))
      yield* watch.synced
      yield* settle
      expect(yield* a).toEqual(["a@7:Pending"])
    }))

  it.scoped("18. auto: a server that ignores sendInitialEvents and sends no bookmark (ADDED events only) is paged after the watch's whole term, having told nothing", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* start("auto")
      const a = yield* subscribe(watch.changes("a"))
      const ignored = yield* kube.nextWatch
      // What a server that does not know the parameters answers a watch from "": every object as
      // ADDED, then only changes; no bookmark at all.
      yield* ignored.emit(added(sandbox("a", "7")), added(sandbox("b", "8")))
      yield* TestClock.adjust(Duration.seconds(240))
      yield* settle
      expect(yield* a).toEqual([])
      expect((yield* watch.health).synced).toBe(false)
      yield* ignored.end
      yield* kube.respondList(fullList("10", sandbox("a", "7")))
      yield* watch.synced
      yield* settle
      expect(yield* a).toEqual(["a@7:Pending"])
      const watched = (yield* kube.calls).filter((call) => call.verb === "watch")
      expect(watched.filter((call) => call.options.sendInitialEvents === true)).toHaveLength(1)
    }))

  it.scoped("18. stream: a 422 is a failure like any other, retried with the back-off, still streaming", () =>
    Effect.gen(function*() {
      const { kube } = yield* start("stream")
      const refused = yield* kube.nextWatch
      yield* refused.fail(statusError(422, "Invalid", "resourceVersionMatch is forbidden for watch"))
      expect(yield* nextPause()).toBe(500)
      yield* TestClock.adjust(Duration.millis(500))
      const again = yield* kube.nextWatch
      expect(again.options.sendInitialEvents).toBe(true)
      expect((yield* kube.calls).filter((c) => c.verb === "list")).toEqual([])
    }))
})
