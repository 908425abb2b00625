/**
 * The pauses between rounds: a round that did not end as it should fails with the machine's
 * transition (`RoundFailure`), and the retry `Schedule` here only waits the transition's pause
 * and says so. The machine names the kind of pause (rules 5–8 of `watchMachine.ts`); how long it
 * is depends on what came before, which the Schedule counts (`PauseSteps`).
 *
 * @internal
 */
import { Data, Duration, Effect, LogLevel, Random, Schedule, ScheduleDecision, ScheduleInterval } from "effect"
import * as WatchMachine from "./watchMachine.ts"
import type { LogAnnotations } from "./watchMetrics.ts"

/**
 * A round that did not end as it should: the machine's transition, which the retry `Schedule`
 * turns into a delay (`RoundFailure` is what `Stream.retry` sees; the state was already set).
 */
export class RoundFailure extends Data.TaggedError("RoundFailure")<{
  readonly transition: WatchMachine.Transition
}> {}

export interface PauseSettings {
  readonly floor: Duration.Duration
  readonly cap: Duration.Duration
  /** The longest pause before a server that gave no answer at all is asked again (rule 7). */
  readonly reconnectCap: Duration.Duration
  readonly jitter: boolean
}

/**
 * What the pauses taken since the last healthy stream were, by kind: each kind grows on its own
 * (rule 7's two paces, rule 5's re-lists). `Stream.retry` starts them afresh whenever a watch
 * heard something.
 */
export interface PauseSteps {
  /** `Backoff` pauses: the server answered with a failure. */
  readonly backoffs: number
  /** `Relist` pauses: re-lists asked for by the server (rule 5). */
  readonly relists: number
  /** `Reconnect` pauses in a row: no answer at all. Any answer ends the row. */
  readonly unanswered: number
}

export const noSteps: PauseSteps = { backoffs: 0, relists: 0, unanswered: 0 }

/** The steps after `pause` was taken. */
const stepAfter = (steps: PauseSteps, pause: WatchMachine.Pause): PauseSteps => {
  switch (pause._tag) {
    case "Reconnect":
      return { ...steps, unanswered: steps.unanswered + 1 }
    case "Backoff":
      return { ...steps, backoffs: steps.backoffs + 1, unanswered: 0 }
    case "Relist":
      return { ...steps, relists: steps.relists + 1, unanswered: 0 }
    default:
      // The server answered (a close, a Retry-After): that ends a row of no answers.
      return steps.unanswered === 0 ? steps : { ...steps, unanswered: 0 }
  }
}

/** The resourceVersion a log line names for the next state: the one it resumes from, if any. */
export const resumeAnnotation = (at: WatchMachine.WatchState): string =>
  at._tag === "Watching" ? at.resourceVersion : ""

/** The floor doubled `times` times, no more than `cap`. */
const doubled = (settings: PauseSettings, times: number, cap: Duration.Duration) =>
  Duration.min(Duration.times(settings.floor, Math.pow(2, Math.min(times, 62))), cap)

const spread = (settings: PauseSettings, delay: Duration.Duration, low: number, high: number) =>
  settings.jitter
    ? Effect.map(
      Random.nextRange(low, high),
      (factor) => Duration.millis(Math.round(Duration.toMillis(delay) * factor))
    )
    : Effect.succeed(delay)

/** How long `pause` waits, given the pauses taken before it (`steps`). */
export const delayOf = (
  settings: PauseSettings,
  pause: WatchMachine.Pause,
  steps: PauseSteps
): Effect.Effect<Duration.Duration> => {
  switch (pause._tag) {
    case "None":
      return Effect.succeed(Duration.zero)
    case "Floor":
      return Effect.succeed(settings.floor)
    case "RetryAfter":
      return Effect.succeed(pause.delay)
    case "Backoff":
      return Effect.map(
        spread(settings, doubled(settings, steps.backoffs, settings.cap), 0.8, 1.2),
        (delay) => Duration.min(delay, settings.cap)
      )
    case "Relist":
      // Rule 5: the first re-list since a healthy watch at once; then the back-off, growing.
      return steps.relists === 0
        ? Effect.succeed(Duration.zero)
        : Effect.map(
          spread(settings, doubled(settings, steps.relists - 1, settings.cap), 0.8, 1.2),
          (delay) => Duration.min(delay, settings.cap)
        )
    case "Reconnect":
      // Spread upward only: a server that does not answer is never asked more than once a
      // `reconnectCap`, and a heal is noticed within a quarter more than it.
      return spread(settings, doubled(settings, steps.unanswered, settings.reconnectCap), 1, 1.25)
  }
}

/**
 * A row of no answers is said when it starts and then at 2, 4, 8, ... in a row, the others at
 * debug: an outage asked once a second would otherwise write a warning a second.
 */
const logLevelOf = (pause: WatchMachine.Pause, steps: PauseSteps): LogLevel.LogLevel => {
  if (pause._tag !== "Reconnect") return LogLevel.Warning
  const inRow = steps.unanswered + 1
  return (inRow & (inRow - 1)) === 0 ? LogLevel.Warning : LogLevel.Debug
}

/**
 * The Schedule only waits (and says so): the state was set when the round settled. Its own
 * state counts the pauses taken since the last healthy stream (`Stream.retry` starts it afresh
 * whenever the round yields).
 */
export const retryPolicy = (settings: PauseSettings, annotations: LogAnnotations) =>
  Schedule.makeWithState(noSteps, (now, failure: RoundFailure, steps: PauseSteps) =>
    Effect.succeed(
      [
        stepAfter(steps, failure.transition.pause),
        [failure.transition, steps] as const,
        ScheduleDecision.continueWith(ScheduleInterval.after(now))
      ] as const
    )).pipe(
      Schedule.modifyDelayEffect(([transition, steps]) =>
        Effect.gen(function*() {
          const delay = yield* delayOf(settings, transition.pause, steps)
          const when = Duration.isZero(delay) ? "now" : `in ${Duration.format(delay)}`
          const inRow = transition.pause._tag === "Reconnect" && steps.unanswered > 0
            ? ` (no answer ${steps.unanswered + 1} times in a row)`
            : ""
          yield* Effect.logWithLevel(
            logLevelOf(transition.pause, steps),
            `${transition.message}${inRow}; ${WatchMachine.describeNext(transition.next)} ${when}`
          ).pipe(
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
