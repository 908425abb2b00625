/**
 * Deadlines for every request of a client, kept by one fiber instead of one race per request.
 *
 * `Effect.timeoutFail` forks two fibers per request (the request and its sleep) and joins them:
 * with a watch resumed hundreds of times a second, the headers deadline alone was about a seventh
 * of a resume's CPU, and the fibers' FiberRefs copies a good part of what it allocated (the storm's
 * allocation profile, `npm run bench -- --profile sw@20:storm --allocations`). Here a deadline is a
 * node in a list, armed and cleared synchronously; one fiber sleeps on the `Clock` (so `TestClock`
 * drives it in tests, as it drove `timeoutFail`) until the earliest one is due and fires it.
 *
 * Deadlines of one duration are armed in time order, so each duration has its own list (a lane),
 * sorted by construction, and clearing one is an unlink. The fiber sleeps until the earliest head
 * or, for an empty lane, one duration from when it looked: a deadline armed meanwhile is due no
 * earlier than that, so arming never has to wake the fiber. Only a lane of a new, shorter
 * duration does, once. A silence limit (a watch's idle limit) is the same node, touched on every
 * read: touching only notes the time, and the node moves back in line when its turn comes.
 *
 * @internal
 */
import { Duration, Effect } from "effect"
import type { Clock } from "effect"

/** A deadline armed for an operation: clear it when the operation finishes in time. */
export interface Deadline {
  readonly clear: () => void
}

/** A limit on silence: each `touch` (something arrived) starts the silence again. */
export interface SilenceLimit extends Deadline {
  readonly touch: () => void
  /**
   * From now on silence may last `millis`, still counted from the last touch (a streaming list's
   * long limit goes back to a watch's once its list has landed). Nothing, once fired or cleared.
   */
  readonly setLimit: (millis: number) => void
}

class Entry {
  prev: Entry | undefined = undefined
  next: Entry | undefined = undefined
  linked = true
  /** For a silence limit: when something last arrived (epoch ms); undefined for a plain deadline. */
  lastActivity: number | undefined = undefined
  /** For a silence limit: whether something is there that nobody has taken yet (not silence). */
  pending: (() => boolean) | undefined = undefined
  constructor(readonly lane: Lane, public at: number, readonly expire: () => void) {}
}

/** The deadlines of one duration, earliest first. */
class Lane {
  head: Entry | undefined = undefined
  tail: Entry | undefined = undefined
  constructor(readonly millis: number) {}

  /** Appends, or walks back from the tail when a clock stepped back (never before the head's turn). */
  insert(entry: Entry): void {
    let after = this.tail
    while (after !== undefined && after.at > entry.at) after = after.prev
    entry.prev = after
    entry.next = after === undefined ? this.head : after.next
    if (entry.next === undefined) this.tail = entry
    else entry.next.prev = entry
    if (after === undefined) this.head = entry
    else after.next = entry
  }

  unlink(entry: Entry): void {
    if (!entry.linked) return
    entry.linked = false
    if (entry.prev === undefined) this.head = entry.next
    else entry.prev.next = entry.next
    if (entry.next === undefined) this.tail = entry.prev
    else entry.next.prev = entry.prev
    entry.prev = undefined
    entry.next = undefined
  }
}

export class DeadlineTimer {
  private readonly lanes = new Map<number, Lane>()
  /** When the fiber looks next (epoch ms; Infinity while it waits for a first deadline). */
  private looksAt = Number.POSITIVE_INFINITY
  private wakeEarly: (() => void) | undefined = undefined
  /**
   * A wake asked for before the fiber's wait began: it sets when it looks next, then starts its
   * sleep a few steps later, and a deadline armed in between has no `wakeEarly` to call.
   */
  private wakeAsked = false

  constructor(private readonly clock: Clock.Clock) {}

  /** Calls `expire` once, `millis` from now, unless the deadline is cleared first. */
  arm(millis: number, expire: () => void): Deadline {
    const entry = this.add(millis, expire)
    return { clear: () => entry.lane.unlink(entry) }
  }

  /**
   * Calls `expire` once silence has lasted `millis`: from now, or from the last `touch`. A touch
   * only notes the time (a watch touches on every read); the entry moves when its turn comes.
   * `pending`, asked when the silence is due, says whether something arrived that was not taken
   * yet: then it is the reader that is slow, not the sender silent, and the silence starts again.
   */
  armSilence(millis: number, expire: () => void, pending?: () => boolean): SilenceLimit {
    let entry = this.add(millis, expire)
    entry.lastActivity = entry.at - millis
    entry.pending = pending
    return {
      clear: () => entry.lane.unlink(entry),
      touch: () => {
        entry.lastActivity = this.clock.unsafeCurrentTimeMillis()
      },
      setLimit: (next) => {
        if (!entry.linked || next === entry.lane.millis) return
        // A lane holds one duration: the limit moves to the lane of its new one.
        entry.lane.unlink(entry)
        const lastActivity = entry.lastActivity!
        entry = this.add(next, expire, lastActivity + next)
        entry.lastActivity = lastActivity
        entry.pending = pending
      }
    }
  }

  /** A deadline `millis` long in its lane, due at `at` (by default `millis` from now). */
  private add(millis: number, expire: () => void, at = this.clock.unsafeCurrentTimeMillis() + millis): Entry {
    let lane = this.lanes.get(millis)
    if (lane === undefined) {
      lane = new Lane(millis)
      this.lanes.set(millis, lane)
    }
    const entry = new Entry(lane, at, expire)
    lane.insert(entry)
    if (entry.at < this.looksAt) {
      this.looksAt = entry.at
      const wake = this.wakeEarly
      this.wakeEarly = undefined
      if (wake === undefined) this.wakeAsked = true
      else wake()
    }
    return entry
  }

  /** Fires every deadline due at `now`; returns when to look again. */
  private fireDue(now: number): number {
    let next = Number.POSITIVE_INFINITY
    for (const lane of this.lanes.values()) {
      for (let entry = lane.head; entry !== undefined && entry.at <= now; entry = lane.head) {
        lane.unlink(entry)
        if (entry.pending?.() === true) entry.lastActivity = now
        if (entry.lastActivity !== undefined && entry.lastActivity + lane.millis > now) {
          // Touched since it was queued: not silent for long enough yet. Back in line, by its new time.
          entry.at = entry.lastActivity + lane.millis
          entry.linked = true
          lane.insert(entry)
          continue
        }
        entry.expire()
      }
      next = Math.min(next, lane.head === undefined ? now + lane.millis : lane.head.at)
    }
    return next
  }

  private readonly woken: Effect.Effect<void> = Effect.async<void>((resume) => {
    if (this.wakeAsked) {
      this.wakeAsked = false
      return resume(Effect.void)
    }
    this.wakeEarly = () => resume(Effect.void)
    return Effect.sync(() => {
      this.wakeEarly = undefined
    })
  })

  /** The timer's fiber: run it (forked) for as long as deadlines may be armed. */
  readonly run: Effect.Effect<never> = Effect.forever(Effect.suspend(() => {
    // Every deadline armed so far is seen by this look.
    this.wakeAsked = false
    const now = this.clock.unsafeCurrentTimeMillis()
    const next = this.fireDue(now)
    this.looksAt = next
    if (next === Number.POSITIVE_INFINITY) return this.woken
    return Effect.raceFirst(this.clock.sleep(Duration.millis(Math.max(0, next - now))), this.woken)
  }))
}
