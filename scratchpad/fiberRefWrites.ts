/**
 * Every fiber-ref write copies the fiber's whole FiberRefs map (effect 3's `FiberRefs.updateAs`),
 * and so does every `getFiberRefs` (it writes the runtime flags first). This counts those copies
 * per watch resume, by the nearest call site in our own code, against a loopback server whose
 * every watch sends one event and ends.
 * Run: npx tsx scratchpad/fiberRefWrites.ts [N]
 */
import { Effect, Layer } from "effect"
import * as KubeClient from "../src/KubeClient.ts"
import * as KubeConfig from "../src/KubeConfig.ts"
import * as SandboxWatch from "../src/SandboxWatch.ts"
import { startResumeServer } from "./resumeServer.ts"

const N = Number(process.argv[2] ?? 2000)
const server = await startResumeServer({ listed: 1, target: () => 0 })
const clientLayer = KubeClient.layer.pipe(Layer.provide(KubeConfig.layerStatic({ server: server.url })))

// Patch the fiber runtime's prototype once: count each FiberRefs copy by where it came from.
const proto: Record<string, (...args: Array<unknown>) => unknown> = await Effect.runPromise(
  Effect.withFiberRuntime((fiber) => Effect.succeed(Object.getPrototypeOf(fiber)))
)
const ownSource = new URL("../src/", import.meta.url).pathname
let counting = false
const bySite = new Map<string, number>()
const site = () => {
  const frames = (new Error().stack ?? "").split("\n").slice(3)
  const ours = frames.filter((f) => f.includes(ownSource)).slice(0, 2).map((f) => f.trim().replace(/.*\/src\//, "src/"))
  const effect = frames.filter((f) => !f.includes(ownSource)).slice(0, 3).map((f) =>
    f.trim().replace(/^at /, "").replace(/\(.*\/src\//, "(")
  )
  return `${ours.join(" < ") || "(no frame of ours)"} | ${effect.join(" < ")}`
}
// What was written: a Context by its keys, anything else by its type.
const describe = (value: unknown): string => {
  if (typeof value === "object" && value !== null && "unsafeMap" in value) {
    return `Context{${[...(value as { unsafeMap: Map<string, unknown> }).unsafeMap.keys()].join(",")}}`
  }
  return typeof value === "object" && value !== null ? value.constructor.name : typeof value
}
for (const method of ["setFiberRef", "setFiberRefs"] as const) {
  const original = proto[method]!
  proto[method] = function(this: unknown, ...args: Array<unknown>) {
    if (counting) {
      const key = `${method} ${describe(args[1])} ${site()}`
      bySite.set(key, (bySite.get(key) ?? 0) + 1)
    }
    return original.apply(this, args)
  }
}

const program = Effect.gen(function*() {
  const watch = yield* SandboxWatch.SandboxWatch
  yield* watch.synced
  yield* Effect.sleep("200 millis")
  counting = true
  const start = server.sent()
  while (server.sent() - start < N) yield* Effect.sleep("5 millis")
  counting = false
  const resumes = server.sent() - start
  const total = [...bySite.values()].reduce((a, b) => a + b, 0)
  console.log(`${resumes} resumes: ${(total / resumes).toFixed(1)} FiberRefs copies each`)
  for (const [k, v] of [...bySite].sort((a, b) => b[1] - a[1]).slice(0, 25)) {
    console.log(`${(v / resumes).toFixed(2).padStart(6)}  ${k}`)
  }
}).pipe(Effect.provide(SandboxWatch.layer({ namespace: "ns" }).pipe(Layer.provide(clientLayer))))

await Effect.runPromise(program)
server.close()
