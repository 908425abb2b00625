/**
 * What an idle subscription weighs, by how its Stream is built: N fibers each running
 * `Stream.runForEach` over a stream whose pull waits for ever (as an idle `changes` does on its
 * mailbox), heap after a full collection, minus the heap before.
 * Run: node --expose-gc --import tsx scratchpad/idleStreams.ts [N]
 */
import { Channel, Chunk, Deferred, Effect, Stream } from "effect"

declare const gc: () => void
const N = Number(process.argv[2] ?? 10_000)

const settled = async () => {
  await new Promise((r) => setTimeout(r, 50))
  for (let i = 0; i < 4; i++) {
    gc()
    await new Promise((r) => setImmediate(r))
  }
  return process.memoryUsage().heapUsed
}

type Make = (pull: Effect.Effect<Chunk.Chunk<number>>) => Stream.Stream<number>

const variants: Record<string, Make> = {
  // As SandboxWatch.changes builds it today.
  repeatEffectChunk: (pull) =>
    Stream.suspend(() =>
      Stream.repeatEffectChunk(Effect.map(pull, Chunk.map((x: number) => x))).pipe(
        Stream.ensuring(Effect.void)
      )
    ),
  bareRepeat: (pull) => Stream.repeatEffectChunk(pull),
  channel: (pull) => {
    const loop: Channel.Channel<Chunk.Chunk<number>> = Channel.flatMap(
      Channel.fromEffect(pull),
      (chunk) => Channel.zipRight(Channel.write(chunk), Channel.suspend(() => loop))
    )
    return Stream.fromChannel(Channel.ensuring(loop, Effect.void))
  }
}

for (const [name, make] of Object.entries(variants)) {
  const before = await settled()
  const never = Deferred.unsafeMake<Chunk.Chunk<number>>(undefined as never)
  const fibers = []
  for (let i = 0; i < N; i++) {
    fibers.push(Effect.runFork(Stream.runForEach(make(Deferred.await(never)), () => Effect.void)))
  }
  await new Promise((r) => setTimeout(r, 100))
  const after = await settled()
  console.log(`${name.padEnd(20)} ${((after - before) / N).toFixed(0)} bytes per idle subscription`)
  await Effect.runPromise(Effect.forEach(fibers, (f) => f.interruptAsFork(f.id()), { discard: true }))
  for (const f of fibers) await Effect.runPromise(f.await)
}
