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
import * as http from "node:http"
import * as v8 from "node:v8"
import * as KubeClient from "../src/KubeClient.ts"
import * as KubeConfig from "../src/KubeConfig.ts"
import * as SandboxWatch from "../src/SandboxWatch.ts"
let rv = 100
const object = (name: string, resourceVersion: number) => ({
  apiVersion: "jr2.dev/v1alpha1",
  kind: "Sandbox",
  metadata: { name, namespace: "ns", resourceVersion: String(resourceVersion), labels: { "jr2.dev/run": "r" } },
  status: { phase: "Ready" }
})
let watches = 0
const server = http.createServer((req, res) => {
  res.writeHead(200, { "content-type": "application/json" })
  if (req.url?.includes("watch=")) {
    watches++
    res.end(JSON.stringify({ type: "MODIFIED", object: object(`s${watches % 100}`, ++rv) }) + "\n")
  } else {res.end(
      JSON.stringify({
        kind: "SandboxList",
        metadata: { resourceVersion: String(rv) },
        items: Array.from({ length: 100 }, (_, i) => object(`s${i}`, rv))
      })
    )}
})
await new Promise<void>((r) => server.listen(0, "127.0.0.1", r))
const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`
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
  for (let i = 0; i < subs; i++) yield* Effect.forkScoped(Stream.runDrain(watch.changes(`s${i}`)))
  const until = (n: number) =>
    Effect.gen(function*() {
      while (watches < n) yield* Effect.sleep("5 millis")
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
      Layer.provide(KubeConfig.layerStatic({ server: url }))
    )
  )
)
await Effect.runPromise(prog)
server.close()
