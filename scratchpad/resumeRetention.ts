/**
 * What a watch keeps per resume, in one process and without the benchmark's fiber supervision: a
 * loopback server that closes every watch after one event, the heap (after GC) at 2,000 and 8,000
 * resumes, with `N` idle `changes` subscribers.
 *
 *   node --expose-gc --import tsx scratchpad/resumeRetention.ts [N]
 *
 * Run against this commit and 93f7215 it gave -50 to 148 B per resume for both (noise), while the
 * benchmark's storm row (which supervises every fiber) moved from ~60 to ~190 B.
 */
import { Effect, Layer, Stream } from "effect"
import * as v8 from "node:v8"
import * as KubeClient from "../src/KubeClient.ts"
import * as KubeConfig from "../src/KubeConfig.ts"
import * as SandboxWatch from "../src/SandboxWatch.ts"
import { nameOf } from "../test/bench/data.ts"
import { startResumeServer } from "./resumeServer.ts"
const server = await startResumeServer({ listed: 100, target: (resourceVersion) => resourceVersion % 100 })
const gc = (globalThis as any).gc as () => void
const heap = () => {
  gc()
  gc()
  return v8.getHeapStatistics().used_heap_size
}
const subs = Number(process.argv[2] ?? 0)
const prog = Effect.gen(function*() {
  const watch = yield* SandboxWatch.SandboxWatch
  yield* watch.synced
  for (let i = 0; i < subs; i++) yield* Effect.forkScoped(Stream.runDrain(watch.changes(nameOf(i))))
  const until = (n: number) =>
    Effect.gen(function*() {
      while (server.sent() < n) yield* Effect.sleep("5 millis")
    })
  yield* until(2000)
  const a = heap()
  yield* until(8000)
  const b = heap()
  console.log(
    `subscribers ${subs}: kept ${((b - a) / 6000).toFixed(0)} B per resume (${((b - a) / 1e6).toFixed(2)} MB over 6000)`
  )
}).pipe(
  Effect.scoped,
  Effect.provide(
    SandboxWatch.layer({ namespace: "ns" }).pipe(
      Layer.provide(KubeClient.layer),
      Layer.provide(KubeConfig.layerStatic({ server: server.url }))
    )
  )
)
await Effect.runPromise(prog)
server.close()
