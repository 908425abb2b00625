/**
 * Every pacing decision of the watch, in one place: how long it waits before asking the server
 * again, and what it remembers of the pauses before. The machine (`watchMachine.ts`) says what kind
 * of pause a round's end calls for (`Pause`); `decide` says how long it is, from one record
 * (`Pacer`) with one rule for forgetting it. The retry `Schedule` at the bottom only waits what
 * `decide` says and writes the log line.
 *
 * - **Counted** pauses (`Backoff`, `Relist`, `Resume`, `RetryAfter`): the server answered, and the
 *   answer was a failure, asked for a full list, or broke off. They share one count `n`: the pause
 *   waits `floor × 2^n`, ±20% and never past the cap. The first (`n = 0`) waits the floor; the
 *   first re-list since the counts were forgotten goes at once, whatever `n` (rule 5: the server
 *   has just answered, and only a list can go on; an apiserver coming back from a restart answers
 *   a 503 and a 429 before the 410 that ends its outage, and the watch must not wait for them);
 *   so does the first resume of a watch that spoke and then broke off, counting nothing (rule 7: a
 *   healthy watch cut by a network fault or a dying apiserver is back at once, and the failures
 *   that follow pause as if it had not been cut; a server that cuts every watch after a bookmark
 *   is not asked once a second). A `RetryAfter` waits what the server asked or the back-off, whichever is
 *   longer, so a server that asks for a second every time is still given more room each time.
 * - **Reconnect** (rule 7, no answer at all): the floor doubling to `reconnectCap` (1 s), spread
 *   upward only. A count of its own, which does not
 *   grow the back-off, so an outage's refusals leave the next answer's pause as it was; an answer
 *   that is a failure ends the row (the server is reachable).
 * - **Beat**: one floor, counted nowhere (a watch that spoke and closed at once, rule 3).
 * - **None**: at once.
 *
 * The one reset rule: both counts are forgotten once `resetAfter` (2 minutes, as client-go's
 * reflector and kube-rs's watcher) has passed since the last paused retry went, with no pause
 * since. Nothing a server sends resets them: a bookmark before every failure, one event before every
 * cut, is what a misbehaving server looks like, and forgetting on it let such a server drive the
 * watch into a list storm. So against any server, over any 10 minutes: at most about 30 requests
 * answered with a failure and at most about 30 full lists (0, 1, 2, 4, 8, 16 s, then one a ~30 s
 * cap), and a server that does not answer is asked about once a second.
 *
 * @internal
 */
import { Data, Duration, Effect, LogLevel, Random, Schedule, ScheduleDecision, ScheduleInterval } from "effect"
import type { LogAnnotations } from "./watchMetrics.ts"

/** The kind of pause a round's end calls for; its length is `decide`'s. */
export type Pause = Data.TaggedEnum<{
  /** Go on at once. */
  None: {}
  /** One back-off floor, counted nowhere. */
  Beat: {}
  /** Counted: the server answered with a failure. The first waits the floor. */
  Backoff: {}
  /** Counted: the server asked for a full list (rule 5). The first goes at once. */
  Relist: {}
  /** Counted: a watch that had spoken broke off mid-stream (rule 7). The first goes at once, uncounted. */
  Resume: {}
  /** No answer at all: the reconnect pace, counted apart. */
  Reconnect: {}
  /** Counted: what the server asked for (already at least the floor), or the back-off if longer. */
  RetryAfter: { readonly delay: Duration.Duration }
}>

export const Pause = Data.taggedEnum<Pause>()

export interface PacingSettings {
  readonly floor: Duration.Duration
  readonly cap: Duration.Duration
  /** The longest pause before a server that gave no answer at all is asked again (rule 7). */
  readonly reconnectCap: Duration.Duration
  /** How long with no paused retry before the counts are forgotten. */
  readonly resetAfter: Duration.Duration
  readonly jitter: boolean
}

/** What the pauses since the counts were last forgotten were. */
export interface Pacer {
  /** Counted pauses (`Backoff`, `Relist`, `Resume`, `RetryAfter`) since the counts were last forgotten. */
  readonly counted: number
  /** `Reconnect` pauses in a row since then. */
  readonly unanswered: number
  /** A `Relist` was paced since then: only the first goes at once. */
  readonly relisted: boolean
  /** A `Resume` was paced since then: only the first goes at once. */
  readonly resumed: boolean
  /** When the last paused retry went (its pause's end), in clock milliseconds. */
  readonly lastRetryAt: number | undefined
}

export const fresh: Pacer = { counted: 0, unanswered: 0, relisted: false, resumed: false, lastRetryAt: undefined }

/** How long a pause waits, and the record after it. */
export interface Decision {
  readonly delay: Duration.Duration
  readonly pacer: Pacer
  /** For a `Reconnect`: how many times in a row the server has not answered, this one included. */
  readonly inRow: number
}

/** The record as it stands at `now`: forgotten once `resetAfter` passed since the last retry. */
export const current = (pacer: Pacer, now: number, settings: PacingSettings): Pacer =>
  pacer.lastRetryAt !== undefined && now - pacer.lastRetryAt >= Duration.toMillis(settings.resetAfter)
    ? fresh
    : pacer

