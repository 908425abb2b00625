import { describe, expect, it } from "@effect/vitest"
import { Effect, TestClock } from "effect"
import { DeadlineTimer } from "../src/internal/deadlineTimer.ts"

/** A timer whose fiber runs for the test's scope, and a log of what fired when (test time). */
const started = Effect.gen(function*() {
  const clock = yield* Effect.clock
  const timer = new DeadlineTimer(clock)
  yield* Effect.forkScoped(timer.run)
  yield* Effect.yieldNow()
  const fired: Array<readonly [string, number]> = []
  const arm = (name: string, millis: number) =>
    timer.arm(millis, () => fired.push([name, clock.unsafeCurrentTimeMillis()]))
  const armSilence = (name: string, millis: number) =>
    timer.armSilence(millis, () => fired.push([name, clock.unsafeCurrentTimeMillis()]))
  return { arm, armSilence, fired }
})

describe("DeadlineTimer", () => {
  it.scoped("fires a deadline when it is due, not before, and only once", () =>
    Effect.gen(function*() {
      const { arm, fired } = yield* started
      arm("a", 30_000)
      yield* TestClock.adjust("29999 millis")
      expect(fired).toEqual([])
      yield* TestClock.adjust("1 millis")
      expect(fired).toEqual([["a", 30_000]])
      yield* TestClock.adjust("5 minutes")
      expect(fired).toEqual([["a", 30_000]])
    }))

  it.scoped("a cleared deadline never fires; the others of its lane still do, in order", () =>
    Effect.gen(function*() {
      const { arm, fired } = yield* started
      const a = arm("a", 30_000)
      yield* TestClock.adjust("1 second")
      arm("b", 30_000)
      yield* TestClock.adjust("1 second")
      const c = arm("c", 30_000)
      arm("d", 30_000)
      a.clear()
      c.clear()
      c.clear() // twice is harmless
      yield* TestClock.adjust("40 seconds")
      expect(fired).toEqual([["b", 31_000], ["d", 32_000]])
    }))

  it.scoped("deadlines of different durations each fire on time; a shorter lane armed later wakes the timer", () =>
    Effect.gen(function*() {
      const { arm, fired } = yield* started
      arm("long", 60_000)
      yield* TestClock.adjust("1 second")
      // The timer sleeps until the long one; this one is due much earlier.
      arm("short", 5_000)
      yield* TestClock.adjust("10 seconds")
      expect(fired).toEqual([["short", 6_000]])
      yield* TestClock.adjust("1 minute")
      expect(fired).toEqual([["short", 6_000], ["long", 60_000]])
    }))

  it.scoped("a shorter deadline armed while the timer is between looking and sleeping still fires on time", () =>
    Effect.gen(function*() {
      // The timer's fiber, woken by the long deadline, sets when it looks next and then starts its
      // sleep; whichever fiber runs in between must not go unnoticed. Tried at every point.
      for (let yields = 0; yields <= 6; yields++) {
        const { arm, fired } = yield* started
        const startedAt = yield* TestClock.currentTimeMillis
        arm("long", 60_000)
        for (let i = 0; i < yields; i++) yield* Effect.yieldNow()
        arm("short", 5_000)
        yield* TestClock.adjust("5 seconds")
        expect([yields, fired]).toEqual([yields, [["short", startedAt + 5_000]]])
        yield* TestClock.adjust("1 minute")
      }
    }))

  it.scoped("a deadline armed while its lane is empty still fires on time", () =>
    Effect.gen(function*() {
      const { arm, fired } = yield* started
      arm("a", 10_000).clear()
      yield* TestClock.adjust("7 seconds")
      arm("b", 10_000)
      yield* TestClock.adjust("9999 millis")
      expect(fired).toEqual([])
      yield* TestClock.adjust("1 millis")
      expect(fired).toEqual([["b", 17_000]])
    }))

  it.scoped("a silence limit fires once nothing touched it for its duration, counted from the last touch", () =>
    Effect.gen(function*() {
      const { armSilence, fired } = yield* started
      const quiet = armSilence("quiet", 60_000)
      armSilence("untouched", 60_000)
      yield* TestClock.adjust("50 seconds")
      quiet.touch()
      yield* TestClock.adjust("10 seconds")
      expect(fired).toEqual([["untouched", 60_000]])
      yield* TestClock.adjust("45 seconds")
      quiet.touch()
      yield* TestClock.adjust("59 seconds")
      expect(fired).toEqual([["untouched", 60_000]])
      yield* TestClock.adjust("1 second")
      expect(fired).toEqual([["untouched", 60_000], ["quiet", 165_000]])
    }))

  it.scoped("a silence limit with something pending that was not taken yet starts its silence again", () =>
    Effect.gen(function*() {
      const clock = yield* Effect.clock
      const timer = new DeadlineTimer(clock)
      yield* Effect.forkScoped(timer.run)
      yield* Effect.yieldNow()
      const fired: Array<number> = []
      let pending = true
      timer.armSilence(10_000, () => fired.push(clock.unsafeCurrentTimeMillis()), () => pending)
      // The reader is busy: what arrived waits unread, so the sender is not silent.
      yield* TestClock.adjust("25 seconds")
      expect(fired).toEqual([])
      pending = false
      // Silence counts from the last look that found something pending (20 s).
      yield* TestClock.adjust("4999 millis")
      expect(fired).toEqual([])
      yield* TestClock.adjust("1 millis")
      expect(fired).toEqual([30_000])
    }))

  it.scoped("a cleared silence limit never fires, touched or not", () =>
    Effect.gen(function*() {
      const { armSilence, fired } = yield* started
      const a = armSilence("a", 10_000)
      a.touch()
      a.clear()
      yield* TestClock.adjust("1 minute")
      expect(fired).toEqual([])
    }))

  it.scoped("a silence limit made shorter counts from the last touch, and goes on being touched and cleared", () =>
    Effect.gen(function*() {
      const { armSilence, fired } = yield* started
      // A streaming list's hour, shortened to a watch's 270 s once its list has landed.
      const watch = armSilence("watch", 3_600_000)
      const cleared = armSilence("cleared", 3_600_000)
      yield* TestClock.adjust("100 seconds")
      watch.touch()
      watch.setLimit(270_000)
      cleared.setLimit(270_000)
      cleared.clear()
      yield* TestClock.adjust("200 seconds")
      watch.touch()
      // 269.999 s since the last touch: not yet.
      yield* TestClock.adjust("269999 millis")
      expect(fired).toEqual([])
      yield* TestClock.adjust("1 millis")
      expect(fired).toEqual([["watch", 570_000]])
      // Fired or cleared, a new limit changes nothing.
      watch.setLimit(1_000)
      cleared.setLimit(1_000)
      yield* TestClock.adjust("2 hours")
      expect(fired).toEqual([["watch", 570_000]])
    }))

  it.scoped("a silence limit made shorter than the silence so far fires at the timer's next look", () =>
    Effect.gen(function*() {
      const { armSilence, fired } = yield* started
      const long = armSilence("long", 3_600_000)
      yield* TestClock.adjust("10 minutes")
      long.setLimit(60_000)
      yield* TestClock.adjust("1 millis")
      expect(fired.map(([name]) => name)).toEqual(["long"])
      expect(fired[0]![1]).toBeLessThanOrEqual(600_001)
    }))
})
