/**
 * The one watch of every Sandbox in a namespace: held in memory, pushed to whoever subscribes to a
 * name, and honest about what it does not know.
 *
 * The loop is list → watch → watch → …, an explicit state machine with two states:
 *
 * - `NeedsList` — the cache cannot be trusted to continue from any resourceVersion (start, or the
 *   server said the one we had is gone). The next round lists, as a quorum read.
 * - `Watching(rv)` — the next round watches from `rv`, the newest resourceVersion heard (events and
 *   bookmarks alike), which the server will replay from.
 *
 * A round is a `Stream`: the list (if needed) then the watch's events, applied to the cache chunk by
 * chunk. A round that ends cleanly (the server's timeout) is followed at once by the next. A round
 * that fails is classified (`RoundFailure`): re-list or resume, and after what delay — none, one
 * back-off floor, the server's `Retry-After`, or the exponential back-off. The delays are one
 * `Schedule` given to `Stream.retry`, which resets it whenever the stream yields: a round that
 * applied something is a healthy stream.
 *
 * The cache is a `SubscriptionRef` holding an immutable `HashMap`, so a re-list replaces it in one
 * step (nobody ever sees half-old, half-new state). Telling subscribers happens under the same
 * lock, through a keyed hub of latest-value mailboxes.
 *
 * Unknown is never loss: a dropped watch, an error, a back-off or an object that does not decode
 * tells nobody anything. Only a list without the name, or a `DELETED` event, says gone.
 *
 * @since 0.1.0
 */
import {
  Cause,
  Chunk,
  Clock,
  Config,
  type ConfigError,
  Context,
  Data,
  Deferred,
  Duration,
  Effect,
  Fiber,
  FiberRef,
  HashMap,
  Layer,
  Metric,
  type MetricLabel,
  Option,
  Random,
  Ref,
  Schedule,
  Scope,
  Stream,
  SubscriptionRef
} from "effect"
import { KubeClient } from "./KubeClient.ts"
import type { FullList } from "./KubeClient.ts"
import * as KubeError from "./KubeError.ts"
import type { Status } from "./KubeStatus.ts"
import { isOlder } from "./internal/resourceVersion.ts"
import type { LatestMailbox } from "./internal/latestMailbox.ts"
import { SubscriberHub } from "./internal/subscriberHub.ts"
import { DefaultLabelSelector, Sandbox, SandboxResource } from "./Sandbox.ts"
import type { UndecodableEvent, WatchEvent } from "./WatchEvent.ts"

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
  /** Open `changes`/`allChanges` subscriptions and `waitFor` waits. */
  readonly subscribers: number
}

/** @since 0.1.0 */
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
   * Every name: nothing before the first list, then each cached Sandbox once, then every change.
   * A slow reader gets the latest state of each name that changed, never a backlog.
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

/** @since 0.1.0 */
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
}

// ---------------------------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------------------------

/** The watch's metrics, for a Prometheus exporter or a test. */
export const metrics = {
  events: Metric.counter("sandbox_watch_events_total", { description: "Watch events applied, by type" }),
  relists: Metric.counter("sandbox_watch_relists_total", { description: "Lists of the whole namespace, by reason" }),
  restarts: Metric.counter("sandbox_watch_restarts_total", { description: "Watch rounds that ended in a failure, by reason" }),
  decodeFailures: Metric.counter("sandbox_watch_decode_failures_total", {
    description: "Sandboxes the server sent that did not fit the schema"
  }),
  cached: Metric.gauge("sandbox_watch_cached_sandboxes", { description: "Sandboxes in the cache" }),
  subscribers: Metric.gauge("sandbox_watch_subscribers", { description: "Open subscriptions" }),
  secondsSinceLastHeard: Metric.gauge("sandbox_watch_seconds_since_last_heard", {
    description: "Seconds since the last list, event or bookmark (updated when health is read)"
  })
}

const eventCounters = {
  ADDED: Metric.tagged(metrics.events, "type", "ADDED"),
  MODIFIED: Metric.tagged(metrics.events, "type", "MODIFIED"),
  DELETED: Metric.tagged(metrics.events, "type", "DELETED"),
  BOOKMARK: Metric.tagged(metrics.events, "type", "BOOKMARK"),
  ERROR: Metric.tagged(metrics.events, "type", "ERROR"),
  UNDECODABLE: Metric.tagged(metrics.events, "type", "UNDECODABLE")
} as const

