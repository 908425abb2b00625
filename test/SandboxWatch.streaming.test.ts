/**
 * Streaming lists (rules 16–18 of `src/internal/watchMachine.ts`) through the scripted client:
 * the initial events fill a draft that lands at the end bookmark, the same watch goes on, a resume
 * never asks for the initial events again, a stream that does not finish is dropped, and `auto`
 * falls back to pages when the server shows it cannot stream. Time is the TestClock's.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Duration, Effect, Exit, Layer, Metric, Option, Ref, Scope, Stream, TestClock } from "effect"
import * as Telemetry from "../src/cli/Telemetry.ts"
import { KubeClient } from "../src/KubeClient.ts"
import type { Sandbox } from "../src/Sandbox.ts"
import * as SandboxWatch from "../src/SandboxWatch.ts"
import type { WatchEvent } from "../src/WatchEvent.ts"
import { InitialEventsEndAnnotation } from "../src/WatchEvent.ts"
import {
  added,
  bookmark,
  deleted,
  errorEvent,
  fullList,
  makeScriptedKubeClient,
  makeScriptedKubeClientWith,
  modified,
  sandbox,
  type ScriptedKubeClient,
  statusError,
  transportError,
  type WatchHandle
} from "./support/ScriptedKubeClient.ts"
import { nextPause, passNextPause } from "./support/waiting.ts"

const start = (listMode: "auto" | "stream" | "paged", { silenceUnkept = false } = {}) =>
  Effect.gen(function*() {
    const kube = yield* makeScriptedKubeClient
    const scope = yield* Scope.make()
    // `silenceUnkept`: a client whose silence limit has not fired yet (the real one counts it from
    // the answer's headers, after the request was sent).
    const layer = silenceUnkept
      ? Layer.map(kube.layer, (context) => {
        const client = Context.get(context, KubeClient)
        return Context.make(KubeClient, {
          ...client,
          openWatch: (resource, schema, options = {}) => {
            const { idleTimeout: _kept, ...unkept } = options
            return client.openWatch(resource, schema, unkept)
          }
        })
      })
      : kube.layer
    const watch = yield* SandboxWatch.make({ namespace: "ns", jitter: false, listMode }).pipe(
      Effect.provide(layer),
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
  idleTimeoutAfterInitialEvents: Duration.seconds(270),
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
      // A normal run (a floor) before the server closes it: resumed at once, not after rule 3's beat.
      yield* TestClock.adjust("500 millis")
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
      // The first re-list since the back-off was last forgotten: at once (rule 5).
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

  // Every request has a deadline: a server that ignores both sendInitialEvents and timeoutSeconds
  // (an aggregated API, a proxy that re-opens upstream), in a namespace with a change a minute, is
  // never silent and never ends; with only the silence limit the watch never synced, never paged.
  it.scoped("17, 18. auto: a server that ignores sendInitialEvents and timeoutSeconds, with a change a minute, is not waited on for ever", () =>
    Effect.gen(function*() {
      const { kube } = yield* start("auto")
      const ignored = yield* kube.nextWatch
      yield* ignored.emit(added(sandbox("a", "7")), added(sandbox("b", "8")))
      for (let minute = 1; minute <= 60; minute++) {
        yield* TestClock.adjust(Duration.minutes(1))
        yield* ignored.emit(modified(sandbox("a", String(8 + minute))))
      }
      yield* settle
      // An hour, 15 times the term asked: the streaming list has long been given up (paged, or asked again).
      expect(yield* ignored.aborted).toBe(true)
      expect((yield* kube.calls).length).toBeGreaterThanOrEqual(2)
    }))

  it.scoped("17, 18. auto: a streaming re-list still arriving at its term plus the idle margin is abandoned then: aborted, paged at once, nothing told, the cache kept", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* start("auto")
      const a = yield* subscribe(watch.changes("a"))
      const first = yield* kube.nextWatch
      yield* first.emit(added(sandbox("a", "7")), endBookmark("9"))
      yield* watch.synced
      yield* settle
      yield* first.emit(errorEvent(410, "Expired", "too old resource version"))
      const relist = yield* kube.nextWatch
      // A change every 30 s: never silent, never ended by the server, no end bookmark.
      for (let step = 1; step <= 8; step++) {
        yield* TestClock.adjust(Duration.seconds(30))
        yield* relist.emit(modified(sandbox("a", String(10 + step), "Ready")))
      }
      yield* TestClock.adjust(Duration.seconds(29))
      yield* settle
      expect(yield* relist.aborted).toBe(false)
      // 240 s asked plus the 30 s margin.
      yield* TestClock.adjust(Duration.seconds(1))
      yield* settle
      expect(yield* relist.aborted).toBe(true)
      expect((yield* kube.calls).at(-1)?.verb).toBe("list")
      expect(yield* a).toEqual(["a@7:Pending"])
      expect(told(yield* watch.get("a"))).toBe("a@7:Pending")
      yield* kube.respondList(fullList("30", sandbox("a", "30", "Ready")))
      yield* settle
      expect(yield* a).toEqual(["a@7:Pending", "a@30:Ready"])
    }))

  it.scoped("17, 18. auto: a streaming re-list silent at its deadline is waited on until rule 4 says; a change before that proves it alive and overdue: abandoned then, paged", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* start("auto")
      const first = yield* kube.nextWatch
      yield* first.emit(added(sandbox("a", "7")), endBookmark("9"))
      yield* watch.synced
      yield* first.emit(errorEvent(410, "Expired", "too old resource version"))
      const relist = yield* kube.nextWatch
      // A change every 30 s up to 210 s, then silent: 60 s of silence when the deadline (270 s) passes.
      for (let step = 1; step <= 7; step++) {
        yield* TestClock.adjust(Duration.seconds(30))
        yield* relist.emit(modified(sandbox("a", String(10 + step), "Ready")))
      }
      yield* TestClock.adjust(Duration.seconds(60))
      yield* settle
      // Silent now: no proof yet either way, so not abandoned as overdue.
      expect(yield* relist.aborted).toBe(false)
      expect((yield* kube.calls).at(-1)?.verb).toBe("watch")
      yield* TestClock.adjust(Duration.seconds(10))
      yield* relist.emit(modified(sandbox("a", "20", "Ready")))
      yield* settle
      expect(yield* relist.aborted).toBe(true)
      expect((yield* kube.calls).at(-1)?.verb).toBe("list")
    }))

  // Review 3 of 8f9059c: the chunk that ends a silence past the deadline may be the list's end. The
  // list is then whole: abandoning it re-asks the server for all of it, and in auto takes a server
  // that just streamed a list to the end as one that cannot (paged for the watch's life). It lands.
  const silentPastDeadline = Effect.gen(function*() {
    const { kube, watch } = yield* start("auto")
    const first = yield* kube.nextWatch
    yield* first.emit(added(sandbox("a", "7")), endBookmark("9"))
    yield* watch.synced
    yield* first.emit(errorEvent(410, "Expired", "too old resource version"))
    const relist = yield* kube.nextWatch
    for (let step = 1; step <= 7; step++) {
      yield* TestClock.adjust(Duration.seconds(30))
      yield* relist.emit(modified(sandbox("a", String(10 + step), "Ready")))
    }
    // Silent 60 s when the deadline (270 s) passes, then 10 s more: rule 4 has not fired.
    yield* TestClock.adjust(Duration.seconds(70))
    yield* settle
    return { kube, watch, relist }
  })

  it.scoped("17, 18. auto: a streaming re-list silent past its deadline whose next chunk carries its end bookmark lands, and lists still stream", () =>
    Effect.gen(function*() {
      const { kube, relist, watch } = yield* silentPastDeadline
      yield* relist.emit(modified(sandbox("a", "20", "Ready")), endBookmark("21"))
      yield* settle
      expect(yield* relist.aborted).toBe(false)
      expect(told(yield* watch.get("a"))).toBe("a@20:Ready")
      expect((yield* kube.calls).at(-1)?.verb).toBe("watch")
      // The server streamed a list to its end: the next re-list streams too.
      yield* relist.emit(errorEvent(410, "Expired", "too old resource version"))
      yield* kube.nextWatch
      expect((yield* kube.calls).every((call) => call.verb !== "list")).toBe(true)
    }))

  it.scoped("17, 18. auto: a streaming re-list silent past its deadline whose next chunk is only its end bookmark lands", () =>
    Effect.gen(function*() {
      const { kube, relist, watch } = yield* silentPastDeadline
      yield* relist.emit(endBookmark("20"))
      yield* settle
      expect(yield* relist.aborted).toBe(false)
      expect(told(yield* watch.get("a"))).toBe("a@17:Ready")
      expect((yield* kube.calls).at(-1)?.verb).toBe("watch")
    }))

  it.scoped("17. stream: a streaming list still arriving at its term plus the idle margin is abandoned, and asked again with twice the term after the back-off", () =>
    Effect.gen(function*() {
      const { kube } = yield* start("stream")
      const first = yield* kube.nextWatch
      for (let minute = 1; minute <= 4; minute++) {
        yield* TestClock.adjust(Duration.minutes(1))
        yield* first.emit(added(sandbox("a", String(7 + minute))))
      }
      yield* TestClock.adjust(Duration.seconds(30))
      yield* settle
      expect(yield* first.aborted).toBe(true)
      expect(yield* nextPause(20_000)).toBe(500)
      yield* TestClock.adjust("500 millis")
      const longer = yield* kube.nextWatch
      expect(longer.options).toEqual({ ...streamingOptions, timeoutSeconds: 480, idleTimeout: Duration.seconds(510) })
    }))

  /**
   * Silence is no proof (rules 4, 18): the silent streaming list `silent` was abandoned, nothing
   * was paged, and after the back-off a streaming list is asked for again.
   */
  const expectSilenceNoProof = (kube: ScriptedKubeClient, silent: WatchHandle) =>
    Effect.gen(function*() {
      expect(yield* silent.aborted).toBe(true)
      expect((yield* kube.calls).filter((call) => call.verb === "list")).toEqual([])
      yield* TestClock.adjust(Duration.millis(yield* nextPause(20_000)))
      const again = yield* kube.nextWatch
      expect(again.options.sendInitialEvents).toBe(true)
      expect((yield* kube.calls).filter((call) => call.verb === "list")).toEqual([])
    })

  it.scoped.each([false, true])(
    "4, 17. auto: a streaming list silent all along is silence at its limit (rule 4), no proof: a streaming list again after the back-off (silence not yet kept by the client: %s)",
    (silenceUnkept) =>
      Effect.gen(function*() {
        const { kube } = yield* start("auto", { silenceUnkept })
        const silent = yield* kube.nextWatch
        yield* TestClock.adjust(Duration.seconds(270))
        yield* settle
        yield* expectSilenceNoProof(kube, silent)
      })
  )

  // A streaming list that arrived for 30 s and whose connection then died (a black hole: no RST) is
  // silent for 240 s when its deadline passes at 270 s, 30 s before the silence limit counted from
  // its last bytes. Taken as overdue there, "auto" would page for the life of the watch; rule 18:
  // nothing transient (a cut, silence) is proof.
  it.scoped("4, 17, 18. auto: a streaming list that arrived for 30 s and then went silent (a dead connection) is silence, no proof: it streams again after the back-off", () =>
    Effect.gen(function*() {
      const { kube } = yield* start("auto")
      const dying = yield* kube.nextWatch
      for (let second = 1; second <= 30; second++) {
        yield* TestClock.adjust(Duration.seconds(1))
        yield* dying.emit(added(sandbox(`s${second}`, String(6 + second))))
      }
      // The connection dies: nothing more, for as long as the silence limit from the last bytes.
      yield* TestClock.adjust(Duration.seconds(270))
      yield* settle
      yield* expectSilenceNoProof(kube, dying)
    }))

  it.scoped("16, 17. a streaming list that lands just before its term plus the idle margin goes on as the watch past it: the deadline is the list's, not the watch's", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* start("auto")
      const a = yield* subscribe(watch.changes("a"))
      const w = yield* kube.nextWatch
      yield* w.emit(added(sandbox("a", "7")))
      yield* TestClock.adjust(Duration.seconds(269))
      yield* w.emit(endBookmark("8"))
      yield* watch.synced
      // A change a minute for ten minutes: the server's own term is what ends this watch, not the list's deadline.
      for (let minute = 1; minute <= 10; minute++) {
        yield* TestClock.adjust(Duration.minutes(1))
        yield* w.emit(modified(sandbox("a", String(8 + minute))))
      }
      yield* settle
      expect(yield* w.aborted).toBe(false)
      expect(yield* kube.calls).toHaveLength(1)
      expect((yield* a).at(-1)).toBe("a@18:Pending")
    }))

  it.scoped("18. auto: a server that closes the streaming list cleanly before its end bookmark, three times in a row, is paged: changes before the close prove nothing, nothing is told", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* start("auto")
      const a = yield* subscribe(watch.changes("a"))
      // A plain watch's answer to the streaming request: what changes now (a change, a deletion),
      // no initial set, no end bookmark, then the end of the body.
      const first = yield* kube.nextWatch
      yield* first.emit(modified(sandbox("a", "11", "Ready")), deleted(sandbox("b", "12")))
      yield* first.end
      expect(yield* nextPause()).toBe(500)
      yield* TestClock.adjust(Duration.millis(500))
      const second = yield* kube.nextWatch
      expect(second.options).toEqual(streamingOptions)
      yield* second.end
      expect(yield* nextPause()).toBe(1000)
      yield* TestClock.adjust(Duration.millis(1000))
      const third = yield* kube.nextWatch
      expect(third.options).toEqual(streamingOptions)
      yield* third.end
      // The third is proof: a paged list at once, no pause.
      yield* kube.respondList(fullList("20", sandbox("a", "13")))
      yield* watch.synced
      yield* settle
      expect(yield* a).toEqual(["a@13:Pending"])
      const after = yield* kube.nextWatch
      expect(after.options.resourceVersion).toBe("20")
      expect(after.options.sendInitialEvents).toBeUndefined()
      const calls = yield* kube.calls
      expect(calls.filter((c) => c.verb === "watch" && c.options.sendInitialEvents === true)).toHaveLength(3)
      expect(calls.filter((c) => c.verb === "list")).toHaveLength(1)
    }))

  it.scoped("18. auto: a cut between the clean closes starts the count again: still streaming after the third close", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* start("auto")
      const first = yield* kube.nextWatch
      yield* first.end
      yield* TestClock.adjust(Duration.millis(yield* nextPause()))
      const second = yield* kube.nextWatch
      yield* second.end
      yield* TestClock.adjust(Duration.millis(yield* nextPause()))
      const cut = yield* kube.nextWatch
      yield* cut.fail(transportError())
      yield* TestClock.adjust(Duration.millis(yield* nextPause()))
      const fourth = yield* kube.nextWatch
      yield* fourth.end
      yield* TestClock.adjust(Duration.millis(yield* nextPause()))
      const fifth = yield* kube.nextWatch
      expect(fifth.options).toEqual(streamingOptions)
      yield* fifth.emit(added(sandbox("a", "7")), endBookmark("9"))
      yield* watch.synced
      expect((yield* kube.calls).filter((c) => c.verb === "list")).toEqual([])
    }))

  it.scoped("18. auto: a 404 to the streaming request (a CRD not served yet) is no proof: it streams again after the back-off, never pages", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* start("auto")
      const notFound = statusError(404, "NotFound", "the server could not find the requested resource")
      const first = yield* kube.nextWatch
      yield* first.fail(notFound)
      yield* TestClock.adjust(Duration.millis(yield* nextPause()))
      const second = yield* kube.nextWatch
      expect(second.options).toEqual(streamingOptions)
      yield* second.fail(notFound)
      yield* TestClock.adjust(Duration.millis(yield* nextPause()))
      const third = yield* kube.nextWatch
      expect(third.options).toEqual(streamingOptions)
      yield* third.emit(added(sandbox("a", "7")), endBookmark("9"))
      yield* watch.synced
      expect((yield* kube.calls).filter((c) => c.verb === "list")).toEqual([])
    }))

  it.scoped("17. stream: a streaming list the server ended at its term still delivering is asked again with twice the term, and the idle limit grows with it", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* start("stream")
      const first = yield* kube.nextWatch
      // Objects arrive until the server's term ends the watch, with no end bookmark.
      yield* first.emit(added(sandbox("a", "7")))
      yield* TestClock.adjust(Duration.seconds(239))
      yield* first.emit(added(sandbox("b", "8")))
      yield* TestClock.adjust(Duration.seconds(1))
      yield* first.end
      // The back-off's first step (rule 17: after the back-off). (The first watch's idle timer, 30 s
      // away, is still listed by TestClock: look nearer.)
      expect(yield* nextPause(20_000)).toBe(500)
      yield* TestClock.adjust("500 millis")
      const longer = yield* kube.nextWatch
      expect(longer.options).toEqual({ ...streamingOptions, timeoutSeconds: 480, idleTimeout: Duration.seconds(510) })
      yield* longer.emit(added(sandbox("a", "7")), added(sandbox("b", "8")), endBookmark("9"))
      yield* watch.synced
      // Once landed, a later streaming list asks for the setting's term again, at once: the first
      // re-list since the counts were forgotten (rule 5), though the term's end took a step.
      yield* longer.emit(errorEvent(410, "Expired", "too old resource version"))
      const relist = yield* kube.nextWatch
      expect(relist.options).toEqual(streamingOptions)
    }))

  it.scoped("4, 17. after a longer term's list lands, the connection's silence limit is rule 4's again: a dead one is noticed in 270 s, not 510 s", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* start("stream")
      const first = yield* kube.nextWatch
      yield* first.emit(added(sandbox("a", "7")))
      yield* TestClock.adjust(Duration.seconds(240))
      yield* first.end
      yield* TestClock.adjust(Duration.millis(yield* nextPause()))
      const longer = yield* kube.nextWatch
      expect(longer.options.idleTimeout).toEqual(Duration.seconds(510))
      // The list takes 400 s to arrive: within the term's limit, though past rule 4's.
      yield* longer.emit(added(sandbox("a", "7")))
      yield* TestClock.adjust(Duration.seconds(400))
      yield* longer.emit(added(sandbox("b", "8")), endBookmark("9"))
      yield* watch.synced
      // Then nothing at all: a half-open connection.
      yield* TestClock.adjust(Duration.seconds(269))
      yield* settle
      expect((yield* kube.calls).filter((c) => c.verb === "watch")).toHaveLength(2)
      yield* TestClock.adjust(Duration.seconds(1))
      yield* settle
      expect((yield* kube.calls).filter((c) => c.verb === "watch")).toHaveLength(3)
      const resumed = yield* kube.nextWatch
      expect(resumed.options.resourceVersion).toBe("9")
      expect(resumed.options.sendInitialEvents).toBeUndefined()
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

const undecodable = (
  eventType: "ADDED" | "MODIFIED" | "DELETED",
  name: string,
  resourceVersion: string
): WatchEvent<Sandbox> => ({
  type: "UNDECODABLE",
  eventType,
  name,
  resourceVersion,
  problem: "status: Expected object"
})

describe("SandboxWatch streaming lists: what comes before the end bookmark", () => {
  // kube-apiserver 1.27–1.29 could queue changes ahead of the end bookmark, and proxies reorder: the
  // initial set is not only ADDEDs. A DELETED names its name even when its object does not decode.
  it.scoped("16. a DELETED whose object does not decode, before the end bookmark, removes the name from the draft", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* start("stream")
      const a = yield* subscribe(watch.changes("a"))
      const w = yield* kube.nextWatch
      yield* w.emit(added(sandbox("a", "7")), undecodable("DELETED", "a", "9"), endBookmark("10"))
      yield* watch.synced
      yield* settle
      expect(Option.isNone(yield* watch.get("a"))).toBe(true)
      expect((yield* watch.health).unknown).toBe(0)
      // The reconcile tells the waited-on name gone, never a@7.
      expect(yield* a).toEqual(["gone"])
    }))

  it.scoped("16. on a streaming re-list, a readable DELETED clears an earlier undecodable entry: the cached name is told gone", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* start("stream")
      const a = yield* subscribe(watch.changes("a"))
      const w = yield* kube.nextWatch
      yield* w.emit(added(sandbox("a", "5")), endBookmark("6"))
      yield* watch.synced
      // Rule 5: the first re-list since the watch heard something goes at once.
      yield* w.emit(errorEvent(410, "Expired", "too old resource version"))
      const relist = yield* kube.nextWatch
      yield* relist.emit(
        undecodable("ADDED", "a", "7"),
        { type: "DELETED", object: sandbox("a", "9"), name: "a", resourceVersion: "9" },
        endBookmark("10")
      )
      yield* settle
      expect(Option.isNone(yield* watch.get("a"))).toBe(true)
      expect(yield* a).toEqual(["a@5:Pending", "gone"])
    }))

  it.scoped("16. the same name sent again before the end bookmark replaces its draft entry (the last state wins)", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* start("stream")
      const w = yield* kube.nextWatch
      yield* w.emit(added(sandbox("a", "7")), modified(sandbox("a", "8", "Ready")), added(sandbox("b", "8")))
      yield* w.emit(endBookmark("9"))
      yield* watch.synced
      expect(told(yield* watch.get("a"))).toBe("a@8:Ready")
      expect((yield* watch.snapshot).size).toBe(2)
    }))
})

