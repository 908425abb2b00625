/**
 * The one watch of every Sandbox in a namespace: held in memory, pushed to whoever subscribes to a
 * name, and honest about what it does not know.
 *
 * The loop is list → watch → watch → …, a state machine whose decisions are all in
 * `internal/watchMachine.ts` (its states, what a round can end with, the numbered rules), and whose
 * cache is changed only by `internal/sandboxCache.ts`. This module runs it:
 *
 * - A round is the list (when the state is `NeedsList`) then one watch, whose events are applied to
 *   the cache chunk by chunk. When the round ends, `settle` asks the machine for the next state and
 *   sets it: the one place it changes.
 * - The rounds run as a `Stream` under `Stream.retry` with the retry `Schedule`. A round that did
 *   not end as it should fails with the machine's transition; the `Schedule` only waits the
 *   transition's pause (none, the server's `Retry-After`, or the exponential back-off).
 *   `Stream.retry` resets the back-off whenever the stream yields, and it yields just before a
 *   failure that follows a watch which heard something (a healthy stream), so that failure's pause
 *   starts from the floor.
 * - The cache is a `SubscriptionRef` of persistent maps, so a re-list replaces it in one step
 *   (nobody ever sees half-old, half-new state). Subscribers are told under the same lock, through a
 *   keyed hub of latest-value mailboxes.
 *
 * Unknown is never loss: a dropped watch, an error, a back-off or an object that does not decode
 * tells nobody anything. Only a list without the name, or a `DELETED` event, says gone.
 */
import {
  Array as Arr,
  Cause,
  Channel,
  Chunk,
  Clock,
  Config,
  type ConfigError,
  Context,
  Data,
  Deferred,
  Duration,
  Effect,
  Either,
  FiberRef,
  HashSet,
  Layer,
  Metric,
  MetricLabel,
  Option,
  Random,
  Schedule,
  ScheduleDecision,
  ScheduleInterval,
  type Scope,
  Stream,
  SubscriptionRef
} from "effect"
import type { LatestMailbox } from "./internal/latestMailbox.ts"
import * as SandboxCache from "./internal/sandboxCache.ts"
import { SubscriberHub } from "./internal/subscriberHub.ts"
import * as WatchMachine from "./internal/watchMachine.ts"
import type { FullList } from "./KubeClient.ts"
import { KubeClient } from "./KubeClient.ts"
import { DefaultLabelSelector, Sandbox, SandboxResource } from "./Sandbox.ts"
import type { UndecodableEvent, WatchEvent } from "./WatchEvent.ts"
import { InitialEventsEndAnnotation } from "./WatchEvent.ts"

/** One name's new state: the Sandbox as the cluster now says it is, or none when it says gone. */
export interface SandboxChange {
  readonly name: string
  readonly sandbox: Option.Option<Sandbox>
}

/** For readiness probes and status lines. */
export interface SandboxWatchHealth {
  readonly synced: boolean
  /** Epoch milliseconds of the last list, event or bookmark; none before the first answer. */
  readonly lastHeard: Option.Option<number>
  /** Lists after the first one (an expired resourceVersion, an ERROR event, ...). */
  readonly relists: number
  readonly watchRestarts: number
  readonly cached: number
  /** Names the cluster has whose only state heard did not decode: neither present nor gone. */
  readonly unknown: number
  /** The newest resourceVersion heard (a list, an event or a bookmark); none before the first list. */
  readonly resourceVersion: Option.Option<string>
  /** Open `changes`/`allChanges` subscriptions and `waitFor` waits. */
  readonly subscribers: number
}

export interface SandboxWatchService {
  /** Completes once the first list has landed. */
  readonly synced: Effect.Effect<void>
  /** The Sandbox as last seen; meaningful once synced. */
  readonly get: (name: string) => Effect.Effect<Option.Option<Sandbox>>
  /**
   * Nothing before the first list; then the cached value at once, then every change the cluster
   * reports. A slow reader skips to the latest state rather than queueing a backlog.
   */
  readonly changes: (name: string) => Stream.Stream<Option.Option<Sandbox>>
  /**
   * Every name: nothing before the first list, then each cached Sandbox once, then every change
   * (gone only for a name it was told present). A slow reader gets the latest state of each name
   * that changed, never a backlog.
   */
  readonly allChanges: Stream.Stream<SandboxChange>
  /**
   * Runs `step` on what `changes(name)` would emit — nothing before the first list, then the
   * cached value, then every change (changes that land while a step runs reach the next step as
   * the latest one) — until `step` answers, and returns that answer.
   *
   * The cheap way to wait on one Sandbox: no stream runs, so a parked wait is a mailbox and the
   * caller's own fiber, about a third of what an idle `changes` stream run by `Stream.runForEach`
   * weighs (that also carries the stream's channel machinery and a fiber of its own).
   */
  readonly waitFor: <A, E, R>(
    name: string,
    step: (value: Option.Option<Sandbox>) => Effect.Effect<Option.Option<A>, E, R>
  ) => Effect.Effect<A, E, R>
  /** Every cached Sandbox, by name. */
  readonly snapshot: Effect.Effect<ReadonlyMap<string, Sandbox>>
  readonly health: Effect.Effect<SandboxWatchHealth>
}

export class SandboxWatch extends Context.Tag("sandbox-watch/SandboxWatch")<SandboxWatch, SandboxWatchService>() {}

