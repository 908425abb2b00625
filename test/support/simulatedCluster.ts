/**
 * The watch end to end against the simulated API server: a Sandbox to create, what a subscriber was
 * told as short strings, and the client and server layers (request deadlines past the TestClock
 * pauses the tests measure; test/KubeClient.test.ts tests the deadlines themselves).
 */
import { Effect, Layer, Option, Ref, Stream } from "effect"
import * as KubeClient from "../../src/KubeClient.ts"
import { type Sandbox, SandboxResource } from "../../src/Sandbox.ts"
import * as SimulatedApiServer from "../../src/SimulatedApiServer.ts"
import { eventually } from "./waiting.ts"

export const sandboxObject = (
  name: string,
  phase = "Pending",
  labels: Record<string, string> = { "jr2.dev/run": "r1" }
) => ({
  apiVersion: "jr2.dev/v1alpha1",
  kind: "Sandbox",
  metadata: { name, labels },
  spec: { repos: [{ key: "main", url: "https://example.test/repo.git" }], resources: { limits: { memory: "2Gi" } } },
  status: { phase }
})

/** `name:phase`, or `gone`. */
export const describeTold = (value: Option.Option<Sandbox>) =>
  Option.match(value, { onNone: () => "gone", onSome: (s) => `${s.metadata.name}:${s.status?.phase ?? "-"}` })

/** Runs `stream` in the test's scope and records what it tells. */
export const record = (stream: Stream.Stream<Option.Option<Sandbox>>) =>
  Effect.gen(function*() {
    const told = yield* Ref.make<ReadonlyArray<string>>([])
    yield* Effect.forkScoped(Stream.runForEach(stream, (v) => Ref.update(told, (all) => [...all, describeTold(v)])))
    return {
      told: Ref.get(told),
      /** Waits until `count` things were told, and returns them all. */
      awaitTold: (count: number) => eventually(Ref.get(told), (t) => t.length >= count)
    }
  })

/** Provides a simulated cluster of namespace `ns` (with `options`) and a client of it. */
export const provideCluster =
  (options: Partial<SimulatedApiServer.Options> = {}) => <A, E, R>(effect: Effect.Effect<A, E, R>) =>
    Effect.provide(
      effect,
      KubeClient.layerWith({ headersTimeout: "1 hour", bodyTimeout: "1 hour" }).pipe(
        Layer.provideMerge(
          SimulatedApiServer.layerWithKubeConfig({
            resource: SandboxResource,
            namespace: "ns",
            historySize: 20,
            bookmarkInterval: "1 hour",
            ...options
          })
        )
      )
    )
