/**
 * The adversarial server, at the lowest seam the client has without sockets: an undici
 * `Dispatcher` whose `request` answers from the truth, as each request's plan says. Everything above
 * it is the real client (`requestSender.ts`: headers and body deadlines, Status parsing, byte
 * budgets; `listPaging.ts`: pages, continue tokens, one page ahead, the restart after an expired
 * token, the draft's budget; `watchOpening.ts` and `ndjsonLines.ts`: lines, decoding, silence) and
 * the real watch.
 *
 * What a plan means for each kind of request (the plan is drawn without knowing which comes):
 * - `Status`: that status, with a Kubernetes Status body (and `Retry-After`).
 * - `NoAnswer`: the connection is reset before any answer, or the headers never come.
 * - `Answer`, a list page: the page of the list (a lagging list is the state `lagBy` changes ago;
 *   a chain's pages come from the state its first page read). `repeatNames`: the continue token
 *   does not advance (the same names again). `emptyResourceVersion`: `metadata.resourceVersion` is
 *   `""`. Endings `reset`, `silence` and `truncated` cut the page's bytes in half; the others send it
 *   whole.
 * - `Answer`, a watch from a resourceVersion: the changes after it (from `""`: the objects there now,
 *   as `ADDED`, then what comes: "from now"), `upTo` of them, then live changes until `liveMs` (at
 *   most the term asked), bookmarks every minute while live, then the ending.
 * - `Answer`, a streaming list: the objects of the (maybe lagging) list as `ADDED` (each twice with
 *   `repeatNames`), its end bookmark as `endBookmark` says, the changes since, then as a watch.
 * Bookmarks carry the resourceVersion reached, never one past what was sent.
 */
import type { Dispatcher } from "@effect/platform-node/Undici"
import type { EventEmitter } from "node:events"
import { Readable } from "node:stream"
import type { AnswerPlan, RequestPlan } from "./generator.ts"
import { Honest } from "./generator.ts"
import type { SimClock } from "./simRuntime.ts"
import { hops } from "./simRuntime.ts"
import type { Trace } from "./trace.ts"
import type { SelectorEvent, Truth, TruthChange, TruthObject } from "./truth.ts"
import { describeObject, FirstResourceVersion, objectJson } from "./truth.ts"

export type RequestKind = "list" | "page" | "stream" | "watch"

/** One request as the pacing checks see it. */
export interface RequestRecord {
  readonly index: number
  readonly at: number
  /** `list`: a list's first page (a new list); `page`: a later page of one; `stream`: a streaming list. */
  readonly kind: RequestKind
  readonly scripted: boolean
  /**
   * A list the server served whole: a first page sent whole, a streaming list up to its end
   * bookmark. (A list cut short is a failure answered, or no answer, and paced as such.)
   */
  listServed: boolean
  /** The server answered with a failure: a non-2xx status, an `ERROR` event, a malformed body. */
  answeredFailure: boolean
  /** That failure was a 429 (a status or an `ERROR`): the server named how long to wait (rule 6). */
  throttled: boolean
  /** A list's pages share a chain (a list's first page starts one). */
  readonly chain: number | undefined
  /**
   * The paced attempt a list's request belongs to: its chain's, and for a list in one piece asked
   * at the instant a page of another chain failed (the restart after an expired continue token),
   * that chain's attempt.
   */
  readonly attempt: number | undefined
}

export interface ServerObserver {
  readonly onRequest: (record: RequestRecord) => void
  /** A change of the truth just happened (the server's clock reached it). */
  readonly onChange: (change: TruthChange) => void
}

export interface ServerSettings {
  /** After this long, plans not yet used are dropped: the server behaves. */
  readonly maxMisbehaviourMs: number
  /** More requests than this at one instant: the watch is in a loop; the server stops answering. */
  readonly maxRequestsAtOneInstant: number
  /** The honest answers' `spread` (how what they send is cut into reads): the network's timing. */
  readonly honestSpread: number
}

const BookmarkEveryMs = 60_000

interface Timed {
  readonly at: number
  readonly order: number
  readonly run: () => void
  cancelled: boolean
}