export interface SandboxWatchOptions {
  readonly namespace: string
  /** Default `jr2.dev/run`. */
  readonly labelSelector?: string
  /** First back-off after a failure; doubles up to the cap. Default 500 ms. */
  readonly backoffFloor?: Duration.DurationInput
  /** Default 30 s. */
  readonly backoffCap?: Duration.DurationInput
  /** Asked of the server on every watch. Default 240. */
  readonly timeoutSeconds?: number
  /** Silence longer than `timeoutSeconds` plus this means a dead connection. Default 30 s. */
  readonly idleMargin?: Duration.DurationInput
  /** Page size of lists. Default 500. */
  readonly pageSize?: number
  /** Randomise back-offs by ±20% so many watchers do not retry in step. Default true. */
  readonly jitter?: boolean
  /**
   * How lists are taken (rules 16–18 of `internal/watchMachine.ts`): `"auto"` (the default: stream,
   * and page for the life of the watch once the server shows it cannot), `"stream"` (one watch with
   * `sendInitialEvents`: the objects one at a time, never a page in memory; needs kube-apiserver
   * 1.27+ with WatchList, on by default since 1.32), or `"paged"` (pages of `pageSize`).
   */
  readonly listMode?: WatchMachine.ListMode
}

// ---------------------------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------------------------

/** The watch's metrics, for a Prometheus exporter or a test. */
export const metrics = {
  events: Metric.counter("sandbox_watch_events_total", {
    incremental: true,
    description: "Watch events applied, by type"
  }),
  relists: Metric.counter("sandbox_watch_relists_total", {
    incremental: true,
    description: "Lists of the whole namespace, by reason"
  }),
  restarts: Metric.counter("sandbox_watch_restarts_total", {
    incremental: true,
    description: "Watch rounds that ended in a failure, by reason"
  }),
  decodeFailures: Metric.counter("sandbox_watch_decode_failures_total", {
    incremental: true,
    description: "Sandboxes the server sent that did not fit the schema"
  }),
  cached: Metric.gauge("sandbox_watch_cached_sandboxes", { description: "Sandboxes in the cache" }),
  subscribers: Metric.gauge("sandbox_watch_subscribers", { description: "Open subscriptions" }),
  secondsSinceLastHeard: Metric.gauge("sandbox_watch_seconds_since_last_heard", {
    description: "Seconds since the last list, event or bookmark (updated when health is read)"
  })
}

type EventType = WatchEvent<Sandbox>["type"]

/**
 * The labels of the events counter for one event type under the loop's metric labels, made once
 * per label set: the counter finds its series by the identity of the labels array it is given, and
 * `Metric.tagged` would join a fresh array (and look the series up again, hashing its key) for
 * every chunk a watch reads.
 */
const eventLabels = new WeakMap<
  ReadonlyArray<MetricLabel.MetricLabel>,
  Record<EventType, ReadonlyArray<MetricLabel.MetricLabel>>
>()
const eventLabelsFor = (labels: ReadonlyArray<MetricLabel.MetricLabel>) => {
  let byType = eventLabels.get(labels)
  if (byType === undefined) {
    const withType = (type: EventType) => Arr.union([MetricLabel.make("type", type)], labels)
    byType = {
      ADDED: withType("ADDED"),
      MODIFIED: withType("MODIFIED"),
      DELETED: withType("DELETED"),
      BOOKMARK: withType("BOOKMARK"),
      ERROR: withType("ERROR"),
      UNDECODABLE: withType("UNDECODABLE")
    }
    eventLabels.set(labels, byType)
  }
  return byType
}

// ---------------------------------------------------------------------------------------------
// The service
// ---------------------------------------------------------------------------------------------

/**
 * A round that did not end as it should: the machine's transition, which the retry `Schedule`
 * turns into a delay (`RoundFailure` is what `Stream.retry` sees; the state was already set).
 */
class RoundFailure extends Data.TaggedError("RoundFailure")<{
  readonly transition: WatchMachine.Transition
}> {}

/** Ends a watch's applier from inside its stream: the round ended with `end`. */
class RoundOver extends Data.TaggedError("RoundOver")<{ readonly end: WatchMachine.RoundEnd }> {}

interface Settings extends WatchMachine.MachineSettings {
  readonly labelSelector: string
  readonly idleLimit: Duration.Duration
  readonly pageSize: number
  readonly jitter: boolean
}

const settingsOf = (options: SandboxWatchOptions): Settings => {
  const timeoutSeconds = options.timeoutSeconds ?? 240
  return {
    namespace: options.namespace,
    labelSelector: options.labelSelector ?? DefaultLabelSelector,
    floor: Duration.decode(options.backoffFloor ?? "500 millis"),
    cap: Duration.decode(options.backoffCap ?? "30 seconds"),
    timeoutSeconds,
    idleLimit: Duration.sum(Duration.seconds(timeoutSeconds), Duration.decode(options.idleMargin ?? "30 seconds")),
    pageSize: options.pageSize ?? 500,
    jitter: options.jitter ?? true,
    listMode: options.listMode ?? "auto"
  }
}

/**
 * What is wrong with `settings`, in words; none when nothing is. Each of these would make the loop
 * spin or ask the server for nonsense: a zero floor retries at once for ever, a zero timeout makes
 * every silent close look like a full term (resumed with no pause), a zero page size asks for
 * nothing per page.
 */
