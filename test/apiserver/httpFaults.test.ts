/**
 * The watch through an HTTP-level fault proxy in front of the real kube-apiserver: what an HTTP
 * middlebox or an overloaded apiserver sends (429 with Retry-After, a 500 Status, a 502 HTML page,
 * an `ERROR` 410 inside a live stream, a 504 too-large resourceVersion, a malformed line, a body cut
 * mid-line, bytes dripped a few at a time, a list body that stalls). For each, the test asserts what
 * the README's behaviour table promises, counts what the watch asked of the server while the fault
 * lasted, and afterwards checks that every subscriber equals a fresh list, with nothing that exists
 * ever told gone and no resourceVersion told going backwards.
 *
 * The watch runs without jitter (so a growing back-off shows as growing gaps), on a 100 ms floor.
 * How long after the last faulted request the first change was told is printed (`[back-in-step]`).
 */
import { describe, expect, it } from "@effect/vitest"
import { type Duration, Effect, Layer, Option } from "effect"
import * as KubeClient from "../../src/KubeClient.ts"
import { KubeConfig } from "../../src/KubeConfig.ts"
import { SandboxResource } from "../../src/Sandbox.ts"
import * as SandboxWatch from "../../src/SandboxWatch.ts"
import * as Facts from "./ApiServerFacts.ts"
import * as HttpFaultProxy from "./HttpFaultProxy.ts"
import type { Recorder } from "./watchSupport.ts"
import {
  backInStep,
  backwards,
  clientOn,
  disagreements,
  falselyGone,
  poll,
  recordAll,
  recordChanges,
  seedPending,
  truthOf
} from "./watchSupport.ts"

const facts = Facts.load()
const ns = facts.namespace
const Floor = 100
/** A list body that has not arrived whole after this is abandoned. */
const BodyTimeout = "2 seconds"

/** Seeds `names` under `run` and starts a watch behind a fresh HTTP fault proxy. */
const scenario = (run: string, names: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const admin = yield* clientOn(Facts.connection(facts))
    const setPhase = yield* seedPending(admin, ns, run, names)
    const proxy = yield* HttpFaultProxy.make(facts)
    const client = yield* Layer.build(
      KubeClient.layerWith({ bodyTimeout: BodyTimeout }).pipe(
        Layer.provide(Layer.succeed(KubeConfig, Facts.connection(facts, { server: proxy.url })))
      )
    )
    const watch = yield* SandboxWatch.make({
      namespace: ns,
      labelSelector: `jr2.dev/run=${run}`,
      backoffFloor: `${Floor} millis`,
      backoffCap: "5 seconds",
      timeoutSeconds: 30,
      idleMargin: "5 seconds",
      jitter: false,
      // These tests read the paged list's requests; streamingList.test.ts has the streaming lists.
      listMode: "paged"
    }).pipe(Effect.provide(client))
    yield* watch.synced
    const all = yield* recordAll(watch)
    const byName = new Map<string, Recorder>()
    for (const name of names) byName.set(name, yield* recordChanges(watch, name))
    yield* all.awaitShorts(names.length)
    // The watch is open and delivering before any fault.
    const first = names[0]!
    yield* all.awaitLast(first, yield* setPhase(first, "Warm"))
    return { admin, setPhase, proxy, watch, all, byName, run, names }
  })

type Scenario = Effect.Effect.Success<ReturnType<typeof scenario>>

/** Requests of `kind` seen since `from` (an index into everything the proxy saw). */
const since = (s: Scenario, from: number, kind: HttpFaultProxy.RequestKind) =>
  Effect.map(s.proxy.seen, (all) => all.slice(from).filter((r) => r.kind === kind))

const mark = (s: Scenario) => Effect.map(s.proxy.seen, (all) => all.length)

/** Gaps in ms between consecutive requests. */
const gaps = (requests: ReadonlyArray<HttpFaultProxy.Seen>) => requests.slice(1).map((r, i) => r.at - requests[i]!.at)

/** Waits until `count` requests of `kind` were seen since `from`. */
const awaitRequests = (
  s: Scenario,
  from: number,
  kind: HttpFaultProxy.RequestKind,
  count: number,
  limit: Duration.DurationInput = "30 seconds"
) => poll(since(s, from, kind), (r) => r.length >= count, `${count} ${kind} requests through the proxy`, limit)