// ---------------------------------------------------------------------------------------------
// The loop's states and setbacks
// ---------------------------------------------------------------------------------------------

/** Why a list is needed; also the `reason` tag of the re-list metric. */
type ListReason = "initial" | "expired" | "error-event" | "too-large-resource-version"

type WatchState =
  | { readonly _tag: "NeedsList"; readonly reason: ListReason }
  | { readonly _tag: "Watching"; readonly resourceVersion: string }

/** How long to wait before the next round. */
type Pause =
  | { readonly _tag: "None" }
  | { readonly _tag: "Floor" }
  | { readonly _tag: "Backoff" }
  | { readonly _tag: "RetryAfter"; readonly delay: Duration.Duration }

/**
 * A round that did not end cleanly: what happened (for a person), what the loop does next
 * (re-list or resume from the last resourceVersion), and after which pause.
 */
class RoundFailure extends Data.TaggedError("RoundFailure")<{
  readonly next: "relist" | "resume"
  readonly listReason: ListReason
  readonly pause: Pause
  /** The `reason` tag of the restart metric: `expired`, `idle`, `429`, `transport`, ... */
  readonly reason: string
  readonly message: string
}> {}

const pauseNone: Pause = { _tag: "None" }
const pauseFloor: Pause = { _tag: "Floor" }
const pauseBackoff: Pause = { _tag: "Backoff" }

// ---------------------------------------------------------------------------------------------
// The service
// ---------------------------------------------------------------------------------------------

interface SandboxCache {
  readonly synced: boolean
  readonly objects: HashMap.HashMap<string, Sandbox>
}

interface Settings {
  readonly namespace: string
  readonly labelSelector: string
  readonly floor: Duration.Duration
  readonly cap: Duration.Duration
  readonly timeoutSeconds: number
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
    jitter: options.jitter ?? true
  }
}

/** What a watch's chunks need, taken once when it opens rather than for every chunk. */
interface RoundContext {
  readonly wake: Deferred.Deferred<void>
  readonly clock: Clock.Clock
  readonly metricLabels: ReadonlyArray<MetricLabel.MetricLabel>
}

/** What one batch of watch events did to the cache. */
interface Applied {
  readonly resourceVersion: string
  readonly heard: boolean
  readonly error: Status | undefined
  readonly undecodable: ReadonlyArray<UndecodableEvent>
  readonly stale: number
}

/**
 * Start the watch in the current scope. The loop is a fiber of that scope: closing it ends the loop
 * and aborts the open request.
 *
 * @since 0.1.0
 */