describe("SandboxWatch streaming lists: bounded by what the draft holds", () => {
  const startWithBudget = (maxListItems: number, maxListBytes?: number) =>
    Effect.gen(function*() {
      const kube = yield* makeScriptedKubeClientWith({ maxListItems, maxListBytes })
      const scope = yield* Scope.make()
      const watch = yield* SandboxWatch.make({ namespace: "ns", jitter: false, listMode: "stream" }).pipe(
        Effect.provide(kube.layer),
        Scope.extend(scope)
      )
      yield* Effect.addFinalizer(() => Scope.close(scope, Exit.void))
      return { kube, watch }
    })

  it.scoped("2. a server that sends the same Sandbox again and again holds one entry: within a budget of 2, it still lands", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* startWithBudget(2)
      const w = yield* kube.nextWatch
      for (let i = 0; i < 20; i++) yield* w.emit(modified(sandbox("a", String(10 + i))))
      yield* w.emit(added(sandbox("b", "40")), endBookmark("41"))
      yield* watch.synced
      expect(told(yield* watch.get("a"))).toBe("a@29:Pending")
      expect((yield* watch.snapshot).size).toBe(2)
    }))

  it.scoped("2. past the budget the streaming list is abandoned as a paged list is: too-large, the back-off, nothing told", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* startWithBudget(2)
      const a = yield* subscribe(watch.changes("a"))
      const w = yield* kube.nextWatch
      yield* w.emit(added(sandbox("a", "7")), added(sandbox("b", "8")), added(sandbox("c", "9")))
      expect(yield* nextPause()).toBe(500)
      expect(yield* w.aborted).toBe(true)
      const restarts = yield* Metric.value(Metric.tagged(SandboxWatch.metrics.restarts, "reason", "too-large"))
      expect(restarts.count).toBe(1)
      expect(yield* a).toEqual([])
      expect((yield* watch.health).synced).toBe(false)
      yield* TestClock.adjust(Duration.millis(500))
      const again = yield* kube.nextWatch
      expect(again.options.sendInitialEvents).toBe(true)
    }))

  /** An object event as read off the wire: `bytes` is the length of its line. */
  const heavy = (event: WatchEvent<Sandbox>, bytes: number): WatchEvent<Sandbox> =>
    event.type === "ADDED" || event.type === "MODIFIED" || event.type === "DELETED" ? { ...event, bytes } : event

  it.scoped("4. past maxListBytes of JSON held the streaming list is abandoned: too-large, the back-off, nothing told, the cache kept", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* startWithBudget(100, 1_000)
      const w = yield* kube.nextWatch
      yield* w.emit(added(sandbox("old", "5")), endBookmark("6"))
      yield* watch.synced
      const old = yield* subscribe(watch.changes("old"))
      const tooLargeBefore = (yield* Metric.value(Metric.tagged(SandboxWatch.metrics.restarts, "reason", "too-large")))
        .count
      yield* w.emit(errorEvent(410, "Expired", "too old resource version"))
      const relist = yield* kube.nextWatch
      // Two of 400 bytes, one replaced by another of 400 (its bytes given back): 800 held, within.
      yield* relist.emit(heavy(added(sandbox("a", "7")), 400), heavy(added(sandbox("b", "8")), 400))
      yield* relist.emit(heavy(modified(sandbox("a", "9")), 400))
      yield* settle
      expect(yield* relist.aborted).toBe(false)
      // A third: 1,200 bytes, past the budget of 1,000.
      yield* relist.emit(heavy(added(sandbox("c", "10")), 400))
      // The back-off's second step: the 410's re-list was its first (rule 5, one count).
      expect(yield* nextPause()).toBe(1_000)
      expect(yield* relist.aborted).toBe(true)
      const restarts = yield* Metric.value(Metric.tagged(SandboxWatch.metrics.restarts, "reason", "too-large"))
      expect(restarts.count - tooLargeBefore).toBe(1)
      // Nobody told: "old" is not in the new list, but the list never landed.
      expect(yield* old).toEqual(["old@5:Pending"])
      expect(told(yield* watch.get("old"))).toBe("old@5:Pending")
      yield* TestClock.adjust(Duration.millis(1_000))
      expect((yield* kube.nextWatch).options.sendInitialEvents).toBe(true)
    }))

  it.scoped("2, 4. a list past its budget whose end bookmark comes in the same chunk does not land either", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* startWithBudget(2, 1_000)
      const w = yield* kube.nextWatch
      yield* w.emit(added(sandbox("a", "7")), added(sandbox("b", "8")), added(sandbox("c", "9")), endBookmark("10"))
      yield* settle
      expect((yield* watch.health).synced).toBe(false)
      expect(yield* w.aborted).toBe(true)
      yield* TestClock.adjust(Duration.millis(yield* nextPause()))
      const again = yield* kube.nextWatch
      yield* again.emit(heavy(added(sandbox("a", "7")), 600), heavy(added(sandbox("b", "8")), 600), endBookmark("10"))
      yield* settle
      expect((yield* watch.health).synced).toBe(false)
      expect(yield* again.aborted).toBe(true)
    }))

  // An undecodable object is held by the draft (its name and resourceVersion, strings as long as a
  // line may be: 16 MiB): uncounted, long-named ones filled memory up to maxListItems of them.
  it.scoped("4. what an undecodable object keeps (its name) counts against maxListBytes: a list of them past it is abandoned", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* startWithBudget(100, 1_000)
      const w = yield* kube.nextWatch
      // Three names of 600 characters each: 1,800 characters held, past the budget of 1,000.
      for (const letter of ["a", "b", "c"]) {
        yield* w.emit(undecodable("ADDED", letter.repeat(600), "7"))
      }
      yield* w.emit(endBookmark("10"))
      yield* settle
      expect((yield* watch.health).synced).toBe(false)
      expect(yield* w.aborted).toBe(true)
    }))

  it.scoped("4. an undecodable name sent again, deleted, or decoded gives its bytes back", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* startWithBudget(100, 1_000)
      const w = yield* kube.nextWatch
      const [a, b, c] = ["a", "b", "c"].map((letter) => letter.repeat(600))
      // Never more than one 600-character name held at once: five counted and none given back
      // would be 3,000, past the budget of 1,000.
      yield* w.emit(undecodable("ADDED", a!, "7"), undecodable("MODIFIED", a!, "8"))
      yield* w.emit(undecodable("DELETED", a!, "9"), undecodable("ADDED", b!, "10"))
      yield* w.emit(added(sandbox(b!, "11")), undecodable("ADDED", c!, "12"), endBookmark("13"))
      yield* settle
      expect(yield* w.aborted).toBe(false)
      expect(yield* watch.health).toMatchObject({ synced: true, unknown: 1 })
    }))

  it.scoped("4. a DELETED before the end bookmark gives its name's bytes back", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* startWithBudget(100, 1_000)
      const w = yield* kube.nextWatch
      yield* w.emit(heavy(added(sandbox("a", "7")), 600), deleted(sandbox("a", "8")))
      yield* w.emit(heavy(added(sandbox("b", "9")), 600), endBookmark("10"))
      yield* watch.synced
      expect((yield* watch.snapshot).size).toBe(1)
    }))
})

