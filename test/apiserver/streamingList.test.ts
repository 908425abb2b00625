/**
 * Streaming lists against the real kube-apiserver (rules 16–18 of `src/internal/watchMachine.ts`):
 * on 1.37 the watch syncs from one `sendInitialEvents` watch and no LIST of Sandboxes reaches the
 * server (its own `apiserver_request_total`, read before and after); 1.20 refuses the parameters
 * with a 422, and `auto` ends on a paged list, telling nothing on the way.
 *
 * Then (issue 28) what a real server does around a streaming list: a 1.37 with the WatchList gate
 * off (its own server, `--feature-gates=WatchList=false`), a cut in the middle of the initial
 * events and a 410 after the end bookmark (through the HTTP fault proxy), and a resume after a cut.
 * Where 1.20 and 1.37 answer differently each test says which answer is whose.
 */
import { fetch } from "@effect/platform-node/Undici"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect, Logger, LogLevel, Option, Ref, Stream, SubscriptionRef } from "effect"
import * as KubeClient from "../../src/KubeClient.ts"
import type { Sandbox } from "../../src/Sandbox.ts"
import { SandboxResource } from "../../src/Sandbox.ts"
import * as SandboxWatch from "../../src/SandboxWatch.ts"
import * as Facts from "./ApiServerFacts.ts"
import * as HttpFaultProxy from "./HttpFaultProxy.ts"
import * as RealApiServer from "./RealApiServer.ts"
import type { ApiServerFacts } from "./RealApiServer.ts"
import type { Probe, WatchCall } from "./watchSupport.ts"
import { clientOn, poll, probe, recordAll, recordChanges, sandboxBody, short } from "./watchSupport.ts"

const facts = Facts.load()
const ns = facts.namespace

/** The server's count of finished requests of `verb` on sandboxes, from its /metrics. */
const requestsOf = (verb: "LIST" | "WATCH") =>
  Effect.scoped(Effect.gen(function*() {
    const agent = yield* Facts.agent(facts)
    const text = yield* Effect.promise(async () => {
      const answer = await fetch(`${facts.url}/metrics`, {
        headers: { authorization: `Bearer ${facts.adminToken}` },
        dispatcher: agent
      })
      return answer.text()
    })
    let total = 0
    for (const line of text.split("\n")) {
      if (!line.startsWith("apiserver_request_total{")) continue
      if (!line.includes(`resource="sandboxes"`) || !line.includes(`verb="${verb}"`)) continue
      total += Number(line.slice(line.lastIndexOf(" ") + 1))
    }
    return total
  }))

const namesOf = (run: string, count: number) =>
  Array.from({ length: count }, (_, i) => `${run}-${String(i).padStart(3, "0")}`)

/**
 * Creates `count` Sandboxes labelled `run`, each with `padding` characters in its spec if told. The
 * gate-off server's bootstrap makes the same namespace as the suite's.
 */
const seed = (
  admin: KubeClient.KubeClientService,
  run: string,
  count: number,
  options: { readonly padding?: number } = {}
) =>
  Effect.forEach(
    namesOf(run, count),
    (name) =>
      admin.create(
        SandboxResource,
        ns,
        sandboxBody(
          ns,
          name,
          run,
          options.padding === undefined ? {} : {
            spec: {
              repos: [{ key: "main", url: "https://example.test/repo.git" }],
              resources: { limits: { memory: "2Gi" } },
              padding: "p".repeat(options.padding)
            }
          }
        )
      ),
    { concurrency: 8, discard: true }
  )

/** The watch of `run` on `client`, on the short back-off every test here uses. */
const watchOn = (
  client: KubeClient.KubeClientService,
  run: string,
  listMode: NonNullable<SandboxWatch.SandboxWatchOptions["listMode"]>,
  options: { readonly backoffFloor?: `${number} millis` } = {}
) =>
  SandboxWatch.make({
    namespace: ns,
    labelSelector: `jr2.dev/run=${run}`,
    listMode,
    backoffFloor: options.backoffFloor ?? "50 millis",
    backoffCap: "2 seconds",
    jitter: false
  }).pipe(Effect.provideService(KubeClient.KubeClient, client))

