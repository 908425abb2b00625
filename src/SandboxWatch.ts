/**
 * The one watch of every Sandbox in a namespace: held in memory, pushed to whoever subscribes to a
 * name, and honest about what it does not know.
 *
 * The loop is list → watch → watch → …, a state machine whose decisions are all in
 * `internal/watchMachine.ts` (its states, what a round can end with, the numbered rules), and whose
 * cache is changed only by `internal/sandboxCache.ts`. This module wires it; the parts are in
 * `internal/`, each given what it needs:
 *
 * - `watchRounds.ts`: a round is the list (when the state is `NeedsList`) then one watch, whose
 *   events are applied to the cache chunk by chunk. When the round ends, `settle` asks the machine
 *   for the next state and sets it: the one place it changes.
 * - `pacing.ts`: the rounds run as a `Stream` under `Stream.retry` with the retry `Schedule`.
 *   A round that did not end as it should fails with the machine's transition, which names the
 *   kind of pause; how long it is comes from one record of the pauses before, forgotten only
 *   after `backoffResetAfter` with no paused retry (never because a server said something).
 * - `cacheSteps.ts`: the cache is a `SubscriptionRef` of persistent maps, so a re-list replaces it
 *   in one step (nobody ever sees half-old, half-new state). Subscribers are told under the same
 *   lock, through a keyed hub of latest-value mailboxes (`subscriptions.ts` reads them).
 * - `watchMetrics.ts`: the metrics, and the counts `health` reads.
 *
 * Unknown is never loss: a dropped watch, an error, a back-off or an object that does not decode
 * tells nobody anything. Only a list without the name, or a `DELETED` event, says gone.
 */
import {
  Clock,
  Config,
  type ConfigError,
  Context,
  Deferred,
  Duration,
  Effect,
  HashMap,
  Layer,
  Metric,
  Option,
  type Scope,
  type Stream,
  SubscriptionRef
} from "effect"
import { type CacheRef, makeCacheSteps, type SandboxHub } from "./internal/cacheSteps.ts"
import * as Pacing from "./internal/pacing.ts"
import * as SandboxCache from "./internal/sandboxCache.ts"
import { SubscriberHub } from "./internal/subscriberHub.ts"
import { makeSubscriptions } from "./internal/subscriptions.ts"
import * as WatchMachine from "./internal/watchMachine.ts"
import * as WatchMetrics from "./internal/watchMetrics.ts"
import { runWatchLoop, type WatchSettings as Settings } from "./internal/watchRounds.ts"
import { KubeClient } from "./KubeClient.ts"
import { DefaultLabelSelector, type Sandbox } from "./Sandbox.ts"

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
  /**
   * The server has answered since the watch started: a list, an event, a close, or a failure it
   * sent back (a 403, a 500). False while no request got an answer (refused, reset, timed out).
   */
  readonly answered: boolean
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

/**
 * One name as the cache holds it, and how far the watch had heard when it did: one reading, so the
 * facts agree (no change can land between them).
 */