interface Item {
  readonly line: string
  /** Counts toward the plan's `upTo` (an object or event; a bookmark does not). */
  readonly counts: boolean
  /** The resourceVersion the watch stands at once this is sent. */
  readonly position: number | undefined
  readonly said: string
  /** The end bookmark of a streaming list: the list is served whole once this is sent. */
  readonly endsList?: true
}

const spreadOf = (answer: OpenAnswer): number => (answer.plan._tag === "Answer" ? answer.plan.spread : 0)

class OpenAnswer {
  ended = false
  /** Sends spread over microtasks, in order. */
  outbox: Promise<void> = Promise.resolve()
  live = false
  sent = 0
  position: number
  readonly timers: Array<Timed> = []
  stream: Readable | undefined = undefined
  constructor(
    readonly record: RequestRecord,
    readonly plan: RequestPlan,
    readonly scripted: boolean,
    position: number
  ) {
    this.position = position
  }
}

interface Chain {
  readonly resourceVersion: number
  readonly items: ReadonlyArray<TruthObject>
}

const statusBody = (code: number, reason: string, message: string, details?: Record<string, unknown>) => ({
  kind: "Status",
  apiVersion: "v1",
  metadata: {},
  status: "Failure",
  message,
  reason,
  code,
  ...(details === undefined ? {} : { details })
})

const reset = () => Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" })

const honestButForSpread = (plan: AnswerPlan): boolean =>
  (Object.keys(Honest) as Array<keyof AnswerPlan>).every((key) => key === "spread" || plan[key] === Honest[key])

const describePlan = (plan: RequestPlan): string => {
  switch (plan._tag) {
    case "Status":
      return `status ${plan.code}${plan.retryAfter === undefined ? "" : ` Retry-After ${plan.retryAfter}`}${
        plan.code === 504 && plan.tooLargeResourceVersion ? " (too large resourceVersion)" : ""
      }`
    case "NoAnswer":
      return plan.how === "reset" ? "no answer (reset)" : "no answer (headers never come)"
    case "Answer": {
      if (honestButForSpread(plan)) return plan.spread === 0 ? "honest" : `honest spread=${plan.spread}`
      const flaws = [
        plan.upTo === undefined ? undefined : `upTo=${plan.upTo}`,
        plan.liveMs === Number.POSITIVE_INFINITY ? "live=term" : `live=${plan.liveMs / 1000}s`,
        plan.bookmarks ? "bookmarks" : undefined,
        plan.bookmarkBeforeEnd ? "bookmark-before-end" : undefined,
        `ending=${plan.ending}${
          plan.ending === "error429" && plan.retryAfter !== undefined ? `(${plan.retryAfter}s)` : ""
        }`,
        plan.endBookmark === "annotated" ? undefined : `end-bookmark=${plan.endBookmark}`,
        plan.lagBy === 0 ? undefined : `lag=${plan.lagBy}`,
        plan.emptyResourceVersion ? "empty-rv" : undefined,
        plan.repeatNames ? "repeat-names" : undefined,
        plan.spread === 0 ? undefined : `spread=${plan.spread}`
      ]
      return `answer ${flaws.filter((f) => f !== undefined).join(" ")}`
    }
  }
}

export class ScriptedServer {
  private planIndex = 0
  private readonly open = new Set<OpenAnswer>()
  private scriptedOpen = 0
  private timers: Array<Timed> = []
  private order = 0
  private changesApplied = 0
  private requests = 0
  /** Every request so far, to find the attempt a list's request belongs to. */
  private readonly records: Array<RequestRecord> = []
  private chainCount = 0
  private readonly chains = new Map<number, Chain>()
  private instant = -1
  private atInstant = 0
  /** When the server began to behave (every plan used and every scripted answer over). */
  calmFrom: number | undefined = undefined
  /** Why the server stopped answering (a loop at one instant), if it did. */
  halted: string | undefined = undefined

  private readonly honest: RequestPlan