/** A logger that keeps every line (level and text) the watch writes; the lines, to read. */
const logLines = Effect.gen(function*() {
  const lines = yield* Ref.make<ReadonlyArray<{ readonly level: string; readonly text: string }>>([])
  const logger = Logger.make(({ logLevel, message }) => {
    Effect.runSync(
      Ref.update(lines, (all) => [...all, {
        level: logLevel.label,
        text: Array.isArray(message) ? message.map(String).join(" ") : String(message)
      }])
    )
  })
  return { lines: Ref.get(lines), layer: Logger.replace(Logger.defaultLogger, logger) }
})

/** The streaming-list watches of a log: those that asked for the initial events. */
const streaming = (watches: ReadonlyArray<WatchCall>) => watches.filter((w) => w.sendInitialEvents === true)

/** The resourceVersion of a watch's end bookmark (`k8s.io/initial-events-end`), if it got that far. */
const endBookmark = (call: WatchCall | undefined): string | undefined =>
  call?.events.find((e) => e.type === "BOOKMARK" && e.initialEventsEnd === true)?.resourceVersion

describe("streaming lists against the real kube-apiserver", () => {
  it.live("auto: 1.37 syncs from the streaming list with no LIST; 1.20 refuses it (422) and the watch lists in pages", () =>
    Effect.scoped(Effect.gen(function*() {
      const run = "stream-auto"
      const count = 40
      const admin = yield* clientOn(Facts.connection(facts))
      yield* seed(admin, run, count)
      const wire = yield* probe(yield* clientOn(Facts.connection(facts)))
      const listsBefore = yield* requestsOf("LIST")
      const watch = yield* SandboxWatch.make({
        namespace: ns,
        labelSelector: `jr2.dev/run=${run}`,
        listMode: "auto",
        backoffFloor: "50 millis",
        backoffCap: "2 seconds",
        jitter: false
      }).pipe(Effect.provideService(KubeClient.KubeClient, wire.client))
      // Told before synced? A subscriber on one name hears only the reconcile and what follows.
      const told: Array<string> = []
      yield* Effect.forkScoped(
        Stream.runForEach(
          watch.changes(`${run}-000`),
          (v: Option.Option<Sandbox>) =>
            Effect.sync(() => told.push(Option.match(v, { onNone: () => "gone", onSome: (s) => s.metadata.name })))
        )
      )
      yield* watch.synced
      expect((yield* watch.health).cached).toBe(count)
      const listsAfter = yield* requestsOf("LIST")
      const log = yield* SubscriptionRef.get(wire.log)
      if (facts.minor >= 37) {
        // One watch, asked for the initial events; no list request at all.
        expect(listsAfter - listsBefore).toBe(0)
        expect(log.lists).toEqual([])
        expect(log.watches[0]).toMatchObject({ resourceVersion: undefined, outcome: "open" })
      } else {
        // The 422, then the paged list (the counter counts it; etcd answered it).
        expect(listsAfter - listsBefore).toBeGreaterThanOrEqual(1)
        expect(log.lists).toHaveLength(1)
        expect(log.watches[0]?.outcome).toBe("KubeStatusError 422")
      }
      // Then the watch goes on: a change is told.
      yield* admin.mergePatch(SandboxResource, ns, `${run}-000`, { status: { phase: "Ready" } }, {
        subresource: "status"
      })
      yield* poll(Effect.sync(() => told.length), (n) => n >= 2, "the change told")
      expect(told).toEqual([`${run}-000`, `${run}-000`])
    })))
})

