/**
 * How many Effect instructions the fiber runtime runs per watch resume, by kind, against a loopback
 * server whose every watch sends one Sandbox event and ends (10,000 listed, 100 `changes`
 * subscribers, as the benchmark's storm). An instruction is one step of the runtime's loop
 * (`Sync`, `OnSuccess`, `Async`, `WithRuntime`, ...): fewer of them is less to warm up and less
 * to run. Run: npx tsx scratchpad/effectOps.ts [resumes] [--by-code] [--sequence] [--held]
 */
import { Effect, Layer, Stream } from "effect"
import * as KubeClient from "../src/KubeClient.ts"
import * as KubeConfig from "../src/KubeConfig.ts"
import * as SandboxWatch from "../src/SandboxWatch.ts"
import { nameOf } from "../test/bench/data.ts"
import { benchSandbox, startResumeServer } from "./resumeServer.ts"

const Resumes = Number(process.argv.find((arg) => /^\d+$/.test(arg)) ?? 2000)
const N = 10_000
const Subscribers = 100
// `--held`: one watch stays open and gets an event every 2 ms, each its own network read (the
// latency row's shape); the counts are then per event. Otherwise every watch sends one event and
// ends (the storm's shape), and the counts are per resume.
const held = process.argv.includes("--held")
const server = await startResumeServer({
  listed: N,
  target: (resourceVersion) => resourceVersion % Subscribers,
  object: benchSandbox,
  held
})
const clientLayer = KubeClient.layer.pipe(Layer.provide(KubeConfig.layerStatic({ server: server.url })))

// Count every instruction the runtime dispatches, by its op code; with `--by-code`, a `Commit`,
// `WithRuntime`, `Sync` or `OnSuccess` also by the start of the function it runs, to see whose it is.
const byCode = process.argv.includes("--by-code")
const proto: Record<string, (...args: Array<unknown>) => unknown> = await Effect.runPromise(
  Effect.withFiberRuntime((fiber) => Effect.succeed(Object.getPrototypeOf(fiber)))
)
const byOp = new Map<string, number>()
let counting = false
// `--sequence`: every instruction of one resume, in order (from one watch request to the next).
let tracing = false
const sequence: Array<string> = []
const codeOf = (op: unknown, key: string): string => {
  if (!byCode || typeof op !== "object" || op === null) return key
  const fields = op as { commit?: unknown; effect_instruction_i0?: unknown }
  const code = key === "Commit" ? fields.commit : fields.effect_instruction_i0
  return typeof code === "function" ? `${key} ${String(code).replace(/\s+/g, " ").slice(0, 110)}` : key
}
for (const key of Object.getOwnPropertyNames(proto)) {
  if (!/^[A-Z][A-Za-z]+$/.test(key) || typeof proto[key] !== "function") continue
  const original = proto[key]
  proto[key] = function(this: unknown, ...args: Array<unknown>) {
    if (tracing) sequence.push(codeOf(args[0], key).slice(0, 150))
    if (counting) {
      const k = codeOf(args[0], key)
      byOp.set(k, (byOp.get(k) ?? 0) + 1)
    }
    return original.apply(this, args)
  }
}

const program = Effect.gen(function*() {
  const watch = yield* SandboxWatch.SandboxWatch
  for (let i = 0; i < Subscribers; i++) {
    yield* Effect.forkScoped(Stream.runForEach(watch.changes(nameOf(i)), () => Effect.void))
  }
  yield* watch.synced
  yield* Effect.sleep("200 millis")
  const start = server.sent()
  counting = true
  while (server.sent() - start < Resumes) yield* Effect.sleep("5 millis")
  counting = false
  const resumes = server.sent() - start
  if (process.argv.includes("--sequence")) {
    yield* Effect.promise(server.nextSent)
    tracing = true
    yield* Effect.promise(server.nextSent)
    tracing = false
    sequence.forEach((line, i) => console.log(String(i).padStart(4), line))
  }
  const total = [...byOp.values()].reduce((a, b) => a + b, 0)
  console.log(
    `${resumes} ${held ? "events" : "resumes"}: ${(total / resumes).toFixed(0)} instructions each ` +
      `(the 5 ms polling loop included)`
  )
  for (const [op, n] of [...byOp].sort((a, b) => b[1] - a[1]).slice(0, 40)) {
    console.log(`${(n / resumes).toFixed(1).padStart(7)}  ${op}`)
  }
}).pipe(Effect.scoped, Effect.provide(SandboxWatch.layer({ namespace: "ns" }).pipe(Layer.provide(clientLayer))))

await Effect.runPromise(program)
server.close()
