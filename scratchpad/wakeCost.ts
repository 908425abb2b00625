/**
 * Bytes and CPU one subscriber wake costs, by how the subscriber reads: one `LatestMailbox` told a
 * value at a time from outside (as the watch's cache step tells), read as a plain fiber loop, as
 * `waitFor` reads, and as `Stream.runForEach(changes(name), f)` reads (`changes`: the channel
 * `subscriptions.ts` builds), beside two other shapes: `Stream.repeatEffectChunk` over the same take,
 * and the same channel consumed by `Stream.runForEachChunk` (no `Effect.forEach` per chunk).
 * What it shows (`test/bench/results/2026-12-07-warm-up.md`): most of a `changes` wake is the
 * consumer's side of effect's Stream (its channel executor, the sink's `Effect.forEach`), which a
 * stream's producer cannot change.
 *
 *   node --expose-gc --max-semi-space-size=512 --min-semi-space-size=512 --import tsx scratchpad/wakeCost.ts [variant]
 *
 * More shapes of the same stream, all read by `runForEach`: `builtOnce` (the channel as it was: one loop
 * built once; it allocates less per wake, but the bench's fanout row runs slower with it),
 * `repeated` (`Channel.repeated`), `unwrapLoop` (`Channel.unwrap` per wake) and `fromPull`
 * (`Stream.fromPull`). None costs much less than `changes`.
 *
 * `KEYS=many` reads from a mailbox of many keys (a `Map`), as a name's subscriber did before its
 * mailbox held its one key in two fields.
 *
 * Exact bytes: the young generation is big enough that no collection runs in the window, so the
 * heap's growth is what was allocated; `harness` is the driver's own cost (a promise per wake).
 * `TOP=n` lists the n functions that allocate most (V8's sampling heap profiler: slow, and its CPU
 * figure then counts the profiler too).
 */
import { Channel, Chunk, Effect, Option, Stream } from "effect"
import * as v8 from "node:v8"
import { LatestMailbox } from "../src/internal/latestMailbox.ts"
import { printTopAllocators, startHeapSampling } from "./heapSampling.ts"

const wakes = 20_000
const collectGarbage = (globalThis as { gc?: () => void }).gc
if (collectGarbage === undefined) throw new Error("run with --expose-gc (see the header)")
const top = Number(process.env.TOP ?? 0)

type Value = Option.Option<number>
const valueOf = (_name: string, value: Value) => value

/** A reader of `mailbox` that calls `onValue` for every value it takes. */
type Reader = (mailbox: LatestMailbox<string, Value>, onValue: () => void) => Effect.Effect<unknown>

/** The channel `subscriptions.ts` builds: each wake's step made new. */
const channelLoop = (take: Effect.Effect<Chunk.Chunk<Value>>): Channel.Channel<Chunk.Chunk<Value>> => {
  const next = (): Channel.Channel<Chunk.Chunk<Value>> =>
    Channel.flatMap(Channel.fromEffect(take), (pending) => Channel.flatMap(Channel.write(pending), next))
  return next()
}

/** The channel it built before: one loop, built once and re-entered on every wake. */
const channelBuiltOnce = (take: Effect.Effect<Chunk.Chunk<Value>>): Channel.Channel<Chunk.Chunk<Value>> => {
  const loop: Channel.Channel<Chunk.Chunk<Value>> = Channel.flatMap(
    Channel.flatMap(Channel.fromEffect(take), (pending) => Channel.write(pending)),
    () => loop
  )
  return loop
}

const readers: Record<string, Reader> = {
  harness: () => Effect.never,
  plain: (mailbox, onValue) => {
    const take = mailbox.taker(valueOf)
    return Effect.forever(Effect.map(take, (values) => {
      for (const _ of values) onValue()
    }))
  },
  waitFor: (mailbox, onValue) => {
    const take = mailbox.taker(valueOf)
    const step = (_: Value) => Effect.sync(() => (onValue(), Option.none()))
    return Effect.gen(function*() {
      for (;;) {
        for (const value of yield* take) {
          const answer = yield* step(value)
          if (Option.isSome(answer)) return answer.value
        }
      }
    })
  },
  changes: (mailbox, onValue) =>
    Stream.runForEach(Stream.fromChannel(channelLoop(mailbox.taker(valueOf))), () => Effect.sync(onValue)),
  builtOnce: (mailbox, onValue) =>
    Stream.runForEach(Stream.fromChannel(channelBuiltOnce(mailbox.taker(valueOf))), () => Effect.sync(onValue)),
  repeatEffectChunk: (mailbox, onValue) =>
    Stream.runForEach(Stream.repeatEffectChunk(mailbox.taker(valueOf)), () => Effect.sync(onValue)),
  repeated: (mailbox, onValue) => {
    const take = mailbox.taker(valueOf)
    const once = Channel.flatMap(Channel.fromEffect(take), (pending) => Channel.write(pending))
    return Stream.runForEach(Stream.fromChannel(Channel.repeated(once)), () => Effect.sync(onValue))
  },
  unwrapLoop: (mailbox, onValue) => {
    const take = mailbox.taker(valueOf)
    const loop: Channel.Channel<Chunk.Chunk<Value>> = Channel.unwrap(
      Effect.map(take, (pending) => Channel.zipRight(Channel.write(pending), Channel.suspend(() => loop)))
    )
    return Stream.runForEach(Stream.fromChannel(loop), () => Effect.sync(onValue))
  },
  fromPull: (mailbox, onValue) =>
    Stream.runForEach(Stream.fromPull(Effect.succeed(mailbox.taker(valueOf))), () => Effect.sync(onValue)),
  forEachChunk: (mailbox, onValue) =>
    Stream.runForEachChunk(Stream.fromChannel(channelLoop(mailbox.taker(valueOf))), () => Effect.sync(onValue))
}

// `KEYS=many`: the mailbox a name's subscriber had before it held its one key in two fields.
const keys = process.env.KEYS === "many" ? "many" : "one"

const measure = async (name: string, reader: Reader) => {
  const mailbox = new LatestMailbox<string, Value>(keys)
  let told: (() => void) | undefined
  const onValue = () => told?.()
  Effect.runFork(reader(mailbox, onValue))
  const harness = name === "harness"
  const wake = (i: number) =>
    new Promise<void>((resolve) => {
      told = resolve
      // The tell: stored, then the reader woken after the step, as `cacheSteps.ts` does.
      mailbox.put("s", Option.some(i))
      if (harness) setImmediate(resolve)
    })
  for (let i = 0; i < 3_000; i++) await wake(i)
  collectGarbage()
  const sampling = top > 0 ? await startHeapSampling(512) : undefined
  const before = v8.getHeapStatistics().used_heap_size
  const cpu0 = process.cpuUsage()
  for (let i = 0; i < wakes; i++) await wake(i)
  const cpu = process.cpuUsage(cpu0)
  const bytes = (v8.getHeapStatistics().used_heap_size - before) / wakes
  console.log(
    `${name.padEnd(20)} ${bytes.toFixed(0).padStart(7)} B/wake ${
      ((cpu.user + cpu.system) * 1000 / wakes).toFixed(0).padStart(7)
    } ns CPU/wake`
  )
  if (sampling !== undefined) printTopAllocators(await sampling.stop(), wakes, top)
}

const main = async () => {
  const only = process.argv[2]
  for (const [name, reader] of Object.entries(readers)) {
    if (only === undefined || only === name) await measure(name, reader)
  }
}

void main()
