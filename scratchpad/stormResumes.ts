/**
 * CPU per watch resume, round after round in one process, as the benchmark's storm has it: N
 * Sandboxes listed, `subscribers` `changes` streams on the first names, and a loopback server whose
 * every watch sends one MODIFIED of one of those names and ends. The first rounds show what the
 * JIT's warm-up costs; the last ones the steady state.
 * Run: ROUNDS=8 npx tsx scratchpad/stormResumes.ts [N] [subscribers] [resumes a round] [small]
 * SETTLE=1 (with `node --expose-gc --import tsx`) collects the list's garbage first, as the
 * benchmark does; SUPERVISED=1 runs under `Supervisor.track`, as the benchmark's storm does.
 *
 * Seen here (SETTLE=1, 1,000 resumes a round, server in this process): 0.80, 0.48, 0.30, 0.25,
 * 0.22, 0.21 ms of CPU per resume, round after round; with `--no-opt` 0.80 in every round. The
 * storm's first thousands of resumes run unoptimized, before TurboFan has compiled them.
 * `Supervisor.track` made no difference (0.21 against 0.21 in the last round).
 */
import { Effect, Layer, Stream, Supervisor } from "effect"
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
const wallPerRound: Array<number> = []
const program = Effect.gen(function*() {
  const watch = yield* SandboxWatch.SandboxWatch
  for (let i = 0; i < Subscribers; i++) {
    yield* Effect.forkScoped(Stream.runForEach(watch.changes(nameOf(i)), () => Effect.void))
  }
  yield* watch.synced
  // SETTLE=1 (with node --expose-gc): the list's garbage collected before the first round, as the
  // benchmark does before its window.
  if (process.env.SETTLE === "1") {
    yield* Effect.sleep("200 millis")
    ;(globalThis as { gc?: () => void }).gc?.()
  }
  for (let round = 0; round < Rounds; round++) {
    const c0 = process.cpuUsage()
    const t0 = performance.now()
    const start = server.sent()
    while (server.sent() - start < Resumes) yield* Effect.sleep("5 millis")
    const c1 = process.cpuUsage(c0)
    perRound.push((c1.user + c1.system) / 1000 / (server.sent() - start))
    wallPerRound.push((performance.now() - t0) / (server.sent() - start))
  }
}).pipe(Effect.scoped, Effect.provide(SandboxWatch.layer({ namespace: "ns" }).pipe(Layer.provide(clientLayer))))

// SUPERVISED=1: under `Supervisor.track`, as the benchmark's storm runs (to count fibers).
await Effect.runPromise(
  process.env.SUPERVISED === "1"
    ? Effect.flatMap(Supervisor.track, (supervisor) => Effect.supervised(program, supervisor))
    : program
)
console.log(
  `N = ${N}, ${Subscribers} subscribers, ${big ? "benchmark" : "small"} objects, ${Resumes} resumes a round; ` +
    `ms CPU per resume: ${perRound.map((ms) => ms.toFixed(3)).join(" ")}; ms wall: ${
      wallPerRound.map((ms) => ms.toFixed(3)).join(" ")
    }`
)
server.close()
