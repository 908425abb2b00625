/**
 * A list as it is gathered, page by page (`listAll`) or event by event (a streaming list's initial
 * events): the latest state of each name, bounded by how many objects it holds.
 *
 * - A name sent again replaces its entry: a server that repeats itself, or a continue token that
 *   never ends on the same page, grows nothing.
 * - A `DELETED` removes its name whatever its object: the event names the name even when the object
 *   does not fit the schema, and before a streaming list's end bookmark a real server may send one
 *   (kube-apiserver 1.27–1.29 could queue changes ahead of it; proxies reorder).
 * - A name whose newest state does not decode keeps its last decoded state (rule 13) and is also
 *   carried as undecodable; a name heard only undecodable is carried only so (unknown, not gone).
 * - Past `maxItems` held, or past `maxBytes` of JSON held (the length of what each kept object was
 *   read from; for an undecodable one, at least the length of what is kept of it, its name and
 *   resourceVersion being as long as a line may be: a name replaced or removed gives its length
 *   back), the list is abandoned with the same typed error whether paged or streamed.
 *
 * @internal
 */
import { KubeBodyTooLargeError, KubeMalformedLineError } from "../KubeError.ts"
import type { HasMetadata } from "../ObjectMeta.ts"
import type { UndecodableEvent } from "../WatchEvent.ts"
import type { FullList } from "./kubeClientTypes.ts"
import { excerpt } from "./ndjsonLines.ts"

/**
 * 100,000 objects held by one list: at the ~3.5 KB a cached Sandbox takes, ~350 MB, which keeps a
 * hostile server (a list or a streaming list that never ends, with new names) inside the README's
 * memory bound; a real namespace is far smaller. One that truly holds more raises it
 * (`--max-list-items`).
 */
export const DefaultMaxListItems = 100_000

/**
 * 32 MiB of JSON held by one list: a hostile server's endless list of large objects (256 KiB each;
 * etcd takes up to 1.5 MiB) then peaks under the README's memory bound (417 and 488 MiB measured;
 * 48 MiB reached 540 MiB, 128 MiB passed 1 GiB): V8 frees such strings late, so a list's peak
 * costs three to five times what it keeps (`test/bench/results/2026-12-07-hostile-list-bytes.md`). It binds before
 * `DefaultMaxListItems` for a namespace of more than ~14,000 Sandboxes of the bench's 2.3 KB
 * (managedFields cut); one that truly holds more raises it (`--max-list-bytes`).
 */
export const DefaultMaxListBytes = 32 * 1024 * 1024

export class ListDraft<A extends HasMetadata> {
  private readonly items = new Map<string, A>()
  private readonly undecodableByName = new Map<string, UndecodableEvent>()
  /** What each held undecodable object counts against the byte budget, by name. */
  private readonly undecodableLengths = new Map<string, number>()
  /** Undecodable objects without a usable name: reported, and counted against both budgets. */
  private readonly nameless: Array<UndecodableEvent> = []
  /** The JSON length each held object was read from, by name (only those with a length). */
  private readonly lengths = new Map<string, number>()
  /** Their sum: what the byte budget counts. */
  private bytes = 0

  constructor(readonly maxItems: number, readonly maxBytes: number) {}

  /** Objects held: what the item budget counts. */
  get held(): number {
    return this.items.size + this.undecodableByName.size + this.nameless.length
  }

  /** The JSON length of the objects held: what the byte budget counts. */
  get heldBytes(): number {
    return this.bytes
  }

  /** The name's state is `item`, read from `bytes` of JSON (none known: 0). */
  put(item: A, bytes: number | undefined): void {
    const name = item.metadata.name
    this.items.set(name, item)
    if (this.undecodableByName.size > 0) this.forgetUndecodable(name)
    const before = this.lengths.size === 0 ? undefined : this.lengths.get(name)
    if (before !== undefined) this.bytes -= before
    if (bytes !== undefined && bytes > 0) {
      this.lengths.set(name, bytes)
      this.bytes += bytes
    } else if (before !== undefined) {
      this.lengths.delete(name)
    }
  }

