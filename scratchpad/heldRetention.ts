/**
 * What an open watch keeps per event: the heap after a full collection, before and after a run of
 * events on one held watch (100 `changes` subscribers, events over 100 names, as the latency row;
 * `SUBSCRIBERS=0` for none). The server runs in this process, so `--trace-gc` counts its work too:
 * for the client's own collections use the benchmark (`BENCH_STDOUT`, test/bench/README.md).
 * Run: node --expose-gc --trace-gc --import tsx scratchpad/heldRetention.ts [events]
 */
import { Effect, Layer, Stream } from "effect"
import * as v8 from "node:v8"
import * as KubeClient from "../src/KubeClient.ts"
import * as KubeConfig from "../src/KubeConfig.ts"
import * as SandboxWatch from "../src/SandboxWatch.ts"
import { nameOf } from "../test/bench/data.ts"
import { benchSandbox, startResumeServer } from "./resumeServer.ts"

const Events = Number(process.argv.find((arg) => /^\d+$/.test(arg)) ?? 3000)
const Subscribers = Number(process.env.SUBSCRIBERS ?? 100)
const gc = (globalThis as { gc?: () => void }).gc!
const server = await startResumeServer({ listed: 10_000, target: (rv) => rv % 100, object: benchSandbox, held: true })
const clientLayer = KubeClient.layer.pipe(Layer.provide(KubeConfig.layerStatic({ server: server.url })))
const settledHeap = () => {
  gc()
  gc()
  return v8.getHeapStatistics().used_heap_size
}

const program = Effect.gen(function*() {
  const watch = yield* SandboxWatch.SandboxWatch
  for (let i = 0; i < Subscribers; i++) {
    yield* Effect.forkScoped(Stream.runForEach(watch.changes(nameOf(i)), () => Effect.void))
  }
  yield* watch.synced
  const waitFor = (n: number) =>
    Effect.gen(function*() {
      const start = server.sent()
      while (server.sent() - start < n) yield* Effect.sleep("5 millis")
    })
  yield* waitFor(500)
  const before = settledHeap()
  yield* waitFor(Events)
  const after = settledHeap()
  console.log(`${Events} events: heap ${((after - before) / 1024).toFixed(0)} KB more after a full collection`)
}).pipe(Effect.scoped, Effect.provide(SandboxWatch.layer({ namespace: "ns" }).pipe(Layer.provide(clientLayer))))

await Effect.runPromise(program)
server.close()
