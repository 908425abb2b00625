/**
 * The truth: what the cluster really did, as a history of changes at increasing resourceVersions.
 * The scripted server answers only from it (a list is the state at one resourceVersion, a watch
 * sends the changes after one), however badly it behaves otherwise; the invariants judge the
 * watch against it.
 *
 * A Sandbox is in the watch's selector while it carries the label `jr2.dev/run`. Through the
 * selector, a create or a label put back is `ADDED`, an update `MODIFIED`, a delete or a label
 * taken away `DELETED` (as kube-apiserver's watch cache sends it).
 */
export type Phase = "Pending" | "Ready" | "Lost"

/** The names the simulation uses: few, so that names repeat (created, deleted, created again). */
export const Names = ["sb-0", "sb-1", "sb-2", "sb-3", "sb-4", "sb-5"] as const

/** One Sandbox as the cluster holds it at a resourceVersion. */
export interface TruthObject {
  readonly name: string
  readonly uid: string
  readonly resourceVersion: number
  readonly phase: Phase
  /** Carries the selector's label. */
  readonly labelled: boolean
  /** This state does not fit the schema (a status the watch cannot read): every answer sends it so. */
  readonly garbled: boolean
  /** Bytes of padding in an annotation (large objects). */
  readonly padBytes: number
}

export type ChangeKind = "create" | "update" | "delete" | "unlabel" | "relabel"

/** One effective change of the cluster. */
export interface TruthChange {
  readonly at: number
  readonly resourceVersion: number
  readonly kind: ChangeKind
  readonly name: string
  readonly before: TruthObject | undefined
  readonly after: TruthObject | undefined
  /** An `awaitReady` starts on this create (with the create's resourceVersion as `createdAt`). */
  readonly awaited: boolean
}

/** What a generated step asks for; made effective against the state it meets (so any shrink is valid). */
export interface TruthStep {
  readonly at: number
  readonly name: number
  /** `touch`: create, or update, or put the label back; `delete`; `unlabel`: leave the selector. */
  readonly kind: "touch" | "delete" | "unlabel"
  readonly phase: Phase
  readonly garbled: boolean
  readonly padBytes: number
  readonly awaited: boolean
}

/** An event as a watch through the selector sees it. */
export interface SelectorEvent {
  readonly type: "ADDED" | "MODIFIED" | "DELETED"
  readonly resourceVersion: number
  readonly object: TruthObject
}

/** The resourceVersion before the first change. */
export const FirstResourceVersion = 100

const visible = (object: TruthObject | undefined): object is TruthObject => object !== undefined && object.labelled

export class Truth {
  readonly changes: ReadonlyArray<TruthChange>
  /** `states[i]`: every object (labelled or not) after the first `i` changes. */
  private readonly states: ReadonlyArray<ReadonlyMap<string, TruthObject>>

  constructor(steps: ReadonlyArray<TruthStep>) {
    const changes: Array<TruthChange> = []
    const states: Array<ReadonlyMap<string, TruthObject>> = [new Map()]
    let current = new Map<string, TruthObject>()
    let resourceVersion = FirstResourceVersion
    let uids = 0
    const ordered = [...steps].sort((a, b) => a.at - b.at)
    for (const step of ordered) {
      const name = Names[step.name % Names.length]!
      const before = current.get(name)
      let kind: ChangeKind
      let after: TruthObject | undefined
      const next = (base: { uid: string; labelled: boolean }): TruthObject => ({
        name,
        uid: base.uid,
        resourceVersion: resourceVersion + 1,
        phase: step.phase,
        labelled: base.labelled,
        garbled: step.garbled,
        padBytes: step.padBytes
      })
      if (step.kind === "touch") {
        if (before === undefined) {
          kind = "create"
          after = next({ uid: `uid-${++uids}`, labelled: true })
        } else {
          kind = before.labelled ? "update" : "relabel"
          after = next({ uid: before.uid, labelled: true })
        }
      } else if (step.kind === "delete") {
        if (before === undefined) continue
        kind = "delete"
        after = undefined
      } else {
        if (before === undefined || !before.labelled) continue
        kind = "unlabel"
        after = next({ uid: before.uid, labelled: false })
      }
      resourceVersion++
      current = new Map(current)
      if (after === undefined) current.delete(name)
      else current.set(name, after)
      changes.push({
        at: step.at,
        resourceVersion,
        kind,
        name,
        before,
        after,
        awaited: kind === "create" && step.awaited
      })
      states.push(current)
    }
    this.changes = changes
    this.states = states
  }

