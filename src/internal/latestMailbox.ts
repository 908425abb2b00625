/**
 * A subscriber's mailbox that keeps only the latest value per key: a slow reader skips to the
 * newest state of each key rather than queueing a backlog, so its memory is bounded by the number
 * of keys, never by how far behind it is. `put` is synchronous so the watch loop can tell every
 * subscriber of a name without yielding.
 *
 * @internal
 */
import { Chunk, Effect } from "effect"

export class LatestMailbox<K, V> {
  /** The latest value per key, for a mailbox of many keys; none for a mailbox of one. */
  private readonly pending: Map<K, V> | undefined
  /**
   * A mailbox of one key (a name's subscriber) holds what is pending in two fields, not a map: a
   * `Map` emptied and filled once per change rebuilds its table every few changes
   * (`scratchpad/wakeCost.ts` against `KEYS=many`).
   */
  private heldKey: K | undefined = undefined
  private heldValue: V | undefined = undefined
  private holding = false
  private wake: (() => void) | undefined = undefined
  /**
   * With `isAbsent`, a mailbox of many keys: the keys its reader last took present. An absence of a
   * key the reader never took present is no news to it, and drops a pending appearance of that key:
   * a key that came and went before the reader looked is heard both ways or not at all, never gone
   * alone. One entry per key present, the size of the cache, for the few whole-namespace readers.
   */
  private readonly takenPresent: Set<K> | undefined

  /**
   * `"one"`: only ever told one key (the hub's mailbox for a name). `isAbsent`: which values say a
   * key is not there (for a mailbox of many keys, see `takenPresent`).
   */
  constructor(keys: "many" | "one" = "many", private readonly isAbsent?: (value: V) => boolean) {
    this.pending = keys === "many" ? new Map<K, V>() : undefined
    this.takenPresent = keys === "many" && isAbsent !== undefined ? new Set<K>() : undefined
  }

  /** Replace what is pending for `key` (it moves to the back: the reader sees changes in order). */
  put(key: K, value: V): void {
    this.store(key, value)
    this.wakeReader()
  }

  /**
   * `put` without waking the reader: says whether one waits, to be woken with `wakeReader` once the
   * caller's step is over. What is stored is there for the reader's next take either way.
   */
  store(key: K, value: V): boolean {
    const pending = this.pending
    if (pending === undefined) {
      this.heldKey = key
      this.heldValue = value
      this.holding = true
    } else {
      pending.delete(key)
      const takenPresent = this.takenPresent
      // Neither its coming nor its going: the reader never had it.
      if (takenPresent !== undefined && this.isAbsent!(value) && !takenPresent.has(key)) return false
      pending.set(key, value)
    }
    return this.wake !== undefined
  }

  private get hasPending(): boolean {
    return this.pending === undefined ? this.holding : this.pending.size > 0
  }

  /**
   * Wakes a reader waiting for a put, if one is and something is pending: a wake that an abandoned
   * wait left set can come after the reader took what it was for, and must not end the reader's
   * next wait with nothing.
   */
  wakeReader(): void {
    const wake = this.wake
    if (wake !== undefined && this.hasPending) {
      this.wake = undefined
      wake()
    }
  }

  /** Everything pending, oldest change first; waits while nothing is. */
  get takeAll(): Effect.Effect<Chunk.Chunk<readonly [K, V]>> {
    return this.entries ??= this.taker((key, value) => [key, value] as const)
  }
  private entries: Effect.Effect<Chunk.Chunk<readonly [K, V]>> | undefined = undefined

  /**
   * `takeAll` as `present` makes each entry: everything pending, oldest change first, as one chunk;
   * waits while nothing is. Made once per reader, not per take, and reads no tuples: a subscriber
   * takes once per change it is told (`scratchpad/eventGarbage.ts`, the subscriber stream's row).
   */
  taker<A>(present: (key: K, value: V) => A): Effect.Effect<Chunk.Chunk<A>> {
    const drainNow = Effect.sync(() => this.drain(present))
    let resume: ((effect: Effect.Effect<Chunk.Chunk<A>>) => void) | undefined
    // One wake per reader, the wait's `resume` kept beside it: no closure made per wait.
    const wake = () => {
      const waiting = resume
      resume = undefined
      waiting?.(drainNow)
    }
    const waitForPut = Effect.async<Chunk.Chunk<A>>((resumeWait) => {
      // Looked at again in the step that sets the wake: the fiber can yield between the first look
      // (below) and this step (its op budget ran out), and a put in between found no wake to call,
      // leaving the reader asleep until the next put (for a quiet name, none). Resumed with
      // `drainNow`, not a chunk drained here: a reader interrupted before it runs leaves it pending.
      if (this.hasPending) return resumeWait(drainNow)
      // No canceller (`Effect.async` would wrap it in an interrupt handler on every wait): a reader
      // interrupted while waiting leaves a wake that the next wait replaces, or that a `put` calls
      // into a fiber no longer listening; either way nothing pending is lost, it stays for the next
      // take.
      resume = resumeWait
      this.wake = wake
    })
    // This first look spares a take with something pending the wait's machinery.
    return Effect.suspend(() => this.hasPending ? drainNow : waitForPut)
  }

  // A loop, not `Array.from` and a new Map: a subscriber drains once per change it is told, and the
  // loop allocates less. Each entry deleted, not the map `clear`ed: `clear` leaves the entries in the
  // old table, which for a long-lived mailbox is in the old generation, so young collections would
  // keep every value ever told through it (`scratchpad/mapClearSurvivors.ts`,
  // `scratchpad/subscriberSurvivors.ts`).
  private drain<A>(present: (key: K, value: V) => A): Chunk.Chunk<A> {
    const pending = this.pending
    if (pending === undefined) {
      // A name's subscriber: a chunk of one, no array; the fields let go of the value.
      const taken = present(this.heldKey!, this.heldValue!)
      this.heldKey = undefined
      this.heldValue = undefined
      this.holding = false
      return Chunk.of(taken)
    }
    const drained: Array<A> = []
    const takenPresent = this.takenPresent
    for (const [key, value] of pending) {
      drained.push(present(key, value))
      pending.delete(key)
      if (takenPresent !== undefined) {
        if (this.isAbsent!(value)) takenPresent.delete(key)
        else takenPresent.add(key)
      }
    }
    return Chunk.unsafeFromArray(drained)
  }
}
