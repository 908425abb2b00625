/**
 * The body reader under the client: what a read gets when the stream's events come in awkward
 * orders. A plain `Readable` stands in for undici's body; no time passes, only loop turns.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Option } from "effect"
import { Readable } from "node:stream"
import * as Zlib from "node:zlib"
import { BodyReader, gunzipped } from "../src/internal/undiciExchange.ts"

/** One turn of the event loop: the stream's `readable`, `end` and `error` events are emitted on the next tick. */
const turn = Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve)))

const body = () => {
  const stream = new Readable({ read() {} })
  return { stream, reader: new BodyReader(stream) }
}

const text = (bytes: Buffer | null) => (bytes === null ? null : bytes.toString())

describe("BodyReader", () => {
  it.effect("gives what arrived since the last read, then null at the end", () =>
    Effect.gen(function*() {
      const { reader, stream } = body()
      const waiting = yield* Effect.fork(reader.next)
      yield* turn
      stream.push(Buffer.from("a"))
      stream.push(Buffer.from("b"))
      expect(text(yield* Fiber.join(waiting))).toBe("ab")
      stream.push(null)
      yield* turn
      expect(yield* reader.next).toBeNull()
    }))

  it.effect("a read interrupted while it waits leaves the next bytes for the next read", () =>
    Effect.gen(function*() {
      const { reader, stream } = body()
      stream.push(Buffer.from("1"))
      expect(text(yield* reader.next)).toBe("1")
      // A caller gives up on a read (a timeout of its own), then reads again later.
      const abandoned = yield* Effect.fork(reader.next)
      yield* turn
      yield* Fiber.interrupt(abandoned)
      stream.push(Buffer.from("2"))
      yield* turn
      yield* turn
      const next = yield* Effect.fork(reader.next)
      yield* turn
      const got = yield* Fiber.poll(next)
      expect(Option.map(got, Exit.map(text))).toEqual(Option.some(Exit.succeed("2")))
    }))

  it.effect("says whether bytes arrived that no read has taken", () =>
    Effect.gen(function*() {
      const { reader, stream } = body()
      expect(reader.unread).toBe(false)
      stream.push(Buffer.from("waiting"))
      expect(reader.unread).toBe(true)
      expect(text(yield* reader.next)).toBe("waiting")
      expect(reader.unread).toBe(false)
    }))

  it.effect("a limit's failure is what later reads report, not the abort the stream reports after it", () =>
    Effect.gen(function*() {
      const { reader, stream } = body()
      const waiting = yield* Effect.fork(reader.next)
      yield* turn
      const idle = new Error("sent nothing for 300ms")
      reader.fail(idle)
      // What undici does when its body is destroyed: an error of its own.
      stream.emit("error", Object.assign(new Error("Request aborted"), { code: "UND_ERR_ABORTED" }))
      yield* turn
      expect(yield* Effect.flip(Fiber.join(waiting))).toBe(idle)
      expect(yield* Effect.flip(reader.next)).toBe(idle)
    }))
})

describe("a gzipped body (a streaming list from 1.37 with WatchListCompression)", () => {
  const gzipped = () => {
    const stream = new Readable({ read() {} })
    return { stream, reader: new BodyReader(gunzipped(stream)) }
  }

  /** Reads until the end, as the watch does. */
  const readAll = (reader: BodyReader): Effect.Effect<string, unknown> =>
    Effect.gen(function*() {
      let all = ""
      for (;;) {
        const bytes = yield* reader.next
        if (bytes === null) return all
        all += bytes.toString()
      }
    })

  it.effect("is inflated as it is read, one gzip member after another (the server flushes a member at a time)", () =>
    Effect.gen(function*() {
      const { reader, stream } = gzipped()
      const reading = yield* Effect.fork(readAll(reader))
      stream.push(Zlib.gzipSync("{\"type\":\"ADDED\"}\n"))
      yield* turn
      const second = Zlib.gzipSync("{\"type\":\"BOOKMARK\"}\n")
      // A member split across two network reads.
      stream.push(second.subarray(0, 7))
      yield* turn
      stream.push(second.subarray(7))
      stream.push(null)
      expect(yield* Fiber.join(reading)).toBe("{\"type\":\"ADDED\"}\n{\"type\":\"BOOKMARK\"}\n")
    }))

  it.effect("a discard destroys the socket's stream under it, which ends the request", () =>
    Effect.gen(function*() {
      const { reader, stream } = gzipped()
      stream.push(Zlib.gzipSync("partial"))
      yield* turn
      reader.discard()
      yield* turn
      expect(stream.destroyed).toBe(true)
    }))

  it.effect("bytes that are not gzip fail the read, not the process", () =>
    Effect.gen(function*() {
      const { reader, stream } = gzipped()
      stream.push(Buffer.from("this is not gzip at all"))
      const failed = yield* Effect.exit(readAll(reader))
      expect(Exit.isFailure(failed)).toBe(true)
    }))
})
