/**
 * The pauses between rounds: a round that did not end as it should fails with the machine's
 * transition (`RoundFailure`), and the retry `Schedule` here only waits the transition's pause
 * (none, the floor, the server's `Retry-After`, or the exponential back-off) and says so.
 *
 * @internal
 */
import { Data, Duration, Effect, Random, Schedule, ScheduleDecision, ScheduleInterval } from "effect"
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
  readonly jitter: boolean
}

/** The resourceVersion a log line names for the next state: the one it resumes from, if any. */
export const resumeAnnotation = (at: WatchMachine.WatchState): string =>
  at._tag === "Watching" ? at.resourceVersion : ""

const jittered = (settings: PauseSettings, delay: Duration.Duration) =>
  settings.jitter
    ? Effect.map(
      Random.nextRange(0.8, 1.2),
      (factor) => Duration.millis(Math.round(Duration.toMillis(delay) * factor))
    )
    : Effect.succeed(delay)

/** How long `pause` waits, `backoff` being the back-off's current step. */
export const delayOf = (
  settings: PauseSettings,
  pause: WatchMachine.Pause,
  backoff: Duration.Duration
): Effect.Effect<Duration.Duration> => {
  switch (pause._tag) {
    case "None":
      return Effect.succeed(Duration.zero)
    case "Floor":
      return Effect.succeed(settings.floor)
    case "RetryAfter":
      return Effect.succeed(pause.delay)
    case "Backoff":
      return Effect.map(jittered(settings, backoff), (delay) => Duration.min(delay, settings.cap))
  }
}

/**
 * The Schedule only waits (and says so): the state was set when the round settled. Its own
 * state counts the back-offs taken since the last healthy stream (`Stream.retry` starts it
 * afresh whenever the round yields), so a `RetryAfter` or a pause of none leaves the next
 * back-off where it was.
 */
export const retryPolicy = (settings: PauseSettings, annotations: LogAnnotations) =>
  Schedule.makeWithState(0, (now, failure: RoundFailure, backoffs: number) =>
    Effect.succeed(
      [
        failure.transition.pause._tag === "Backoff" ? backoffs + 1 : backoffs,
        [failure.transition, Duration.times(settings.floor, Math.pow(2, backoffs))] as const,
        ScheduleDecision.continueWith(ScheduleInterval.after(now))
      ] as const
    )).pipe(
      Schedule.modifyDelayEffect(([transition, backoff]) =>
        Effect.gen(function*() {
          const delay = yield* delayOf(settings, transition.pause, backoff)
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
