/**
 * Where a watch resume's CPU goes: the same N resumes (a watch that sends one event and ends),
 * measured through three layers in one process against a loopback server:
 *   raw       — @effect/platform's HttpClient: execute, drain the body
 *   undici    — undici's own request on a keep-alive Agent, in two Effect.async steps
 *   client    — KubeClient.watch, drained
 *   watch     — SandboxWatch (list once, then N resumes)
 * Run: npx tsx scratchpad/resumeCost.ts [N]
 */
import { HttpClient, HttpClientRequest } from "@effect/platform"
import { NodeHttpClient } from "@effect/platform-node"
import { Agent, type Dispatcher } from "@effect/platform-node/Undici"
import { Effect, Layer, Stream } from "effect"
import * as KubeClient from "../src/KubeClient.ts"
import * as KubeConfig from "../src/KubeConfig.ts"
import { Sandbox, SandboxResource } from "../src/Sandbox.ts"
import * as SandboxWatch from "../src/SandboxWatch.ts"
import { startResumeServer, timeResumes } from "./resumeServer.ts"

const N = Number(process.argv[2] ?? 2000)
const server = await startResumeServer({ listed: 1, target: () => 0 })
const url = server.url
const config = KubeConfig.layerStatic({ server: url })
const clientLayer = KubeClient.layer.pipe(Layer.provide(config))

const measure = async (label: string, run: () => Promise<void>) => {
  const { cpuMicros, resumes, wallMicros } = await timeResumes(server, run)
  console.log(
    `${label.padEnd(8)} ${resumes} resumes: ${(cpuMicros / 1000).toFixed(3)} ms CPU each, ${
      (wallMicros / 1000).toFixed(3)
    } ms wall`
  )
}

const path = `/apis/jr2.dev/v1alpha1/namespaces/ns/sandboxes?watch=1&resourceVersion=1`
const raw = Effect.gen(function*() {
  const client = yield* HttpClient.HttpClient
  for (let i = 0; i < N; i++) {
    const response = yield* client.execute(HttpClientRequest.get(url + path))
    yield* Stream.runDrain(response.stream)
  }
}).pipe(Effect.scoped, Effect.provide(NodeHttpClient.layerUndici))

// undici's own request on one keep-alive Agent, one Effect.async per request and one per body.
const agent = new Agent({ keepAliveTimeout: 30_000 })
const undiciOnly = Effect.gen(function*() {
  for (let i = 0; i < N; i++) {
    const body = yield* Effect.async<Dispatcher.ResponseData["body"], Error>((resume) => {
      agent.request({ origin: url, path, method: "GET" }).then(
        (response) => resume(Effect.succeed(response.body)),
        (error: Error) => resume(Effect.fail(error))
      )
    })
    yield* Effect.async<void, Error>((resume) => {
      body.on("data", () => undefined)
      body.once("end", () => resume(Effect.void))
      body.once("error", (error) => resume(Effect.fail(error)))
    })
  }
})

const viaClient = Effect.gen(function*() {
  const client = yield* KubeClient.KubeClient
  for (let i = 0; i < N; i++) {
    yield* Stream.runDrain(
      client.watch(SandboxResource, Sandbox, {
        namespace: "ns",
        resourceVersion: "1",
        allowWatchBookmarks: true,
        timeoutSeconds: 240
      })
    )
  }
}).pipe(Effect.provide(clientLayer))

const viaWatch = Effect.gen(function*() {
  const watch = yield* SandboxWatch.SandboxWatch
  yield* watch.synced
  const start = server.sent()
  while (server.sent() - start < N) yield* Effect.sleep("5 millis")
}).pipe(Effect.provide(SandboxWatch.layer({ namespace: "ns" }).pipe(Layer.provide(clientLayer))))

for (let round = 0; round < 3; round++) {
  await measure("raw", () => Effect.runPromise(Effect.orDie(raw)))
  await measure("undici", () => Effect.runPromise(Effect.orDie(undiciOnly)))
  await measure("client", () => Effect.runPromise(Effect.orDie(viaClient)))
  await measure("watch", () => Effect.runPromise(viaWatch))
}
server.close()