describe("SandboxWatch streaming lists: an end bookmark with an empty resourceVersion", () => {
  const restartsFor = (reason: string) =>
    Effect.map(Metric.value(Metric.tagged(SandboxWatch.metrics.restarts, "reason", reason)), (state) => state.count)

  // Rule 2: `resourceVersion=` means "from now"; a list landed there would miss every deletion in
  // between. Only a server that breaks the API contract sends it.
  it.scoped("2. a re-list that ends so is no list: malformed, the back-off, the cache kept, nobody told, a streaming list again", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* start("stream")
      const w = yield* kube.nextWatch
      yield* w.emit(added(sandbox("a", "7")), added(sandbox("b", "8")), endBookmark("9"))
      yield* watch.synced
      const a = yield* subscribe(watch.changes("a"))
      const b = yield* subscribe(watch.changes("b"))
      const malformedBefore = yield* restartsFor("malformed")
      yield* w.emit(errorEvent(410, "Expired", "too old resource version"))
      const relist = yield* kube.nextWatch
      // b is not in it: were the list taken, b would be told gone.
      yield* relist.emit(added(sandbox("a", "11", "Ready")), endBookmark(""))
      yield* settle
      expect((yield* restartsFor("malformed")) - malformedBefore).toBe(1)
      expect(yield* relist.aborted).toBe(true)
      // The back-off's second step: the 410's re-list was its first (rule 5, one count).
      expect(yield* nextPause()).toBe(1_000)
      expect(told(yield* watch.get("a"))).toBe("a@7:Pending")
      expect(told(yield* watch.get("b"))).toBe("b@8:Pending")
      expect((yield* watch.health).resourceVersion).toEqual(Option.some("9"))
      expect(yield* a).toEqual(["a@7:Pending"])
      expect(yield* b).toEqual(["b@8:Pending"])
      yield* TestClock.adjust(Duration.millis(1_000))
      const again = yield* kube.nextWatch
      expect(again.options).toEqual(streamingOptions)
    }))

  it.scoped("2. a first list that ends so syncs nothing and tells nobody", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* start("auto")
      const a = yield* subscribe(watch.changes("a"))
      const w = yield* kube.nextWatch
      yield* w.emit(added(sandbox("a", "7")), endBookmark(""))
      yield* settle
      expect((yield* watch.health).synced).toBe(false)
      expect(yield* nextPause()).toBe(500)
      expect(yield* a).toEqual([])
      yield* TestClock.adjust(Duration.millis(500))
      // No proof the server cannot stream (rule 18): it streams again.
      expect((yield* kube.nextWatch).options).toEqual(streamingOptions)
    }))

  it.scoped("2. after the end bookmark, an empty resourceVersion on a bookmark or an event is ignored: the resume is from the newest", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* start("stream")
      const w = yield* kube.nextWatch
      yield* w.emit(added(sandbox("a", "7")), endBookmark("9"), bookmark(""), bookmark("12"), bookmark(""))
      yield* w.emit(added(sandbox("c", "")))
      yield* watch.synced
      // A floor's run first: a watch that spoke and closed at once would wait a beat (rule 3).
      yield* TestClock.adjust(Duration.millis(500))
      yield* w.end
      const resumed = yield* kube.nextWatch
      expect(resumed.options.resourceVersion).toBe("12")
    }))
})