  constructor(
    private readonly truth: Truth,
    private readonly plans: ReadonlyArray<RequestPlan>,
    private readonly clock: SimClock,
    private readonly trace: Trace,
    private readonly observer: ServerObserver,
    private readonly settings: ServerSettings
  ) {
    this.honest = settings.honestSpread === 0 ? Honest : { ...Honest, spread: settings.honestSpread }
    this.schedule(settings.maxMisbehaviourMs, () => {
      if (this.planIndex < this.plans.length) {
        this.trace.add(
          "server",
          `misbehaved for ${settings.maxMisbehaviourMs / 60_000} min: the plans left are dropped`
        )
        this.planIndex = this.plans.length
        this.maybeCalm()
      }
    })
    this.maybeCalm()
  }

  /** The request count so far. */
  get requestCount(): number {
    return this.requests
  }

  readonly dispatcher: Dispatcher = {
    request: (options: {
      readonly path: string
      readonly method: string
      readonly signal?: EventEmitter & { readonly aborted?: boolean }
    }) => this.request(options)
  } as unknown as Dispatcher

  // -- time ----------------------------------------------------------------------------------

  /** The next instant the server does something by itself (a change, a bookmark, an ending). */
  nextEventAt(): number {
    let next = Number.POSITIVE_INFINITY
    const change = this.truth.changes[this.changesApplied]
    if (change !== undefined) next = change.at
    for (const timer of this.timers) if (!timer.cancelled && timer.at < next) next = timer.at
    return next
  }

  /** Does what is due by the clock's now: changes of the truth first, then timed sends. */
  fireDue(): void {
    const now = this.clock.unsafeCurrentTimeMillis()
    for (;;) {
      const change = this.truth.changes[this.changesApplied]
      if (change === undefined || change.at > now) break
      this.changesApplied++
      this.applyChange(change)
    }
    const due = this.timers.filter((t) => !t.cancelled && t.at <= now).sort((a, b) => a.at - b.at || a.order - b.order)
    this.timers = this.timers.filter((t) => !t.cancelled && t.at > now)
    for (const timer of due) if (!timer.cancelled) timer.run()
  }

  private schedule(at: number, run: () => void, answer?: OpenAnswer): Timed {
    const timer: Timed = { at, order: this.order++, run, cancelled: false }
    this.timers.push(timer)
    answer?.timers.push(timer)
    return timer
  }

  private applyChange(change: TruthChange): void {
    const before = change.before === undefined ? "" : ` (was ${describeObject(change.before)})`
    this.trace.add(
      "truth",
      `rv ${change.resourceVersion}: ${change.kind} ${
        change.after === undefined ? change.name : describeObject(change.after)
      }${before}`
    )
    this.observer.onChange(change)
    const event = this.truth.eventAt(change.resourceVersion)
    for (const answer of [...this.open]) {
      if (!answer.live || answer.ended) continue
      answer.position = change.resourceVersion
      if (event === undefined) continue
      this.send(answer, [this.eventItem(event)])
      if (answer.plan._tag === "Answer" && answer.plan.upTo !== undefined && answer.sent >= answer.plan.upTo) {
        this.finish(answer)
      }
    }
  }

  // -- requests ------------------------------------------------------------------------------

