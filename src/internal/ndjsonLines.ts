/**
 * Newline-delimited bytes to lines, for a watch body: each complete line decoded from UTF-8 once
 * (so a character split across two chunks is kept whole), a cap on how long a line may grow, and a
 * clear difference between a body that ended cleanly and one that ended mid-line or failed.
 *
 * Written here rather than taken from `@effect/platform`'s `Ndjson` (0.97 decodes each chunk
 * without `stream: true` and corrupts split characters) or `Stream.splitLines` (which emits the
 * buffered partial line before an upstream failure, so a cut connection reads as half a line).
 *
 * @internal
 */
import { Cause, Chunk, Effect, Option } from "effect"

const NEWLINE = 10

/** What `LineSplitter.push` ended with. */
export type PushResult = "ok" | "tooLong" | "stopped"

const utf8 = (bytes: Buffer, start: number, end: number): string => bytes.toString("utf8", start, end)

/** A Buffer over the same memory (no copy), for its fast `toString("utf8", start, end)`. */
const asBuffer = (bytes: Uint8Array): Buffer =>
  Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)

/**
 * The stateful core, free of Effect so it can be tested byte by byte and costs nothing per line
 * beyond decoding the line itself.
 */
export class LineSplitter {
  /** The bytes of the line in progress (no newline seen yet), copied out of their chunks. */
  private pending: Array<Buffer> = []
  private pendingBytes = 0
  /** A byte-order mark is skipped at the start of a body, as `TextDecoder` would. */
  private atStart = true

  /**
   * `decode` turns a complete line's bytes into its text: UTF-8 by default; the watch passes one
   * that leaves `managedFields` undecoded.
   */
  constructor(
    readonly maxLineBytes: number,
    private readonly decode: (bytes: Buffer, start: number, end: number) => string = utf8
  ) {}

  /** Bytes held for the line in progress. */
  get bufferedBytes(): number {
    return this.pendingBytes
  }

  /**
   * Splits one network chunk. `onLine` gets each complete line without its `\n`, in order, and
   * returns `false` to stop early. Returns `"tooLong"` as soon as a line is known to exceed the cap
   * (a complete one, or the one in progress), without buffering further.
   */
  push(bytes: Uint8Array, onLine: (line: string) => boolean): PushResult {
    const buffer = asBuffer(bytes)
    const max = this.maxLineBytes
    let start = 0
    // 0x0A never occurs inside a multi-byte UTF-8 sequence, so byte newlines are text newlines and
    // every complete line is whole characters.
    let newline = buffer.indexOf(NEWLINE, start)
    if (newline !== -1 && this.pendingBytes > 0) {
      if (this.pendingBytes + newline - start > max) return this.fail()
      this.pending.push(buffer.subarray(start, newline))
      const joined = Buffer.concat(this.pending)
      const line = this.decode(joined, this.textStart(joined, 0, joined.length), joined.length)
      this.pending = []
      this.pendingBytes = 0
      if (!onLine(line)) return this.stop()
      start = newline + 1
      newline = buffer.indexOf(NEWLINE, start)
    }
    while (newline !== -1) {
      if (newline - start > max) return this.fail()
      if (!onLine(this.decode(buffer, this.textStart(buffer, start, newline), newline))) return this.stop()
      start = newline + 1
      newline = buffer.indexOf(NEWLINE, start)
    }
    if (start < buffer.length) {
      this.pendingBytes += buffer.length - start
      if (this.pendingBytes > max) return this.fail()
      // A copy: the network layer owns the chunk, and a view would keep all of it alive.
      this.pending.push(Buffer.from(buffer.subarray(start)))
    }
    return "ok"
  }

  /** The body ended: whatever followed the last `\n` (`""` when the body ended on a newline). */
  end(): string {
    const joined = this.pending.length === 0 ? undefined : Buffer.concat(this.pending)
    const rest = joined === undefined
      ? ""
      : this.decode(joined, this.textStart(joined, 0, joined.length), joined.length)
    this.reset()
    return rest
  }