const problemsOf = (settings: Settings): Array<string> => {
  const problems: Array<string> = []
  const positiveWhole = (name: string, value: number) => {
    if (!Number.isInteger(value) || value < 1) {
      problems.push(`${name} must be a whole number of at least 1, got ${value}`)
    }
  }
  positiveWhole("timeoutSeconds", settings.timeoutSeconds)
  positiveWhole("pageSize", settings.pageSize)
  if (!Duration.greaterThan(settings.floor, Duration.zero)) {
    problems.push(
      `backoffFloor must be longer than zero (every retry waits at least this), got ${Duration.format(settings.floor)}`
    )
  }
  if (Duration.lessThan(settings.cap, settings.floor)) {
    problems.push(
      `backoffCap (${Duration.format(settings.cap)}) must be at least backoffFloor (${Duration.format(settings.floor)})`
    )
  }
  if (!Duration.isFinite(settings.idleLimit)) problems.push("idleMargin must be finite")
  return problems
}

/**
 * Runs `apply` on every chunk of an opened watch (`KubeClient.openWatch`) until it ends, in a scope
 * of its own. A pull loop rather than `Stream.runForEachChunk`, which costs some 2.5 KB more per
 * chunk (`scratchpad/allocations.ts`): at 1,000 events a second every event is its own chunk, and
 * what a chunk allocates is latency. The watch is opened as a pull, not as a `Stream` turned into
 * one: per watch, the stream's scope and channel executor cost twice the rest of it (0.20–0.22 ms
 * of CPU against 0.10–0.12 ms, rows `toPull` and `openWatch` of `npx tsx scratchpad/watchLayers.ts`).
 * `apply` fails with a tagged error, never an `Option`: the pull's own failures are `Option`s.
 */
const applyEveryChunk =
  <A, E, E2 extends { readonly _tag: string }>(apply: (chunk: Chunk.Chunk<A>) => Effect.Effect<void, E2>) =>
  (open: Effect.Effect<Effect.Effect<Chunk.Chunk<A>, Option.Option<E>>, E, Scope.Scope>): Effect.Effect<void, E | E2> =>
    Effect.scoped(Effect.flatMap(open, (pull) => {
      // Not `Effect.forever`, which yields to the scheduler after every round: a chunk read from
      // the network already comes after a wait, and the runtime still yields after its op budget.
      const loop: Effect.Effect<never, Option.Option<E> | E2> = Effect.flatMap(
        Effect.flatMap(pull, apply),
        () => loop
      )
      // The pull fails with an `Option` (none at the end); `apply` fails with its own error, told
      // apart by being no `Option`, rather than wrapped in one per chunk.
      return Effect.catchAll(
        loop,
        (error: Option.Option<E> | E2): Effect.Effect<void, E | E2> =>
          Option.isOption(error)
            ? Option.match(error, { onNone: () => Effect.void, onSome: Effect.fail })
            : Effect.fail(error)
      )
    }))

/** How a watch ended, whether it heard anything, and the newest resourceVersion it reached. */
interface RoundOutcome {
  readonly end: WatchMachine.RoundEnd
  readonly heard: boolean
  readonly resourceVersion: string
}

/**
 * Start the watch in the current scope. The loop is a fiber of that scope: closing it ends the loop
 * and aborts the open request.
 */
