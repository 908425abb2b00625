/**
 * What a watch costs before its first request: the time from `Layer.build` to the list's arrival
 * at a loopback server (whose list is empty, so nothing after it weighs), then to `synced`.
 * Run: npx tsx scratchpad/startCost.ts
 *
 * With `--cpu-prof` (Node 22: `--experimental-transform-types`), it prints the two windows on the
 * profiler's clock. Seen here: 20–27 ms from `Layer.build` to the list's arrival (the layers 5–7 ms;
 * undici's first connection, which compiles its llhttp WebAssembly, ~3–6 ms; the rest the Effect
 * runtime's code running for the first time, spread thin over many functions) and 11–16 ms more to
 * `synced` for an empty list. The same request on a warm process takes well under 1 ms: this is the
 * fixed part of the benchmark's time to synced at N = 10,000.
 */
import { Context, Effect, Layer } from "effect"
import * as http from "node:http"
import * as KubeClient from "../src/KubeClient.ts"
import * as KubeConfig from "../src/KubeConfig.ts"
import * as SandboxWatch from "../src/SandboxWatch.ts"

let firstRequestAt = 0
let firstRequestMicros = 0n
const server = http.createServer((req, res) => {
  if (firstRequestAt === 0) {
    firstRequestAt = performance.now()
    firstRequestMicros = process.hrtime.bigint() / 1000n
  }
  res.writeHead(200, { "content-type": "application/json" })
  if (req.url?.includes("watch=")) return // held open
  res.end(JSON.stringify({ kind: "SandboxList", metadata: { resourceVersion: "1" }, items: [] }))
})
await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
const port = (server.address() as { port: number }).port

// Idle around the measured part, and its bounds on the profiler's clock, for `--cpu-prof` runs.
await new Promise((resolve) => setTimeout(resolve, 100))
const fromMicros = process.hrtime.bigint() / 1000n
let syncedMicros = 0n
const t0 = performance.now()
const marks: Array<[string, number]> = []
const mark = (what: string) => marks.push([what, performance.now() - t0])
await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
  const config = yield* Layer.build(KubeConfig.layerStatic({ server: `http://127.0.0.1:${port}`, namespace: "ns" }))
  mark("KubeConfig built")
  const client = yield* Layer.build(KubeClient.layer).pipe(Effect.provide(config))
  mark("KubeClient built")
  const context = yield* Layer.build(SandboxWatch.layer({ namespace: "ns" })).pipe(Effect.provide(client))
  mark("SandboxWatch built")
  const watch = Context.get(context, SandboxWatch.SandboxWatch)
  yield* watch.synced
  mark("synced")
  syncedMicros = process.hrtime.bigint() / 1000n
})))
await new Promise((resolve) => setTimeout(resolve, 100))
marks.push(["list arrived", firstRequestAt - t0])
for (const [what, ms] of marks.sort((a, b) => a[1] - b[1])) console.log(`${ms.toFixed(1).padStart(8)} ms  ${what}`)
console.log(
  `profiler windows: start to list ${fromMicros} ${firstRequestMicros}; list to synced ${firstRequestMicros} ${syncedMicros}`
)
server.close()
server.closeAllConnections()