/** `watch.synced`, or a death that says what the watch last asked and heard. */
const syncedWithin = (
  watch: SandboxWatch.SandboxWatchService,
  wire: Probe,
  limit: `${number} seconds` = "60 seconds"
) =>
  watch.synced.pipe(
    Effect.timeoutOption(limit),
    Effect.flatMap(Option.match({
      onSome: () => Effect.void,
      onNone: () =>
        Effect.flatMap(SubscriptionRef.get(wire.log), (log) =>
          Effect.dieMessage(`not synced within ${limit}; the wire: ${JSON.stringify(log).slice(0, 4_000)}`))
    }))
  )

/** The 422's message, as each server words it. */
const refusalOf = (minor: number) =>
  minor >= 37
    // 1.37 with the gate off: the request's validation, `sendInitialEvents` named.
    ? "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"
    // 1.20 knows no sendInitialEvents (it ignores the parameter) but forbids resourceVersionMatch on a watch.
    : "resourceVersionMatch is forbidden for watch"

/**
 * On 1.37: a server of its own with the WatchList gate off. On 1.20, which has no such gate and
 * refuses the parameters as it is, the suite's own server: the same tests assert 1.20's answer.
 */
let gateOff: RealApiServer.RealApiServer | undefined
const gateOffFacts = (): ApiServerFacts => (gateOff === undefined ? facts : RealApiServer.facts(gateOff))

