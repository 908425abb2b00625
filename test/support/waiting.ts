/**
 * Waiting for a condition in a test without letting test time pass. Over real sockets a condition
 * needs the event loop to run, so polling yields to it with a short *live* pause — a wait for I/O,
 * never a sleep that makes anything happen: TestClock still owns every timer of the code under test.
 */
import { Chunk, Effect, TestClock, TestServices } from "effect"

/** Polls `get` until `check` holds, for up to `limitMillis` of real time; dies with the last value. */
export const eventually = <A, E, R>(get: Effect.Effect<A, E, R>, check: (a: A) => boolean, limitMillis = 10_000) =>
  Effect.gen(function*() {
    const started = Date.now()
    let value = yield* get
    while (!check(value)) {
      if (Date.now() - started > limitMillis) {
        return yield* Effect.dieMessage(
          `condition never held within ${limitMillis}ms; last value: ${JSON.stringify(value)}`
        )
      }
      yield* Effect.yieldNow()
      yield* TestServices.provideLive(Effect.sleep("2 millis"))
      value = yield* get
    }
    return value
  })

/**
 * The nearest pending TestClock sleep (at most `within` ms away), once one is registered. TestClock
 * keeps interrupted sleeps listed and each open watch holds a long idle-timeout sleep, so only the
 * nearest future one is the pause being looked for.
 */
export const nextPause = (within = 60_000) =>
  Effect.map(
    eventually(
      Effect.gen(function*() {
        const now = yield* TestClock.currentTimeMillis
        const future = Chunk.toArray(yield* TestClock.sleeps()).filter((t) => t > now && t - now <= within)
        return future.length === 0 ? -1 : Math.min(...future) - now
      }),
      (delta) => delta >= 0
    ),
    (delta) => delta
  )

/** Waits for the next pause and lets exactly that much test time pass. */
export const passNextPause = (within?: number) =>
  Effect.gen(function*() {
    const delay = yield* nextPause(within)
    yield* TestClock.adjust(`${delay} millis`)
    return delay
  })
