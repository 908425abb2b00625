/**
 * The loop a `waitFor` runs on every wake, as a generator (`Effect.gen` with a `for` over each
 * chunk) and as recursion through `flatMap`: N values put one at a time into a mailbox, each taken
 * and stepped, the last one answering. CPU per wake and bytes allocated per wake.
 * Run: node --expose-gc --import tsx scratchpad/waitForLoop.ts [N]
 *
 * Seen here (2026-12-04): 2.23–2.29 µs per wake as a generator, 2.12–2.38 as recursion: no
 * difference, so `waitFor` keeps its generator. A generator that lives as long as its loop costs
 * nothing once optimized; what cost a watch resume 5.7 µs in `openWatch` was a new generator per
 * resume, resumed four times.
 */
import { Chunk, Effect, Option } from "effect"
import { LatestMailbox } from "../src/internal/latestMailbox.ts"

const N = Number(process.argv[2] ?? 100_000)

type Step = (value: number) => Effect.Effect<Option.Option<number>>

const asGenerator = (mailbox: LatestMailbox<string, number>, step: Step) =>
  Effect.gen(function*() {
    for (;;) {
      for (const [, value] of yield* mailbox.takeAll) {
        const answer = yield* step(value)
        if (Option.isSome(answer)) return answer.value
      }
    }
  })

const asRecursion = (mailbox: LatestMailbox<string, number>, step: Step) => {
  const through = (pending: Chunk.Chunk<readonly [string, number]>, index: number): Effect.Effect<number> =>
    index >= pending.length
      ? next
      : Effect.flatMap(
        step(Chunk.unsafeGet(pending, index)[1]),
        (answer) => (Option.isSome(answer) ? Effect.succeed(answer.value) : through(pending, index + 1))
      )
  const next: Effect.Effect<number> = Effect.flatMap(mailbox.takeAll, (pending) => through(pending, 0))
  return next
}

const run = async (label: string, loop: typeof asGenerator) => {
  const mailbox = new LatestMailbox<string, number>()
  const step: Step = (value) => Effect.sync(() => (value === N ? Option.some(value) : Option.none()))
  // The feeder puts one value per macrotask, so every take waits and is woken, as a subscriber is.
  let i = 0
  const feed = () => {
    if (++i > N) return
    mailbox.put("name", i)
    setImmediate(feed)
  }
  ;(globalThis as { gc?: () => void }).gc?.()
  const heap0 = process.memoryUsage().heapUsed
  const c0 = process.cpuUsage()
  setImmediate(feed)
  const result = await Effect.runPromise(loop(mailbox, step))
  const c1 = process.cpuUsage(c0)
  console.log(
    `${label.padEnd(10)} ${result}: ${((c1.user + c1.system) / N).toFixed(2)} µs CPU per wake (feeder included)` +
      `, heap +${((process.memoryUsage().heapUsed - heap0) / N).toFixed(0)} B per wake before collection`
  )
}

for (let round = 0; round < 3; round++) {
  await run("generator", asGenerator)
  await run("recursion", asRecursion)
}
