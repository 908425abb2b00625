import { Effect, Stream } from "effect"
import * as SandboxWatch from "../src/SandboxWatch.ts"
import { bookmark, fullList, makeScriptedKubeClient, sandbox } from "../test/support/ScriptedKubeClient.ts"

const run = (n: number) =>
  Effect.gen(function*() {
    const kube = yield* makeScriptedKubeClient
    const watch = yield* SandboxWatch.make({ namespace: "ns", jitter: false }).pipe(Effect.provide(kube.layer))
    yield* kube.respondList(fullList("10", sandbox("a", "1")))
    yield* Effect.forkScoped(Stream.runDrain(watch.changes("a")))
    const t0 = performance.now()
    for (let i = 0; i < n; i++) {
      const w = yield* kube.nextWatch
      yield* w.emit(bookmark(String(11 + i)))
      yield* w.end
    }
    const ms = performance.now() - t0
    console.log(n, "reconnects", ms.toFixed(0), "ms", (process.memoryUsage().heapUsed / 1e6).toFixed(1), "MB")
  }).pipe(Effect.scoped)

Effect.runPromise(Effect.forEach([2000], run, { discard: true }))