  private request(options: {
    readonly path: string
    readonly method: string
    readonly signal?: EventEmitter & { readonly aborted?: boolean }
  }): Promise<unknown> {
    const now = this.clock.unsafeCurrentTimeMillis()
    const url = new URL(options.path, "http://sim")
    const query = url.searchParams
    const watch = query.get("watch") === "1"
    const streaming = watch && query.get("sendInitialEvents") === "true"
    const kind: RequestKind = streaming ? "stream" : watch ? "watch" : query.has("continue") ? "page" : "list"
    if (now !== this.instant) {
      this.instant = now
      this.atInstant = 0
    }
    this.atInstant++
    const index = ++this.requests
    if (this.halted === undefined && this.atInstant > this.settings.maxRequestsAtOneInstant) {
      this.halted = `more than ${this.settings.maxRequestsAtOneInstant} requests at one instant`
      this.trace.add("server", `${this.halted}: the server stops answering`)
    }
    const scripted = this.halted === undefined && this.planIndex < this.plans.length
    const plan: RequestPlan = this.halted !== undefined
      ? { _tag: "NoAnswer", how: "hang" }
      : scripted
      ? this.plans[this.planIndex++]!
      : this.honest
    const chain = kind === "list"
      ? ++this.chainCount
      : kind === "page"
      ? Number(query.get("continue")!.split(".")[0])
      : undefined
    const failedPage = [...this.records].reverse().find((r) => r.kind === "page" && r.answeredFailure && r.at === now)
    const attempt = kind === "page"
      ? this.records.find((r) => r.chain === chain)?.attempt ?? chain
      : kind === "list" && !query.has("limit") && failedPage !== undefined
      ? failedPage.attempt
      : chain
    const record: RequestRecord = {
      index,
      at: now,
      kind,
      scripted,
      listServed: false,
      answeredFailure: false,
      throttled: false,
      chain,
      attempt
    }
    this.records.push(record)
    this.observer.onRequest(record)
    const asked = kind === "watch"
      ? `watch rv=${query.get("resourceVersion") ?? "(none)"}`
      : kind === "stream"
      ? `streaming list (timeoutSeconds=${query.get("timeoutSeconds")})`
      : kind === "page"
      ? `list page continue=${query.get("continue")}`
      : `list limit=${query.get("limit") ?? "(none)"}`
    this.trace.add(
      "server",
      `#${index} ${asked} ⇒ ${scripted ? `plan ${this.planIndex}/${this.plans.length}: ` : ""}${describePlan(plan)}`
    )
    const answer = new OpenAnswer(record, plan, scripted, FirstResourceVersion)
    this.open.add(answer)
    if (scripted) this.scriptedOpen++
    return new Promise((resolve, reject) => {
      const signal = options.signal
      const onAbort = () => {
        if (answer.stream !== undefined) answer.stream.destroy()
        else {
          reject(new Error("the request was aborted"))
          this.ended(answer, "aborted by the client")
        }
      }
      signal?.once("abort", onAbort)
      const respond = (statusCode: number, headers: Record<string, string>, stream: Readable) => {
        answer.stream = stream
        stream.once("close", () => {
          signal?.removeListener("abort", onAbort)
          this.ended(answer, "closed")
        })
        resolve({ statusCode, headers, body: stream, trailers: {}, opaque: null, context: {} })
      }
      switch (plan._tag) {
        case "NoAnswer":
          if (plan.how === "reset") {
            signal?.removeListener("abort", onAbort)
            reject(reset())
            this.ended(answer, "reset")
          }
          return
        case "Status":
          record.answeredFailure = true
          record.throttled = plan.code === 429
          return this.answerStatus(plan, kind, query, respond)
        case "Answer":
          return watch
            ? this.answerWatch(answer, plan, streaming, query, respond)
            : this.answerPage(answer, plan, query, respond)
      }
    })
  }

  private ended(answer: OpenAnswer, how: string): void {
    if (answer.ended) return
    answer.ended = true
    answer.live = false
    for (const timer of answer.timers) timer.cancelled = true
    this.open.delete(answer)
    if (how !== "closed" && how !== "reset") this.trace.add("server", `#${answer.record.index} ${how}`)
    if (answer.scripted) {
      this.scriptedOpen--
      this.maybeCalm()
    }
  }

  private maybeCalm(): void {
    if (this.calmFrom === undefined && this.planIndex >= this.plans.length && this.scriptedOpen === 0) {
      this.calmFrom = this.clock.unsafeCurrentTimeMillis()
      this.trace.add("server", "every plan is used: the server behaves from here on")
    }
  }

