/**
 * What one watch costs, layer by layer, against a loopback server that answers each watch with one
 * bookmark and ends it: the CPU per watch of
 *   request   — the request alone (internal/undiciExchange's send, body read to its end)
 *   stream    — KubeClient.watch, drained with Stream.runDrain
 *   toPull    — KubeClient.watch turned into a pull in a scope (how SandboxWatch read it before)
 *   openWatch — KubeClient.openWatch in a scope, pulled to its end (how SandboxWatch reads it now)
 * Run: npx tsx scratchpad/watchLayers.ts [N]
 */
import { Clock, Effect, Layer, Stream } from "effect"
import * as http from "node:http"
import { Agent } from "undici"
import { DeadlineTimer } from "../src/internal/deadlineTimer.ts"
import { send, targetOf } from "../src/internal/undiciExchange.ts"
import * as KubeClient from "../src/KubeClient.ts"
import * as KubeConfig from "../src/KubeConfig.ts"
import { Sandbox, SandboxResource } from "../src/Sandbox.ts"

const N = Number(process.argv[2] ?? 3000)
let rv = 100
const server = http.createServer((_req, res) => {
  res.writeHead(200, { "content-type": "application/json" })
  res.end(JSON.stringify({ type: "BOOKMARK", object: { metadata: { resourceVersion: String(++rv) } } }) + "\n")
})
await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`

const agent = new Agent({ keepAliveTimeout: 30_000 })
const timer = new DeadlineTimer(Clock.make())
const request = Effect.flatMap(
  send(agent, targetOf(url), { method: "GET", path: "/w?watch=1", headers: { accept: "application/json" } }, {
    timer,
    millis: 30_000
  }),
  (answer) => {
    const drain: Effect.Effect<void, unknown> = Effect.flatMap(
      answer.body.next,
      (b) => (b === null ? Effect.void : drain)
    )
    return drain
  }
)

const options = { namespace: "ns", resourceVersion: "1", allowWatchBookmarks: true, timeoutSeconds: 240 }
const untilEnd = <A, E>(pull: Effect.Effect<A, E>) => Effect.catchAll(Effect.forever(pull), () => Effect.void)

const program = Effect.gen(function*() {
  yield* Effect.forkDaemon(timer.run)
  const client = yield* KubeClient.KubeClient
  const rows: Record<string, Effect.Effect<void, unknown>> = {
    request,
    stream: Stream.runDrain(client.watch(SandboxResource, Sandbox, options)),
    toPull: Effect.scoped(Effect.flatMap(Stream.toPull(client.watch(SandboxResource, Sandbox, options)), untilEnd)),
    openWatch: Effect.scoped(Effect.flatMap(client.openWatch(SandboxResource, Sandbox, options), untilEnd))
  }
  for (let round = 0; round < 3; round++) {
    const line: Array<string> = []
    for (const [label, row] of Object.entries(rows)) {
      const c0 = process.cpuUsage()
      for (let i = 0; i < N; i++) yield* row
      const c1 = process.cpuUsage(c0)
      line.push(`${label} ${((c1.user + c1.system) / 1000 / N).toFixed(3)}`)
    }
    console.log(`round ${round + 1}, ms CPU per watch: ${line.join(", ")}`)
  }
}).pipe(Effect.provide(KubeClient.layer.pipe(Layer.provide(KubeConfig.layerStatic({ server: url })))))

await Effect.runPromise(Effect.orDie(program))
await agent.destroy()
server.close()
server.closeAllConnections()