  /** The newest resourceVersion. */
  get lastResourceVersion(): number {
    return FirstResourceVersion + this.changes.length
  }

  /** The resourceVersion the cluster stands at, at `time`. */
  resourceVersionAt(time: number): number {
    let count = 0
    while (count < this.changes.length && this.changes[count]!.at <= time) count++
    return FirstResourceVersion + count
  }

  private stateAt(resourceVersion: number): ReadonlyMap<string, TruthObject> {
    const index = Math.max(0, Math.min(this.changes.length, resourceVersion - FirstResourceVersion))
    return this.states[index]!
  }

  /** The Sandboxes in the selector at `resourceVersion`, by name, in name order. */
  visibleAt(resourceVersion: number): Array<TruthObject> {
    return [...this.stateAt(resourceVersion).values()].filter(visible).sort((a, b) => a.name.localeCompare(b.name))
  }

  /** Whether `name` is in the selector at `resourceVersion`. */
  holds(name: string, resourceVersion: number): TruthObject | undefined {
    const object = this.stateAt(resourceVersion).get(name)
    return visible(object) ? object : undefined
  }

  /** The events a watch through the selector sees after `from` up to and including `to`. */
  eventsBetween(from: number, to: number): Array<SelectorEvent> {
    const events: Array<SelectorEvent> = []
    for (const change of this.changes) {
      if (change.resourceVersion <= from || change.resourceVersion > to) continue
      const event = selectorEvent(change)
      if (event !== undefined) events.push(event)
    }
    return events
  }

  /** The change at exactly `resourceVersion`, as the selector sees it. */
  eventAt(resourceVersion: number): SelectorEvent | undefined {
    const change = this.changes[resourceVersion - FirstResourceVersion - 1]
    return change === undefined ? undefined : selectorEvent(change)
  }

  /** `name` is out of the selector at some resourceVersion in (`after`, `upTo`]. */
  absentSomewhere(name: string, after: number, upTo: number): boolean {
    for (let rv = Math.max(after + 1, FirstResourceVersion); rv <= upTo; rv++) {
      if (this.holds(name, rv) === undefined) return true
    }
    return false
  }

  /** Changes the selector shows in [from, to) of time. */
  visibleChangesIn(from: number, to: number): number {
    let count = 0
    for (const change of this.changes) {
      if (change.at >= from && change.at < to && selectorEvent(change) !== undefined) count++
    }
    return count
  }
}

const selectorEvent = (change: TruthChange): SelectorEvent | undefined => {
  const was = visible(change.before)
  const is = visible(change.after)
  if (!was && is) return { type: "ADDED", resourceVersion: change.resourceVersion, object: change.after! }
  if (was && is) return { type: "MODIFIED", resourceVersion: change.resourceVersion, object: change.after! }
  if (was && !is) {
    // A deletion carries the last state at the deletion's resourceVersion; a label taken away, the new state.
    const object = change.after ?? change.before!
    return {
      type: "DELETED",
      resourceVersion: change.resourceVersion,
      object: { ...object, resourceVersion: change.resourceVersion }
    }
  }
  return undefined
}

/** The object as the server sends it (garbled states with a status the schema refuses). */
export const objectJson = (object: TruthObject, resourceVersion = String(object.resourceVersion)): unknown => ({
  apiVersion: "jr2.dev/v1alpha1",
  kind: "Sandbox",
  metadata: {
    name: object.name,
    namespace: "ns",
    uid: object.uid,
    resourceVersion,
    labels: object.labelled ? { "jr2.dev/run": "sim" } : {},
    ...(object.padBytes > 0 ? { annotations: { "sim/pad": "x".repeat(object.padBytes) } } : {})
  },
  status: { phase: object.garbled ? 7 : object.phase }
})

/** A short form for traces: `sb-1@104 Ready`, `sb-1@104 (garbled)`. */
export const describeObject = (object: TruthObject): string =>
  `${object.name}@${object.resourceVersion} ${object.garbled ? "(garbled)" : object.phase}${
    object.labelled ? "" : " unlabelled"
  }${object.padBytes > 0 ? ` +${Math.round(object.padBytes / 1024)}KiB` : ""}`
