import { describe, expect, it } from "@effect/vitest"
import { Chunk, Effect, Either, Option, Stream } from "effect"
import { excerpt, type LineHandler, LineSplitter, pullLines } from "../src/internal/ndjsonLines.ts"

const bytes = (text: string) => new TextEncoder().encode(text)

/** Feeds chunks to a splitter; returns the lines and each push's result. */
const split = (max: number, chunks: ReadonlyArray<Uint8Array>) => {
  const splitter = new LineSplitter(max)
  const lines: Array<string> = []
  const results = chunks.map((chunk) => splitter.push(chunk, (line) => (lines.push(line), true)))
  return { lines, results, rest: splitter.end() }
}

describe("LineSplitter", () => {
  it("splits lines within and across chunks, keeping the partial last line for end()", () => {
    const { lines, rest, results } = split(1024, [bytes("a\nbb"), bytes("b\n\nc"), bytes("cc")])
    expect(lines).toEqual(["a", "bbb", ""])
    expect(results).toEqual(["ok", "ok", "ok"])
    expect(rest).toBe("ccc")
  })

  it("keeps a two-byte character split across chunks whole", () => {
    const encoded = bytes("{\"name\":\"café\"}\n")
    const at = encoded.indexOf(0xc3) + 1 // between the two bytes of "é"
    const { lines, rest } = split(1024, [encoded.subarray(0, at), encoded.subarray(at)])
    expect(lines).toEqual(["{\"name\":\"café\"}"])
    expect(rest).toBe("")
  })

  it("keeps a four-byte emoji whole wherever the chunk boundary falls in it", () => {
    const encoded = bytes("x🦀y\n")
    for (let cut = 1; cut < encoded.length; cut++) {
      const { lines } = split(1024, [encoded.subarray(0, cut), encoded.subarray(cut)])
      expect(lines).toEqual(["x🦀y"])
    }
    // One byte at a time, too.
    const { lines } = split(1024, Array.from(encoded, (b) => Uint8Array.of(b)))
    expect(lines).toEqual(["x🦀y"])
  })

  it("refuses a line in progress that grows past the cap, without waiting for its newline", () => {
    const { lines, results } = split(8, [bytes("ok\n12345"), bytes("6789")])
    expect(lines).toEqual(["ok"])
    expect(results).toEqual(["ok", "tooLong"])
  })

  it("refuses a complete line over the cap, counting bytes, not characters", () => {
    // "éééé" is 4 characters but 8 bytes.
    expect(split(8, [bytes("éééé\n")]).results).toEqual(["ok"])
    expect(split(7, [bytes("éééé\n")]).results).toEqual(["tooLong"])
    expect(split(9, [bytes("0123456789\n")]).results).toEqual(["tooLong"])
    expect(split(10, [bytes("0123456789\n")]).results).toEqual(["ok"])
  })

  it("counts the bytes of a line over several chunks against the cap", () => {
    expect(split(10, [bytes("01234"), bytes("56789"), bytes("\n")]).results).toEqual(["ok", "ok", "ok"])
    expect(split(10, [bytes("01234"), bytes("56789"), bytes("X\n")]).results).toEqual(["ok", "ok", "tooLong"])
  })

  it("skips a byte-order mark at the start of the body only, and replaces invalid UTF-8 as a decoder does", () => {
    expect(split(1024, [bytes("\uFEFFa\n\uFEFFb\n")]).lines).toEqual(["a", "\uFEFFb"])
    // The mark split across the first chunks, or the first line never ended.
    const marked = bytes("\uFEFF{\"a\":1}\n{\"b\":2}\n")
    for (let cut = 1; cut <= 3; cut++) {
      expect(split(1024, [marked.subarray(0, cut), marked.subarray(cut)]).lines).toEqual(["{\"a\":1}", "{\"b\":2}"])
    }
    expect(split(1024, [bytes("\uFEFF"), bytes("x")]).rest).toBe("x")
    const invalid = Uint8Array.of(0x61, 0xff, 0x62, 0x0a)
    expect(split(1024, [invalid]).lines).toEqual([new TextDecoder().decode(invalid.subarray(0, 3))])
  })

  it("stops when the line callback says so", () => {
    const splitter = new LineSplitter(100)
    const seen: Array<string> = []
    const result = splitter.push(bytes("a\nb\nc\n"), (line) => (seen.push(line), line !== "b"))
    expect(result).toBe("stopped")
    expect(seen).toEqual(["a", "b"])
  })
})