describe("a server that cannot stream lists: 1.37 with --feature-gates=WatchList=false, 1.20 as it is (both 422)", () => {
  beforeAll(async () => {
    if (facts.minor >= 37) {
      const started = Date.now()
      gateOff = await RealApiServer.start({ extraArgs: ["--feature-gates=WatchList=false"] })
      console.log(`[streamingList] gate-off ${gateOff.version} ready in ${Date.now() - started} ms`)
    }
  }, 240_000)
  afterAll(async () => {
    await gateOff?.stop()
  }, 60_000)

  it.live(
    "auto: the 422 (1.37: the WatchList gate named; 1.20: resourceVersionMatch forbidden) is said once, one paged list syncs every Sandbox, then a change is told",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const server = gateOffFacts()
        const run = "gate-auto"
        const count = 12
        const admin = yield* clientOn(Facts.connection(server))
        yield* seed(admin, run, count)
        const wire = yield* probe(yield* clientOn(Facts.connection(server)))
        const logs = yield* logLines
        const watch = yield* watchOn(wire.client, run, "auto").pipe(Effect.provide(logs.layer))
        const first = `${run}-000`
        const one = yield* recordChanges(watch, first)
        yield* syncedWithin(watch, wire)
        expect(yield* watch.health).toMatchObject({ synced: true, cached: count })

        // The one streaming list asked for, refused on the request.
        const log = yield* wire.await(
          (l) => l.watches.length >= 2 && l.watches[1]!.outcome === "open",
          "the plain watch after the paged list"
        )
        const refused = log.watches[0]!
        expect(refused).toMatchObject({
          sendInitialEvents: true,
          resourceVersion: undefined,
          outcome: "KubeStatusError 422"
        })
        expect(refused.failureMessage).toContain(refusalOf(server.minor))
        // Then one quorum list with every Sandbox, and a plain watch from its resourceVersion.
        expect(log.lists).toHaveLength(1)
        const listed = log.lists[0]!
        expect(listed.resourceVersion).toBeUndefined()
        if (listed.outcome._tag !== "Listed") throw new Error(`the list failed: ${listed.outcome.failure}`)
        expect([...listed.outcome.names].sort()).toEqual(namesOf(run, count))
        expect(log.watches[1]).toMatchObject({
          sendInitialEvents: undefined,
          resourceVersion: listed.outcome.resourceVersion
        })
        // Said once, as a warning naming what the server said and what comes next.
        const said = (yield* logs.lines).filter((l) => l.text.includes("refused a streaming list"))
        expect(said).toHaveLength(1)
        expect(said[0]!.level).toBe(LogLevel.Warning.label)
        expect(said[0]!.text).toContain(refusalOf(server.minor))
        expect(said[0]!.text).toContain("every list is paged from now on")

        // A change made on the server is told, after the reconcile.
        yield* admin.mergePatch(SandboxResource, ns, first, { status: { phase: "Ready" } }, {
          subresource: "status"
        })
        yield* one.await((t) => t.length >= 2, `${first}'s change told`)
        expect(yield* one.shorts).toEqual([`${first}:-`, `${first}:Ready`])
        // And nothing asked to stream again: the watch pages for its life.
        const after = yield* SubscriptionRef.get(wire.log)
        expect(streaming(after.watches)).toHaveLength(1)
        expect(after.lists).toHaveLength(1)
        expect((yield* logs.lines).filter((l) => l.text.includes("refused a streaming list"))).toHaveLength(1)
      })),
    120_000
  )

  it.live(
    "stream: every streaming list refused with the 422, asked again on a growing back-off; no paged list, never synced, nothing told",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const server = gateOffFacts()
        const run = "gate-stream"
        const count = 5
        const floorMs = 50
        const admin = yield* clientOn(Facts.connection(server))
        yield* seed(admin, run, count)
        const wire = yield* probe(yield* clientOn(Facts.connection(server)))
        const logs = yield* logLines
        const watch = yield* watchOn(wire.client, run, "stream").pipe(Effect.provide(logs.layer))
        const first = `${run}-000`
        const all = yield* recordAll(watch)
        const one = yield* recordChanges(watch, first)
        const ended = (n: number) => (l: { readonly watches: ReadonlyArray<WatchCall> }) =>
          l.watches.length >= n && l.watches.slice(0, n).every((w) => w.outcome !== "open")
        const log = yield* wire.await(ended(4), "four streaming lists refused")
        const refused = log.watches.slice(0, 4)
        for (const w of refused) {
          expect(w).toMatchObject({
            sendInitialEvents: true,
            resourceVersion: undefined,
            outcome: "KubeStatusError 422"
          })
          expect(w.failureMessage).toContain(refusalOf(server.minor))
        }
        // No jitter: each pause doubles from the floor (50, 100, 200 ms).
        const gaps = refused.slice(1).map((w, i) => w.at - refused[i]!.at)
        gaps.forEach((gap, i) => expect(gap).toBeGreaterThanOrEqual(floorMs * 2 ** i * 0.9))
        expect(log.lists).toEqual([])
        expect(yield* watch.health).toMatchObject({ synced: false, cached: 0 })

        // A change on the server meanwhile: still nobody is told anything, and the refusals go on.
        yield* admin.mergePatch(SandboxResource, ns, first, { status: { phase: "Ready" } }, {
          subresource: "status"
        })
        const later = yield* wire.await(ended(6), "two more streaming lists refused")
        expect(later.watches.every((w) => w.sendInitialEvents === true)).toBe(true)
        expect(later.watches.slice(0, 6).map((w) => w.outcome)).toEqual(Array(6).fill("KubeStatusError 422"))
        expect(later.lists).toEqual([])
        expect(yield* watch.health).toMatchObject({ synced: false, cached: 0 })
        expect(yield* all.told).toEqual([])
        expect(yield* one.told).toEqual([])
        // Every refusal a warning, none of them moving to pages.
        const lines = yield* logs.lines
        expect(lines.filter((l) => l.text.includes(refusalOf(server.minor))).length).toBeGreaterThanOrEqual(5)
        expect(lines.filter((l) => l.text.includes("paged"))).toEqual([])
      })),
    120_000
  )
})

/**
 * Waits until the watch that goes on after the sync has reached the proxy (the probe logs a watch
 * when it is asked for, before its request is on the wire): on 1.37 the streaming list itself, on
 * 1.20 the plain watch from the paged list's resourceVersion (`syncedAt`) after the 422.
 */
const establishedThrough = (proxy: HttpFaultProxy.HttpFaultProxy, syncedAt: string) =>
  poll(
    Effect.map(proxy.seen, (all) => all.filter((r) => r.kind === "watch")),
    (watches) =>
      facts.minor >= 37
        ? watches.length === 1 && watches[0]!.query.sendInitialEvents === "true"
        : watches.length === 2 && watches[1]!.query.resourceVersion === syncedAt,
    "the watch after the sync to reach the proxy"
  )