describe("SandboxWatch streaming lists: a list that is arriving is being heard", () => {
  it.scoped("16. a first streaming list still arriving has been answered: health.answered before its end bookmark", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* start("stream")
      expect((yield* watch.health).answered).toBe(false)
      const w = yield* kube.nextWatch
      yield* w.emit(added(sandbox("a", "7")))
      yield* settle
      const health = yield* watch.health
      expect(health.synced).toBe(false)
      expect(health.answered).toBe(true)
    }))

  it.scoped("16. /readyz: the chunks of a long streaming re-list count as heard, so it never says the watch heard nothing", () =>
    Effect.gen(function*() {
      const { kube, watch } = yield* start("stream")
      const w = yield* kube.nextWatch
      yield* w.emit(added(sandbox("a", "7")), endBookmark("9"))
      yield* watch.synced
      yield* w.emit(errorEvent(410, "Expired", "too old resource version"))
      // A large namespace over a slow link: the server ends the first re-list at its term (rule 17),
      // and the next, asked for twice the term, arrives for five minutes, well past /readyz's limit.
      const cut = yield* kube.nextWatch
      yield* cut.emit(added(sandbox("s", "10")))
      yield* TestClock.adjust(Duration.seconds(240))
      yield* cut.end
      yield* passNextPause(20_000)
      const relist = yield* kube.nextWatch
      expect(relist.options.timeoutSeconds).toBe(480)
      for (let i = 0; i < 5; i++) {
        yield* TestClock.adjust(Duration.seconds(60))
        yield* relist.emit(added(sandbox(`s${i}`, String(10 + i))))
        yield* settle
      }
      const now = yield* TestClock.currentTimeMillis
      const health = yield* watch.health
      expect(health.lastHeard).toEqual(Option.some(now))
      expect(Telemetry.readiness(health, now, Duration.seconds(270))).toEqual({
        ready: true,
        reason: "synced, and heard from the cluster recently"
      })
    }))
})