  private answerStatus(
    plan: Extract<RequestPlan, { readonly _tag: "Status" }>,
    kind: RequestKind,
    query: URLSearchParams,
    respond: (statusCode: number, headers: Record<string, string>, stream: Readable) => void
  ): void {
    const at = query.get("resourceVersion") ?? ""
    const current = this.truth.resourceVersionAt(this.clock.unsafeCurrentTimeMillis())
    const body = plan.code === 410
      ? statusBody(
        410,
        "Expired",
        kind === "page"
          ? "The provided continue parameter is too old to display a consistent list result."
          : `too old resource version: ${at} (${current})`
      )
      : plan.code === 429
      ? statusBody(429, "TooManyRequests", "Too many requests, please try again later.", {
        ...(plan.retryAfter === undefined ? {} : { retryAfterSeconds: plan.retryAfter })
      })
      : plan.code === 403
      ? statusBody(
        403,
        "Forbidden",
        `sandboxes.jr2.dev is forbidden: User "system:serviceaccount:ns:sim" cannot ${
          kind === "list" || kind === "page" ? "list" : "watch"
        } resource "sandboxes" in API group "jr2.dev" in the namespace "ns"`
      )
      : plan.code === 504 && plan.tooLargeResourceVersion
      ? statusBody(504, "Timeout", `Too large resource version: ${at}, current: ${current}`, {
        causes: [{ reason: "ResourceVersionTooLarge", message: "Too large resource version" }],
        retryAfterSeconds: 1
      })
      : plan.code === 504
      ? statusBody(504, "Timeout", "The server was unable to return a response in the time allotted.")
      : plan.code === 503
      ? statusBody(503, "ServiceUnavailable", "The server is currently unable to handle the request.")
      : statusBody(500, "InternalError", "Internal error occurred: the simulation says so")
    const headers: Record<string, string> = { "content-type": "application/json" }
    if (plan.retryAfter !== undefined && (plan.code === 429 || plan.code === 503)) {
      headers["retry-after"] = String(plan.retryAfter)
    }
    respond(plan.code, headers, Readable.from([Buffer.from(JSON.stringify(body))], { objectMode: false }))
  }

  // -- a list page -----------------------------------------------------------------------------

  private answerPage(
    answer: OpenAnswer,
    plan: AnswerPlan,
    query: URLSearchParams,
    respond: (statusCode: number, headers: Record<string, string>, stream: Readable) => void
  ): void {
    const now = this.clock.unsafeCurrentTimeMillis()
    const token = query.get("continue")
    const chainId = answer.record.chain!
    let offset = 0
    if (token === null) {
      const resourceVersion = Math.max(FirstResourceVersion, this.truth.resourceVersionAt(now) - plan.lagBy)
      this.chains.set(chainId, { resourceVersion, items: this.truth.visibleAt(resourceVersion) })
    } else {
      offset = Number(token.split(".")[1])
    }
    const chain = this.chains.get(chainId)!
    const limitText = query.get("limit")
    const limit = limitText === null ? chain.items.length : Number(limitText)
    const items = chain.items.slice(offset, offset + limit)
    const nextOffset = plan.repeatNames && items.length > 0 ? offset : offset + items.length
    const more = nextOffset < chain.items.length
    const resourceVersion = plan.emptyResourceVersion ? "" : String(chain.resourceVersion)
    const body = JSON.stringify({
      kind: "SandboxList",
      apiVersion: "jr2.dev/v1alpha1",
      metadata: { resourceVersion, ...(more ? { continue: `${chainId}.${nextOffset}` } : {}) },
      items: items.map((item) => objectJson(item))
    })
    this.trace.add(
      "server",
      `#${answer.record.index} ← page rv="${resourceVersion}" [${items.map(describeObject).join(", ")}]${
        more ? ` continue=${chainId}.${nextOffset}` : ""
      }`
    )
    const stream = new Readable({ read() {} })
    respond(200, { "content-type": "application/json" }, stream)
    const bytes = Buffer.from(body)
    switch (plan.ending) {
      case "reset":
      case "silence":
      case "truncated": {
        stream.push(bytes.subarray(0, Math.floor(bytes.length / 2)))
        this.trace.add("server", `#${answer.record.index} ← half the page, then ${plan.ending}`)
        if (plan.ending === "reset") {
          // Its answer had begun: a failure the counted back-off paces (rule 7).
          answer.record.answeredFailure = true
          stream.destroy(reset())
        }
        if (plan.ending === "truncated") {
          answer.record.answeredFailure = true
          stream.push(null)
        }
        return
      }
      default:
        answer.record.listServed = true
        stream.push(bytes)
        stream.push(null)
    }
  }