/** The floor doubled `times` times, no more than `cap`. */
const doubled = (settings: PacingSettings, times: number, cap: Duration.Duration): number =>
  Math.min(Duration.toMillis(settings.floor) * Math.pow(2, Math.min(times, 62)), Duration.toMillis(cap))

/**
 * The pause `pause` calls for at `now`, given the record before it. `unit` is a number in [0, 1)
 * that spreads the delay when `settings.jitter` is on (the caller draws it, so this stays pure).
 */
export const decide = (
  pacer: Pacer,
  pause: Pause,
  now: number,
  settings: PacingSettings,
  unit: number
): Decision => {
  const before = current(pacer, now, settings)
  const spread = (low: number, high: number) => settings.jitter ? low + (high - low) * unit : 1
  const capMillis = Duration.toMillis(settings.cap)
  const retried = (millis: number, next: Omit<Pacer, "lastRetryAt">, inRow = 0): Decision => ({
    delay: Duration.millis(millis),
    pacer: { ...next, lastRetryAt: now + millis },
    inRow
  })
  /** The counted back-off for the `n`-th counted pause: ±20%, never past the cap. */
  const backoffMillis = (first: number): number =>
    before.counted === 0
      ? first
      : Math.min(Math.round(doubled(settings, before.counted, settings.cap) * spread(0.8, 1.2)), capMillis)
  const counted = { counted: before.counted + 1, unanswered: 0, relisted: before.relisted, resumed: before.resumed }
  switch (pause._tag) {
    case "None":
      return { delay: Duration.zero, pacer: before, inRow: 0 }
    case "Beat":
      return { delay: settings.floor, pacer: before, inRow: 0 }
    case "Backoff":
      return retried(backoffMillis(Math.round(Duration.toMillis(settings.floor) * spread(1, 1.2))), counted)
    case "Relist":
      return retried(
        before.relisted ? backoffMillis(Duration.toMillis(settings.floor)) : 0,
        { ...counted, relisted: true }
      )
    case "Resume":
      // The first goes at once and counts nothing: a healthy watch cut as its apiserver dies must
      // not lengthen the pauses of the 503 and 429 that apiserver answers as it comes back.
      return before.resumed
        ? retried(backoffMillis(Math.round(Duration.toMillis(settings.floor) * spread(1, 1.2))), counted)
        : retried(0, { ...before, unanswered: 0, resumed: true })
    case "RetryAfter":
      return retried(
        Math.max(Duration.toMillis(pause.delay), backoffMillis(Duration.toMillis(settings.floor))),
        counted
      )
    case "Reconnect":
      // Spread upward only: a server that does not answer is never asked more than once a
      // `reconnectCap`, and a heal is noticed within a quarter more than it.
      return retried(
        Math.round(doubled(settings, before.unanswered, settings.reconnectCap) * spread(1, 1.25)),
        { ...before, unanswered: before.unanswered + 1 },
        before.unanswered + 1
      )
  }
}

/**
 * A row of no answers is said when it starts and then at 2, 4, 8, ... in a row, the others at
 * debug: an outage asked once a second would otherwise write a warning a second.
 */
const logLevelOf = (pause: Pause, inRow: number): LogLevel.LogLevel =>
  pause._tag !== "Reconnect" || (inRow & (inRow - 1)) === 0 ? LogLevel.Warning : LogLevel.Debug

/** What a pause is for, as the loop says it: the round's words and what comes next. */
export interface PauseRequest {
  readonly pause: Pause
  /** What happened, then what comes next (without "when"): the log line's words. */
  readonly message: string
  /** The log line's annotations beyond the loop's. */
  readonly annotations: Readonly<Record<string, string>>
}

/** Decides `request`'s pause with the record in `holder`, writes the record back, and says so. */
export const takePause = (
  holder: { pacer: Pacer },
  request: PauseRequest,
  settings: PacingSettings,
  annotations: LogAnnotations,
  now: number
): Effect.Effect<Duration.Duration> =>
  Effect.flatMap(Random.next, (unit) => {
    const decision = decide(holder.pacer, request.pause, now, settings, unit)
    holder.pacer = decision.pacer
    const when = Duration.isZero(decision.delay) ? "now" : `in ${Duration.format(decision.delay)}`
    const inRow = decision.inRow > 1 ? ` (no answer ${decision.inRow} times in a row)` : ""
    return Effect.as(
      Effect.logWithLevel(logLevelOf(request.pause, decision.inRow), `${request.message}${inRow} ${when}`).pipe(
        Effect.annotateLogs({ ...annotations, ...request.annotations })
      ),
      decision.delay
    )
  })

/**
 * The retry `Schedule`: for each failure, the pause `takePause` decides, for ever. It keeps no
 * count of its own (the record is `holder`'s, which outlives a restart of the rounds), so
 * nothing about how the retried stream is run can reset the back-off.
 */
export const retryPolicy = <E>(
  holder: { pacer: Pacer },
  requestOf: (failure: E) => PauseRequest,
  settings: PacingSettings,
  annotations: LogAnnotations
): Schedule.Schedule<Duration.Duration, E> =>
  Schedule.makeWithState(undefined, (now, failure: E) =>
    Effect.map(
      takePause(holder, requestOf(failure), settings, annotations, now),
      (delay) =>
        [
          undefined,
          delay,
          ScheduleDecision.continueWith(ScheduleInterval.after(now + Duration.toMillis(delay)))
        ] as const
    ))
