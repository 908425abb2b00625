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
  private readonly pending = new Map<K, V>()
  private wake: (() => void) | undefined = undefined

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
    this.pending.delete(key)
    this.pending.set(key, value)
    return this.wake !== undefined
  }

  /** Wakes a reader waiting for a put, if one is. */
  wakeReader(): void {
    const wake = this.wake
    if (wake !== undefined) {
      this.wake = undefined
      wake()
    }
  }

  /** Everything pending, oldest change first; waits while nothing is. */
  readonly takeAll: Effect.Effect<Chunk.Chunk<readonly [K, V]>> = Effect.suspend(() =>
    this.pending.size > 0 ? this.drainNow : this.waitForPut
  )

  // Made once per mailbox, not per wait: a subscriber waits once per change it is told.
  private readonly drainNow = Effect.sync(() => this.drain())
  private readonly waitForPut = Effect.async<Chunk.Chunk<readonly [K, V]>>((resume) => {
    // No canceller (`Effect.async` would wrap it in an interrupt handler on every wait): a reader
    // interrupted while waiting leaves a wake that the next wait replaces, or that a `put` calls
    // into a fiber no longer listening; either way nothing pending is lost, it stays for the next
    // `takeAll`.
    this.wake = () => resume(this.drainNow)
  })

  // A loop, not `Array.from` and a new Map: a subscriber drains once per change it is told, and the
  // loop allocates less. Each entry deleted, not the map `clear`ed: `clear` leaves the entries in the
  // old table, which for a long-lived mailbox is in the old generation, so young collections would
  // keep every value ever told through it (`scratchpad/mapClearSurvivors.ts`,
  // `scratchpad/subscriberSurvivors.ts`).
  private drain(): Chunk.Chunk<readonly [K, V]> {
    const drained: Array<readonly [K, V]> = []
    for (const entry of this.pending) {
      drained.push(entry)
      this.pending.delete(entry[0])
    }
    return Chunk.unsafeFromArray(drained)
  }
}
