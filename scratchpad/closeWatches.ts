import { Effect, Layer } from "effect"
import * as KubeClient from "../src/KubeClient.ts"
import { SandboxResource } from "../src/Sandbox.ts"
import * as SandboxWatch from "../src/SandboxWatch.ts"
import * as SimulatedApiServer from "../src/SimulatedApiServer.ts"

const program = Effect.gen(function*() {
  const server = yield* SimulatedApiServer.SimulatedApiServer
  yield* server.create({
    apiVersion: "jr2.dev/v1alpha1",
    kind: "Sandbox",
    metadata: { name: "s1", labels: { "jr2.dev/run": "x" } }
  })
  const watch = yield* SandboxWatch.make({ namespace: "ns" })
  yield* watch.synced
  yield* server.awaitOpenWatches(1)
  yield* server.mergePatch("s1", { status: { phase: "Ready" } }, { subresource: "status" })
  yield* Effect.sleep("100 millis")
  yield* server.closeWatches
  yield* Effect.sleep("2 seconds")
  console.log((yield* server.requestsOf("watch")).map((r) => r.query))
})
Effect.runPromise(program.pipe(
  Effect.scoped,
  Effect.provide(KubeClient.layer.pipe(
    Layer.provideMerge(SimulatedApiServer.layerWithKubeConfig({ resource: SandboxResource, namespace: "ns" }))
  ))
))
