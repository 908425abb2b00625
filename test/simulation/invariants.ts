/**
 * The invariants a run is held to, checked as it goes (each request, each thing a reader hears,
 * each wait that ends, each budget check of a draft) and at every quiescent moment (every fiber
 * waiting on the clock or the server). Each belongs to one property, so properties can be run
 * alone (`SIM_PROPERTIES`, `--property`):
 *
 * - `pacing`: in any 10 minutes, at most `Ceilings.listsPerWindow` lists served whole (a paged
 *   list counted at its first page, a streaming list at its end bookmark) and
 *   `Ceilings.answeredFailuresPerWindow` requests the server answered with a failure (a non-2xx
 *   status, an `ERROR` event, a malformed body; not a 429, whose pace is the server's `Retry-After`,
 *   rule 6; not a reset before any answer, or silence, which rule 7 paces at about one a second;
 *   a reset after the 200 is one), each plus
 *   `allowancePerChange` for every change of the truth in that window (a watch that hears a change
 *   starts every back-off afresh, rules 5 and 7, so each change heard may buy a few quick retries; a
 *   bookmark is not a change); and in any second at most `requestsPerSecond` requests, a list's
 *   pages counted once (no loop at a standing clock).
 * - `gone`: a reader (`changes(name)`, `allChanges`) is told a name gone after it heard it present
 *   at resourceVersion p, or the cache drops a name it held at p, only if the truth had the name out
 *   of the selector (deleted, or its label taken away) at some resourceVersion after p.
 * - `convergence`: at every quiescent moment every reader's last word on each name is what the
 *   cache holds (level-triggered readers are never left behind); once the server has behaved for
 *   `Ceilings.convergeAfterMs`, the cache is the truth (a state that does not decode may leave the
 *   name unknown or at an older state: rule 13; a truth over a budget cannot be listed at all).
 * - `bounds`: a draft past its budget at a budget check fails there: it is never added to after,
 *   and a list is never landed holding more than its budget; a paged list asks for at most
 *   `maxListPages` pages (and the one asked ahead). With a byte budget set (`SIM_LIST_BYTES`, the
 *   hook for the `lists` branch), a draft past it at a check must fail there too.
 * - `waits`: `awaitReady(name, { createdAt })` fails `SandboxGone` only if the truth had the name
 *   out of the selector at some resourceVersion since `createdAt`; and at a quiescent moment no wait
 *   is still waiting on a name the cache holds `Ready`.
 */
import { Option } from "effect"
import type { Sandbox } from "../../src/Sandbox.ts"
import type { DraftRecorder } from "./draftSpy.ts"
import type { RequestRecord } from "./scriptedServer.ts"
import type { Trace } from "./trace.ts"
import type { Truth } from "./truth.ts"

/** The pacing ceilings and the calm needed for convergence, in one place. */
export const Ceilings = {
  windowMs: 10 * 60_000,
  /**
   * "About 30": the back-off (rules 5 and 7) at its fastest, every pause at the low end of its
   * ±20% jitter, allows 31 in ten minutes (8 in its first 50 s, then one every 24 s at the cap).
   */
  listsPerWindow: 32,
  answeredFailuresPerWindow: 32,
  /** Extra lists and failures a window allows per change of the truth in it. */
  allowancePerChange: 8,
  secondMs: 1_000,
  requestsPerSecond: 8,
  /** Extra requests a second allows per change of the truth in it. */
  requestsPerChangeInSecond: 3,
  /**
   * Whether a 429 counts toward the failures ceiling. It does not: rule 6 waits what the server's
   * `Retry-After` asks (at least the floor), so a server that keeps throttling sets the pace itself;
   * such answers are held to the per-second ceiling only.
   */
  throttlingCountsAsFailure: false,
  /** How long the server behaves before the cache must be the truth. */
  convergeAfterMs: 60_000
} as const

export const PropertyNames = ["pacing", "gone", "convergence", "bounds", "waits"] as const
export type PropertyName = typeof PropertyNames[number]

export interface Violation {
  readonly property: PropertyName
  readonly at: number
  readonly message: string
}

export interface Budgets {
  readonly maxListItems: number
  readonly maxListPages: number
  /** The byte budget of a list's draft, when one is being checked (`SIM_LIST_BYTES`). */
  readonly maxListBytes: number | undefined
}

/** What the checks read at a quiescent moment. */
export interface QuiescentView {
  readonly synced: boolean
  readonly cache: ReadonlyMap<string, Sandbox>
  /** Names the watch holds as unknown (rule 13). */
  readonly unknown: (name: string) => boolean
  /** Waits still waiting: their names. */
  /** Each `awaitReady` still waiting: its name and the resourceVersion it was created at. */
  readonly pendingWaits: ReadonlyArray<{ readonly name: string; readonly createdAt: number }>
  /** When the server began to behave, if it has. */
  readonly calmFrom: number | undefined
}

