/**
 * A persistent map from names to values for a cache that a list replaces whole and watch events
 * change a few names at a time. A list's entries go into a plain `Map` that is never written again
 * (the base); the changes since are a persistent `HashMap` over it (the overlay). Every version stays
 * valid: a write makes a new overlay and never touches the base.
 *
 * Why not one `HashMap`, for speed: building one from a whole list is the persistent map's code
 * running cold, between the last page and `synced`, where a `Map` is many times cheaper
 * (`npx tsx scratchpad/overlayMapCost.ts`; the bench's sync row).
 *
 * Once the overlay holds a quarter as many names as the base, the write that made it so moves the
 * base's other entries into the overlay, which from then on is the whole map (until the next list):
 * superseded values are held no longer than that, and the map's code is warm by then. Folding into
 * a new base `Map` each time instead cost throughput (a copy of the whole map every few thousand
 * events; the bench's tp row).
 *
 * @internal
 */
import { HashMap, Option } from "effect"

/** What the overlay holds for a name the base has and the map no longer does. */
const Removed: unique symbol = Symbol("OverlayMap/Removed")
type Slot<V> = V | typeof Removed

/** Fewest changes that move the base: below this, a small list's base may as well stay. */
const MinMove = 64

const NoBase: ReadonlyMap<string, never> = new Map<string, never>()

/** What `key` holds: the overlay's word when it has one (none for a removal), else the base's. */
const lookup = <V>(
  base: ReadonlyMap<string, V>,
  overlay: HashMap.HashMap<string, Slot<V>>,
  key: string
): V | undefined => {
  // An empty overlay (a list's first version) is not searched.
  if (HashMap.size(overlay) > 0) {
    const slot = HashMap.get(overlay, key)
    if (Option.isSome(slot)) return slot.value === Removed ? undefined : slot.value
  }
  return base.get(key)
}

/**
 * The base's entries the overlay does not shadow, moved into it; what it marks removed, taken out.
 * `overlay` is a draft's, still open for writes.
 */
const moveBase = <V>(base: ReadonlyMap<string, V>, overlay: HashMap.HashMap<string, Slot<V>>): void => {
  const removed: Array<string> = []
  for (const [key, slot] of overlay) if (slot === Removed) removed.push(key)
  for (const entry of base) if (!HashMap.has(overlay, entry[0])) HashMap.set(overlay, entry[0], entry[1])
  for (const key of removed) HashMap.remove(overlay, key)
}

export class OverlayMap<V> implements Iterable<[string, V]> {
  /** Use `empty`, `fromMap` and the writes; `base` is never written to. */
  constructor(
    private readonly base: ReadonlyMap<string, V>,
    private readonly overlay: HashMap.HashMap<string, Slot<V>>,
    readonly size: number
  ) {}

  static empty<V>(): OverlayMap<V> {
    return new OverlayMap<V>(NoBase, HashMap.empty(), 0)
  }

  /** The map of `entries`, which it takes over: the caller must not write to it again. */
  static fromMap<V>(entries: Map<string, V>): OverlayMap<V> {
    return new OverlayMap(entries, HashMap.empty(), entries.size)
  }

  get(key: string): V | undefined {
    return lookup(this.base, this.overlay, key)
  }

  getOption(key: string): Option.Option<V> {
    return Option.fromNullable(this.get(key))
  }

  has(key: string): boolean {
    return this.get(key) !== undefined
  }

  /**
   * The next version with `key` set to `value`: one persistent write, no draft, for a step that
   * changes one name (`scratchpad/tellCost.ts`, the cache step's row). The same version a draft's
   * `set` then `done` would make, the base moved when this write makes the overlay big enough.
   */
  set(key: string, value: V): OverlayMap<V> {
    const overlay = HashMap.set(this.overlay, key, value)
    if (this.base.size === 0) return new OverlayMap<V>(NoBase, overlay, HashMap.size(overlay))
    const changed = HashMap.size(overlay)
    if (changed > MinMove && changed > this.base.size >> 2) {
      const draft = this.beginEdit()
      draft.set(key, value)
      return draft.done()
    }
    return new OverlayMap(this.base, overlay, this.get(key) === undefined ? this.size + 1 : this.size)
  }

  /** A draft of the next version, this one as it is: its writes, then its `done` make that version. */
  beginEdit(): OverlayDraft<V> {
    return new OverlayDraft(this.base, HashMap.beginMutation(this.overlay), this.size)
  }

  *[Symbol.iterator](): Iterator<[string, V]> {
    const overlay = this.overlay
    for (const [key, slot] of overlay) if (slot !== Removed) yield [key, slot]
    const shadowed = HashMap.size(overlay) > 0
    for (const entry of this.base) if (!shadowed || !HashMap.has(overlay, entry[0])) yield entry
  }

  /** Names the list's `Map` answers for (none once the overlay took them over), for tests. */
  get baseNames(): number {
    return this.base.size
  }

  /** Names the overlay answers for, removed ones included, for tests. */
  get overlayNames(): number {
    return HashMap.size(this.overlay)
  }
}

/**
 * The writes of one step: reads see them at once; `done` makes the new version. With no base the
 * overlay is the whole map and counts itself, so a write needs no lookup first.
 */
export class OverlayDraft<V> {
  constructor(
    private readonly base: ReadonlyMap<string, V>,
    private readonly overlay: HashMap.HashMap<string, Slot<V>>,
    private size: number
  ) {}

  get(key: string): V | undefined {
    return lookup(this.base, this.overlay, key)
  }

  set(key: string, value: V): void {
    if (this.base.size > 0 && this.get(key) === undefined) this.size++
    HashMap.set(this.overlay, key, value)
  }

  /** Says whether the map held `key`. */
  remove(key: string): boolean {
    if (this.base.size === 0) {
      if (!HashMap.has(this.overlay, key)) return false
      HashMap.remove(this.overlay, key)
      return true
    }
    if (this.get(key) === undefined) return false
    this.size--
    // A name only the overlay had leaves it; one the base has is shadowed.
    if (this.base.has(key)) HashMap.set(this.overlay, key, Removed)
    else HashMap.remove(this.overlay, key)
    return true
  }

  /** The new version; the draft is not to be used after. */
  done(): OverlayMap<V> {
    const changed = HashMap.size(this.overlay)
    if (this.base.size === 0) return new OverlayMap<V>(NoBase, HashMap.endMutation(this.overlay), changed)
    if (changed > MinMove && changed > this.base.size >> 2) {
      moveBase(this.base, this.overlay)
      return new OverlayMap<V>(NoBase, HashMap.endMutation(this.overlay), this.size)
    }
    return new OverlayMap(this.base, HashMap.endMutation(this.overlay), this.size)
  }
}