  /**
   * An object that does not fit the schema, read from `bytes` of JSON (a page's share; none known:
   * 0); a `DELETED` one removes its name. It counts at least what is kept of it: a hostile server's
   * names may be as long as a line.
   */
  putUndecodable(event: UndecodableEvent, bytes: number | undefined): void {
    const name = event.name
    if (name === undefined) {
      this.nameless.push(event)
      this.bytes += lengthOf(event, bytes)
    } else if (event.eventType === "DELETED") {
      this.remove(name)
    } else {
      this.forgetUndecodable(name)
      this.undecodableByName.set(name, event)
      const length = lengthOf(event, bytes)
      this.undecodableLengths.set(name, length)
      this.bytes += length
    }
  }

  /** The name is no longer carried as undecodable: its length is given back. */
  private forgetUndecodable(name: string): void {
    if (!this.undecodableByName.delete(name)) return
    const before = this.undecodableLengths.get(name)
    if (before !== undefined) {
      this.bytes -= before
      this.undecodableLengths.delete(name)
    }
  }

  /** The cluster says the name went. */
  remove(name: string): void {
    this.items.delete(name)
    this.forgetUndecodable(name)
    const before = this.lengths.get(name)
    if (before !== undefined) {
      this.bytes -= before
      this.lengths.delete(name)
    }
  }

  /**
   * The error to fail with once the draft holds more than `maxItems` or `maxBytes`; none while
   * within them. `what` names the list in the message (its path).
   */
  overBudget(method: string, path: string, what: "list" | "streaming list"): KubeBodyTooLargeError | undefined {
    if (this.bytes > this.maxBytes) {
      const held = `${this.bytes} bytes in ${this.held} objects`
      return new KubeBodyTooLargeError({
        method,
        path,
        limit: this.maxBytes,
        unit: "bytes",
        message: `the ${what} of ${path} went past ${sizeOf(this.maxBytes)} of JSON held (${held}) without an end ` +
          `(objects larger than expected, or a server that never finishes it); it was abandoned and is retried ` +
          `after the back-off (a namespace that really holds that much needs KubeClientOptions.maxListBytes ` +
          `raised: --max-list-bytes)`
      })
    }
    if (this.held <= this.maxItems) return undefined
    return new KubeBodyTooLargeError({
      method,
      path,
      limit: this.maxItems,
      unit: "items",
      message: `the ${what} of ${path} went past ${this.maxItems} objects without an end (a server that never ` +
        `finishes it, or more objects than expected); it was abandoned and is retried after the back-off (a ` +
        `namespace that really holds that many needs KubeClientOptions.maxListItems raised: --max-list-items)`
    })
  }

  toList(resourceVersion: string, pages: number, restarts: number): FullList<A> {
    const undecodable = this.nameless.length === 0
      ? Array.from(this.undecodableByName.values())
      : [...this.undecodableByName.values(), ...this.nameless]
    return { items: Array.from(this.items.values()), undecodable, resourceVersion, pages, restarts }
  }
}

/** What an undecodable object counts: its share of what it was read from, and no less than what is kept. */
const lengthOf = (event: UndecodableEvent, bytes: number | undefined): number =>
  Math.max(
    bytes ?? 0,
    (event.name?.length ?? 0) + (event.resourceVersion?.length ?? 0) + event.problem.length
  )

/** A byte count as a person reads it: `48 MiB (50331648 bytes)`, or `900 bytes`. */
const sizeOf = (bytes: number): string => {
  const units = [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]] as const
  for (const [unit, size] of units) {
    if (bytes >= size) return `${Number((bytes / size).toFixed(1))} ${unit} (${bytes} bytes)`
  }
  return `${bytes} bytes`
}

/**
 * A streaming list's end bookmark with an empty resourceVersion (rule 2): no list, since a watch
 * from `resourceVersion=` starts "from now" and would never tell the deletions in between. Only a
 * server that breaks the API contract sends it. The excerpt is the bookmark as it was read.
 */
export const emptyEndBookmark = (
  path: string,
  annotations: Readonly<Record<string, string>>
): KubeMalformedLineError =>
  new KubeMalformedLineError({
    path,
    message: `the streaming list of ${path} ended with a bookmark whose resourceVersion is empty: there is no ` +
      `point to watch from (resourceVersion= means "from now", and deletions in between would never be told), so ` +
      `the list is dropped and asked again after the back-off; the server breaks the API contract (a proxy or an ` +
      `aggregated API in front of the apiserver?)`,
    excerpt: excerpt(`BOOKMARK resourceVersion "" annotations ${JSON.stringify(annotations)}`)
  })