/** A reader's last word on one name: present at a resourceVersion, or gone. */
type Word = { readonly present: false } | {
  readonly present: true
  readonly resourceVersion: string
  readonly phase: string
}

const wordOf = (value: Option.Option<Sandbox>): Word =>
  Option.isSome(value)
    ? {
      present: true,
      resourceVersion: value.value.metadata.resourceVersion,
      phase: value.value.status?.phase ?? "-"
    }
    : { present: false }

const sayWord = (word: Word | undefined): string =>
  word === undefined ? "nothing" : word.present ? `@${word.resourceVersion} ${word.phase}` : "gone"

class Reader {
  /** The last word heard per name. */
  readonly last = new Map<string, Word>()
  /** The resourceVersion each name was last heard present at. */
  readonly presentAt = new Map<string, string>()
  constructor(readonly label: string, readonly only: string | undefined) {}
}

export class Invariants implements DraftRecorder {
  readonly violations: Array<Violation> = []
  private readonly requests: Array<RequestRecord> = []
  private checkedUpTo = 0
  private readonly readers = new Map<string, Reader>()
  private cachePresent = new Map<string, string>()
  private readonly pagesByChain = new Map<number, number>()
  private lastCacheSaid = ""
  /** A loop at a standing clock is said once: every request after it would say it again. */
  private loopSaid = false

  constructor(
    private readonly truth: Truth,
    private readonly budgets: Budgets,
    private readonly trace: Trace,
    private readonly now: () => number,
    private readonly enabled: ReadonlySet<PropertyName>
  ) {}

  get countBytes(): boolean {
    return this.budgets.maxListBytes !== undefined && this.enabled.has("bounds")
  }

  /** Records a violation of `property` (when it is being checked) and says so in the trace. */
  violate(property: PropertyName, message: string): void {
    if (!this.enabled.has(property)) return
    this.violations.push({ property, at: this.now(), message })
    this.trace.add("check", `VIOLATION (${property}): ${message}`)
  }

  private truthNow(): number {
    return this.truth.resourceVersionAt(this.now())
  }

  // -- pacing --------------------------------------------------------------------------------

  onRequest(record: RequestRecord): void {
    this.requests.push(record)
    const chain = record.chain
    if (chain !== undefined) {
      const pages = (this.pagesByChain.get(chain) ?? 0) + 1
      this.pagesByChain.set(chain, pages)
      // The pages read, and the one asked for ahead of the page that went past the budget.
      if (pages > this.budgets.maxListPages + 2) {
        this.violate("bounds", `one list asked for ${pages} pages; its budget is ${this.budgets.maxListPages}`)
      }
    }
    const at = record.at
    const inSecond = this.requests.filter((r) => r.at > at - Ceilings.secondMs && r.kind !== "page").length
    const changes = this.truth.visibleChangesIn(at - Ceilings.secondMs + 1, at + 1)
    const perSecond = Ceilings.requestsPerSecond + Ceilings.requestsPerChangeInSecond * changes
    if (inSecond > perSecond && !this.loopSaid) {
      this.loopSaid = true
      this.violate(
        "pacing",
        `${inSecond} requests within one second (at most ${perSecond}): a loop at a standing clock`
      )
    }
  }

  private allowanceFor(at: number): number {
    return Ceilings.allowancePerChange * this.truth.visibleChangesIn(at - Ceilings.windowMs + 1, at + 1)
  }

  /**
   * Lists served and failures answered are known once the server has answered (a failure, maybe
   * only when the body ends): checked for each request at the next quiescent moment.
   */
  private checkWindows(): void {
    for (; this.checkedUpTo < this.requests.length; this.checkedUpTo++) {
      const record = this.requests[this.checkedUpTo]!
      const inWindow = (r: RequestRecord) => r.at > record.at - Ceilings.windowMs && r.at <= record.at
      const isList = (r: RequestRecord) => r.listServed && (r.kind === "list" || r.kind === "stream")
      const allowance = this.allowanceFor(record.at)
      if (isList(record)) {
        const lists = this.requests.filter((r) => isList(r) && inWindow(r)).length
        const allowed = Ceilings.listsPerWindow + allowance
        if (lists > allowed) {
          this.violate("pacing", `${lists} lists served whole within ten minutes (at most ${allowed})`)
          return
        }
      }
      const isFailure = (r: RequestRecord) => r.answeredFailure && (Ceilings.throttlingCountsAsFailure || !r.throttled)
      if (isFailure(record)) {
        // A list's failed requests count once per paced attempt: the watch asks for a list's next
        // page while it reads the one before (rule 1), so a list cut at every page fails two
        // requests each time it is tried, not one; and a list whose continue token expired starts
        // over in one piece at once (a second chain, the same attempt).
        const failed = this.requests.filter((r) => isFailure(r) && inWindow(r))
        const attempts = new Set(failed.flatMap((r) => r.attempt === undefined ? [] : [r.attempt]))
        const failures = failed.filter((r) => r.attempt === undefined).length + attempts.size
        const allowed = Ceilings.answeredFailuresPerWindow + allowance
        if (failures > allowed) {
          this.violate("pacing", `${failures} requests answered with a failure within ten minutes (at most ${allowed})`)
          return
        }
      }
    }
  }

