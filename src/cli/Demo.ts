/**
 * The demo: an embedded simulated API server on a loopback port, and a demo operator that plays a
 * cluster's life on it, round after round: Sandboxes created, scheduled, Ready; one whose image
 * cannot be pulled and one no node can hold (their Ready waits time out with that evidence); repos
 * asked and fetched, one fetch failing; a Sandbox evicted (Lost), others deleted. Between the acts
 * the server misbehaves as real ones do (a dropped watch, a restart that expires every
 * resourceVersion, 429s) so a newcomer watches the program ride through them.
 *
 * The operator narrates with `Effect.log`, and asks the Orchestrator's waits what a client would.
 */
import type { ServeError } from "@effect/platform/HttpServerError"
import { Duration, Effect, Layer, Option, Stream } from "effect"
import type * as KubeConfig from "../KubeConfig.ts"
import { Orchestrator, Verdict } from "../Orchestrator.ts"
import { DefaultLabelSelector, SandboxResource } from "../Sandbox.ts"
import * as Evidence from "../SandboxEvidence.ts"
import * as SimulatedApiServer from "../SimulatedApiServer.ts"

export interface DemoOptions {
  readonly namespace: string
  /** Pause between two acts of the play. Default 1.2 s. */
  readonly beat?: Duration.DurationInput
}

/** The simulated server, and a `KubeConfig` pointing at it. */
export const layer = (
  options: DemoOptions
): Layer.Layer<SimulatedApiServer.SimulatedApiServer | KubeConfig.KubeConfig, ServeError> =>
  SimulatedApiServer.layerWithKubeConfig({
    resource: SandboxResource,
    namespace: options.namespace,
    // A short history, as a busy apiserver's watch cache is: the restart act expires it anyway.
    historySize: 50,
    bookmarkInterval: Duration.seconds(15)
  })

const sandbox = (name: string) => ({
  apiVersion: "jr2.dev/v1alpha1",
  kind: "Sandbox",
  metadata: { name, labels: { [DefaultLabelSelector]: "demo" } },
  spec: {
    repos: [{ key: "main", url: "https://git.example.invalid/demo.git" }],
    resources: { limits: { memory: "512Mi", cpu: "1" } }
  }
})

const cond = (type: string, status: string, reason?: string, message?: string) => ({
  type,
  status,
  ...(reason === undefined ? {} : { reason }),
  ...(message === undefined ? {} : { message })
})

/**
 * The demo operator: rounds of the play until interrupted. Writes that the server refuses are
 * logged and skipped: a demo must not stop on its own.
 */