  // -- a watch or a streaming list -------------------------------------------------------------

  private objectItem(type: "ADDED" | "MODIFIED" | "DELETED", object: TruthObject, position: number | undefined): Item {
    return {
      line: JSON.stringify({ type, object: objectJson(object) }),
      counts: true,
      position,
      said: `${type} ${describeObject(object)}`
    }
  }

  private eventItem(event: SelectorEvent): Item {
    return this.objectItem(event.type, event.object, event.resourceVersion)
  }

  private bookmarkItem(resourceVersion: string, endOfList: boolean, position: number | undefined): Item {
    return {
      line: JSON.stringify({
        type: "BOOKMARK",
        object: {
          kind: "Sandbox",
          apiVersion: "jr2.dev/v1alpha1",
          metadata: {
            resourceVersion,
            ...(endOfList ? { annotations: { "k8s.io/initial-events-end": "true" } } : {})
          }
        }
      }),
      counts: false,
      position,
      said: `BOOKMARK "${resourceVersion}"${endOfList ? " (initial-events-end)" : ""}`,
      ...(endOfList ? { endsList: true as const } : {})
    }
  }

  private answerWatch(
    answer: OpenAnswer,
    plan: AnswerPlan,
    streaming: boolean,
    query: URLSearchParams,
    respond: (statusCode: number, headers: Record<string, string>, stream: Readable) => void
  ): void {
    const now = this.clock.unsafeCurrentTimeMillis()
    const current = this.truth.resourceVersionAt(now)
    const term = Number(query.get("timeoutSeconds") ?? "240") * 1000
    const items: Array<Item> = []
    if (streaming) {
      const at = Math.max(FirstResourceVersion, current - plan.lagBy)
      answer.position = at
      for (const object of this.truth.visibleAt(at)) {
        items.push(this.objectItem("ADDED", object, undefined))
        if (plan.repeatNames) items.push(this.objectItem("ADDED", object, undefined))
      }
      const rv = plan.emptyResourceVersion || plan.endBookmark === "emptyRv" ? "" : String(at)
      if (plan.endBookmark === "annotated" || plan.endBookmark === "emptyRv") {
        items.push(this.bookmarkItem(rv, true, at))
      }
      if (plan.endBookmark === "plain") items.push(this.bookmarkItem(rv, false, at))
      for (const event of this.truth.eventsBetween(at, current)) items.push(this.eventItem(event))
    } else {
      const from = query.get("resourceVersion") ?? ""
      if (from === "") {
        // "From now": the objects there now, then what comes; nothing of what went meanwhile.
        answer.position = current
        for (const object of this.truth.visibleAt(current)) items.push(this.objectItem("ADDED", object, current))
      } else {
        answer.position = Number(from)
        for (const event of this.truth.eventsBetween(Number(from), current)) items.push(this.eventItem(event))
      }
    }
    const stream = new Readable({ read() {} })
    respond(200, { "content-type": "application/json" }, stream)
    // What the plan lets through before the ending: every bookmark, and objects or events up to `upTo`.
    const through: Array<Item> = []
    let counted = 0
    let cut = false
    for (const item of items) {
      if (item.counts && plan.upTo !== undefined && counted >= plan.upTo) {
        cut = true
        break
      }
      if (item.counts) counted++
      through.push(item)
    }
    this.send(answer, through)
    if (cut || (plan.upTo !== undefined && answer.sent >= plan.upTo) || plan.liveMs <= 0) return this.finish(answer)
    answer.position = current
    answer.live = true
    const until = now + Math.min(plan.liveMs, term)
    this.schedule(until, () => this.finish(answer), answer)
    if (plan.bookmarks) {
      const bookmark = (at: number) => {
        if (at >= until) return
        this.schedule(at, () => {
          this.send(answer, [this.bookmarkItem(this.bookmarkVersion(answer), false, answer.position)])
          bookmark(at + BookmarkEveryMs)
        }, answer)
      }
      bookmark(now + BookmarkEveryMs)
    }
  }

