/**
 * The simulation's time and scheduling, both driven by hand so that a run is a function of its
 * scenario alone.
 *
 * - `SimClock`: Effect's `Clock` on a virtual instant that moves only when the driver says so.
 *   Why not `TestClock`: each `TestClock.adjust` waits for the fibers to settle with two or three
 *   real `setTimeout(0)`s per sleep it fires (`awaitSuspended`), a millisecond or more each, so a
 *   run of a few hundred pauses took most of a second of wall time; and a real timer racing the
 *   `setImmediate` the list paging waits on (`listPaging.ts`) makes the interleaving depend on the
 *   machine. This clock has no real timer at all: the driver jumps to the next sleep.
 * - `SimScheduler`: Effect's `Scheduler` as one FIFO queue drained on microtasks (never a
 *   `setTimeout`, which the default scheduler falls back to after 2,048 hops). It counts the tasks
 *   it ran, which is how `settle` knows the fibers have all stopped.
 * - `settle`: turns the event loop (`setImmediate`) until a whole turn ran no fiber task: every
 *   fiber is then waiting on the clock, the scripted server, or a mailbox.
 */
import type { Scheduler } from "effect"
import { Clock, Duration, Effect, FiberRef } from "effect"

interface Sleeper {
  readonly at: number
  readonly order: number
  readonly wake: () => void
  cancelled: boolean
}

export class SimClock implements Clock.Clock {
  readonly [Clock.ClockTypeId]: Clock.ClockTypeId = Clock.ClockTypeId
  private now = 0
  private order = 0
  private sleepers: Array<Sleeper> = []

  unsafeCurrentTimeMillis(): number {
    return this.now
  }
  unsafeCurrentTimeNanos(): bigint {
    return BigInt(this.now) * 1_000_000n
  }
  readonly currentTimeMillis: Effect.Effect<number> = Effect.sync(() => this.now)
  readonly currentTimeNanos: Effect.Effect<bigint> = Effect.sync(() => this.unsafeCurrentTimeNanos())

  sleep(duration: Duration.Duration): Effect.Effect<void> {
    const millis = Duration.toMillis(duration)
    if (millis <= 0) return Effect.void
    // An infinite sleep never wakes: it is not listed, so it never becomes "the next instant".
    if (!Number.isFinite(millis)) return Effect.never
    return Effect.async<void>((resume) => {
      const sleeper: Sleeper = {
        at: this.now + millis,
        order: this.order++,
        wake: () => resume(Effect.void),
        cancelled: false
      }
      this.sleepers.push(sleeper)
      return Effect.sync(() => {
        sleeper.cancelled = true
      })
    })
  }

  /** The earliest instant a sleep ends; Infinity when nobody sleeps. */
  nextWake(): number {
    let next = Number.POSITIVE_INFINITY
    for (const sleeper of this.sleepers) if (!sleeper.cancelled && sleeper.at < next) next = sleeper.at
    return next
  }

  /** Moves the clock to `instant` (never back). */
  setTime(instant: number): void {
    if (instant > this.now) this.now = instant
  }

  /** Wakes every sleep due by now, earliest first (ties in the order they began). */
  wakeDue(): number {
    const due = this.sleepers.filter((s) => !s.cancelled && s.at <= this.now)
    this.sleepers = this.sleepers.filter((s) => !s.cancelled && s.at > this.now)
    due.sort((a, b) => a.at - b.at || a.order - b.order)
    for (const sleeper of due) sleeper.wake()
    return due.length
  }
}

/** A deterministic scheduler: one FIFO queue, drained on microtasks, with a count of tasks run. */
export class SimScheduler implements Scheduler.Scheduler {
  private queue: Array<Scheduler.Task> = []
  private draining = false
  /** Tasks run so far. */
  ran = 0

  shouldYield(fiber: Parameters<Scheduler.Scheduler["shouldYield"]>[0]): number | false {
    return fiber.currentOpCount > fiber.getFiberRef(FiberRef.currentMaxOpsBeforeYield)
      ? fiber.getFiberRef(FiberRef.currentSchedulingPriority)
      : false
  }

  scheduleTask(task: Scheduler.Task): void {
    this.queue.push(task)
    if (!this.draining) {
      this.draining = true
      void Promise.resolve().then(this.drain)
    }
  }

  /** As the default scheduler: the tasks queued so far, then a new microtask for those they queued. */
  private readonly drain = (): void => {
    const tasks = this.queue
    this.queue = []
    for (const task of tasks) {
      this.ran++
      task()
    }
    if (this.queue.length > 0) void Promise.resolve().then(this.drain)
    else this.draining = false
  }

  get idle(): boolean {
    return this.queue.length === 0 && !this.draining
  }
}

/** Resolves after `count` microtask hops: a moment later within the same instant, among the fibers' tasks. */
export const hops = (count: number): Promise<void> => {
  let promise = Promise.resolve()
  for (let i = 1; i < count; i++) promise = promise.then(() => undefined)
  return promise
}

const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve))

/**
 * Turns the event loop until a whole turn ran no task, at most `maxTurns` times (then it says so:
 * something keeps the fibers busy at a standing clock).
 */
export const settle = async (scheduler: SimScheduler, maxTurns = 10_000): Promise<boolean> => {
  for (let turn = 0; turn < maxTurns; turn++) {
    const before = scheduler.ran
    await nextTurn()
    if (scheduler.ran === before && scheduler.idle) return true
  }
  return false
}