export interface SandboxLookup {
  /** A list has landed. */
  readonly synced: boolean
  /** The Sandbox cached under the name; none when the cluster's last word was "not there" (or unknown). */
  readonly sandbox: Option.Option<Sandbox>
  /** The name's only state heard did not decode: neither present nor gone (unknown is never loss). */
  readonly unknown: boolean
  /** The resourceVersion the cache stood at; none before the first list. */
  readonly resourceVersion: Option.Option<string>
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
   * caller's own fiber, lighter than an idle `changes` stream run by `Stream.runForEach` (that also
   * carries the stream's channel machinery and a fiber of its own); and each change wakes the wait
   * for about a third of the bytes a `changes` stream's consumer allocates (`scratchpad/wakeCost.ts`).
   */
  readonly waitFor: <A, E, R>(
    name: string,
    step: (value: Option.Option<Sandbox>) => Effect.Effect<Option.Option<A>, E, R>
  ) => Effect.Effect<A, E, R>
  /**
   * The name as cached and the resourceVersion the cache stood at, read together. A wait that decides
   * from more than the value it was told (is the watch past the create?) decides from this.
   */
  readonly lookup: (name: string) => Effect.Effect<SandboxLookup>
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
  /**
   * The longest pause before a server that gave no answer at all (refused, reset, timed out) is
   * asked again: those pauses double from `backoffFloor` to this and stay there, so a server that
   * is down is asked about once this long and a heal is noticed within about this long. An answer
   * that is a failure (a 5xx) waits the back-off to `backoffCap` instead. Between `backoffFloor`
   * and `backoffCap`. Default 1 s (or the nearer of those two).
   */
  readonly reconnectCap?: Duration.DurationInput | undefined
  /**
   * How long with no paused retry before the back-off's counts are forgotten and the next failure
   * pauses from the floor again (a re-list: at once). Nothing a server sends resets them sooner.
   * At least `backoffCap`. Default 2 minutes (client-go's reflector and kube-rs's watcher).
   */
  readonly backoffResetAfter?: Duration.DurationInput | undefined
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
   * 1.27+ with WatchList, on by default in 1.32 and from 1.34), or `"paged"` (pages of `pageSize`).
   */
  readonly listMode?: WatchMachine.ListMode
  /**
   * Ask for a streaming list gzipped (`Accept-Encoding: gzip`; kube-apiserver 1.37+ with
   * `WatchListCompression` then compresses that whole watch). Fewer bytes on the wire for more CPU
   * on both ends: for a cluster reached over a slow or metered link. Default false.
   */
  readonly gzipStreamingLists?: boolean
}

// ---------------------------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------------------------

/** The watch's metrics, for a Prometheus exporter or a test. */
export const metrics = WatchMetrics.metrics

// ---------------------------------------------------------------------------------------------
// The service
// ---------------------------------------------------------------------------------------------

