/**
 * CPU per watch resume, round after round in one process, as the benchmark's storm has it: N
 * Sandboxes listed, `subscribers` `changes` streams on the first names, and a loopback server whose
 * every watch sends one MODIFIED of one of those names and ends. The first rounds show what the
 * JIT's warm-up costs; the last ones the steady state.
 * Run: ROUNDS=8 npx tsx scratchpad/stormResumes.ts [N] [subscribers] [resumes a round] [small]
 */
import { Effect, Layer, Stream } from "effect"
import * as KubeClient from "../src/KubeClient.ts"
import * as KubeConfig from "../src/KubeConfig.ts"
import * as SandboxWatch from "../src/SandboxWatch.ts"
import { nameOf } from "../test/bench/data.ts"
import { benchSandbox, smallSandbox, startResumeServer } from "./resumeServer.ts"

const N = Number(process.argv[2] ?? 10_000)
const Subscribers = Number(process.argv[3] ?? 100)
const Resumes = Number(process.argv[4] ?? 1000)
const Rounds = Number(process.env.ROUNDS ?? 8)
const big = process.argv[5] !== "small"
const server = await startResumeServer({
  listed: N,
  target: (resourceVersion) => resourceVersion % Math.max(1, Math.min(Subscribers, N)),
  object: big ? benchSandbox : smallSandbox
})
const clientLayer = KubeClient.layer.pipe(Layer.provide(KubeConfig.layerStatic({ server: server.url })))

const perRound: Array<number> = []
const program = Effect.gen(function*() {
  const watch = yield* SandboxWatch.SandboxWatch
  for (let i = 0; i < Subscribers; i++) {
    yield* Effect.forkScoped(Stream.runForEach(watch.changes(nameOf(i)), () => Effect.void))
  }
  yield* watch.synced
  for (let round = 0; round < Rounds; round++) {
    const c0 = process.cpuUsage()
    const start = server.sent()
    while (server.sent() - start < Resumes) yield* Effect.sleep("5 millis")
    const c1 = process.cpuUsage(c0)
    perRound.push((c1.user + c1.system) / 1000 / (server.sent() - start))
  }
}).pipe(Effect.scoped, Effect.provide(SandboxWatch.layer({ namespace: "ns" }).pipe(Layer.provide(clientLayer))))

await Effect.runPromise(program)
console.log(
  `N = ${N}, ${Subscribers} subscribers, ${big ? "benchmark" : "small"} objects, ${Resumes} resumes a round; ` +
    `ms CPU per resume: ${perRound.map((ms) => ms.toFixed(3)).join(" ")}`
)
server.close()