export const make = (
  options: SandboxWatchOptions
): Effect.Effect<SandboxWatchService, never, KubeClient | Scope.Scope> =>
  Effect.gen(function*() {
    const client = yield* KubeClient
    const settings = settingsOf(options)
    const problems = problemsOf(settings)
    if (problems.length > 0) {
      // A mistake in the caller's code, not something the cluster did: the Layer fails to build.
      return yield* Effect.dieMessage(`SandboxWatch options: ${problems.join("; ")}`)
    }
    const cache = yield* SubscriptionRef.make<SandboxCache.SandboxCache>(SandboxCache.empty)
    // Done once the first list is in the cache. Not a wait on the cache's `changes`: that stream's
    // subscription and channel stages, running for the first time, stood between `Layer.build`
    // and the first request, and between the list and `synced` (the benchmark's time to synced;
    // test/bench/results/2026-12-04-sixth-pass.md). A `Deferred`, not a latch: it resumes its
    // waiters at once, where a latch schedules a task that resumes them, one hop later.
    const firstList = yield* Deferred.make<void>()
    const hub = new SubscriberHub<Option.Option<Sandbox>>()
    // Read and written by the loop's fiber only; set in one place, `settle`.
    let state: WatchMachine.WatchState = WatchMachine.initialFor(settings.listMode ?? "paged")
    const counts = {
      relists: 0,
      watchRestarts: 0,
      // Plain values, made `Option`s only when health is read: they are set for every chunk.
      lastHeard: undefined as number | undefined,
      resourceVersion: undefined as string | undefined,
      /** What the cached-Sandboxes gauge was last set to: events set it only when it changes. */
      cachedReported: -1
    }
    const annotations = { namespace: settings.namespace, labelSelector: settings.labelSelector }

    // -- applying what the cluster said ------------------------------------------------------

    // What a step tells goes into the mailboxes inside the cache's step (a subscriber registering
    // under the same lock reads the cache this step returns, so nothing slips between), but their
    // readers are woken after it: woken inside the lock's region, every woken subscriber's work
    // outlived young collections (1.4–1.9 MB promoted per scavenge, pauses 3–5 ms; measured with
    // `BENCH_STDOUT=<file> npm run bench -- --only lat --node-flags=--trace-gc-nvp`).
    const toWake: Array<Mailbox> = []
    const tell: SandboxCache.Tell = (name, value, onlyNamed) => hub.tell(name, value, toWake, onlyNamed)
    const wakeTold = <R>(applied: R): R => {
      for (let i = 0; i < toWake.length; i++) toWake[i]!.wakeReader()
      toWake.length = 0
      return applied
    }
    /**
     * One step of the cache: `apply` gets the cache and `tell`, and returns the next cache with
     * what it did. Uninterruptible, the step and the wakes after it: what the cluster said is applied
     * whole or not at all (the step is synchronous), and a told reader is always woken. And measured:
     * the lock's own switches back to interruptible made what each step allocated outlive young
     * collections, 1.4–1.8 MB promoted per scavenge against 0.03–0.06 MB this way, pauses 3–4 → ~1
     * ms (one subscriber: `BENCH_LAT_ONLY_TARGET=1`; test/bench/results/2026-12-04-third-pass.md).
     */
    const applyToCache = <R extends { readonly cache: SandboxCache.SandboxCache }>(
      apply: (old: SandboxCache.SandboxCache) => R
    ): Effect.Effect<R> =>
      Effect.uninterruptible(Effect.map(
        SubscriptionRef.modify(cache, (old) => {
          const applied = apply(old)
          return [applied, applied.cache] as const
        }),
        wakeTold
      ))

    const applyList = (list: FullList<Sandbox>) =>
      applyToCache((old) => SandboxCache.applyList(old, list, hub.subscribedNames(), tell))

    const applyEvents = (events: Chunk.Chunk<WatchEvent<Sandbox>>, from: string) =>
      applyToCache((old) => SandboxCache.applyEvents(old, events, from, tell))

    /** By type, synchronously: this runs for every chunk a watch reads (most hold one event). */
    const countEvents = (
      events: Chunk.Chunk<WatchEvent<Sandbox>>,
      labels: Record<EventType, ReadonlyArray<MetricLabel.MetricLabel>>
    ) => {
      let type: EventType | undefined
      let run = 0
      for (const event of events) {
        if (event.type !== type) {
          if (type !== undefined) metrics.events.unsafeUpdate(run, labels[type])
          type = event.type
          run = 0
        }
        run++
      }
      if (type !== undefined) metrics.events.unsafeUpdate(run, labels[type])
    }

    const reportUndecodable = (from: "list" | "watch") => (bad: UndecodableEvent) =>
      Effect.logWarning(
        `Sandbox ${bad.name === undefined ? "(no name)" : `"${bad.name}"`} ${
          from === "list"
            ? "in a list"
            : bad.eventType === "ADDED"
            ? "in an ADDED event"
            : `in a ${bad.eventType} event`
        } does not fit the schema; ` +
          `keeping its previous cached value: ${bad.problem}`
      ).pipe(
        Effect.annotateLogs({ ...annotations, resourceVersion: bad.resourceVersion ?? "", reason: "decode" }),
        Effect.zipRight(Metric.increment(metrics.decodeFailures))
      )

    // -- the one place the state changes -----------------------------------------------------

    /**
     * The round ended with `end`: the machine decides the next state, which is set here and only
     * here. A round that did not end as it should fails with the transition, for the retry
     * `Schedule` to wait on.
     */
    const settle = (end: WatchMachine.RoundEnd): Effect.Effect<void, RoundFailure> => {
      const transition = WatchMachine.step(state, end, settings)
      state = transition.next
      if (transition.restart === undefined) {
        return transition.message === undefined ? Effect.void : Effect.logDebug(`${transition.message}; resuming`).pipe(
          Effect.annotateLogs({ ...annotations, resourceVersion: resumeAnnotation(state), reason: "quiet-term" })
        )
      }
      counts.watchRestarts++
      return Metric.increment(Metric.tagged(metrics.restarts, "reason", transition.restart)).pipe(
        Effect.zipRight(Effect.fail(new RoundFailure({ transition })))
      )
    }

    const resumeAnnotation = (at: WatchMachine.WatchState) => (at._tag === "Watching" ? at.resourceVersion : "")

    // -- one round: list if needed, then watch -------------------------------------------------

    /**
     * A whole list, paged or streamed (rule 16), becomes the cache in one step (rule 1), and the
     * round goes on to watch from its resourceVersion.
     */
    const landList = (
      list: FullList<Sandbox>,
      reason: WatchMachine.ListReason,
      how: "listed" | "streamed"
    ): Effect.Effect<void, RoundFailure> =>
      Effect.gen(function*() {
        const applied = yield* applyList(list)
        if (reason !== "initial") counts.relists++
        counts.lastHeard = yield* Clock.currentTimeMillis
        counts.resourceVersion = list.resourceVersion
        yield* Metric.increment(Metric.tagged(metrics.relists, "reason", reason))
        counts.cachedReported = applied.cache.objects.size
        yield* Metric.set(metrics.cached, counts.cachedReported)
        yield* Effect.forEach(list.undecodable, reportUndecodable("list"), { discard: true })
        yield* settle(
          how === "listed"
            ? WatchMachine.RoundEnd.Listed({ resourceVersion: list.resourceVersion })
            : WatchMachine.RoundEnd.StreamListed({ resourceVersion: list.resourceVersion })
        )
        if (yield* Deferred.succeed(firstList, undefined)) {
          // Who waits on `synced` hears it now, before this fiber writes its log line or opens
          // the watch (the bench's sync row).
          yield* Effect.yieldNow()
        }
        yield* Effect.logInfo(
          `${how} ${list.items.length} Sandboxes at resourceVersion ${list.resourceVersion} (${reason}); ` +
            `${applied.told} told; watching from there`
        ).pipe(Effect.annotateLogs({ ...annotations, resourceVersion: list.resourceVersion, reason }))
      })

    const relist = (reason: WatchMachine.ListReason): Effect.Effect<string, RoundFailure> =>
      client.listAll(SandboxResource, Sandbox, {
        namespace: settings.namespace,
        labelSelector: settings.labelSelector,
        limit: settings.pageSize
        // No resourceVersion: a quorum read (rule 1).
      }).pipe(
        Effect.matchEffect({
          onFailure: (error) =>
            Effect.flatMap(
              settle(WatchMachine.RoundEnd.ListFailed({ error })),
              () => Effect.dieMessage("a failed list must end the round")
            ),
          onSuccess: (list) => Effect.as(landList(list, reason, "listed"), list.resourceVersion)
        }),
        Effect.withSpan("SandboxWatch.list", { attributes: { ...annotations, reason } })
      )

    /**
     * One watch from `resourceVersion`, its events applied to the cache as they come, until it ends.
     * The clock read as it starts begins rule 8's term; the idle clock (rule 4) runs in the client,
     * from the answer's headers (the headers deadline covers the time before). Its span is the
     * client's `KubeClient.watch` (namespace, label selector, resourceVersion): a span of its own
     * here said the same and cost a resume 35 of its 290 runtime instructions
     * (`npx tsx scratchpad/effectOps.ts`).
     */
    const watchFrom = (
      resourceVersion: string,
      streaming?: WatchMachine.ListReason
    ): Effect.Effect<RoundOutcome, RoundFailure> =>
      Effect.suspend(() => {
        let heard = false
        let current = resourceVersion
        // Rule 16: until the end bookmark, a streaming list's objects fill this draft, not the cache.
        let draft: { items: Array<Sandbox>; undecodable: Array<UndecodableEvent> } | undefined = streaming === undefined
          ? undefined
          : { items: [], undecodable: [] }
        // Taken once per watch rather than for every chunk (nested, not `Effect.zip`, which runs
        // as a `forEach`: a dozen runtime instructions more per resume).
        return Effect.clockWith((clock) =>
          Effect.flatMap(FiberRef.get(FiberRef.currentMetricLabels), (metricLabels) => {
            const openedAt = clock.unsafeCurrentTimeMillis()
            const labelsByType = eventLabelsFor(metricLabels)
            /**
             * One chunk of events into the cache; an `ERROR` among them ends the round. The common
             * case (events applied, nothing to report) is one step after the cache's: a watch may
             * read thousands of chunks a second.
             */
            const applyChunk = (chunk: Chunk.Chunk<WatchEvent<Sandbox>>) =>
              Effect.flatMap(applyEvents(chunk, current), (applied) => {
                counts.lastHeard = clock.unsafeCurrentTimeMillis()
                current = applied.resourceVersion
                counts.resourceVersion = current
                countEvents(chunk, labelsByType)
                const cached = applied.cache.objects.size
                if (cached !== counts.cachedReported) {
                  counts.cachedReported = cached
                  metrics.cached.unsafeUpdate(cached, metricLabels)
                }
                if (applied.heard) heard = true
                if (applied.error === undefined && applied.undecodable.length === 0 && applied.stale === 0) {
                  return Effect.void
                }
                return Effect.gen(function*() {
                  yield* Effect.forEach(applied.undecodable, reportUndecodable("watch"), { discard: true })
                  if (applied.stale > 0) {
                    yield* Effect.logDebug(`ignored ${applied.stale} event(s) older than the cached object`)
                  }
                  if (applied.error !== undefined) {
                    return yield* new RoundOver({
                      end: WatchMachine.RoundEnd.ErrorEvent({ status: applied.error, resourceVersion: current, heard })
                    })
                  }
                })
              })
            /**
             * A chunk of a streaming list's initial events: into the draft, until the end bookmark
             * lands the draft as the list and the rest of the chunk goes on as the watch.
             */
            const fillDraft = (
              chunk: Chunk.Chunk<WatchEvent<Sandbox>>
            ): Effect.Effect<void, RoundOver | RoundFailure> => {
              const filling = draft!
              let index = 0
              for (const event of chunk) {
                index++
                switch (event.type) {
                  case "ADDED":
                  case "MODIFIED":
                    filling.items.push(event.object)
                    break
                  case "DELETED":
                    filling.items = filling.items.filter((item) => item.metadata.name !== event.name)
                    break
                  case "UNDECODABLE":
                    filling.undecodable.push(event)
                    break
                  case "ERROR":
                    return Effect.fail(
                      new RoundOver({
                        end: WatchMachine.RoundEnd.ErrorEvent({ status: event.status, resourceVersion: current, heard })
                      })
                    )
                  case "BOOKMARK": {
                    if (event.annotations[InitialEventsEndAnnotation] !== "true") {
                      // Rule 18: a server that streams sends no other bookmark before this one.
                      return Effect.fail(
                        new RoundOver({
                          end: WatchMachine.RoundEnd.StreamUnsupported({
                            why: "the server sent a bookmark before the end of a streaming list's initial events " +
                              "(it ignored sendInitialEvents)"
                          })
                        })
                      )
                    }
                    draft = undefined
                    current = event.resourceVersion
                    const rest = Chunk.drop(chunk, index)
                    const landed = landList(
                      {
                        items: filling.items,
                        undecodable: filling.undecodable,
                        resourceVersion: event.resourceVersion,
                        pages: 1,
                        restarts: 0
                      },
                      streaming!,
                      "streamed"
                    )
                    return Chunk.isEmpty(rest) ? landed : Effect.zipRight(landed, applyChunk(rest))
                  }
                }
              }
              return Effect.void
            }
            const applyAll: Effect.Effect<WatchMachine.RoundEnd, RoundFailure> = client.openWatch(
              SandboxResource,
              Sandbox,
              streaming === undefined
                ? {
                  namespace: settings.namespace,
                  labelSelector: settings.labelSelector,
                  resourceVersion,
                  allowWatchBookmarks: true,
                  timeoutSeconds: settings.timeoutSeconds,
                  // Rule 4: silence past the server's own timeout (it sends bookmarks about every
                  // minute meanwhile) means the connection is dead. The client keeps the limit on its
                  // timer, with no fiber or race per watch.
                  idleTimeout: settings.idleLimit
                }
                : {
                  namespace: settings.namespace,
                  labelSelector: settings.labelSelector,
                  // No resourceVersion: the initial events are consistent with etcd (rule 16).
                  sendInitialEvents: true,
                  resourceVersionMatch: "NotOlderThan",
                  allowWatchBookmarks: true,
                  timeoutSeconds: settings.timeoutSeconds,
                  idleTimeout: settings.idleLimit
                }
            ).pipe(
              applyEveryChunk((chunk: Chunk.Chunk<WatchEvent<Sandbox>>) =>
                draft === undefined ? applyChunk(chunk) : fillDraft(chunk)
              ),
              Effect.matchEffect({
                onFailure: (error) =>
                  error._tag === "RoundFailure" ? Effect.fail(error) : Effect.succeed(
                    error._tag === "RoundOver"
                      ? error.end
                      : error._tag === "KubeWatchIdleError"
                      ? WatchMachine.RoundEnd.Idle({ resourceVersion: current })
                      : WatchMachine.RoundEnd.WatchFailed({ error, resourceVersion: current, heard })
                  ),
                onSuccess: () =>
                  Effect.sync(() =>
                    WatchMachine.RoundEnd.Closed({
                      resourceVersion: current,
                      heard,
                      ranMillis: clock.unsafeCurrentTimeMillis() - openedAt
                    })
                  )
              })
            )
            return Effect.map(applyAll, (end): RoundOutcome => ({ end, heard, resourceVersion: current }))
          })
        )
      })

    /**
     * The loop's one pull: rounds (a list when the state needs one, then a watch) run one after
     * another for as long as they end as they should. `Stream.retry` resets the back-off whenever
     * the stream yields, and only a watch that heard something makes a healthy stream (a list alone
     * does not: rule 5). So when a round fails after a healthy one, the pull yields first and fails
     * on the next pull, and the pause starts from the floor; a failure after none fails at once.
     * Yielding only then, not after every healthy round, tells the `Schedule` the same and keeps
     * the stream's own work off a resume: 357 → 291 runtime instructions per resume
     * (`npx tsx scratchpad/effectOps.ts`).
     */
    let failureAfterYield: RoundFailure | undefined
    const nextHealthyRound: Effect.Effect<string, RoundFailure> = Effect.suspend(() => {
      if (failureAfterYield !== undefined) {
        const failure = failureAfterYield
        failureAfterYield = undefined
        return Effect.fail(failure)
      }
      return Effect.gen(function*() {
        let healthy = false
        for (;;) {
          const outcome = state._tag === "Watching"
            ? yield* watchFrom(state.resourceVersion)
            : state.lists === "stream"
            ? yield* watchFrom("", state.reason)
            : yield* watchFrom(yield* relist(state.reason))
          const settled = yield* Effect.either(settle(outcome.end))
          if (outcome.heard) healthy = true
          if (Either.isLeft(settled)) {
            if (!healthy) return yield* Effect.fail(settled.left)
            failureAfterYield = settled.left
            return outcome.resourceVersion
          }
        }
      })
    })

    // -- pauses between rounds ---------------------------------------------------------------

    const jittered = (delay: Duration.Duration) =>
      settings.jitter
        ? Effect.map(
          Random.nextRange(0.8, 1.2),
          (factor) => Duration.millis(Math.round(Duration.toMillis(delay) * factor))
        )
        : Effect.succeed(delay)

    const delayOf = (pause: WatchMachine.Pause, backoff: Duration.Duration): Effect.Effect<Duration.Duration> => {
      switch (pause._tag) {
        case "None":
          return Effect.succeed(Duration.zero)
        case "Floor":
          return Effect.succeed(settings.floor)
        case "RetryAfter":
          return Effect.succeed(pause.delay)
        case "Backoff":
          return Effect.map(jittered(backoff), (delay) => Duration.min(delay, settings.cap))
      }
    }

    /**
     * The Schedule only waits (and says so): the state was set when the round settled. Its own
     * state counts the back-offs taken since the last healthy stream (`Stream.retry` starts it
     * afresh whenever the round yields), so a `RetryAfter` or a pause of none leaves the next
     * back-off where it was.
     */
    const retryPolicy = Schedule.makeWithState(0, (now, failure: RoundFailure, backoffs: number) =>
      Effect.succeed(
        [
          failure.transition.pause._tag === "Backoff" ? backoffs + 1 : backoffs,
          [failure.transition, Duration.times(settings.floor, Math.pow(2, backoffs))] as const,
          ScheduleDecision.continueWith(ScheduleInterval.after(now))
        ] as const
      )).pipe(
        Schedule.modifyDelayEffect(([transition, backoff]) =>
          Effect.gen(function*() {
            const delay = yield* delayOf(transition.pause, backoff)
            const when = Duration.isZero(delay) ? "now" : `in ${Duration.format(delay)}`
            yield* Effect.logWarning(`${transition.message}; ${WatchMachine.describeNext(transition.next)} ${when}`)
              .pipe(
                Effect.annotateLogs({
                  ...annotations,
                  resourceVersion: resumeAnnotation(transition.next),
                  reason: transition.restart ?? ""
                })
              )
            return delay
          })
        )
      )

    const rounds = Stream.repeatEffect(nextHealthyRound).pipe(Stream.retry(retryPolicy), Stream.runDrain)

    /**
     * Nothing the cluster does ends the rounds; only a defect in our own code can. Then the machine
     * says what comes next (a list, after the longest pause) and the rounds start again: a loop that
     * stopped for good would leave every subscriber waiting for news that never comes, while the
     * cache still answered as if synced. (A loop of attempts, not a restart nested in the handler:
     * each defect would keep a frame for ever.)
     */
    const afterDefect = (cause: Cause.Cause<RoundFailure>): Effect.Effect<void> =>
      // The machine's `Defect` arm always restarts, so `settle` fails with its transition.
      Effect.catchAll(settle(WatchMachine.RoundEnd.Defect()), ({ transition }) =>
        Effect.gen(function*() {
          failureAfterYield = undefined
          const delay = yield* delayOf(transition.pause, settings.cap)
          yield* Effect.logError(
            `${transition.message}; ${WatchMachine.describeNext(transition.next)} in ${Duration.format(delay)}`,
            cause
          ).pipe(Effect.annotateLogs({ reason: "defect" }))
          yield* Effect.sleep(delay)
        }))
    const loop = Effect.forever(
      Effect.catchAllCause(
        rounds,
        (cause) => Cause.isInterruptedOnly(cause) ? Effect.failCause(cause) : afterDefect(cause)
      )
    )
    yield* Effect.forkScoped(Effect.annotateLogs(loop, annotations))

    // -- what subscribers see -----------------------------------------------------------------

    const updateSubscriberGauge = Effect.suspend(() => Metric.set(metrics.subscribers, hub.subscribers))

    type Mailbox = LatestMailbox<string, Option.Option<Sandbox>>

    /**
     * A new mailbox for `name` (`undefined`: every name), registered under the cache's lock so no
     * change can slip between "the current value" and "told"; once synced, `initial` puts what
     * the cache holds now.
     */
    const register = (
      name: string | undefined,
      initial: (mailbox: Mailbox, current: SandboxCache.SandboxCache) => void,
      recorded?: (mailbox: Mailbox) => void
    ) =>
      SubscriptionRef.modify(cache, (current) => {
        const mailbox = hub.add(name)
        recorded?.(mailbox)
        if (current.synced) initial(mailbox, current)
        return [mailbox, current] as const
      }).pipe(Effect.zipLeft(updateSubscriberGauge))

    const unregister = (name: string | undefined, mailbox: Mailbox) =>
      Effect.suspend(() => {
        hub.remove(name, mailbox)
        return updateSubscriberGauge
      })

    /** What the cache holds for `name`; nothing for a name that is unknown (rule 13). */
    const tellCurrent = (name: string) => (mailbox: Mailbox, current: SandboxCache.SandboxCache) => {
      if (!HashSet.has(current.unknown, name)) mailbox.put(name, current.objects.getOption(name))
    }

    /**
     * A subscription is one channel that loops on its mailbox: each wake writes what is pending as
     * one chunk. Its first pull registers; its end unregisters. Written as a channel rather than
     * `Stream.repeatEffectChunk`, whose every element also passes an `Option` error mapping, a
     * `catchAll` and an `unwrap`: 15.5 → 11.6 KB allocated per wake under `Stream.runForEach`
     * (`node --expose-gc --max-semi-space-size=512 --min-semi-space-size=512 --import tsx
     * scratchpad/allocations.ts`), and at 1,000 events a second every event is a wake. (A scoped
     * acquire would add a scope and channel layers to every subscription: a quarter of what an idle
     * one weighs.)
     */
    const subscription = <A>(
      name: string | undefined,
      initial: (mailbox: Mailbox, current: SandboxCache.SandboxCache) => void,
      present: (pending: Chunk.Chunk<readonly [string, Option.Option<Sandbox>]>) => Chunk.Chunk<A>
    ): Stream.Stream<A> =>
      Stream.suspend(() => {
        let mailbox: Mailbox | undefined
        // The mailbox is recorded for the finalizer in the same synchronous step that registers it
        // (inside the cache's lock): no interrupt can fall between, or it would stay told for ever.
        // (An uninterruptible region around the first pull did the same, but measurably made every
        // later resume of the watch keep more memory.)
        const registerOnce = register(name, initial, (registered) => {
          mailbox = registered
        })
        const pull = Effect.suspend(() =>
          mailbox === undefined ? Effect.flatMap(registerOnce, (registered) => registered.takeAll) : mailbox.takeAll
        )
        const loop: Channel.Channel<Chunk.Chunk<A>> = Channel.flatMap(
          Channel.fromEffect(pull),
          (pending) => Channel.flatMap(Channel.write(present(pending)), () => loop)
        )
        return Stream.fromChannel(loop).pipe(
          Stream.ensuring(Effect.suspend(() => (mailbox === undefined ? Effect.void : unregister(name, mailbox))))
        )
      })

    const waitFor = <A, E, R>(
      name: string,
      step: (value: Option.Option<Sandbox>) => Effect.Effect<Option.Option<A>, E, R>
    ): Effect.Effect<A, E, R> =>
      Effect.acquireUseRelease(
        register(name, tellCurrent(name)),
        (mailbox) =>
          Effect.gen(function*() {
            for (;;) {
              for (const [, value] of yield* mailbox.takeAll) {
                const answer = yield* step(value)
                if (Option.isSome(answer)) return answer.value
              }
            }
          }),
        (mailbox) => unregister(name, mailbox)
      )

    const changes = (name: string): Stream.Stream<Option.Option<Sandbox>> =>
      subscription(name, tellCurrent(name), Chunk.map(([, value]) => value))

    const allChanges: Stream.Stream<SandboxChange> = subscription(
      undefined,
      (mailbox, current) => {
        for (const [name, sandbox] of current.objects) mailbox.put(name, Option.some(sandbox))
      },
      Chunk.map(([name, sandbox]) => ({ name, sandbox }))
    )

    const synced = Deferred.await(firstList)

    const health = Effect.gen(function*() {
      const current = yield* SubscriptionRef.get(cache)
      const now = yield* Clock.currentTimeMillis
      if (counts.lastHeard !== undefined) {
        yield* Metric.set(metrics.secondsSinceLastHeard, (now - counts.lastHeard) / 1000)
      }
      return {
        synced: current.synced,
        lastHeard: Option.fromNullable(counts.lastHeard),
        relists: counts.relists,
        watchRestarts: counts.watchRestarts,
        cached: current.objects.size,
        unknown: HashSet.size(current.unknown),
        resourceVersion: Option.fromNullable(counts.resourceVersion),
        subscribers: hub.subscribers
      } satisfies SandboxWatchHealth
    })

    return {
      synced,
      get: (name) => Effect.map(SubscriptionRef.get(cache), (current) => current.objects.getOption(name)),
      changes,
      allChanges,
      waitFor,
      snapshot: Effect.map(SubscriptionRef.get(cache), (current) => new Map(current.objects)),
      health
    } satisfies SandboxWatchService
  })