const settingsOf = (options: SandboxWatchOptions): Settings => {
  const timeoutSeconds = options.timeoutSeconds ?? 240
  const floor = Duration.decode(options.backoffFloor ?? "500 millis")
  const cap = Duration.decode(options.backoffCap ?? "30 seconds")
  return {
    namespace: options.namespace,
    labelSelector: options.labelSelector ?? DefaultLabelSelector,
    floor,
    cap,
    reconnectCap: options.reconnectCap === undefined
      ? Duration.clamp(Duration.seconds(1), { minimum: floor, maximum: cap })
      : Duration.decode(options.reconnectCap),
    resetAfter: Duration.decode(options.backoffResetAfter ?? "2 minutes"),
    timeoutSeconds,
    idleLimit: Duration.sum(Duration.seconds(timeoutSeconds), Duration.decode(options.idleMargin ?? "30 seconds")),
    pageSize: options.pageSize ?? 500,
    jitter: options.jitter ?? true,
    listMode: options.listMode ?? "auto",
    gzipStreamingLists: options.gzipStreamingLists ?? false
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
  if (
    Duration.lessThan(settings.reconnectCap, settings.floor) ||
    Duration.greaterThan(settings.reconnectCap, settings.cap)
  ) {
    problems.push(
      `reconnectCap (${Duration.format(settings.reconnectCap)}) must be between backoffFloor (${
        Duration.format(settings.floor)
      }) and backoffCap (${Duration.format(settings.cap)})`
    )
  }
  if (Duration.lessThan(settings.resetAfter, settings.cap)) {
    problems.push(
      `backoffResetAfter (${Duration.format(settings.resetAfter)}) must be at least backoffCap (${
        Duration.format(settings.cap)
      }): shorter, a failure at the cap would forget the back-off before its own next pause`
    )
  }
  if (!Duration.isFinite(settings.idleLimit)) problems.push("idleMargin must be finite")
  return problems
}

/** What the cache and the loop's counts say now; sets the seconds-since-heard gauge. */
const healthOf = (
  cache: CacheRef,
  counts: WatchMetrics.LoopCounts,
  hub: SandboxHub
): Effect.Effect<SandboxWatchHealth> =>
  Effect.gen(function*() {
    const current = yield* SubscriptionRef.get(cache)
    const now = yield* Clock.currentTimeMillis
    if (counts.lastHeard !== undefined) {
      yield* Metric.set(metrics.secondsSinceLastHeard, (now - counts.lastHeard) / 1000)
    }
    return {
      synced: current.synced,
      lastHeard: Option.fromNullable(counts.lastHeard),
      answered: counts.answered,
      relists: counts.relists,
      watchRestarts: counts.watchRestarts,
      cached: current.objects.size,
      unknown: HashMap.size(current.unknown),
      // The cache's own: the resourceVersion it stands at, as `lookup` reads it.
      resourceVersion: Option.fromNullable(current.resourceVersion),
      subscribers: hub.subscribers
    }
  })

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
    // Done once the first list is in the cache: not a wait on the cache's `changes`, whose stream
    // stages stood before `synced` (the bench's sync row), nor a latch, which resumes one hop later.
    const firstList = yield* Deferred.make<void>()
    const hub: SandboxHub = new SubscriberHub(Option.isNone)
    const counts = WatchMetrics.makeLoopCounts()
    const annotations = { namespace: settings.namespace, labelSelector: settings.labelSelector }
    const loop = runWatchLoop({
      client,
      settings,
      annotations,
      cacheSteps: makeCacheSteps(cache, hub),
      firstList,
      state: { machine: WatchMachine.initialFor(settings.listMode), pacer: Pacing.fresh },
      counts
    })
    yield* Effect.forkScoped(Effect.annotateLogs(loop, annotations))

    return {
      synced: Deferred.await(firstList),
      get: (name) => Effect.map(SubscriptionRef.get(cache), (current) => current.objects.getOption(name)),
      lookup: (name) =>
        Effect.map(SubscriptionRef.get(cache), (current): SandboxLookup => ({
          synced: current.synced,
          sandbox: current.objects.getOption(name),
          unknown: HashMap.has(current.unknown, name),
          resourceVersion: Option.fromNullable(current.resourceVersion)
        })),
      ...makeSubscriptions(cache, hub),
      snapshot: Effect.map(SubscriptionRef.get(cache), (current) => new Map(current.objects)),
      health: healthOf(cache, counts, hub)
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
 * `SANDBOX_WATCH_RECONNECT_CAP`, `SANDBOX_WATCH_BACKOFF_RESET_AFTER`,
 * `SANDBOX_WATCH_TIMEOUT_SECONDS`, `SANDBOX_WATCH_PAGE_SIZE`, `SANDBOX_WATCH_LIST_MODE` (auto, stream or paged),
 * `SANDBOX_WATCH_GZIP_STREAMING_LISTS`.
 */
export const config: Config.Config<SandboxWatchOptions> = Config.all({
  namespace: Config.string("SANDBOX_WATCH_NAMESPACE"),
  labelSelector: Config.string("SANDBOX_WATCH_LABEL_SELECTOR").pipe(Config.withDefault(DefaultLabelSelector)),
  backoffFloor: Config.duration("SANDBOX_WATCH_BACKOFF_FLOOR").pipe(Config.withDefault(Duration.millis(500))),
  backoffCap: Config.duration("SANDBOX_WATCH_BACKOFF_CAP").pipe(Config.withDefault(Duration.seconds(30))),
  backoffResetAfter: Config.duration("SANDBOX_WATCH_BACKOFF_RESET_AFTER").pipe(
    Config.withDefault(Duration.minutes(2))
  ),
  // No default here: unset, it is 1 s kept between the floor and the cap `make` was given.
  reconnectCap: Config.option(Config.duration("SANDBOX_WATCH_RECONNECT_CAP")).pipe(
    Config.map(Option.getOrUndefined)
  ),
  timeoutSeconds: Config.integer("SANDBOX_WATCH_TIMEOUT_SECONDS").pipe(Config.withDefault(240)),
  pageSize: Config.integer("SANDBOX_WATCH_PAGE_SIZE").pipe(Config.withDefault(500)),
  listMode: Config.literal("auto", "stream", "paged")("SANDBOX_WATCH_LIST_MODE").pipe(Config.withDefault("auto")),
  gzipStreamingLists: Config.boolean("SANDBOX_WATCH_GZIP_STREAMING_LISTS").pipe(Config.withDefault(false))
})

export const layerConfig = (
  options: Config.Config<SandboxWatchOptions> = config
): Layer.Layer<SandboxWatch, ConfigError.ConfigError, KubeClient> => Layer.unwrapEffect(Effect.map(options, layer))
