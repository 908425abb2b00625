/**
 * undici's `request` (a Promise and a Readable body per request) against its `dispatch` with a
 * handler (no stream): the same N watch resumes against a loopback server, drained.
 * Run: npx tsx scratchpad/dispatchCost.ts [N]
 *
 * Seen here, warm (server included, same process), µs of CPU per resume: `request` 27–30,
 * `+signal` (an AbortController's signal, as the client passed) 32–40, `+emitter` (an EventEmitter
 * in its place, as the client now passes) 27, `dispatch` 25–27. The AbortController was worth
 * replacing; the stream behind `request` (2–3 µs) is not worth a handler of our own.
 */
import { Agent, type Dispatcher } from "@effect/platform-node/Undici"
import { Effect } from "effect"
import { EventEmitter } from "node:events"
import { startResumeServer, timeResumes } from "./resumeServer.ts"

const N = Number(process.argv[2] ?? 2000)
const server = await startResumeServer({ listed: 1, target: () => 0 })
const url = server.url
const path = `/apis/jr2.dev/v1alpha1/namespaces/ns/sandboxes?watch=1&resourceVersion=1`
const agent = new Agent({ keepAliveTimeout: 30_000 })

const measure = async (label: string, run: () => Promise<void>) => {
  const { cpuMicros, resumes, wallMicros } = await timeResumes(server, run)
  console.log(`${label.padEnd(9)} ${resumes}: ${cpuMicros.toFixed(1)} µs CPU each, ${wallMicros.toFixed(1)} µs wall`)
}

/** An EventEmitter-shaped signal, which undici accepts in place of an AbortSignal. */
class EmitterSignal extends EventEmitter {
  aborted = false
}

/** N resumes through `request`, each body drained in paused mode, with the signal `signal()` gives. */
const viaRequest = (signal: () => AbortSignal | EventEmitter | undefined) =>
  Effect.gen(function*() {
    for (let i = 0; i < N; i++) {
      const body = yield* Effect.async<Dispatcher.ResponseData["body"], Error>((resume) => {
        agent.request({ origin: url, path, method: "GET", headers: { accept: "application/json" }, signal: signal() })
          .then(
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
  await measure("request", () => Effect.runPromise(viaRequest(() => undefined)))
  await measure("+signal", () => Effect.runPromise(viaRequest(() => new AbortController().signal)))
  await measure("+emitter", () => Effect.runPromise(viaRequest(() => new EmitterSignal())))
  await measure("dispatch", () => Effect.runPromise(viaDispatch))
}
server.close()
