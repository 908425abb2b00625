/**
 * What asking for the next list page before parsing this one buys when the server takes its time.
 * A server in its own process (so its wait and its writes do not share our thread) answers pages of
 * 500 benchmark Sandboxes after `delay` ms each, as an apiserver reading etcd across a network does;
 * `KubeClient.listAll` (one page ahead) is timed against the same pages asked for one after another
 * with `KubeClient.list`, alternately, in one warm process. Pages are written as kube-apiserver
 * writes a custom resource's list (keys sorted: the continue token at the end), or with `typed` as
 * it writes a built-in kind's (the token before the items).
 * Run: npx tsx scratchpad/listAhead.ts [delay ms] [N] [typed]
 */
import { Effect, Layer, Option } from "effect"
import { spawn } from "node:child_process"
import * as http from "node:http"
import * as KubeClient from "../src/KubeClient.ts"
import * as KubeConfig from "../src/KubeConfig.ts"
import { Sandbox, SandboxResource } from "../src/Sandbox.ts"
import { makeSandbox } from "../test/bench/data.ts"

// `serve <delay> <N> <typed|sorted>` in the server's process; `[delay] [N] [typed]` in ours.
const serving = process.argv[2] === "serve"
const args = process.argv.slice(serving ? 3 : 2)
const delay = Number(args[0] ?? 10)
const N = Number(args[1] ?? 10_000)
const typed = args[2] === "typed"
const PageSize = 500

if (serving) {
  const pages: Array<Buffer> = []
  for (let first = 0; first < N; first += PageSize) {
    const items = []
    for (let i = first; i < Math.min(N, first + PageSize); i++) items.push(makeSandbox(i, 0, N, "ns"))
    const next = first + PageSize < N ? { continue: String(first + PageSize) } : {}
    const metadata = { resourceVersion: String(N), ...next }
    const list = typed
      ? { kind: "SandboxList", apiVersion: "jr2.dev/v1alpha1", metadata, items }
      : { apiVersion: "jr2.dev/v1alpha1", items, kind: "SandboxList", metadata }
    pages.push(Buffer.from(JSON.stringify(list)))
  }
  const server = http.createServer((req, res) => {
    const token = new URL(req.url ?? "/", "http://x").searchParams.get("continue")
    const page = pages[Number(token ?? 0) / PageSize]!
    setTimeout(() => {
      res.writeHead(200, { "content-type": "application/json", "content-length": page.length })
      res.end(page)
    }, delay)
  })
  server.listen(0, "127.0.0.1", () => console.log((server.address() as { port: number }).port))
} else {
  const child = spawn(process.execPath, [
    ...process.execArgv,
    process.argv[1]!,
    "serve",
    String(delay),
    String(N),
    typed ? "typed" : "sorted"
  ], {
    stdio: ["ignore", "pipe", "inherit"]
  })
  const port = await new Promise<number>((resolve) =>
    child.stdout.once("data", (data) => resolve(Number(String(data))))
  )
  const options = { namespace: "ns", limit: PageSize }
  const oneByOne = (client: KubeClient.KubeClientService) =>
    Effect.gen(function*() {
      let count = 0
      let token: string | undefined
      do {
        const page = yield* client.list(
          SandboxResource,
          Sandbox,
          token === undefined ? options : { ...options, continue: token }
        )
        count += page.items.length
        token = Option.getOrUndefined(page.continue)
      } while (token !== undefined)
      return count
    })
  const ahead = (client: KubeClient.KubeClientService) =>
    Effect.map(client.listAll(SandboxResource, Sandbox, options), (list) => list.items.length)
  const time = (list: Effect.Effect<number, unknown>) =>
    Effect.gen(function*() {
      const t0 = performance.now()
      const count = yield* list
      if (count !== N) throw new Error(`listed ${count}, not ${N}`)
      return performance.now() - t0
    })
  // The server goes with this process however it ends.
  process.once("exit", () => child.kill())
  await Effect.runPromise(Effect.scoped(
    Effect.gen(function*() {
      const client = yield* KubeClient.KubeClient
      for (let warm = 0; warm < 3; warm++) yield* time(ahead(client)).pipe(Effect.zip(time(oneByOne(client))))
      const rows: Record<"ahead" | "one by one", Array<number>> = { ahead: [], "one by one": [] }
      for (let round = 0; round < 8; round++) {
        rows.ahead.push(yield* time(ahead(client)))
        rows["one by one"].push(yield* time(oneByOne(client)))
      }
      const median = (xs: Array<number>) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!
      console.log(
        `N = ${N}, pages of ${PageSize} (${typed ? "typed" : "keys sorted"}), server delay ${delay} ms per page`
      )
      for (const [what, ms] of Object.entries(rows)) {
        console.log(`${what.padEnd(11)} median ${median(ms).toFixed(1)} ms  (${ms.map((x) => x.toFixed(0)).join(" ")})`)
      }
    }).pipe(
      Effect.provide(
        KubeClient.layer.pipe(
          Layer.provide(KubeConfig.layerStatic({ server: `http://127.0.0.1:${port}`, namespace: "ns" }))
        )
      )
    )
  ))
}