/**
 * Once the faults stopped: a change made now is told (the watch is back), every recorder agrees
 * with a fresh list, nothing that exists was told gone, no resourceVersion told went backwards.
 * Prints how long after the last faulted request the first change was told.
 */
const settle = (s: Scenario, present: ReadonlyArray<string> = s.names) =>
  Effect.gen(function*() {
    const last = present[present.length - 1]!
    const lastFault = (yield* s.proxy.seen).filter((r) => r.fault !== undefined).at(-1)
    const rv = yield* s.setPhase(last, "After")
    if (lastFault !== undefined) {
      yield* backInStep(
        `httpFaults, ${s.run} after ${lastFault.fault} (kube-apiserver ${facts.version})`,
        s.all,
        lastFault.at
      )
    }
    yield* s.byName.get(last)!.awaitLast(last, rv)
    const truth = yield* truthOf(s.admin, ns, s.run)
    yield* s.all.await(
      (told) => disagreements(told, truth).length === 0,
      "allChanges to agree with the server",
      "10 seconds"
    )
    for (const [name, recorder] of s.byName) {
      yield* recorder.await(
        (told) => disagreements(told, truth, [name]).length === 0,
        `changes(${name}) to agree`,
        "10 seconds"
      )
    }
    for (const told of [yield* s.all.told, ...(yield* Effect.forEach([...s.byName.values()], (r) => r.told))]) {
      expect(backwards(told)).toEqual([])
      expect(falselyGone(told, present)).toEqual([])
    }
    const snapshot = yield* s.watch.snapshot
    expect([...snapshot.keys()].sort()).toEqual([...truth.keys()].sort())
  })

