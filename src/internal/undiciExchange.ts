/**
 * One HTTP exchange on an undici `Dispatcher`, as Effects: send a request and get its status and
 * headers, then read the body whole or chunk by chunk.
 *
 * Why not `@effect/platform`'s `HttpClient` (which runs on the same undici): per request it builds
 * a span with every header as an attribute, parses the URL again, registers the response with a
 * `FinalizationRegistry` and aborts an `AbortController` at the end of every body (a `DOMException`
 * each time); per body chunk its `Stream` adds channel stages. A watch resume is one request, so
 * that was most of what a resume cost (`npx tsx scratchpad/resumeCost.ts`, rows `raw` and
 * `undici`). The headers deadline is kept by the client's `DeadlineTimer` (on the `Clock`, so tests
 * drive it with `TestClock`); an interrupt aborts the request or destroys the body, which frees the
 * connection.
 *
 * @internal
 */
import type { Dispatcher } from "@effect/platform-node/Undici"
import { Data, Effect } from "effect"
import { EventEmitter } from "node:events"
import type { Readable } from "node:stream"
import * as Stream from "node:stream"
import * as Zlib from "node:zlib"
import type { DeadlineTimer } from "./deadlineTimer.ts"

/** A body read stopped at its byte limit: `received` bytes had come when it was stopped. */
export class BodyOverLimit extends Data.TaggedError("BodyOverLimit")<{
  readonly limit: number
  readonly received: number
}> {}

export interface Outgoing {
  readonly method: Dispatcher.HttpMethod
  /** The path after the server's own (`/apis/...?...`). */
  readonly path: string
  readonly headers: Record<string, string>
  readonly body?: string
}

/** An answer whose status and headers have arrived; its body is read with a `BodyReader`. */
export interface Answer {
  readonly status: number
  readonly headers: Readonly<Record<string, string | ReadonlyArray<string> | undefined>>
  readonly body: BodyReader
}

/** One header's value (the first, when a server repeated it). */
export const headerValue = (answer: Answer, name: string): string | undefined => {
  const value = answer.headers[name]
  return typeof value === "string" ? value : value?.[0]
}

/** Where requests go: the server's origin, and the path prefix a server URL may carry (Rancher's `/k8s/clusters/<id>`). */
export interface Target {
  readonly origin: string
  readonly pathPrefix: string
}

export const targetOf = (server: string): Target => {
  const url = new URL(server)
  return { origin: url.origin, pathPrefix: url.pathname.replace(/\/+$/, "") }
}

/** What `send` fails with when the status and headers did not come in time. */
export class HeadersDeadlinePassed {
  readonly _tag = "HeadersDeadlinePassed"
}

/** How long `send` waits for the status and headers, on which timer. */
export interface HeadersDeadline {
  readonly timer: DeadlineTimer
  readonly millis: number
}

/**
 * What aborts a request: undici takes an EventEmitter with `aborted` and `reason` where it takes an
 * `AbortSignal`. An `AbortController` per request (an `EventTarget`, its listener added and removed
 * by undici twice over) was a sizeable share of a watch resume's CPU
 * (`npx tsx scratchpad/dispatchCost.ts`, rows `+signal` and `+emitter`).
 */
class AbortSwitch extends EventEmitter {
  aborted = false
  reason: Error | undefined = undefined

  abort(): void {
    if (this.aborted) return
    this.aborted = true
    this.reason = new Error("the request was abandoned (its deadline passed or its caller let go)")
    this.emit("abort")
  }
}

/**
 * Sends `request`; succeeds once the status and headers are in, fails with what undici threw (the
 * caller describes it), or with `HeadersDeadlinePassed` when they took longer than `deadline`.
 * Interrupted or out of time before then, the request is aborted.
 */
export const send = (
  dispatcher: Dispatcher,
  target: Target,
  request: Outgoing,
  deadline: HeadersDeadline
): Effect.Effect<Answer, unknown> =>
  Effect.async<Answer, unknown>((resume) => {
    const abort = new AbortSwitch()
    let interrupted = false
    const armed = deadline.timer.arm(deadline.millis, () => {
      interrupted = true
      abort.abort()
      resume(Effect.fail(new HeadersDeadlinePassed()))
    })
    dispatcher.request({
      origin: target.origin,
      path: target.pathPrefix + request.path,
      method: request.method,
      headers: request.headers,
      body: request.body ?? null,
      signal: abort,
      // The caller's deadlines, on the Effect clock, govern; undici's own (300 s) would only
      // race them.
      headersTimeout: 0,
      bodyTimeout: 0
    }).then(
      (data) => {
        armed.clear()
        const body = new BodyReader(asked(request, data.headers) ? gunzipped(data.body) : data.body)
        // The answer came as the caller let go: nobody will read it.
        if (interrupted) return body.discard()
        resume(Effect.succeed({ status: data.statusCode, headers: data.headers, body }))
      },
      (error: unknown) => {
        armed.clear()
        if (!interrupted) resume(Effect.fail(error))
      }
    )
    return Effect.sync(() => {
      armed.clear()
      interrupted = true
      abort.abort()
    })
  })

/**
 * Whether the answer is gzip that the request asked for. Only then is it inflated: a gzip body
 * nobody asked for (a proxy's) stays what it was, and its error names its content-encoding.
 */
const asked = (request: Outgoing, headers: Answer["headers"]): boolean =>
  request.headers["accept-encoding"] === "gzip" && headers["content-encoding"] === "gzip"

