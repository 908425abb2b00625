/**
 * The watch's cache and the two ways the cluster changes it: a list (the cache becomes the list)
 * and a batch of watch events. Both are plain functions of the old cache and what the cluster said,
 * returning the new cache; whom to tell is handed to `tell` as it is decided, so a test can collect
 * the tells into an array. Rules 10–14 of `watchMachine.ts` live here.
 *
 * The maps are persistent (`OverlayMap`, `HashMap`): a list replaces the cache in one step, and a
 * snapshot taken by a reader stays valid while the watch goes on.
 *
 * @internal
 */
import { Chunk, HashMap, Option } from "effect"
import type { Status } from "../KubeStatus.ts"
import type { Sandbox } from "../Sandbox.ts"
import type { UndecodableEvent, WatchEvent } from "../WatchEvent.ts"
import type { FullList } from "./kubeClientTypes.ts"
import { OverlayMap } from "./overlayMap.ts"
import { isOlder } from "./resourceVersion.ts"

export interface SandboxCache {
  /** A list has landed: before it the cache knows nothing. */
  readonly synced: boolean
  /**
   * The newest resourceVersion the cache stands at (its list's, or the last event's or bookmark's);
   * none before the first list. Kept here, with the objects, so one reading says both what is
   * cached and how far the watch had heard when it was (an `awaitReady` deciding "gone").
   */
  readonly resourceVersion: string | undefined
  readonly objects: OverlayMap<Sandbox>
  /**
   * Names the cluster has but whose only state we heard did not decode: neither present nor gone
   * (rule 13). Nobody is told anything about them until a state that decodes, or a deletion. Each
   * with the newest resourceVersion it was heard at ("" when none came), so a list older than that
   * cannot tell it gone (rule 14).
   */
  readonly unknown: HashMap.HashMap<string, string>
  /**
   * Names told gone, with the resourceVersion that said so, so a lagging list cannot bring an
   * older state back (rule 14). Bounded: see `MaxTombstones`.
   */
  readonly tombstones: HashMap.HashMap<string, string>
}

export const empty: SandboxCache = {
  synced: false,
  resourceVersion: undefined,
  objects: OverlayMap.empty(),
  unknown: HashMap.empty(),
  tombstones: HashMap.empty()
}

/**
 * Tells one name's new state: the Sandbox, or none for gone. `onlyNamed`: the news is for those who
 * subscribed to that name, not for whole-namespace subscribers, who never heard of it as present
 * (a waited-on name the first list does not hold, a name only ever unknown): to them it is no change.
 */
export type Tell = (name: string, value: Option.Option<Sandbox>, onlyNamed?: boolean) => void

/**
 * Tombstones kept. A lagging list older than a deletion is rare (lists are quorum reads); past this
 * many, a list keeps the newest deletions. A watch may go days without a list, so its events prune
 * too, back to this many once twice as many have gathered: one sort of 8,192 names every 4,096
 * deletions, not one per deletion.
 */
export const MaxTombstones = 4096

const TombstonesBeforePrune = 2 * MaxTombstones

const gone: Option.Option<Sandbox> = Option.none()

/** `candidate` is known to be no newer than `current` (where the order cannot be told: false). */
const notNewer = (candidate: string, current: string): boolean => candidate === current || isOlder(candidate, current)

/** The newer of an unknown name's resourceVersion `before` (none: not unknown) and one it is `heard` at now. */
const newestHeard = (before: string | undefined, heard: string): string =>
  before !== undefined && (heard === "" || isOlder(heard, before)) ? before : heard

// ---------------------------------------------------------------------------------------------
// A list
// ---------------------------------------------------------------------------------------------

export interface ListApplied {
  readonly cache: SandboxCache
  /** How many tells the list made. */
  readonly told: number
}

/**
 * The cache becomes the list, in one step. Told: every name whose resourceVersion changed or that
 * went (rule 11) and, on the first list, every name in `waitedOn`, present or gone (rule 10).
 * Kept as they were, untold: a cached object newer than the list's copy, or one the list carried
 * but could not decode (rules 13, 14). A name the list carried only undecodable is unknown, not
 * gone; so is one unknown before that a list older than it does not carry.
 */
