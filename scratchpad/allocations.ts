/**
 * Bytes the Effect runtime allocates per operation the watch does once per chunk read — the
 * figures behind "what bounds tell latency" in the README. Run with a young generation big enough
 * that no collection happens while measuring, so the heap's growth is what was allocated:
 *
 *   node --expose-gc --max-semi-space-size=512 --min-semi-space-size=512 --import tsx scratchpad/allocations.ts
 *
 * Each figure includes the harness's own cost (a promise per operation, and for the consumers a
 * resume from outside, as a socket would): read them against the first lines, not as absolutes.
 */
import { Channel, Chunk, Effect, PubSub, Ref, Stream, SubscriptionRef } from "effect"
import * as v8 from "node:v8"

const operations = 20_000
const usedHeap = () => v8.getHeapStatistics().used_heap_size
const collectGarbage = (globalThis as { gc?: () => void }).gc
if (collectGarbage === undefined) throw new Error("run with --expose-gc (see the header)")

const measure = async (name: string, step: (i: number) => Promise<void>) => {
  for (let i = 0; i < 2_000; i++) await step(i) // warm-up: JIT and lazy initialisation
  collectGarbage()
  const before = usedHeap()
  for (let i = 0; i < operations; i++) await step(i)
  const perOperation = (usedHeap() - before) / operations
  console.log(`${name.padEnd(58)} ${perOperation.toFixed(0).padStart(7)} B`)
}

const run = <A>(effect: Effect.Effect<A>) => () => Effect.runPromise(effect).then(() => undefined)

/** A long-lived consumer fiber fed one chunk at a time from outside (as a socket would). */
const consumer = (
  name: string,
  build: (pull: Effect.Effect<Chunk.Chunk<number>>, onChunk: () => void) => Effect.Effect<unknown>
) => {
  let wake: ((chunk: Chunk.Chunk<number>) => void) | undefined
  const queued: Array<Chunk.Chunk<number>> = []
  const pull = Effect.async<Chunk.Chunk<number>>((resume) => {
    const next = queued.shift()
    if (next !== undefined) return resume(Effect.succeed(next))
    wake = (chunk) => {
      wake = undefined
      resume(Effect.succeed(chunk))
    }
  })
  let consumed: (() => void) | undefined
  Effect.runFork(build(pull, () => consumed?.()))
  return measure(name, () =>
    new Promise<void>((resolve) => {
      consumed = resolve
      const chunk = Chunk.of(1)
      if (wake !== undefined) wake(chunk)
      else queued.push(chunk)
    }))
}

/** A channel stage that passes chunks through: what one operator costs per chunk. */
const passThrough = <A>(): Channel.Channel<Chunk.Chunk<A>, Chunk.Chunk<A>, never, never, unknown, unknown> => {
  const loop: Channel.Channel<Chunk.Chunk<A>, Chunk.Chunk<A>, never, never, unknown, unknown> = Channel.readWithCause({
    onInput: (input: Chunk.Chunk<A>) => Channel.zipRight(Channel.write(input), loop),
    onFailure: (cause) => Channel.failCause(cause),
    onDone: () => Channel.void
  })
  return loop
}

const main = async () => {
  console.log("one operation, run by Effect.runPromise:")
  await measure("  Effect.void (the harness alone)", run(Effect.void))
  const ref = await Effect.runPromise(Ref.make(0))
  await measure("  Ref.modify", run(Ref.modify(ref, (n) => [n, n + 1] as const)))
  const subscriptionRef = await Effect.runPromise(SubscriptionRef.make(0))
  await measure("  SubscriptionRef.modify", run(SubscriptionRef.modify(subscriptionRef, (n) => [n, n + 1] as const)))
  const semaphore = await Effect.runPromise(Effect.makeSemaphore(1))
  await measure(
    "  Semaphore.withPermits(1)(Ref.modify)",
    run(semaphore.withPermits(1)(Ref.modify(ref, (n) => [n, n + 1] as const)))
  )
  const pubsub = await Effect.runPromise(PubSub.unbounded<number>())
  await measure("  PubSub.publish, nobody subscribed", run(PubSub.publish(pubsub, 1)))

  console.log("one chunk through a long-lived consumer:")
  await consumer(
    "  plain loop: Effect.forever(pull, then a sync step)",
    (pull, on) => Effect.forever(Effect.flatMap(pull, () => Effect.sync(on)))
  )
  await consumer(
    "  Stream.repeatEffectChunk | runForEachChunk",
    (pull, on) => Stream.runForEachChunk(Stream.repeatEffectChunk(pull), () => Effect.sync(on))
  )
  await consumer(
    "  ... consumed through Stream.toPull instead",
    (pull, on) =>
      Effect.scoped(
        Effect.flatMap(Stream.toPull(Stream.repeatEffectChunk(pull)), (next) =>
          Effect.forever(Effect.flatMap(next, () => Effect.sync(on))))
      ).pipe(
        Effect.ignore
      )
  )
  await consumer(
    "  ... + Stream.mapError",
    (pull, on) =>
      Stream.runForEachChunk(Stream.repeatEffectChunk(pull).pipe(Stream.mapError((e) => e)), () => Effect.sync(on))
  )
  await consumer(
    "  ... + a pass-through channel stage",
    (pull, on) =>
      Stream.runForEachChunk(
        Stream.pipeThroughChannel(Stream.repeatEffectChunk(pull), passThrough<number>()),
        () => Effect.sync(on)
      )
  )
  await consumer(
    "  ... + Stream.unwrapScoped",
    (pull, on) =>
      Stream.runForEachChunk(Stream.unwrapScoped(Effect.succeed(Stream.repeatEffectChunk(pull))), () => Effect.sync(on))
  )
  await consumer(
    "  ... + Stream.withSpan",
    (pull, on) =>
      Stream.runForEachChunk(Stream.repeatEffectChunk(pull).pipe(Stream.withSpan("chunk")), () => Effect.sync(on))
  )

  console.log("one chunk through a subscription consumed by Stream.runForEach (what `changes` is):")
  const present = (chunk: Chunk.Chunk<number>) => Chunk.map(chunk, (n) => n + 1)
  /** A channel that loops on the pull, writing each chunk (the shape of `SandboxWatch`'s subscriptions). */
  const loopOn = (pull: Effect.Effect<Chunk.Chunk<number>>): Channel.Channel<Chunk.Chunk<number>> => {
    const loop: Channel.Channel<Chunk.Chunk<number>> = Channel.flatMap(
      Channel.fromEffect(pull),
      (chunk) => Channel.flatMap(Channel.write(present(chunk)), () => loop)
    )
    return loop
  }
  await consumer(
    "  Stream.repeatEffectChunk + Stream.ensuring",
    (pull, on) =>
      Stream.runForEach(
        Stream.repeatEffectChunk(Effect.map(pull, present)).pipe(Stream.ensuring(Effect.void)),
        () => Effect.sync(on)
      )
  )
  await consumer(
    "  a channel that loops on the pull + Stream.ensuring",
    (pull, on) =>
      Stream.runForEach(Stream.fromChannel(loopOn(pull)).pipe(Stream.ensuring(Effect.void)), () => Effect.sync(on))
  )
  await consumer(
    "  ... with Channel.ensuring instead",
    (pull, on) =>
      Stream.runForEach(Stream.fromChannel(Channel.ensuring(loopOn(pull), Effect.void)), () => Effect.sync(on))
  )
  await consumer(
    "  ... with neither",
    (pull, on) => Stream.runForEach(Stream.fromChannel(loopOn(pull)), () => Effect.sync(on))
  )
}

void main()