export const operator = (
  options: DemoOptions
): Effect.Effect<never, never, SimulatedApiServer.SimulatedApiServer | Orchestrator> =>
  Effect.gen(function*() {
    const server = yield* SimulatedApiServer.SimulatedApiServer
    const orchestrator = yield* Orchestrator
    const beat = Effect.sleep(options.beat ?? Duration.millis(1200))
    const attempt = <A, E>(what: string, write: Effect.Effect<A, E>) =>
      write.pipe(
        Effect.asVoid,
        Effect.catchAll((error) =>
          Effect.logWarning(`demo: ${what} was refused: ${String((error as { message?: unknown }).message ?? error)}`)
        )
      )
    const status = (name: string, patch: Record<string, unknown>) =>
      attempt(`the status of ${name}`, server.mergePatch(name, { status: patch }, { subresource: "status" }))

    const followContinuity = (name: string) =>
      Stream.runForEach(orchestrator.continuity(name), (v) =>
        Effect.logInfo(
          `continuity: sandbox "${name}" ${
            Verdict.$match(v, {
              Alive: ({ phase }) => `is alive (${Option.getOrElse(phase, () => "no phase yet")})`,
              Lost: ({ detail, reason }) => `is Lost (${Evidence.describeReasoned({ reason, message: detail })})`,
              Gone: () => "is gone"
            })
          }`
        )).pipe(Effect.asVoid)

    /**
     * Ask the Orchestrator what a client would, and tell what it answered. A Sandbox that became
     * Ready is then followed, as the Orchestrator follows the Sandboxes it holds.
     */
    const awaitReady = (name: string, timeout: Duration.DurationInput) =>
      orchestrator.awaitReady(name, { timeout }).pipe(
        Effect.matchEffect({
          onFailure: (error) => Effect.logWarning(`orchestrator: ${error.message}`),
          onSuccess: (s) =>
            Effect.zipRight(
              Effect.logInfo(`orchestrator: sandbox "${name}" is Ready at ${s.status?.endpoint ?? "(no endpoint)"}`),
              followContinuity(name)
            )
        }),
        Effect.forkScoped
      )
    const awaitFetched = (name: string, key: string, asked: string) =>
      orchestrator.awaitRepoFetched(name, key, asked, { timeout: "15 seconds" }).pipe(
        Effect.matchEffect({
          onFailure: (error) => Effect.logWarning(`orchestrator: ${error.message}`),
          onSuccess: () => Effect.logInfo(`orchestrator: sandbox "${name}" fetched repo "${key}" at "${asked}"`)
        }),
        Effect.forkScoped
      )
    const round = (n: number) =>
      Effect.scoped(Effect.gen(function*() {
        const [a, b, c, d] = ["alpha", "bravo", "charlie", "delta"].map((x) => `${x}-${n}`) as [
          string,
          string,
          string,
          string
        ]
        yield* Effect.logInfo(`demo: round ${n}: creating Sandboxes ${a}, ${b}, ${c}, ${d}`)
        for (const name of [a, b, c, d]) yield* attempt(`creating ${name}`, server.create(sandbox(name)))
        yield* awaitReady(a, "30 seconds")
        yield* awaitReady(b, "30 seconds")
        yield* awaitReady(c, "8 seconds")
        yield* awaitReady(d, "8 seconds")
        yield* beat

        const creating = [cond("Scheduled", "True"), cond("Ready", "False", "ContainersNotReady")]
        for (const name of [a, b, c]) {
          yield* status(name, {
            phase: "Pending",
            podUID: `pod-${name}`,
            conditions: creating,
            waiting: [{ container: "harness", reason: "ContainerCreating" }]
          })
        }
        yield* status(d, {
          phase: "Pending",
          conditions: [cond("Scheduled", "False", "Unschedulable", "0/3 nodes are available: 3 Insufficient memory.")]
        })
        yield* beat

        yield* status(c, {
          waiting: [{
            container: "harness",
            reason: "ImagePullBackOff",
            message: `Back-off pulling image "registry.example.invalid/harness:v9"`
          }]
        })
        yield* status(a, {
          phase: "Ready",
          endpoint: "10.42.0.11:7000",
          conditions: [cond("Scheduled", "True"), cond("Ready", "True")],
          waiting: null
        })
        yield* beat

        yield* Effect.logInfo(
          "demo: fault: the API server drops every open watch (the watch resumes from its resourceVersion)"
        )
        yield* server.closeWatches
        yield* status(b, {
          phase: "Ready",
          endpoint: "10.42.0.12:7000",
          conditions: [cond("Scheduled", "True"), cond("Ready", "True")],
          waiting: null
        })
        yield* beat

        yield* Effect.logInfo(`demo: asking ${a} for repo "main" at "abc1234" and ${b} at "deadbeef"`)
        yield* status(a, { repos: [{ key: "main", asked: "abc1234" }] })
        yield* status(b, { repos: [{ key: "main", asked: "deadbeef" }] })
        yield* awaitFetched(a, "main", "abc1234")
        yield* awaitFetched(b, "main", "deadbeef")
        yield* beat
        yield* status(a, { repos: [{ key: "main", asked: "abc1234", attempted: "abc1234" }] })
        yield* status(b, {
          repos: [{
            key: "main",
            asked: "deadbeef",
            attempted: "deadbeef",
            error: "fatal: remote error: upload-pack: not our ref deadbeef"
          }]
        })
        yield* beat
        yield* status(a, { repos: [{ key: "main", asked: "abc1234", attempted: "abc1234", fetched: "abc1234" }] })
        yield* beat

        yield* Effect.logInfo(
          "demo: fault: the watches stall, the cluster moves on, and the API server restarts and forgets its history (the watch's resume gets 410 Expired, so it re-lists)"
        )
        yield* server.stallWatches
        yield* status(b, { harness: { restartCount: 1, lastTerminated: { reason: "OOMKilled", exitCode: 137 } } })
        yield* status(c, { harness: { restartCount: 0 } })
        yield* server.restart
        yield* beat

        yield* status(b, {
          phase: "Lost",
          endpoint: null,
          conditions: [
            cond("Scheduled", "True"),
            cond("Ready", "False", "PodFailed"),
            cond(
              "Lost",
              "True",
              "Evicted",
              "The node was low on resource: memory. Threshold quantity: 100Mi, available: 88Mi."
            )
          ]
        })
        yield* beat

        yield* Effect.logInfo(
          "demo: fault: the API server answers 429 Too Many Requests twice (the watch backs off, without a re-list)"
        )
        yield* server.failNext(2, "TooManyRequests", { verbs: ["watch"], retryAfterSeconds: 1 })
        yield* server.closeWatches
        yield* beat
        yield* beat

        yield* Effect.logInfo(`demo: deleting ${a}`)
        yield* attempt(`deleting ${a}`, server.delete(a))
        yield* beat
        yield* Effect.logInfo(`demo: round ${n} ends: deleting ${b}, ${c}, ${d}`)
        for (const name of [b, c, d]) yield* attempt(`deleting ${name}`, server.delete(name))
        yield* beat
      }))

    let n = 1
    return yield* Effect.forever(Effect.suspend(() => round(n++)))
  })