/** A handler that turns lines into numbers; "x" is an error. */
const numbers: LineHandler<number, string> = {
  onLine: (line, out) => {
    if (line === "x") return `bad line`
    out.push(Number(line))
    return undefined
  },
  onEnd: (rest, out) => {
    if (rest === "") return undefined
    if (rest === "9") {
      out.push(9)
      return undefined
    }
    return `ended mid-line: ${rest}`
  },
  onTooLong: (limit) => `too long (${limit})`
}

/** A body's reads: each chunk in turn, then its clean end (`null`) or `failure`. */
const readsOf = (chunks: ReadonlyArray<string>, failure?: string): Effect.Effect<Uint8Array | null, string> => {
  let next = 0
  return Effect.suspend(() => {
    if (next < chunks.length) return Effect.succeed(bytes(chunks[next++]!))
    return failure === undefined ? Effect.succeed(null) : Effect.fail(failure)
  })
}

/** The pull as a `Stream`, as `KubeClient.watch` makes one. */
const decodeLines = <A, E>(read: Effect.Effect<Uint8Array | null, string>, max: number, handler: LineHandler<A, E>) =>
  Stream.repeatEffectChunkOption(pullLines(read, max, handler))

describe("pullLines", () => {
  it.effect("emits one chunk per read, all lines of it together; a read that completes no line emits nothing", () =>
    Effect.gen(function*() {
      const chunks = yield* decodeLines(readsOf(["1\n2\n3\n", "4\n5", "\n", "6", "7\n"]), 100, numbers).pipe(
        Stream.chunks,
        Stream.map(Chunk.toReadonlyArray),
        Stream.runCollect
      )
      expect(Chunk.toReadonlyArray(chunks)).toEqual([[1, 2, 3], [4], [5], [67]])
    }))

  it.effect("hands the rest after the last newline to onEnd on a clean end", () =>
    Effect.gen(function*() {
      const good = yield* Stream.runCollect(decodeLines(readsOf(["1\n9"]), 100, numbers))
      expect(Chunk.toReadonlyArray(good)).toEqual([1, 9])
      const cut = yield* decodeLines(readsOf(["1\n{\"ty"]), 100, numbers).pipe(Stream.runCollect, Effect.either)
      expect(cut).toEqual(Either.left("ended mid-line: {\"ty"))
    }))

  it.effect("passes a failed read through and never hands on the partial line", () =>
    Effect.gen(function*() {
      const seen: Array<number> = []
      const result = yield* decodeLines(readsOf(["1\n2\n3"], "connection reset"), 100, numbers).pipe(
        Stream.runForEach((n) => Effect.sync(() => seen.push(n))),
        Effect.either
      )
      expect(seen).toEqual([1, 2])
      expect(result).toEqual(Either.left("connection reset"))
    }))

  it.effect("emits what a read yielded before a bad line, then fails, and reads no further", () =>
    Effect.gen(function*() {
      const seen: Array<number> = []
      const result = yield* decodeLines(readsOf(["1\n2\nx\n3\n", "4\n"]), 100, numbers).pipe(
        Stream.runForEach((n) => Effect.sync(() => seen.push(n))),
        Effect.either
      )
      expect(seen).toEqual([1, 2])
      expect(result).toEqual(Either.left("bad line"))
    }))

  it.effect("fails with onTooLong when a line passes the cap", () =>
    Effect.gen(function*() {
      const result = yield* decodeLines(readsOf(["1\n", "123456789"]), 8, numbers).pipe(
        Stream.runCollect,
        Effect.either
      )
      expect(result).toEqual(Either.left("too long (8)"))
    }))

  it.effect("each call starts a new body: a line one left incomplete never reaches the next", () =>
    Effect.gen(function*() {
      let reads = 0
      const read = Effect.suspend(() => Effect.succeed(reads++ === 0 ? bytes("1\n2") : null))
      const handler: LineHandler<number, string> = {
        ...numbers,
        onEnd: (rest, out) => void (rest === "" ? undefined : out.push(Number(rest)))
      }
      expect(Chunk.toReadonlyArray(yield* pullLines(read, 100, handler))).toEqual([1])
      // The second body ends at once, with nothing of the first's "2".
      expect(yield* Effect.flip(pullLines(read, 100, handler))).toEqual(Option.none())
    }))
})

describe("excerpt", () => {
  it("collapses whitespace and caps the length at 200 characters", () => {
    expect(excerpt("  a \n\t b  ")).toBe("a b")
    const long = excerpt("y".repeat(10_000))
    expect(long.length).toBe(200)
    expect(long.endsWith("…")).toBe(true)
  })
})