  /**
   * Where the text of a complete line `[start, end)` begins: past a byte-order mark on the body's
   * first line. Looked for in the whole line, not in the first chunk, which may hold only part of
   * the mark.
   */
  private textStart(buffer: Buffer, start: number, end: number): number {
    if (!this.atStart) return start
    this.atStart = false
    return end - start >= 3 && buffer[start] === 0xef && buffer[start + 1] === 0xbb && buffer[start + 2] === 0xbf
      ? start + 3
      : start
  }

  private fail(): PushResult {
    this.reset()
    return "tooLong"
  }

  private stop(): PushResult {
    this.reset()
    return "stopped"
  }

  private reset(): void {
    this.pending = []
    this.pendingBytes = 0
  }
}

/** What a caller does with the lines of a body. */
export interface LineHandler<A, E> {
  /** One complete line, without its `\n`. Push what it yields to `out`; return an error to stop. */
  readonly onLine: (line: string, out: Array<A>) => E | undefined
  /** The body ended cleanly; `rest` is what followed the last `\n` (`""` when nothing did). */
  readonly onEnd: (rest: string, out: Array<A>) => E | undefined
  /** A line grew past `limitBytes` without a newline. */
  readonly onTooLong: (limitBytes: number) => E
}

/**
 * A body's lines as whatever the handler makes of them, as a pull (what `Stream.toPull` gives: the
 * next `Chunk`, failing with none at the end): `read` gives the body's next bytes (all that arrived
 * since the last read) or `null` at its clean end, and each read becomes one output `Chunk` in one
 * synchronous step (bytes → lines → items), with no stream stage per network read. A read that
 * completes no line emits nothing and reads again. A failed read passes through as it is: the line
 * in progress is dropped, never handed on. Items a read yielded before a line failed are emitted
 * before the failure. Each call starts a new body.
 */
export const pullLines = <A, E, E2, R>(
  read: Effect.Effect<Uint8Array | null, E2, R>,
  maxLineBytes: number,
  handler: LineHandler<A, E>,
  decodeLine?: (bytes: Buffer, start: number, end: number) => string
): Effect.Effect<Chunk.Chunk<A>, Option.Option<E | E2>, R> => {
  const splitter = new LineSplitter(maxLineBytes, decodeLine)
  let finished = false
  /** A failure found after items the same read yielded: reported on the next pull. */
  let failNext: E | undefined = undefined
  // A ready-made cause: `Effect.fail` of an object would capture the current span into it on
  // every run, and every watch ends here.
  const end = Effect.failCause(Cause.fail(Option.none()))
  // The read and what follows it, made once per body rather than once per read.
  const readThen: Effect.Effect<Chunk.Chunk<A>, Option.Option<E | E2>, R> = Effect.matchEffect(read, {
    onFailure: (error) => {
      finished = true
      return Effect.fail(Option.some(error))
    },
    onSuccess: (bytes) => {
      const out: Array<A> = []
      let error: E | undefined = undefined
      if (bytes === null) {
        finished = true
        error = handler.onEnd(splitter.end(), out)
      } else {
        const result = splitter.push(bytes, (line) => {
          error = handler.onLine(line, out)
          return error === undefined
        })
        if (result === "tooLong") error = handler.onTooLong(maxLineBytes)
      }
      if (error !== undefined) {
        finished = true
        if (out.length === 0) return Effect.fail(Option.some(error))
        failNext = error
      }
      if (out.length > 0) return Effect.succeed(Chunk.unsafeFromArray(out))
      return finished ? end : pull
    }
  })
  const pull: Effect.Effect<Chunk.Chunk<A>, Option.Option<E | E2>, R> = Effect.suspend(() => {
    if (failNext !== undefined) {
      const error = failNext
      failNext = undefined
      return Effect.fail(Option.some(error))
    }
    return finished ? end : readThen
  })
  return pull
}

/** A short, single-line rendering of what arrived, for an error a person reads. */
export const excerpt = (text: string, max = 200): string => {
  // Slice before collapsing: the text may be a 16 MiB line.
  const collapsed = text.slice(0, max * 4).replace(/\s+/g, " ").trim()
  if (collapsed.length <= max && text.length <= max * 4) return collapsed
  // Do not cut a surrogate pair in half.
  let end = Math.min(max - 1, collapsed.length)
  const code = collapsed.charCodeAt(end - 1)
  if (code >= 0xd800 && code <= 0xdbff) end -= 1
  return `${collapsed.slice(0, end)}…`
}