export const applyList = (
  old: SandboxCache,
  list: FullList<Sandbox>,
  waitedOn: Iterable<string>,
  tell: Tell
): ListApplied => {
  // Each name the list carried undecodable, at the resourceVersion it carried it at.
  const undecodable = new Map<string, string>()
  for (const bad of list.undecodable) {
    if (bad.name !== undefined) undecodable.set(bad.name, bad.resourceVersion ?? list.resourceVersion)
  }
  const objects = new Map<string, Sandbox>()
  const tombstones = HashMap.beginMutation(old.tombstones)
  const anyTombstones = HashMap.size(old.tombstones) > 0
  const anyUnknown = HashMap.size(old.unknown) > 0
  // Unknown names the list carries at a state older than where they were heard undecodable (rule
  // 14, as for a cached object): the list's copy is the past, so they stay unknown, untold.
  const staleCopies = new Set<string>()
  let told = 0
  for (const item of list.items) {
    const name = item.metadata.name
    if (anyUnknown) {
      const heardAt = HashMap.get(old.unknown, name)
      if (Option.isSome(heardAt) && isOlder(item.metadata.resourceVersion, heardAt.value)) {
        staleCopies.add(name)
        continue
      }
    }
    const cached = old.objects.get(name)
    if (cached !== undefined) {
      // A list cannot be newer than what we were told, unless the server is behind: keep ours.
      const sandbox = isOlder(item.metadata.resourceVersion, cached.metadata.resourceVersion) ? cached : item
      objects.set(name, sandbox)
      if (sandbox !== cached && sandbox.metadata.resourceVersion !== cached.metadata.resourceVersion) {
        told++
        tell(name, Option.some(sandbox))
      }
      continue
    }
    // Looked up only when there are any: on a first list the persistent map's code would run cold,
    // most of the list's cost (`npx tsx scratchpad/overlayMapCost.ts`).
    if (anyTombstones) {
      const deletedAt = HashMap.get(old.tombstones, name)
      // A state no newer than the deletion we told is the past, not a re-creation.
      if (Option.isSome(deletedAt) && notNewer(item.metadata.resourceVersion, deletedAt.value)) continue
      HashMap.remove(tombstones, name)
    }
    objects.set(name, item)
    told++
    tell(name, Option.some(item))
  }
  for (const [name, sandbox] of old.objects) {
    if (objects.has(name)) continue
    // Not in the list: gone, unless it did not decode (unknown, not loss) or the list is older than
    // what we last heard of it (a stale list cannot prove a newer object gone).
    if (undecodable.has(name) || isOlder(list.resourceVersion, sandbox.metadata.resourceVersion)) {
      objects.set(name, sandbox)
    } else {
      HashMap.set(tombstones, name, list.resourceVersion)
      told++
      tell(name, gone)
    }
  }
  const unknown = HashMap.beginMutation(HashMap.empty<string, string>())
  for (const [name, heardAt] of undecodable) {
    if (objects.has(name)) continue
    HashMap.set(unknown, name, newestHeard(Option.getOrUndefined(HashMap.get(old.unknown, name)), heardAt))
  }
  // A name unknown before that this list does not carry at all is gone: tell those waiting on it.
  // Unless the list is older than where it was heard (rule 14): a lagging server that has not seen
  // its create yet cannot prove it gone, so it stays unknown and nobody is told.
  for (const [name, heardAt] of old.unknown) {
    if (undecodable.has(name) || objects.has(name)) continue
    if (staleCopies.has(name) || isOlder(list.resourceVersion, heardAt)) {
      HashMap.set(unknown, name, heardAt)
    } else {
      told++
      tell(name, gone, true)
    }
  }
  const cache: SandboxCache = {
    synced: true,
    resourceVersion: list.resourceVersion,
    objects: OverlayMap.fromMap(objects),
    unknown: HashMap.endMutation(unknown),
    tombstones: pruneTombstones(HashMap.endMutation(tombstones))
  }
  if (!old.synced) {
    // The reconcile: every name waited on that the first list does not hold is told gone, except
    // the ones it holds undecodable. (The ones it holds were told above: the cache was empty.)
    for (const name of Array.from(waitedOn)) {
      if (!cache.objects.has(name) && !HashMap.has(cache.unknown, name)) {
        told++
        tell(name, gone, true)
      }
    }
  }
  return { cache, told }
}

const pruneTombstones = (tombstones: HashMap.HashMap<string, string>): HashMap.HashMap<string, string> => {
  if (HashMap.size(tombstones) <= MaxTombstones) return tombstones
  const newestFirst = Array.from(tombstones).sort(([, a], [, b]) => (isOlder(a, b) ? 1 : isOlder(b, a) ? -1 : 0))
  return HashMap.fromIterable(newestFirst.slice(0, MaxTombstones))
}

// ---------------------------------------------------------------------------------------------
// Watch events
// ---------------------------------------------------------------------------------------------

export interface EventsApplied {
  readonly cache: SandboxCache
  /** The newest resourceVersion heard, to resume from (rule 2). */
  readonly resourceVersion: string
  /** Something other than an `ERROR` was heard: the stream is healthy. */
  readonly heard: boolean
  /** The `ERROR` the batch stopped at, if any; events after it are not applied. */
  readonly error: Status | undefined
  /** Objects that did not fit the schema, to report. */
  readonly undecodable: ReadonlyArray<UndecodableEvent>
  /** Events older than what the cache holds, not applied (rule 14). */
  readonly stale: number
}

/**
 * The steady state's batch: one `ADDED` or `MODIFIED` of a cached name, not older than it. Applied
 * with one persistent write and no draft (`scratchpad/tellCost.ts`, the cache step's row); exactly
 * what `applyEvents`' loop makes of it. None for any other batch, which the loop applies.
 */