/**
 * The watch as a scoped Layer: the loop lives exactly as long as the Layer's scope.
 */
export const layer = (options: SandboxWatchOptions): Layer.Layer<SandboxWatch, never, KubeClient> =>
  Layer.scoped(SandboxWatch, make(options))

/**
 * The options from `Config` — by default the environment: `SANDBOX_WATCH_NAMESPACE` (required),
 * `SANDBOX_WATCH_LABEL_SELECTOR`, `SANDBOX_WATCH_BACKOFF_FLOOR`, `SANDBOX_WATCH_BACKOFF_CAP`,
 * `SANDBOX_WATCH_TIMEOUT_SECONDS`, `SANDBOX_WATCH_PAGE_SIZE`.
 */
export const config: Config.Config<SandboxWatchOptions> = Config.all({
  namespace: Config.string("SANDBOX_WATCH_NAMESPACE"),
  labelSelector: Config.string("SANDBOX_WATCH_LABEL_SELECTOR").pipe(Config.withDefault(DefaultLabelSelector)),
  backoffFloor: Config.duration("SANDBOX_WATCH_BACKOFF_FLOOR").pipe(Config.withDefault(Duration.millis(500))),
  backoffCap: Config.duration("SANDBOX_WATCH_BACKOFF_CAP").pipe(Config.withDefault(Duration.seconds(30))),
  timeoutSeconds: Config.integer("SANDBOX_WATCH_TIMEOUT_SECONDS").pipe(Config.withDefault(240)),
  pageSize: Config.integer("SANDBOX_WATCH_PAGE_SIZE").pipe(Config.withDefault(500))
})

export const layerConfig = (
  options: Config.Config<SandboxWatchOptions> = config
): Layer.Layer<SandboxWatch, ConfigError.ConfigError, KubeClient> => Layer.unwrapEffect(Effect.map(options, layer))