  private bookmarkVersion(answer: OpenAnswer): string {
    return answer.plan._tag === "Answer" && answer.plan.emptyResourceVersion ? "" : String(answer.position)
  }

  private send(answer: OpenAnswer, items: ReadonlyArray<Item>): void {
    if (answer.ended || answer.stream === undefined || items.length === 0) return
    for (const item of items) {
      if (item.counts) answer.sent++
      if (item.position !== undefined) answer.position = item.position
      if (item.endsList === true) answer.record.listServed = true
    }
    const index = answer.record.index
    if (spreadOf(answer) === 0) {
      this.trace.add("server", `#${index} ← ${items.map((item) => item.said).join("; ")}`)
      return this.deliver(answer, (stream) => stream.push(Buffer.from(items.map((item) => item.line + "\n").join(""))))
    }
    for (const item of items) {
      this.deliver(answer, (stream) => {
        this.trace.add("server", `#${index} ← ${item.said}`)
        stream.push(Buffer.from(item.line + "\n"))
      })
    }
  }

  /**
   * Does `action` on the answer's body: now, or (a plan that spreads its sends) a few microtasks
   * after the one before, each its own read for the client. A spread send is announced at once
   * (`readable`), not on Node's next tick, which comes only once every fiber has stopped: so it
   * lands amid what the fibers are doing, as bytes from a socket can when the runtime's scheduler
   * lets the event loop in between its tasks.
   */
  private deliver(answer: OpenAnswer, action: (stream: Readable) => void): void {
    const run = (announce: boolean) => {
      const stream = answer.stream
      if (answer.ended || stream === undefined || stream.destroyed) return
      action(stream)
      if (announce && !stream.destroyed) stream.emit("readable")
    }
    const spread = spreadOf(answer)
    if (spread === 0) return run(false)
    answer.outbox = answer.outbox.then(() => hops(spread)).then(() => run(true))
  }

  /** The plan's ending, now. */
  private finish(answer: OpenAnswer): void {
    if (answer.ended || answer.stream === undefined || answer.plan._tag !== "Answer") return
    const plan = answer.plan
    answer.live = false
    for (const timer of answer.timers) timer.cancelled = true
    if (plan.bookmarkBeforeEnd) {
      this.send(answer, [this.bookmarkItem(this.bookmarkVersion(answer), false, answer.position)])
    }
    const index = answer.record.index
    const error = (status: ReturnType<typeof statusBody>) => {
      answer.record.answeredFailure = true
      answer.record.throttled = status.code === 429
      this.deliver(answer, (stream) => {
        this.trace.add("server", `#${index} ← ERROR ${status.code} ${status.reason}, then a close`)
        stream.push(Buffer.from(JSON.stringify({ type: "ERROR", object: status }) + "\n"))
        stream.push(null)
      })
    }
    switch (plan.ending) {
      case "close":
        return this.deliver(answer, (stream) => {
          this.trace.add("server", `#${index} ← clean close`)
          stream.push(null)
        })
      case "reset":
        // After its 200 (and whatever it said): counted as a failure, which rule 7 paces as one
        // (a watch that spoke is resumed at once only the first time since the back-off was forgotten).
        answer.record.answeredFailure = true
        return this.deliver(answer, (stream) => {
          this.trace.add("server", `#${index} ← reset`)
          stream.destroy(reset())
        })
      case "silence":
        this.trace.add("server", `#${index} ← silence from here on`)
        return
      case "truncated":
        answer.record.answeredFailure = true
        return this.deliver(answer, (stream) => {
          this.trace.add("server", `#${index} ← half a line, then a close`)
          stream.push(Buffer.from("{\"type\":\"ADDED\",\"object\":{\"metadata\":"))
          stream.push(null)
        })
      case "error410":
        return error(statusBody(410, "Expired", `too old resource version: ${answer.position}`))
      case "error429":
        return error(
          statusBody(429, "TooManyRequests", "Too many requests, please try again later.", {
            ...(plan.retryAfter === undefined ? {} : { retryAfterSeconds: plan.retryAfter })
          })
        )
      case "error500":
        return error(statusBody(500, "InternalError", "Internal error occurred: the simulation says so"))
    }
  }
}
