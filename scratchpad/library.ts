/**
 * The README's library example, kept here so the type check keeps it true:
 * `npx tsx scratchpad/library.ts` (needs a kubeconfig or in-cluster credentials).
 */
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import * as KubeClient from "../src/KubeClient.ts"
import * as KubeConfig from "../src/KubeConfig.ts"
import * as Orchestrator from "../src/Orchestrator.ts"
import * as SandboxWatch from "../src/SandboxWatch.ts"

const Live = Orchestrator.layer.pipe(
  Layer.provideMerge(SandboxWatch.layer({ namespace: "team-a" })),
  Layer.provide(KubeClient.layer),
  Layer.provide(KubeConfig.layer()),
  Layer.provide(NodeContext.layer)
)

const program = Effect.gen(function*() {
  const orchestrator = yield* Orchestrator.Orchestrator
  const sandbox = yield* orchestrator.awaitReady("sb-1", { timeout: "2 minutes" })
  yield* Effect.log(`ready at ${sandbox.status?.endpoint}`)
})

NodeRuntime.runMain(program.pipe(Effect.provide(Live)))
