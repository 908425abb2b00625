/**
 * Watches every `ListDraft` (a list as it is gathered, paged or streamed) without changing what it
 * does: its methods are wrapped once, and a run's recorder hears how much each draft holds at each
 * budget check. The bounds invariant reads this: a draft past its budget at a check must fail there
 * (never gather more, never become the cache).
 *
 * Bytes: today's draft has no byte budget (the `lists` branch adds one). The recorder estimates what
 * a draft holds in bytes (each decoded object's JSON) and, when the run sets a byte budget, holds the
 * draft to it at every check, as it holds it to `maxItems`.
 */
import { ListDraft } from "../../src/internal/listDraft.ts"

export interface DraftRecorder {
  /** A budget check: what the draft held, its budgets, and whether the check failed the draft. */
  readonly onCheck: (check: {
    readonly draft: object
    readonly held: number
    readonly maxItems: number
    readonly bytes: number
    readonly failed: boolean
    readonly what: string
  }) => void
  /** The draft became a list (the cache will be it). */
  readonly onLanded: (draft: object, held: number, maxItems: number, bytes: number) => void
  /** Something was put into a draft a check had already failed. */
  readonly onPutAfterFailure: (draft: object) => void
  /** Whether to estimate bytes (costs a `JSON.stringify` per object put). */
  readonly countBytes: boolean
}

let recorder: DraftRecorder | undefined

/** The recorder of the run in progress (runs are one after another, never at once). */
export const recordDraftsWith = (next: DraftRecorder | undefined): void => {
  recorder = next
}

interface Spied {
  __simBytes?: Map<string, number>
  __simFailed?: boolean
}

const bytesOf = (draft: Spied): number => {
  let total = 0
  for (const size of draft.__simBytes?.values() ?? []) total += size
  return total
}

const installed = Symbol.for("sandbox-watch/simulation/draftSpy")
const prototype = ListDraft.prototype as unknown as Record<string | symbol, unknown>

if (prototype[installed] !== true) {
  prototype[installed] = true
  const put = ListDraft.prototype.put
  const remove = ListDraft.prototype.remove
  const putUndecodable = ListDraft.prototype.putUndecodable
  const overBudget = ListDraft.prototype.overBudget
  const toList = ListDraft.prototype.toList
  ListDraft.prototype.put = function(this: ListDraft<any> & Spied, item, bytes) {
    if (this.__simFailed === true) recorder?.onPutAfterFailure(this)
    if (recorder?.countBytes === true) {
      ;(this.__simBytes ??= new Map()).set(item.metadata.name, bytes ?? JSON.stringify(item).length)
    }
    return put.call(this, item, bytes)
  }
  ListDraft.prototype.putUndecodable = function(this: ListDraft<any> & Spied, event, bytes) {
    if (this.__simFailed === true) recorder?.onPutAfterFailure(this)
    if (event.name !== undefined) this.__simBytes?.delete(event.name)
    return putUndecodable.call(this, event, bytes)
  }
  ListDraft.prototype.remove = function(this: ListDraft<any> & Spied, name) {
    this.__simBytes?.delete(name)
    return remove.call(this, name)
  }
  ListDraft.prototype.overBudget = function(this: ListDraft<any> & Spied, method, path, what) {
    const failure = overBudget.call(this, method, path, what)
    if (failure !== undefined) this.__simFailed = true
    recorder?.onCheck({
      draft: this,
      held: this.held,
      maxItems: this.maxItems,
      bytes: bytesOf(this),
      failed: failure !== undefined,
      what
    })
    return failure
  }
  ListDraft.prototype.toList = function(this: ListDraft<any> & Spied, resourceVersion, pages, restarts) {
    recorder?.onLanded(this, this.held, this.maxItems, bytesOf(this))
    return toList.call(this, resourceVersion, pages, restarts)
  }
}
