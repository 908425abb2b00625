/**
 * undici's `request` (a Promise and a Readable body per request) against its `dispatch` with a
 * handler (no stream): the same N watch resumes against a loopback server, drained.
 * Run: npx tsx scratchpad/dispatchCost.ts [N]
 *
 * Seen here, warm (server included, same process): 28–30 µs of CPU per resume through `request`,
 * 28–29.5 through `dispatch`, so the stream costs a resume 1–2 µs of the ~290 µs the storm's
 * sandbox-watch spends on one: not where the storm's time goes, and `request` stays.
 */
import { Agent, type Dispatcher } from "@effect/platform-node/Undici"
import { Effect } from "effect"
import { startResumeServer } from "./resumeServer.ts"

const N = Number(process.argv[2] ?? 2000)
const server = await startResumeServer({ listed: 1, target: () => 0 })
const url = server.url
const path = `/apis/jr2.dev/v1alpha1/namespaces/ns/sandboxes?watch=1&resourceVersion=1`
const agent = new Agent({ keepAliveTimeout: 30_000 })

const measure = async (label: string, run: () => Promise<void>) => {
  const c0 = process.cpuUsage()
  const t0 = performance.now()
  const w0 = server.sent()
  await run()
  const c1 = process.cpuUsage(c0)
  const n = server.sent() - w0
  console.log(
    `${label.padEnd(9)} ${n}: ${((c1.user + c1.system) / n).toFixed(1)} µs CPU each, ${
      ((performance.now() - t0) * 1000 / n).toFixed(1)
    } µs wall`
  )
}

const viaRequest = Effect.gen(function*() {
  for (let i = 0; i < N; i++) {
    const body = yield* Effect.async<Dispatcher.ResponseData["body"], Error>((resume) => {
      agent.request({ origin: url, path, method: "GET", headers: { accept: "application/json" } }).then(
        (response) => resume(Effect.succeed(response.body)),
        (error: Error) => resume(Effect.fail(error))
      )
    })
    yield* Effect.async<void, Error>((resume) => {
      const read = () => {
        while (body.read() !== null);
      }
      body.on("readable", read)
      body.once("end", () => resume(Effect.void))
      body.once("error", (error) => resume(Effect.fail(error)))
    })
  }
})

const viaDispatch = Effect.gen(function*() {
  for (let i = 0; i < N; i++) {
    const state: { done?: () => void; ended: boolean; chunks: number } = { ended: false, chunks: 0 }
    yield* Effect.async<number, Error>((resume) => {
      agent.dispatch({ origin: url, path, method: "GET", headers: { accept: "application/json" } }, {
        onRequestStart() {},
        onResponseStart(_controller: unknown, status: number) {
          resume(Effect.succeed(status))
        },
        onResponseData(_controller: unknown, _chunk: Buffer) {
          state.chunks++
        },
        onResponseEnd() {
          state.ended = true
          state.done?.()
        },
        onResponseError(_controller: unknown, error: Error) {
          resume(Effect.fail(error))
        }
      } as unknown as Dispatcher.DispatchHandler)
    })
    yield* Effect.async<void>((resume) => {
      if (state.ended) return resume(Effect.void)
      state.done = () => resume(Effect.void)
    })
  }
})

for (let round = 0; round < 4; round++) {
  await measure("request", () => Effect.runPromise(viaRequest))
  await measure("dispatch", () => Effect.runPromise(viaDispatch))
}
server.close()