  // -- readers and the cache -----------------------------------------------------------------

  addReader(label: string, only: string | undefined): void {
    this.readers.set(label, new Reader(label, only))
  }

  onHeard(label: string, name: string, value: Option.Option<Sandbox>): void {
    const reader = this.readers.get(label)!
    const word = wordOf(value)
    this.trace.add("reader", `${label} ← ${name} ${sayWord(word)}`)
    reader.last.set(name, word)
    if (word.present) {
      reader.presentAt.set(name, word.resourceVersion)
      return
    }
    const presentAt = reader.presentAt.get(name)
    if (presentAt !== undefined) {
      reader.presentAt.delete(name)
      const now = this.truthNow()
      if (!this.truth.absentSomewhere(name, Number(presentAt), now)) {
        this.violate(
          "gone",
          `${label} was told ${name} gone, but the truth held it from resourceVersion ${presentAt} (when it was ` +
            `last told present) to ${now}`
        )
      }
    }
  }

  // -- waits ---------------------------------------------------------------------------------

  onWaitEnded(name: string, createdAt: number, outcome: string, gone: boolean): void {
    this.trace.add("wait", `awaitReady(${name}, createdAt ${createdAt}) ended: ${outcome}`)
    if (!gone) return
    const now = this.truthNow()
    if (!this.truth.absentSomewhere(name, createdAt - 1, now)) {
      this.violate(
        "waits",
        `awaitReady(${name}, createdAt ${createdAt}) failed SandboxGone, but the truth held ${name} from ` +
          `${createdAt} to ${now}`
      )
    }
  }

  // -- drafts --------------------------------------------------------------------------------

  readonly onCheck: DraftRecorder["onCheck"] = ({ bytes, failed, held, maxItems, what }) => {
    if (held > maxItems && !failed) {
      this.violate("bounds", `a ${what}'s draft held ${held} objects at its check and went on (budget ${maxItems})`)
    }
    const maxBytes = this.budgets.maxListBytes
    if (maxBytes !== undefined && bytes > maxBytes && !failed) {
      this.violate(
        "bounds",
        `a ${what}'s draft held ~${bytes} bytes at its check and went on (byte budget ${maxBytes})`
      )
    }
  }

  readonly onLanded: DraftRecorder["onLanded"] = (_draft, held, maxItems, bytes) => {
    if (held > maxItems) {
      this.violate("bounds", `a list landed holding ${held} objects (budget ${maxItems})`)
    }
    const maxBytes = this.budgets.maxListBytes
    if (maxBytes !== undefined && bytes > maxBytes) {
      this.violate("bounds", `a list landed holding ~${bytes} bytes (byte budget ${maxBytes})`)
    }
  }

  readonly onPutAfterFailure: DraftRecorder["onPutAfterFailure"] = () => {
    this.violate("bounds", "a draft that failed its budget check was added to afterwards")
  }

  // -- a quiescent moment --------------------------------------------------------------------

  atQuiescence(view: QuiescentView): void {
    this.checkWindows()
    this.checkCacheGone(view)
    this.checkReaders(view)
    for (const { createdAt, name } of view.pendingWaits) {
      const cached = view.cache.get(name)
      // A Ready older than the wait's create is an earlier Sandbox of the name: not this one's.
      if (cached?.status?.phase === "Ready" && Number(cached.metadata.resourceVersion) >= createdAt) {
        this.violate("waits", `awaitReady(${name}) is still waiting, but the cache holds ${name} Ready`)
      }
    }
    if (
      view.calmFrom !== undefined && this.now() >= view.calmFrom + Ceilings.convergeAfterMs &&
      this.fitBudgetsThroughout(this.now() - Ceilings.convergeAfterMs)
    ) {
      this.checkConvergence(view)
    }
  }

