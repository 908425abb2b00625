/**
 * What the watch reports: its metrics, the counts its health reads, and the warning for a Sandbox
 * that did not fit the schema. The counts are one mutable record, written by the loop's fiber.
 *
 * @internal
 */
import { Array as Arr, type Chunk, Effect, Metric, MetricLabel } from "effect"
import { answerBegan } from "../KubeError.ts"
import type { Sandbox } from "../Sandbox.ts"
import type { UndecodableEvent, WatchEvent } from "../WatchEvent.ts"
import type { RoundEnd } from "./watchMachine.ts"

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

/** What the loop has heard, for `health` and the cached gauge: written by the loop's fiber only. */
export interface LoopCounts {
  /** Lists after the first one. */
  relists: number
  watchRestarts: number
  // Plain values, made `Option`s only when health is read: they are set for every chunk.
  lastHeard: number | undefined
  /** A round has ended with something the server said (`answeredBy`): health's `answered`. */
  answered: boolean
  /** What the cached-Sandboxes gauge was last set to: events set it only when it changes. */
  cachedReported: number
}

export const makeLoopCounts = (): LoopCounts => ({
  relists: 0,
  watchRestarts: 0,
  lastHeard: undefined,
  answered: false,
  cachedReported: -1
})

/**
 * Whether a round that ended so heard the server answer: anything but a request that got no
 * answer (refused, reset, timed out, or not sent at all for want of credentials) or our own defect.
 */
export const answeredBy = (end: RoundEnd): boolean => {
  switch (end._tag) {
    case "ListFailed":
      return answerBegan(end.error)
    case "WatchFailed":
      return end.heard || answerBegan(end.error)
    case "Defect":
      return false
    default:
      return true
  }
}

/** The annotations of every log line the loop writes. */
export interface LogAnnotations {
  readonly namespace: string
  readonly labelSelector: string
}

type EventType = WatchEvent<Sandbox>["type"]

/** The labels of the events counter, one array per event type. */
export type EventLabels = Record<EventType, ReadonlyArray<MetricLabel.MetricLabel>>

/**
 * The labels of the events counter for one event type under the loop's metric labels, made once
 * per label set: the counter finds its series by the identity of the labels array it is given, and
 * `Metric.tagged` would join a fresh array (and look the series up again, hashing its key) for
 * every chunk a watch reads.
 */
const eventLabels = new WeakMap<ReadonlyArray<MetricLabel.MetricLabel>, EventLabels>()
export const eventLabelsFor = (labels: ReadonlyArray<MetricLabel.MetricLabel>): EventLabels => {
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

/** By type, synchronously: this runs for every chunk a watch reads (most hold one event). */
export const countEvents = (events: Chunk.Chunk<WatchEvent<Sandbox>>, labels: EventLabels): void => {
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

export const reportUndecodable = (annotations: LogAnnotations, from: "list" | "watch") => (bad: UndecodableEvent) =>
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
