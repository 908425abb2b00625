/**
 * Does a stream's channel, read by `Stream.runForEach`, keep the values it wrote past young
 * collections? Written to test a guess that turned out wrong. In the watch, what young collections
 * do not take back depends on how big V8's young generation is, whatever the channel's shape
 * (`test/bench/results/2026-12-07-promotion.md`, sections 2 and 3).
 *
 * No network here. 100 mailboxes, each read by one stream, are told a fresh ~3 KB object in turn,
 * about 1,000 a second from a fiber. Each value is also held in a persistent map until its name's
 * next value, and `AMBIENT` (default 60) sets how much other garbage comes with it. The probe prints
 * the bytes per value that no young collection took back, counting the values' own objects only.
 *
 *   node --import tsx scratchpad/channelRetention.ts [producer] [consumer]
 *
 * `producer`: `fresh` (each wake's step made new, as `subscriptions.ts` builds it) or `builtOnce`
 * (one loop built once and re-entered, as it was). `consumer`: `runForEach`, `runForEachChunk`,
 * `toPull` (a loop over `Stream.toPull`) or `sink` (`Stream.run` into a sink whose step is made new
 * per chunk).
 *
 * What it shows:
 * - `builtOnce`: 43–87 B per value with `runForEach`, 277 B with `runForEachChunk`, 0 B with `toPull`
 *   and `sink`.
 * - `fresh`: 0–46 B with every consumer.
 *
 * Too little to matter, next to the ~4 KB per event that the watch promotes in the runs where the
 * young generation is still small.
 */
import { Channel, Chunk, Effect, HashMap, Option, Sink, Stream } from "effect"
import { LatestMailbox } from "../src/internal/latestMailbox.ts"
import { type ProfileNode, startHeapSampling } from "./heapSampling.ts"

type Value = Option.Option<unknown>
const valueOf = (_name: string, value: Value) => value

const producers = {
  fresh: (take: Effect.Effect<Chunk.Chunk<Value>>): Channel.Channel<Chunk.Chunk<Value>> => {
    const next = (): Channel.Channel<Chunk.Chunk<Value>> =>
      Channel.flatMap(Channel.fromEffect(take), (pending) => Channel.flatMap(Channel.write(pending), next))
    return next()
  },
  builtOnce: (take: Effect.Effect<Chunk.Chunk<Value>>): Channel.Channel<Chunk.Chunk<Value>> => {
    const loop: Channel.Channel<Chunk.Chunk<Value>> = Channel.flatMap(
      Channel.flatMap(Channel.fromEffect(take), (pending) => Channel.write(pending)),
      () => loop
    )
    return loop
  }
} as const

/** A sink that calls `f` for each element, its read step made new for every chunk. */
const freshForEach = (f: (value: Value) => void): Sink.Sink<void, Value> => {
  const step = (): Channel.Channel<never, Chunk.Chunk<Value>, never, never, void, unknown> =>
    Channel.readWith({
      onInput: (input: Chunk.Chunk<Value>) => {
        Chunk.forEach(input, f)
        return step()
      },
      onFailure: Channel.fail,
      onDone: () => Channel.void
    })
  return Sink.fromChannel(step())
}

const consumers = {
  runForEach: (stream: Stream.Stream<Value>, f: (value: Value) => void) =>
    Stream.runForEach(stream, (value) => Effect.sync(() => f(value))),
  runForEachChunk: (stream: Stream.Stream<Value>, f: (value: Value) => void) =>
    Stream.runForEachChunk(stream, (values) => Effect.sync(() => Chunk.forEach(values, f))),
  toPull: (stream: Stream.Stream<Value>, f: (value: Value) => void) =>
    Effect.scoped(
      Effect.flatMap(Stream.toPull(stream), (pull) =>
        Effect.forever(Effect.map(pull, (values) => Chunk.forEach(values, f))))
    ),
  sink: (stream: Stream.Stream<Value>, f: (value: Value) => void) => Stream.run(stream, freshForEach(f))
} as const

const producer = (process.argv[2] ?? "fresh") as keyof typeof producers
const consumer = (process.argv[3] ?? "runForEach") as keyof typeof consumers
if (!(producer in producers) || !(consumer in consumers)) {
  throw new Error("usage: scratchpad/channelRetention.ts fresh|builtOnce runForEach|runForEachChunk|toPull|sink")
}

const template = JSON.stringify({
  apiVersion: "jr2.dev/v1alpha1",
  kind: "Sandbox",
  metadata: { name: "x", labels: { a: "b" }, annotations: { note: "n".repeat(400) } },
  spec: { items: Array.from({ length: 40 }, (_, i) => ({ key: `k${i}`, value: "v".repeat(30) })) }
})
/** A value of its own, as a parsed event is: named so the profile can tell its objects apart. */
function makeValue(): Value {
  return Option.some(JSON.parse(template))
}
/** The rest of an event's garbage, dropped at once. */
function makeAmbient(): number {
  return Array.from({ length: Number(process.env.AMBIENT ?? 60) }, () => ({ a: 1, b: "x", c: [1, 2, 3] })).length
}

const main = async () => {
  const mailboxes = Array.from({ length: 100 }, () => new LatestMailbox<string, Value>("one"))
  let seen = 0
  for (const mailbox of mailboxes) {
    // As `subscriptions.ts` wraps it: a first step (its registration), a finalizer, a suspend.
    const stream = Stream.suspend(() =>
      Stream.fromChannel(
        Channel.flatMap(Channel.fromEffect(Effect.void), () => producers[producer](mailbox.taker(valueOf)))
      ).pipe(Stream.ensuring(Effect.void))
    )
    Effect.runFork(consumers[consumer](stream, () => seen++))
  }
  let told = 0
  // As the watch tells: from a fiber, each value also put in a persistent map (the cache) that
  // holds it until the name's next value, the mailbox stored first and its reader woken after.
  let cache = HashMap.empty<number, Value>()
  const tellOne = Effect.sync(() => {
    const index = told++ % mailboxes.length
    const value = makeValue()
    cache = HashMap.set(cache, index, value)
    const mailbox = mailboxes[index]!
    const waiting = mailbox.store("s", value)
    makeAmbient()
    if (waiting) mailbox.wakeReader()
  })
  const tellFor = (ms: number) =>
    Effect.runPromise(
      Effect.gen(function*() {
        const until = Date.now() + ms
        while (Date.now() < until) {
          yield* tellOne
          yield* Effect.sleep("1 millis")
        }
      })
    )
  await tellFor(1_000) // warm-up, not counted
  const sampling = await startHeapSampling(256, false)
  const before = told
  await tellFor(6_000)
  const values = told - before
  // Another second of garbage only, so what was still young when the telling stopped is collected.
  for (let i = 0; i < 1_000; i++) {
    makeAmbient()
    await new Promise((resolve) => setImmediate(resolve))
  }
  const head = await sampling.stop()
  let kept = 0
  const walk = (node: ProfileNode, inValue: boolean) => {
    const here = inValue || node.callFrame.functionName === "makeValue"
    if (here) kept += node.selfSize
    for (const child of node.children) walk(child, here)
  }
  walk(head, false)
  console.log(
    `${producer.padEnd(10)} ${consumer.padEnd(16)} ${values} values (${seen} seen): ${
      (kept / values).toFixed(0).padStart(5)
    } B of each value kept past young collections`
  )
  process.exit(0)
}

void main()