/**
 * The body inflated as it is read. A pipeline, so destroying the inflated end (a `discard`, a
 * limit) destroys the socket's too. Inflating only what is read keeps a gzip bomb within the
 * read's own limits (a line's, a page's); 1.37 sends a gzip member per flush, which zlib reads on.
 */
export const gunzipped = (body: Readable): Readable =>
  Stream.pipeline(body, Zlib.createGunzip(), () => {
    // Errors reach the reader through the gunzip stream's own `error` event.
  })

/** The body ended before the server finished it, with no error of its own (a socket closed early). */
export class BodyClosedEarly extends Error {
  constructor() {
    super("the connection closed before the body ended")
  }
}

/**
 * A body read in paused mode: `next` takes everything buffered at once (one network read or
 * several, as one Buffer), or waits for more. Listeners stay on for the body's life, so an error
 * between two reads is kept for the next one rather than thrown as an unhandled `error` event.
 */
export class BodyReader {
  private failure: unknown = undefined
  private ended = false
  private closed = false

  constructor(private readonly stream: Readable) {
    const notify = () => this.retry()
    stream.on("readable", notify)
    stream.once("end", () => {
      this.ended = true
      notify()
    })
    stream.once("error", (error: unknown) => {
      // The first failure is the one to report: a limit that passed (`fail`) destroys the stream,
      // and undici then reports its own abort, which says less.
      if (this.failure === undefined) this.failure = error
      notify()
    })
    stream.once("close", () => {
      this.closed = true
      notify()
    })
  }

  /** What a read gets now (bytes, `null` at the end of the body, or the body's error); none: wait. */
  private poll(): Effect.Effect<Buffer | null, unknown> | undefined {
    if (this.failure !== undefined) return Effect.fail(this.failure)
    const bytes = this.takeBuffered()
    if (bytes !== null) return Effect.succeed(bytes)
    if (this.ended) return Effect.succeed(null)
    if (this.closed) return Effect.fail(this.stream.errored ?? new BodyClosedEarly())
    return undefined
  }

  /**
   * Everything buffered, as one Buffer (`null`: nothing yet). Node 26's `read()` gives the first
   * buffered chunk where earlier Nodes' gave them all, so the rest is taken here.
   */
  private takeBuffered(): Buffer | null {
    const first = this.stream.read() as Buffer | null
    if (first === null || this.stream.readableLength === 0) return first
    const parts = [first]
    let size = first.length
    while (this.stream.readableLength > 0) {
      const more = this.stream.read() as Buffer | null
      if (more === null) break
      parts.push(more)
      size += more.length
    }
    return Buffer.concat(parts, size)
  }

  /** The next bytes of the body, or `null` once it has ended cleanly. */
  readonly next: Effect.Effect<Buffer | null, unknown> = Effect.async<Buffer | null, unknown>((resume) => {
    const ready = this.poll()
    if (ready !== undefined) return resume(ready)
    this.waiting = resume
    // No canceller: `Effect.async` wraps one in an interrupt handler on every wait (a third of
    // what a wait runs). A waiting read is woken with `readNow`, not with bytes: woken after it was
    // interrupted (a caller that gave up on one read and will read again), it never runs, so the
    // bytes stay in the stream for the next read instead of going to a fiber no longer listening.
  })

  /** Reads what is there when the woken read runs; waits again if that is nothing. */
  private readonly readNow: Effect.Effect<Buffer | null, unknown> = Effect.suspend(() => this.poll() ?? this.next)

  /** The read that waits for the body to say something (readable, ended, failed or closed), if one does. */
  private waiting: ((effect: Effect.Effect<Buffer | null, unknown>) => void) | undefined = undefined

  /** Wakes the waiting read, which reads when it runs (`readNow`). */
  private retry(): void {
    const resume = this.waiting
    if (resume === undefined) return
    this.waiting = undefined
    resume(this.readNow)
  }

  /** Bytes arrived that no read has taken yet. */
  get unread(): boolean {
    return this.stream.readableLength > 0
  }

  /** The whole body, in one Buffer. */
  readonly all: Effect.Effect<Buffer, unknown> = Effect.suspend(() => this.upTo(Infinity, "fail"))

  /**
   * The body, at most `limit` bytes of it: past that the rest is not read (the body is destroyed,
   * closing its connection) and the read fails with `BodyOverLimit` (`"fail"`), or ends with the
   * first `limit` bytes (`"truncate"`, for an error's text).
   */
  upTo(limit: number, past: "fail" | "truncate"): Effect.Effect<Buffer, unknown> {
    const parts: Array<Buffer> = []
    let size = 0
    const whole = () => (parts.length === 1 ? parts[0]! : Buffer.concat(parts, size))
    const loop: Effect.Effect<Buffer, unknown> = Effect.flatMap(this.next, (bytes) => {
      if (bytes === null) return Effect.succeed(whole())
      parts.push(bytes)
      size += bytes.length
      if (size > limit) {
        this.discard()
        if (past === "truncate") return Effect.succeed(whole().subarray(0, limit))
        // The effect that read them may outlive the failure (held by a caller's retry), so the
        // bytes read are let go here: hostile.ts's endless-page mode.
        parts.length = 0
        return Effect.fail(new BodyOverLimit({ limit, received: size }))
      }
      return loop
    })
    return loop
  }

  /** Fails every read from now on with `error`, and closes the connection (a limit passed). */
  fail(error: unknown): void {
    if (this.failure !== undefined || this.ended) return
    this.failure = error
    this.stream.destroy()
    this.retry()
  }

  /** Stops reading: an unfinished body is destroyed, which closes its connection (undici's way to abort it). */
  discard(): void {
    this.waiting = undefined
    if (!this.ended) this.stream.destroy()
  }
}