describe("streaming lists through the HTTP fault proxy", () => {
  it.live.skipIf(facts.minor < 37)(
    "a cut in the middle of the initial events (1.37 only: 1.20 sends none): nothing told, the list streams again from scratch after the back-off, then synced with all told once",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const run = "stream-cut"
        const count = 60
        const admin = yield* clientOn(Facts.connection(facts))
        // ~2 KB each: about 130 KB of initial events, dripped at 64 bytes a millisecond at best.
        yield* seed(admin, run, count, { padding: 2_000 })
        const proxy = yield* HttpFaultProxy.make(facts)
        yield* proxy.failNext("watch", 1, { _tag: "Drip", bytes: 64, everyMillis: 1 })
        const wire = yield* probe(yield* clientOn(Facts.connection(facts, { server: proxy.url })))
        const watch = yield* watchOn(wire.client, run, "auto")
        // The first name: the first of the initial events (they come in key order), so part of the draft dropped.
        const first = `${run}-000`
        const all = yield* recordAll(watch)
        const one = yield* recordChanges(watch, first)

        const partway = yield* wire.await(
          (l) => (l.watches[0]?.events.length ?? 0) >= 10,
          "ten initial events through the drip",
          "60 seconds"
        )
        expect(endBookmark(partway.watches[0])).toBeUndefined()
        expect(yield* watch.health).toMatchObject({ synced: false, cached: 0 })
        expect(yield* all.told).toEqual([])
        expect(yield* one.told).toEqual([])
        const cutAt = Date.now()
        expect(yield* proxy.cutOpen).toBeGreaterThanOrEqual(1)
        const cut = (yield* wire.await((l) => l.watches[0]?.outcome !== "open", "the cut streaming list to end"))
          .watches[0]!
        const arrived = cut.events.filter((e) => e.type === "ADDED").length
        expect(arrived).toBeGreaterThanOrEqual(10)
        expect(arrived).toBeLessThan(count)
        expect(endBookmark(cut)).toBeUndefined()
        expect(cut.outcome).toBe("KubeTransportError")

        yield* syncedWithin(watch, wire)
        expect(yield* watch.health).toMatchObject({ synced: true, cached: count })
        const watches = (yield* proxy.seen).filter((r) => r.kind === "watch")
        expect(watches[0]).toMatchObject({
          fault: "Drip",
          query: { sendInitialEvents: "true", resourceVersionMatch: "NotOlderThan" }
        })
        // The next list streams again, from nothing: no resume from what half arrived.
        expect(watches.length).toBeGreaterThanOrEqual(2)
        expect(watches[1]!.fault).toBeUndefined()
        expect(watches[1]!.query).toMatchObject({ sendInitialEvents: "true", resourceVersionMatch: "NotOlderThan" })
        expect(watches[1]!.query.resourceVersion).toBeUndefined()
        expect(watches[1]!.at - cutAt).toBeGreaterThanOrEqual(45) // the back-off's floor, 50 ms
        expect((yield* proxy.seen).filter((r) => r.kind === "list")).toEqual([])
        const log = yield* SubscriptionRef.get(wire.log)
        expect(log.lists).toEqual([])
        expect(endBookmark(log.watches[1])).toBeDefined()

        // Everything told once, present (the reconcile); nothing gone.
        const told = yield* all.await((t) => t.length >= count, `${count} told`)
        expect(told.map(short).sort()).toEqual(namesOf(run, count).map((n) => `${n}:-`))
        // The one name: the reconcile, then a change, and nothing between.
        yield* admin.mergePatch(SandboxResource, ns, first, { status: { phase: "Ready" } }, {
          subresource: "status"
        })
        yield* one.await((t) => t.length >= 2, `${first}'s change told`)
        expect(yield* one.shorts).toEqual([`${first}:-`, `${first}:Ready`])
        expect((yield* all.shorts).filter((s) => s.endsWith(":gone"))).toEqual([])
      })),
    120_000
  )

  it.live(
    "a 410 on the resume after the sync re-lists: 1.37 streams again (no LIST reaches the server), 1.20 lists in pages; only the Sandbox deleted meanwhile is told (gone)",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const run = "stream-410"
        const count = 8
        const admin = yield* clientOn(Facts.connection(facts))
        yield* seed(admin, run, count)
        const names = namesOf(run, count)
        const doomed = names[3]!
        const proxy = yield* HttpFaultProxy.make(facts)
        const wire = yield* probe(yield* clientOn(Facts.connection(facts, { server: proxy.url })))
        // A wider floor than elsewhere: the deletion below must reach etcd before the re-list asks
        // (the cut, a floor, the 410, two floors), and is checked to have done so.
        const watch = yield* watchOn(wire.client, run, "auto", { backoffFloor: "250 millis" })
        yield* syncedWithin(watch, wire)
        const all = yield* recordAll(watch)
        expect((yield* all.awaitShorts(count)).slice().sort()).toEqual(names.map((n) => `${n}:-`))
        const synced = yield* SubscriptionRef.get(wire.log)
        // How it synced: 1.37 from a streaming list; 1.20 refused it (422) and listed in pages.
        const syncedAt = facts.minor >= 37 ? endBookmark(synced.watches[0]) : (synced.lists[0]?.outcome as {
          resourceVersion?: string
        })?.resourceVersion
        expect(syncedAt).toBeDefined()
        if (facts.minor >= 37) expect(synced.lists).toEqual([])
        else expect(synced.watches[0]!.outcome).toBe("KubeStatusError 422")
        yield* establishedThrough(proxy, syncedAt!)

        const from = (yield* proxy.seen).length
        const wireFrom = synced.watches.length
        const listsBefore = yield* requestsOf("LIST")
        yield* proxy.failNext("watch", 1, { _tag: "ExpiredInStream" })
        expect(yield* proxy.cutOpen).toBeGreaterThanOrEqual(1)
        yield* admin.delete(SandboxResource, ns, doomed)
        yield* all.awaitLast(doomed, "gone")

        // A later change, told after whatever the re-list told: the bound on "only the deleted one".
        const marker = names[0]!
        yield* admin.mergePatch(SandboxResource, ns, marker, { status: { phase: "Later" } }, { subresource: "status" })
        yield* all.await((t) => t.length >= count + 2, "the deletion and the later change told")
        expect((yield* all.shorts).slice(count)).toEqual([`${doomed}:gone`, `${marker}:Later`])
        expect(yield* watch.health).toMatchObject({ synced: true, cached: count - 1 })

        const seen = (yield* proxy.seen).slice(from)
        const watches = seen.filter((r) => r.kind === "watch")
        // The resume: a plain watch from where the sync left off, answered 410 by the proxy.
        expect(watches[0]).toMatchObject({ fault: "ExpiredInStream", query: { resourceVersion: syncedAt } })
        expect(watches[0]!.query.sendInitialEvents).toBeUndefined()
        const log = yield* SubscriptionRef.get(wire.log)
        const after = log.watches.slice(wireFrom)
        // The deletion was not heard as an event: the re-list told it (rule 11).
        expect(after.flatMap((w) => w.events).filter((e) => e.type === "DELETED")).toEqual([])
        const listsAfter = yield* requestsOf("LIST")
        if (facts.minor >= 37) {
          // The re-list is a streaming list: a watch with the initial events, no resourceVersion; no LIST.
          expect(watches[1]!.query).toMatchObject({ sendInitialEvents: "true", resourceVersionMatch: "NotOlderThan" })
          expect(watches[1]!.query.resourceVersion).toBeUndefined()
          expect(seen.filter((r) => r.kind === "list")).toEqual([])
          expect(listsAfter - listsBefore).toBe(0)
          const restream = after[1]!
          expect(restream.sendInitialEvents).toBe(true)
          const initial = restream.events.filter((e) => e.type === "ADDED").map((e) => e.name).sort()
          expect(initial).toEqual(names.filter((n) => n !== doomed))
          expect(endBookmark(restream)).toBeDefined()
        } else {
          // 1.20: the watch pages for its life: a quorum list, then a plain watch from it.
          const lists = seen.filter((r) => r.kind === "list")
          expect(lists).toHaveLength(1)
          expect(lists[0]!.query.resourceVersion).toBeUndefined()
          expect(listsAfter - listsBefore).toBeGreaterThanOrEqual(1)
          expect(watches[1]!.query.sendInitialEvents).toBeUndefined()
          expect(log.lists.at(-1)!.outcome).toMatchObject({ _tag: "Listed" })
          expect([...(log.lists.at(-1)!.outcome as { names: ReadonlyArray<string> }).names].sort()).toEqual(
            names.filter((n) => n !== doomed)
          )
        }
        expect(streaming(log.watches)).toHaveLength(facts.minor >= 37 ? 2 : 1)
      })),
    120_000
  )

  it.live(
    "a resume after the streaming sync (1.37; 1.20: after its paged sync) is a plain watch from the end bookmark's resourceVersion or newer, never sendInitialEvents; nothing told",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const run = "stream-resume"
        const count = 6
        const admin = yield* clientOn(Facts.connection(facts))
        yield* seed(admin, run, count)
        const names = namesOf(run, count)
        const proxy = yield* HttpFaultProxy.make(facts)
        const wire = yield* probe(yield* clientOn(Facts.connection(facts, { server: proxy.url })))
        const watch = yield* watchOn(wire.client, run, "auto")
        yield* syncedWithin(watch, wire)
        const all = yield* recordAll(watch)
        yield* all.awaitShorts(count)
        const synced = yield* SubscriptionRef.get(wire.log)
        // 1.37: the end bookmark of the one streaming list; 1.20: the paged list's resourceVersion.
        const syncedAt = facts.minor >= 37
          ? endBookmark(synced.watches[0])
          : (synced.lists[0]?.outcome as { resourceVersion?: string })?.resourceVersion
        expect(syncedAt).toBeDefined()
        expect(synced.lists).toHaveLength(facts.minor >= 37 ? 0 : 1)
        yield* establishedThrough(proxy, syncedAt!)

        const from = (yield* proxy.seen).length
        expect(yield* proxy.cutOpen).toBeGreaterThanOrEqual(1)
        const resumed = yield* poll(
          Effect.map(proxy.seen, (all) => all.slice(from).filter((r) => r.kind === "watch")),
          (w) => w.length >= 1,
          "the resume through the proxy"
        )
        expect(resumed[0]!.query.sendInitialEvents).toBeUndefined()
        expect(resumed[0]!.query.resourceVersionMatch).toBeUndefined()
        const at = resumed[0]!.query.resourceVersion
        expect(at).toBeDefined()
        expect(BigInt(at!)).toBeGreaterThanOrEqual(BigInt(syncedAt!))
        expect(Option.some(at)).toEqual((yield* watch.health).resourceVersion)

        // Nothing told by the cut or the resume: the next thing told is a change made now.
        const marker = names[1]!
        yield* admin.mergePatch(SandboxResource, ns, marker, { status: { phase: "After" } }, { subresource: "status" })
        yield* all.await((t) => t.length >= count + 1, "the change after the resume told")
        expect((yield* all.shorts).slice(count)).toEqual([`${marker}:After`])
        const seen = (yield* proxy.seen).slice(from)
        expect(seen.filter((r) => r.kind === "list")).toEqual([])
        expect(seen.filter((r) => r.kind === "watch" && r.query.sendInitialEvents !== undefined)).toEqual([])
        expect(streaming((yield* SubscriptionRef.get(wire.log)).watches)).toHaveLength(1)
      })),
    120_000
  )
})