describe("SandboxWatch through HTTP faults in front of the real kube-apiserver", () => {
  it.live(
    "429 with Retry-After: resumes without a re-list, no sooner than the server asked",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const s = yield* scenario("hf-429", ["h429-a", "h429-b"])
        const from = yield* mark(s)
        yield* s.proxy.failNext("watch", 3, { _tag: "TooManyRequests", retryAfterSeconds: 1 })
        yield* s.proxy.cutOpen
        yield* s.setPhase("h429-b", "During")
        const watches = yield* awaitRequests(s, from, "watch", 4)
        expect(watches.slice(0, 3).map((w) => w.fault)).toEqual([
          "TooManyRequests",
          "TooManyRequests",
          "TooManyRequests"
        ])
        // One request per Retry-After at the most (a few ms of scheduling allowed).
        for (const gap of gaps(watches.slice(0, 4))) expect(gap).toBeGreaterThanOrEqual(990)
        yield* settle(s)
        expect(yield* since(s, from, "list")).toEqual([])
      })),
    60_000
  )

  it.live(
    "500 with a Status, 502 with an HTML page: the back-off doubles while they last; no re-list",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const s = yield* scenario("hf-5xx", ["h5xx-a", "h5xx-b"])
        const from = yield* mark(s)
        yield* s.proxy.failNext("watch", 2, { _tag: "InternalError" })
        yield* s.proxy.failNext("watch", 2, { _tag: "BadGatewayHtml" })
        yield* s.proxy.cutOpen
        const watches = yield* awaitRequests(s, from, "watch", 5)
        expect(watches.slice(0, 4).map((w) => w.fault)).toEqual([
          "InternalError",
          "InternalError",
          "BadGatewayHtml",
          "BadGatewayHtml"
        ])
        // The cut was no answer (its own pace, rule 7); each 5xx, an answer, doubles the next pause
        // from the floor.
        const between = gaps(watches.slice(0, 5))
        between.forEach((gap, i) => expect(gap).toBeGreaterThanOrEqual(Floor * 2 ** i * 0.95))
        expect(between[3]!).toBeLessThan(Floor * 2 ** 3 * 3)
        yield* settle(s)
        expect(yield* since(s, from, "list")).toEqual([])
      })),
    60_000
  )

  it.live(
    "an ERROR 410 in the stream and a 504 too-large resourceVersion: each re-lists, the back-off growing while they repeat",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const s = yield* scenario("hf-410", ["h410-a", "h410-b"])
        const from = yield* mark(s)
        yield* s.proxy.failNext("watch", 2, { _tag: "ExpiredInStream" })
        yield* s.proxy.failNext("watch", 1, { _tag: "TooLargeResourceVersion" })
        yield* s.proxy.cutOpen
        yield* s.admin.delete(SandboxResource, ns, "h410-b")
        const lists = yield* awaitRequests(s, from, "list", 3)
        const watches = yield* awaitRequests(s, from, "watch", 4)
        expect(watches.slice(0, 3).map((w) => w.fault)).toEqual([
          "ExpiredInStream",
          "ExpiredInStream",
          "TooLargeResourceVersion"
        ])
        // Each faulted watch is followed by a quorum list: the first at once (rule 5), then after a
        // pause that doubles while they repeat: a list alone is not a healthy stream.
        const pauses = watches.slice(0, 3).map((w, i) => lists[i]!.at - w.at)
        pauses.forEach((pause, i) => expect(pause).toBeGreaterThanOrEqual(i === 0 ? 0 : Floor * 2 ** (i - 1) * 0.95))
        for (const list of lists) expect(list.query.resourceVersion).toBeUndefined()
        yield* s.byName.get("h410-b")!.awaitLast("h410-b", "gone")
        yield* settle(s, ["h410-a"])
      })),
    60_000
  )

  it.live(
    "a malformed line and a body cut mid-line: resume from the last good resourceVersion after the back-off, no re-list",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const s = yield* scenario("hf-lines", ["hln-a", "hln-b"])
        const before = (yield* s.watch.health).resourceVersion
        const from = yield* mark(s)
        yield* s.proxy.failNext("watch", 1, { _tag: "MalformedLine" })
        yield* s.proxy.failNext("watch", 1, { _tag: "CutMidLine" })
        yield* s.proxy.cutOpen
        const watches = yield* awaitRequests(s, from, "watch", 3)
        expect(watches.slice(0, 2).map((w) => w.fault)).toEqual(["MalformedLine", "CutMidLine"])
        for (const w of watches) expect(Option.some(w.query.resourceVersion)).toEqual(before)
        yield* settle(s)
        expect(yield* since(s, from, "list")).toEqual([])
      })),
    60_000
  )

  it.live(
    "bytes dripped three at a time: lines and multi-byte characters split across chunks arrive whole",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const s = yield* scenario("hf-drip", ["hdr-a", "hdr-b"])
        const from = yield* mark(s)
        yield* s.proxy.failNext("watch", 1, { _tag: "Drip", bytes: 3, everyMillis: 1 })
        yield* s.proxy.cutOpen
        yield* awaitRequests(s, from, "watch", 1)
        const phase = "Prêt 🙂 naïve — ✓"
        const rv = yield* s.setPhase("hdr-b", phase)
        const told = yield* s.byName.get("hdr-b")!.awaitLast("hdr-b", rv)
        const last = told[told.length - 1]!
        expect(Option.map(last.sandbox, (x) => x.status?.phase)).toEqual(Option.some(phase))
        yield* settle(s)
        expect(yield* since(s, from, "list")).toEqual([])
      })),
    60_000
  )

  it.live(
    "a list body that stalls: the deadline abandons it and the list is asked again",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const s = yield* scenario("hf-stall", ["hst-a", "hst-b"])
        const from = yield* mark(s)
        // An expired resourceVersion sends the watch to list; that list's body stalls.
        yield* s.proxy.failNext("watch", 1, { _tag: "ExpiredInStream" })
        yield* s.proxy.failNext("list", 1, { _tag: "StallBody" })
        yield* s.proxy.cutOpen
        const lists = yield* awaitRequests(s, from, "list", 2, "20 seconds")
        expect(lists[0]!.fault).toBe("StallBody")
        yield* Effect.promise(() => lists[0]!.abandoned)
        // Not before the body deadline (2 s), then the back-off.
        expect(lists[1]!.at - lists[0]!.at).toBeGreaterThanOrEqual(2_000)
        expect((yield* s.watch.health).synced).toBe(true)
        yield* settle(s)
      })),
    60_000
  )
})