  private checkCacheGone(view: QuiescentView): void {
    const now = this.truthNow()
    const present = new Map<string, string>()
    for (const [name, sandbox] of view.cache) present.set(name, sandbox.metadata.resourceVersion)
    for (const [name, at] of this.cachePresent) {
      if (present.has(name)) continue
      if (!this.truth.absentSomewhere(name, Number(at), now)) {
        this.violate(
          "gone",
          `the cache dropped ${name}, but the truth held it from resourceVersion ${at} (the state cached) to ${now}`
        )
      }
    }
    this.cachePresent = present
    const said = [...present].map(([name, at]) => `${name}@${at}`).join(", ")
    if (said !== this.lastCacheSaid) {
      this.lastCacheSaid = said
      this.trace.add("watch", `cache: {${said}}`)
    }
  }

  private checkReaders(view: QuiescentView): void {
    for (const reader of this.readers.values()) {
      const names = reader.only !== undefined
        ? [reader.only]
        : [...new Set([...reader.last.keys(), ...view.cache.keys()])]
      for (const name of names) {
        const heard = reader.last.get(name)
        const cached = view.cache.get(name)
        const inStep = cached === undefined
          ? heard === undefined || !heard.present
          : heard !== undefined && heard.present && heard.resourceVersion === cached.metadata.resourceVersion
        if (!inStep) {
          this.violate(
            "convergence",
            `${reader.label} last heard ${name} ${sayWord(heard)} but the cache holds ${
              cached === undefined ? "nothing" : `@${cached.metadata.resourceVersion} ${cached.status?.phase ?? "-"}`
            } (everything has run: the reader was not woken)`
          )
        }
      }
    }
  }

  /** Whether a list of the truth at `resourceVersion` fits the list budgets (else it is rightly refused). */
  private fitsBudgets(resourceVersion: number): boolean {
    const visible = this.truth.visibleAt(resourceVersion)
    if (visible.length > this.budgets.maxListItems) return false
    const maxBytes = this.budgets.maxListBytes
    return maxBytes === undefined || visible.reduce((sum, o) => sum + o.padBytes, 0) <= maxBytes / 2
  }

  /**
   * Whether every state of the truth since `from` fits the list budgets: a list refused for its
   * size waits the counted back-off (up to the cap), so the cache is owed the truth only a whole
   * convergence window after the truth came to fit, not at once.
   */
  private fitBudgetsThroughout(from: number): boolean {
    for (let rv = this.truth.resourceVersionAt(from); rv <= this.truthNow(); rv++) {
      if (!this.fitsBudgets(rv)) return false
    }
    return true
  }

  private checkConvergence(view: QuiescentView): void {
    const now = this.truthNow()
    const visible = this.truth.visibleAt(now)
    const problems: Array<string> = []
    if (!view.synced) problems.push("the watch never synced")
    const expected = new Set<string>()
    for (const object of visible) {
      expected.add(object.name)
      const cached = view.cache.get(object.name)
      if (object.garbled) {
        // Rule 13: an unreadable state leaves the name at an older state, or unknown.
        if (cached !== undefined && Number(cached.metadata.resourceVersion) >= object.resourceVersion) {
          problems.push(
            `${object.name}: the cache holds @${cached.metadata.resourceVersion}, the truth an unreadable ` +
              `@${object.resourceVersion}`
          )
        } else if (cached === undefined && !view.unknown(object.name)) {
          problems.push(
            `${object.name}: neither cached nor unknown (the truth has an unreadable @${object.resourceVersion})`
          )
        }
        continue
      }
      if (cached === undefined) {
        problems.push(
          `${object.name}: missing from the cache (the truth has @${object.resourceVersion} ${object.phase})`
        )
      } else if (
        cached.metadata.resourceVersion !== String(object.resourceVersion) || cached.status?.phase !== object.phase
      ) {
        problems.push(
          `${object.name}: the cache holds @${cached.metadata.resourceVersion} ${cached.status?.phase ?? "-"}, ` +
            `the truth @${object.resourceVersion} ${object.phase}`
        )
      }
    }
    for (const [name, cached] of view.cache) {
      if (!expected.has(name)) {
        problems.push(`${name}: the cache holds @${cached.metadata.resourceVersion}, the truth has no such Sandbox`)
      }
    }
    if (problems.length > 0) {
      this.violate(
        "convergence",
        `the server has behaved for ${Ceilings.convergeAfterMs / 1000}s and the cache is not the truth at ` +
          `resourceVersion ${now}: ${problems.join("; ")}`
      )
    }
  }
}