const applyOneChange = (
  old: SandboxCache,
  events: Iterable<WatchEvent<Sandbox>>,
  from: string,
  tell: Tell
): EventsApplied | undefined => {
  if (!Chunk.isChunk(events) || Chunk.size(events) !== 1) return undefined
  const event = Chunk.unsafeHead(events)
  if (event.type !== "ADDED" && event.type !== "MODIFIED") return undefined
  const name = event.name
  const cached = old.objects.get(name)
  if (cached === undefined || isOlder(event.resourceVersion, cached.metadata.resourceVersion)) return undefined
  const objects = old.objects.set(name, event.object)
  const unknown = HashMap.size(old.unknown) > 0 ? HashMap.remove(old.unknown, name) : old.unknown
  const tombstones = HashMap.size(old.tombstones) > 0 ? HashMap.remove(old.tombstones, name) : old.tombstones
  tell(name, Option.some(event.object))
  const resourceVersion = event.resourceVersion === "" ? from : event.resourceVersion
  return {
    cache: {
      synced: old.synced,
      resourceVersion,
      objects,
      unknown,
      tombstones: HashMap.size(tombstones) > TombstonesBeforePrune ? pruneTombstones(tombstones) : tombstones
    },
    resourceVersion,
    heard: true,
    error: undefined,
    undecodable: noUndecodable,
    stale: 0
  }
}

/** A batch of watch events, applied in one step from resourceVersion `from`; stops at an `ERROR`. */
export const applyEvents = (
  old: SandboxCache,
  events: Iterable<WatchEvent<Sandbox>>,
  from: string,
  tell: Tell
): EventsApplied => {
  const oneChange = applyOneChange(old, events, from, tell)
  if (oneChange !== undefined) return oneChange
  let resourceVersion = from
  let heard = false
  let error: Status | undefined
  let stale = 0
  let undecodable: Array<UndecodableEvent> | undefined
  const objects = old.objects.beginEdit()
  // Touched only by deletions and names not cached: most batches leave them as they were.
  let tombstones = old.tombstones
  let unknown = old.unknown
  const isStale = (name: string, eventVersion: string): boolean => {
    const cached = objects.get(name)
    if (cached !== undefined) return isOlder(eventVersion, cached.metadata.resourceVersion)
    const deletedAt = HashMap.get(tombstones, name)
    return Option.isSome(deletedAt) && notNewer(eventVersion, deletedAt.value)
  }
  const remove = (name: string, deletedAt: string) => {
    const wasPresent = objects.remove(name)
    if (deletedAt !== "") tombstones = HashMap.set(tombstones, name, deletedAt)
    if (HashMap.size(unknown) > 0) unknown = HashMap.remove(unknown, name)
    tell(name, gone, !wasPresent)
  }
  for (const event of events) {
    if (event.type === "ERROR") {
      error = event.status
      break
    }
    heard = true
    // Rule 2: an empty resourceVersion would make the next watch start "from now".
    const eventVersion = event.type === "UNDECODABLE" ? event.resourceVersion ?? "" : event.resourceVersion
    if (eventVersion !== "") resourceVersion = eventVersion
    switch (event.type) {
      case "BOOKMARK":
        break
      case "UNDECODABLE": {
        ;(undecodable ??= []).push(event)
        const name = event.name
        if (name === undefined || (eventVersion !== "" && isStale(name, eventVersion))) break
        if (event.eventType === "DELETED") {
          // The object is unreadable, but the event says which name went: that is the cluster's word.
          remove(name, eventVersion)
        } else if (objects.get(name) === undefined) {
          // Rule 13: keep what we had; a name we had nothing for becomes unknown, at the newest
          // resourceVersion it was heard at.
          const before = Option.getOrUndefined(HashMap.get(unknown, name))
          unknown = HashMap.set(unknown, name, newestHeard(before, eventVersion))
        }
        break
      }
      default: {
        const name = event.name
        if (isStale(name, eventVersion)) {
          stale++
          break
        }
        if (event.type === "DELETED") {
          remove(name, eventVersion)
        } else {
          objects.set(name, event.object)
          if (HashMap.size(unknown) > 0) unknown = HashMap.remove(unknown, name)
          if (HashMap.size(tombstones) > 0) tombstones = HashMap.remove(tombstones, name)
          tell(name, Option.some(event.object))
        }
      }
    }
  }
  return {
    cache: {
      synced: old.synced,
      resourceVersion,
      objects: objects.done(),
      unknown,
      tombstones: HashMap.size(tombstones) > TombstonesBeforePrune ? pruneTombstones(tombstones) : tombstones
    },
    resourceVersion,
    heard,
    error,
    undecodable: undecodable ?? noUndecodable,
    stale
  }
}

const noUndecodable: ReadonlyArray<UndecodableEvent> = []