export const make = (options: SandboxWatchOptions): Effect.Effect<SandboxWatchService, never, KubeClient | Scope.Scope> =>
  Effect.gen(function*() {
    const client = yield* KubeClient
    const settings = settingsOf(options)
    const cache = yield* SubscriptionRef.make<SandboxCache>({ synced: false, objects: HashMap.empty() })
    const hub = new SubscriberHub<Option.Option<Sandbox>>()
    const state = yield* Ref.make<WatchState>({ _tag: "NeedsList", reason: "initial" })
    const counts = { relists: 0, watchRestarts: 0, lastHeard: Option.none<number>() }
    const annotations = { namespace: settings.namespace, labelSelector: settings.labelSelector }

    const heardNow = Effect.map(Clock.currentTimeMillis, (now) => {
      counts.lastHeard = Option.some(now)
    })

    // -- applying what the cluster said ------------------------------------------------------

    /**
     * The cache becomes the list, in one step. Told: every name whose resourceVersion changed or
     * that went — and on the first list, every name anyone is waiting on, present or not: that is
     * the reconcile. An object the list carried but that did not decode keeps its cached value,
     * and a cached object newer than the list's copy (a list cannot be newer than what we were
     * told, unless the server is behind) is kept: told resourceVersions never go backwards.
     */
    const applyList = (list: FullList<Sandbox>) =>
      SubscriptionRef.modifyEffect(cache, (old) =>
        Effect.sync(() => {
          const first = !old.synced
          const undecodableNames = new Set<string>()
          for (const bad of list.undecodable) if (bad.name !== undefined) undecodableNames.add(bad.name)
          // Telling inside this step is safe: subscribers register under the same lock, and the
          // cache they read next is the one this step returns.
          const next = HashMap.beginMutation(HashMap.empty<string, Sandbox>())
          let told = 0
          for (const item of list.items) {
            const name = item.metadata.name
            const cached = HashMap.get(old.objects, name)
            const keep = Option.isSome(cached) && isOlder(item.metadata.resourceVersion, cached.value.metadata.resourceVersion)
            const sandbox = keep ? cached.value : item
            HashMap.set(next, name, sandbox)
            // (Before the first list the cache is empty, so a first list tells every name it holds.)
            if (Option.isNone(cached) || cached.value.metadata.resourceVersion !== sandbox.metadata.resourceVersion) {
              told++
              hub.tell(name, Option.some(sandbox))
            }
          }
          for (const [name, sandbox] of old.objects) {
            if (HashMap.has(next, name)) continue
            // Not in the list: gone — unless it did not decode (unknown, not loss) or the list is
            // older than what we last heard of it (a stale list cannot prove a newer object gone).
            if (undecodableNames.has(name) || isOlder(list.resourceVersion, sandbox.metadata.resourceVersion)) {
              HashMap.set(next, name, sandbox)
            } else {
              told++
              hub.tell(name, Option.none())
            }
          }
          const objects = HashMap.endMutation(next)
          if (first) {
            // The reconcile: every name waited on that the first list does not hold is told gone.
            for (const name of Array.from(hub.subscribedNames())) {
              if (!HashMap.has(objects, name)) hub.tell(name, Option.none())
            }
          }
          return [{ told, size: HashMap.size(objects) }, { synced: true, objects }] as const
        }))

    /** A batch of watch events, applied in one step; stops at an `ERROR`. */
    const applyEvents = (events: Chunk.Chunk<WatchEvent<Sandbox>>, from: string) =>
      SubscriptionRef.modifyEffect(cache, (old) =>
        Effect.sync(() => {
          let resourceVersion = from
          let heard = false
          let error: Status | undefined
          let stale = 0
          const undecodable: Array<UndecodableEvent> = []
          const objects = HashMap.beginMutation(old.objects)
          for (const event of events) {
            if (event.type === "ERROR") {
              error = event.status
              break
            }
            heard = true
            switch (event.type) {
              case "BOOKMARK":
                resourceVersion = event.resourceVersion
                break
              case "UNDECODABLE":
                // The event happened; only its object is unreadable. Resume past it, tell nobody,
                // keep what we had for that name.
                if (event.resourceVersion !== undefined) resourceVersion = event.resourceVersion
                undecodable.push(event)
                break
              default: {
                resourceVersion = event.resourceVersion
                const cached = HashMap.get(objects, event.name)
                if (Option.isSome(cached) && isOlder(event.resourceVersion, cached.value.metadata.resourceVersion)) {
                  stale++
                  break
                }
                if (event.type === "DELETED") {
                  HashMap.remove(objects, event.name)
                  hub.tell(event.name, Option.none())
                } else {
                  HashMap.set(objects, event.name, event.object)
                  hub.tell(event.name, Option.some(event.object))
                }
              }
            }
          }
          const applied: Applied = { resourceVersion, heard, error, undecodable, stale }
          return [applied, { synced: old.synced, objects: HashMap.endMutation(objects) }] as const
        }))

    /** By type, synchronously: this runs for every chunk a watch reads. */
    const countEvents = (events: Chunk.Chunk<WatchEvent<Sandbox>>, labels: ReadonlyArray<MetricLabel.MetricLabel>) => {
      const byType = { ADDED: 0, MODIFIED: 0, DELETED: 0, BOOKMARK: 0, ERROR: 0, UNDECODABLE: 0 }
      for (const event of events) byType[event.type]++
      for (const type of Object.keys(byType) as Array<keyof typeof byType>) {
        if (byType[type] > 0) eventCounters[type].unsafeUpdate(byType[type], labels)
      }
    }

    const reportUndecodable = (bad: UndecodableEvent) =>
      Effect.logWarning(
        `Sandbox ${bad.name === undefined ? "(no name)" : `"${bad.name}"`} in a ${bad.eventType} event does not fit the schema; ` +
          `keeping its previous cached value: ${bad.problem}`
      ).pipe(
        Effect.annotateLogs({ ...annotations, resourceVersion: bad.resourceVersion ?? "", reason: "decode" }),
        Effect.zipRight(Metric.increment(metrics.decodeFailures))
      )

    // -- classifying failures ----------------------------------------------------------------

    const failureOfError = (error: KubeError.KubeClientError, during: "list" | "watch", rv: string | undefined): RoundFailure => {
      const at = rv === undefined ? "" : ` ${rv}`
      if (KubeError.isExpired(error)) {
        return new RoundFailure({
          next: "relist",
          listReason: "expired",
          pause: pauseFloor,
          reason: "expired",
          message: `resourceVersion${at} expired (${error.message})`
        })
      }
      if (KubeError.isTooLargeResourceVersion(error)) {
        return new RoundFailure({
          next: "relist",
          listReason: "too-large-resource-version",
          pause: pauseFloor,
          reason: "too-large-resource-version",
          message: `the server has not reached resourceVersion${at} yet (${error.message})`
        })
      }
      if (KubeError.isTooManyRequests(error)) {
        const asked = KubeError.retryAfter(error)
        return new RoundFailure({
          next: "resume",
          listReason: "initial",
          pause: Option.match(asked, {
            onNone: () => pauseBackoff,
            onSome: (delay) => ({ _tag: "RetryAfter", delay: Duration.min(delay, settings.cap) })
          }),
          reason: "429",
          message: `the server is throttling us (429${Option.match(asked, { onNone: () => "", onSome: (d) => `, Retry-After ${Duration.format(d)}` })})`
        })
      }
      if (KubeError.isUnauthorized(error)) {
        return new RoundFailure({
          next: "resume",
          listReason: "initial",
          pause: pauseBackoff,
          reason: "401",
          message: "the cluster rejected our credentials (401 Unauthorized); they will be read afresh"
        })
      }
      if (KubeError.isForbidden(error)) {
        return new RoundFailure({
          next: "resume",
          listReason: "initial",
          pause: pauseBackoff,
          reason: "403",
          message: `forbidden to ${during} sandboxes.jr2.dev in namespace "${settings.namespace}": grant get, list and watch on ` +
            `sandboxes.jr2.dev (RBAC); the watch heals without a restart once it may (${error.message})`
        })
      }
      const reason = error._tag === "KubeStatusError" ? String(error.code) :
        error._tag === "KubeTransportError" ? "transport" :
        error._tag === "KubeLineTooLongError" ? "line-too-long" : "malformed"
      return new RoundFailure({ next: "resume", listReason: "initial", pause: pauseBackoff, reason, message: error.message })
    }

    const failureOfErrorEvent = (status: Status, rv: string, pause: Pause): RoundFailure =>
      status.code === 410 || status.reason === "Expired" || status.reason === "Gone"
        ? new RoundFailure({
          next: "relist",
          listReason: "expired",
          pause,
          reason: "expired",
          message: `resourceVersion ${rv} expired (${status.message ?? "410 Gone"})`
        })
        : new RoundFailure({
          next: "relist",
          listReason: "error-event",
          pause,
          reason: "error-event",
          message: `the watch sent an ERROR (${status.code ?? "no code"} ${status.reason ?? ""}: ${status.message ?? "no message"})`
        })

    // -- one round: list if needed, then watch -------------------------------------------------

    const relist = (reason: ListReason) =>
      client.listAll(SandboxResource, Sandbox, {
        namespace: settings.namespace,
        labelSelector: settings.labelSelector,
        limit: settings.pageSize
        // No resourceVersion: a quorum read. A list served from an apiserver's cache may be
        // stale, and a stale reconcile would tell a Sandbox created a moment ago that it is gone.
      }).pipe(
        Effect.mapError((error) => failureOfError(error, "list", undefined)),
        Effect.tap((list) =>
          Effect.gen(function*() {
            const applied = yield* applyList(list)
            if (reason !== "initial") counts.relists++
            yield* heardNow
            yield* Metric.increment(Metric.tagged(metrics.relists, "reason", reason))
            yield* Metric.set(metrics.cached, applied.size)
            yield* Effect.forEach(list.undecodable, reportUndecodable, { discard: true })
            yield* Ref.set(state, { _tag: "Watching", resourceVersion: list.resourceVersion })
            yield* Effect.logInfo(
              `listed ${list.items.length} Sandboxes at resourceVersion ${list.resourceVersion} (${reason}); ` +
                `${applied.told} told; watching from there`
            ).pipe(Effect.annotateLogs({ ...annotations, resourceVersion: list.resourceVersion, reason }))
          })
        ),
        Effect.map((list) => list.resourceVersion),
        Effect.withSpan("SandboxWatch.list", { attributes: { ...annotations, reason } })
      )

    /** `openedAt`: when the watch was asked for (epoch ms), for the idle limit and rule 8. */
    const watchFrom = (resourceVersion: string, openedAt: number) => {
      // Rule 8: a watch that closes having said nothing is not asked again at once.
      let heard = false
      let current = resourceVersion
      let lastActivity = openedAt
      // The platform's undici client has no body timeout: silence past the server's own timeout
      // (it sends bookmarks about every minute) means the connection is dead. One watchdog per
      // watch, sleeping until the silence would be too long, costs less than a timer per chunk.
      const idleMillis = Duration.toMillis(settings.idleLimit)
      const watchdog = Effect.gen(function*() {
        while (true) {
          const silent = (yield* Clock.currentTimeMillis) - lastActivity
          if (silent >= idleMillis) {
            return yield* new RoundFailure({
              next: "resume",
              listReason: "initial",
              pause: pauseNone,
              reason: "idle",
              message: `the watch was silent for ${Duration.format(settings.idleLimit)}; the connection is taken for dead`
            })
          }
          yield* Effect.sleep(Duration.millis(idleMillis - silent))
        }
      })
      /**
       * One chunk of events into the cache; an `ERROR` among them fails the round. The common case
       * (events applied, nothing to report) is one step after the cache's: a watch may read
       * thousands of chunks a second.
       */
      const applyChunk = (chunk: Chunk.Chunk<WatchEvent<Sandbox>>, round: RoundContext) =>
        Effect.flatMap(applyEvents(chunk, current), (applied) => {
          lastActivity = round.clock.unsafeCurrentTimeMillis()
          counts.lastHeard = Option.some(lastActivity)
          current = applied.resourceVersion
          countEvents(chunk, round.metricLabels)
          const firstWord = applied.heard && !heard
          if (applied.heard) heard = true
          const recorded = Ref.set(state, { _tag: "Watching", resourceVersion: current })
          if (!firstWord && applied.error === undefined && applied.undecodable.length === 0 && applied.stale === 0) return recorded
          return Effect.gen(function*() {
            yield* recorded
            yield* Effect.forEach(applied.undecodable, reportUndecodable, { discard: true })
            if (applied.stale > 0) {
              yield* Effect.logDebug(`ignored ${applied.stale} event(s) older than the cached object`)
            }
            if (firstWord) yield* Deferred.succeed(round.wake, undefined)
            if (applied.error !== undefined) {
              // Rule 8: a watch that said nothing but the ERROR waits one floor before the re-list.
              return yield* Effect.fail(failureOfErrorEvent(applied.error, current, heard ? pauseNone : pauseFloor))
            }
          })
        })
      // The events are applied by one fiber per watch, raced once against the watchdog. Cutting
      // the watch short from inside the Stream (`Stream.interruptWhen`) would fork a fiber for
      // every chunk read, which profiles showed as a fifth of the watch's CPU.
      const events: Stream.Stream<string, RoundFailure> = Stream.unwrapScoped(
        Effect.gen(function*() {
          const round: RoundContext = {
            // Completed by the first event heard (a healthy watch: the back-off resets) or by the end.
            wake: yield* Deferred.make<void>(),
            clock: yield* Effect.clock,
            metricLabels: yield* FiberRef.get(FiberRef.currentMetricLabels)
          }
          const applyAll = client.watch(SandboxResource, Sandbox, {
            namespace: settings.namespace,
            labelSelector: settings.labelSelector,
            resourceVersion,
            allowWatchBookmarks: true,
            timeoutSeconds: settings.timeoutSeconds
          }).pipe(
            Stream.runForEachChunk((chunk) => applyChunk(chunk, round)),
            Effect.mapError((error) => (error._tag === "RoundFailure" ? error : failureOfError(error, "watch", current)))
          )
          const applier = yield* Effect.raceFirst(applyAll, watchdog).pipe(
            Effect.ensuring(Deferred.succeed(round.wake, undefined)),
            Effect.forkScoped
          )
          // Yields once, and only for a watch that said something; then ends as the watch did.
          // (`Stream.filter` would not do: an emptied chunk still counts as output and resets it.)
          const healthy = Stream.unwrap(Effect.map(Deferred.await(round.wake), () => (heard ? Stream.make(current) : Stream.empty)))
          return Stream.concat(healthy, Stream.drain(Stream.fromEffect(Fiber.join(applier))))
        })
      )
      // Rule 8, with the exception a quiet cluster needs: kube-apiserver 1.20 sends no bookmark
      // unless something changed, so a watch that ran its full `timeoutSeconds` and closed silent
      // is the normal end of a quiet term, not a misbehaving server. Only an early silent close
      // waits one floor (client-go's "very short watch").
      const fullTermMillis = settings.timeoutSeconds * 900
      const afterClose = Stream.execute(
        Effect.gen(function*() {
          if (heard) return
          const ran = (yield* Clock.currentTimeMillis) - openedAt
          if (ran >= fullTermMillis) {
            return yield* Effect.logDebug(`the watch ran its term without a change; resuming`).pipe(
              Effect.annotateLogs({ ...annotations, resourceVersion: current, reason: "quiet-term" })
            )
          }
          yield* Effect.logWarning(
            `the watch closed after ${Duration.format(Duration.millis(ran))} without a word; asking again in ${Duration.format(settings.floor)}`
          ).pipe(Effect.annotateLogs({ ...annotations, resourceVersion: current, reason: "silent-close" }))
          yield* Effect.sleep(settings.floor)
        })
      )
      return Stream.concat(events, afterClose).pipe(
        Stream.withSpan("SandboxWatch.watch", { attributes: { ...annotations, resourceVersion } })
      )
    }

    const round: Stream.Stream<string, RoundFailure> = Stream.unwrap(
      Effect.gen(function*() {
        const current = yield* Ref.get(state)
        if (current._tag === "Watching") return watchFrom(current.resourceVersion, yield* Clock.currentTimeMillis)
        const resourceVersion = yield* relist(current.reason)
        // The list yields once: a list that landed is a healthy stream and resets the back-off.
        return Stream.concat(Stream.make(resourceVersion), watchFrom(resourceVersion, yield* Clock.currentTimeMillis))
      })
    )

    // -- pauses between rounds ---------------------------------------------------------------

    const jittered = (delay: Duration.Duration) =>
      settings.jitter
        ? Effect.map(Random.nextRange(0.8, 1.2), (factor) => Duration.millis(Math.round(Duration.toMillis(delay) * factor)))
        : Effect.succeed(delay)

    const pauseFor = (failure: RoundFailure, backoff: Duration.Duration): Effect.Effect<Duration.Duration> => {
      switch (failure.pause._tag) {
        case "None":
          return Effect.succeed(Duration.zero)
        case "Floor":
          return Effect.succeed(settings.floor)
        case "RetryAfter":
          return Effect.succeed(failure.pause.delay)
        case "Backoff":
          return Effect.map(jittered(backoff), (delay) => Duration.min(delay, settings.cap))
      }
    }

    const retryPolicy = Schedule.identity<RoundFailure>().pipe(
      Schedule.intersect(Schedule.exponential(settings.floor, 2)),
      Schedule.modifyDelayEffect(([failure, backoff]) =>
        Effect.gen(function*() {
          const delay = yield* pauseFor(failure, backoff)
          const rv = yield* Ref.get(state)
          const next = failure.next === "relist"
            ? "re-listing"
            : `resuming from resourceVersion ${rv._tag === "Watching" ? rv.resourceVersion : "(none: listing)"}`
          const when = Duration.isZero(delay) ? "now" : `in ${Duration.format(delay)}`
          yield* Effect.logWarning(`${failure.message}; ${next} ${when}`).pipe(
            Effect.annotateLogs({
              ...annotations,
              resourceVersion: rv._tag === "Watching" ? rv.resourceVersion : "",
              reason: failure.reason
            })
          )
          if (failure.next === "relist") yield* Ref.set(state, { _tag: "NeedsList", reason: failure.listReason })
          return delay
        })
      )
    )

    const onFailure = (failure: RoundFailure) =>
      Effect.gen(function*() {
        counts.watchRestarts++
        yield* Metric.increment(Metric.tagged(metrics.restarts, "reason", failure.reason))
      })

    const loop = Stream.forever(round).pipe(
      Stream.tapError(onFailure),
      Stream.retry(retryPolicy),
      Stream.runDrain,
      Effect.catchAllCause((cause) =>
        // Nothing the cluster does ends the loop; only a defect in our own code could get here.
        Cause.isInterruptedOnly(cause) ? Effect.void : Effect.logError("the Sandbox watch loop died", cause)
      ),
      Effect.annotateLogs(annotations)
    )
    yield* Effect.forkScoped(loop)

    // -- what subscribers see -----------------------------------------------------------------

    const updateSubscriberGauge = Effect.suspend(() => Metric.set(metrics.subscribers, hub.subscribers))

    type Mailbox = LatestMailbox<string, Option.Option<Sandbox>>

    /**
     * A new mailbox for `name` (`undefined`: every name), registered under the cache's lock so no
     * change can slip between "the current value" and "told"; once synced, `initial` puts what
     * the cache holds now.
     */
    const register = (name: string | undefined, initial: (mailbox: Mailbox, current: SandboxCache) => void) =>
      SubscriptionRef.modify(cache, (current) => {
        const mailbox = hub.add(name)
        if (current.synced) initial(mailbox, current)
        return [mailbox, current] as const
      }).pipe(Effect.zipLeft(updateSubscriberGauge))

    const unregister = (name: string | undefined, mailbox: Mailbox) =>
      Effect.suspend(() => {
        hub.remove(name, mailbox)
        return updateSubscriberGauge
      })

    const tellCurrent = (name: string) => (mailbox: Mailbox, current: SandboxCache) =>
      mailbox.put(name, HashMap.get(current.objects, name))

    /**
     * A subscription is one `Stream.repeatEffectChunk` over a mailbox. Its first pull registers;
     * its end unregisters. (A scoped acquire would add a scope and channel layers to every
     * subscription: a quarter of what an idle one weighs.)
     */
    const subscription = <A>(
      name: string | undefined,
      initial: (mailbox: Mailbox, current: SandboxCache) => void,
      present: (pending: Chunk.Chunk<readonly [string, Option.Option<Sandbox>]>) => Chunk.Chunk<A>
    ): Stream.Stream<A> =>
      Stream.suspend(() => {
        let mailbox: Mailbox | undefined
        const pull = Effect.suspend(() =>
          mailbox === undefined
            ? Effect.flatMap(register(name, initial), (registered) => {
              mailbox = registered
              return registered.takeAll
            })
            : mailbox.takeAll
        )
        return Stream.repeatEffectChunk(Effect.map(pull, present)).pipe(
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

    const synced = cache.changes.pipe(
      Stream.filter((current) => current.synced),
      Stream.take(1),
      Stream.runDrain
    )

    const health = Effect.gen(function*() {
      const current = yield* SubscriptionRef.get(cache)
      const now = yield* Clock.currentTimeMillis
      if (Option.isSome(counts.lastHeard)) {
        yield* Metric.set(metrics.secondsSinceLastHeard, (now - counts.lastHeard.value) / 1000)
      }
      return {
        synced: current.synced,
        lastHeard: counts.lastHeard,
        relists: counts.relists,
        watchRestarts: counts.watchRestarts,
        cached: HashMap.size(current.objects),
        subscribers: hub.subscribers
      } satisfies SandboxWatchHealth
    })

    return {
      synced,
      get: (name) => Effect.map(SubscriptionRef.get(cache), (current) => HashMap.get(current.objects, name)),
      changes,
      allChanges,
      waitFor,
      snapshot: Effect.map(SubscriptionRef.get(cache), (current) => new Map(current.objects)),
      health
    } satisfies SandboxWatchService
  })

/**
 * The watch as a scoped Layer: the loop lives exactly as long as the Layer's scope.
 *
 * @since 0.1.0
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

/** @since 0.1.0 */
export const layerConfig = (
  options: Config.Config<SandboxWatchOptions> = config
): Layer.Layer<SandboxWatch, ConfigError.ConfigError, KubeClient> =>
  Layer.unwrapEffect(Effect.map(options, layer))
