import { describe, expect, it } from "@effect/vitest"
import { Cause, Chunk, Effect, Exit, Fiber, Layer, Option, Stream, TestClock } from "effect"
import * as KubeClient from "../src/KubeClient.ts"
import * as Orchestrator from "../src/Orchestrator.ts"
import { SandboxResource } from "../src/Sandbox.ts"
import type { Sandbox, SandboxStatus } from "../src/Sandbox.ts"
import * as SandboxWatch from "../src/SandboxWatch.ts"
import * as Sim from "../src/SimulatedApiServer.ts"
import * as FakeSandboxWatch from "./support/FakeSandboxWatch.ts"

// A fresh fake watch and Orchestrator per test: no state or clock carries over.
const TestLayer = Orchestrator.layer.pipe(Layer.provideMerge(FakeSandboxWatch.layer))
const run = <A, E>(effect: Effect.Effect<A, E, Orchestrator.Orchestrator | FakeSandboxWatch.FakeSandboxWatch>) =>
  Effect.provide(effect, TestLayer)

let rv = 0
const sandbox = (name: string, status?: SandboxStatus, memory?: string): Sandbox => ({
  metadata: { name, resourceVersion: String(++rv) },
  ...(memory === undefined ? {} : { spec: { resources: { limits: { memory } } } }),
  ...(status === undefined ? {} : { status })
})
const lost = (name: string, reason: string, message: string) =>
  sandbox(name, {
    phase: "Lost",
    conditions: [{ type: "Lost", status: "True", reason, message }]
  })

/** Let a forked wait subscribe and register its timeout with the TestClock before time moves. */
const untilWaiting = (name: string) =>
  Effect.gen(function*() {
    const fake = yield* FakeSandboxWatch.FakeSandboxWatch
    while ((yield* fake.readers(name)) === 0 || Chunk.isEmpty(yield* TestClock.sleeps())) yield* Effect.yieldNow()
  })

/** `awaitReady(name)` for two minutes, forked, once it is waiting. */
const forkAwaitReady = (name: string) =>
  Effect.gen(function*() {
    const o = yield* Orchestrator.Orchestrator
    const fiber = yield* Effect.fork(o.awaitReady(name, { timeout: "2 minutes" }))
    yield* untilWaiting(name)
    return fiber
  })

const failure = <A, E>(exit: Exit.Exit<A, E>): E => {
  if (Exit.isFailure(exit) && exit.cause._tag === "Fail") return exit.cause.error
  throw new Error(`expected a failure, got ${String(exit)}`)
}

describe("Orchestrator.awaitReady", () => {
  it.effect("succeeds at once with a Sandbox already Ready", () =>
    run(Effect.gen(function*() {
      const fake = yield* FakeSandboxWatch.FakeSandboxWatch
      const ready = sandbox("s1", { phase: "Ready", endpoint: "10.0.0.1:7000" })
      yield* fake.sync([ready])
      const o = yield* Orchestrator.Orchestrator
      const got = yield* o.awaitReady("s1", { timeout: "2 minutes" })
      expect(got).toStrictEqual(ready)
    })))

  it.effect("waits through Pending and a Sandbox not yet seen, then succeeds on Ready", () =>
    run(Effect.gen(function*() {
      const fake = yield* FakeSandboxWatch.FakeSandboxWatch
      yield* fake.sync([])
      const fiber = yield* forkAwaitReady("s1")
      yield* TestClock.adjust("10 seconds")
      yield* fake.put(sandbox("s1", { phase: "Pending" }))
      yield* TestClock.adjust("10 seconds")
      expect(fiber.unsafePoll()).toBeNull()
      const ready = sandbox("s1", { phase: "Ready" })
      yield* fake.put(ready)
      expect(yield* Fiber.join(fiber)).toStrictEqual(ready)
    })))

  it.effect("keeps waiting through a watch outage (no change for a while), then succeeds", () =>
    run(Effect.gen(function*() {
      const fake = yield* FakeSandboxWatch.FakeSandboxWatch
      yield* fake.sync([sandbox("s1", { phase: "Pending" })])
      const fiber = yield* forkAwaitReady("s1")
      // The watch is cut off and backing off: it tells nothing, for 110 s of the 120 s.
      yield* TestClock.adjust("110 seconds")
      expect(fiber.unsafePoll()).toBeNull()
      const ready = sandbox("s1", { phase: "Ready" })
      yield* fake.put(ready)
      expect(yield* Fiber.join(fiber)).toStrictEqual(ready)
    })))

  it.effect("fails at once when the Sandbox goes Lost while the wait runs", () =>
    run(Effect.gen(function*() {
      const fake = yield* FakeSandboxWatch.FakeSandboxWatch
      yield* fake.sync([sandbox("s1", { phase: "Pending" })])
      const fiber = yield* forkAwaitReady("s1")
      yield* fake.put(lost("s1", "Evicted", "The node was low on resource: memory."))
      const error = failure(yield* Fiber.await(fiber))
      expect(error._tag).toBe("SandboxLost")
      expect(error).toMatchObject({
        sandboxName: "s1",
        reason: "Evicted",
        detail: Option.some("The node was low on resource: memory.")
      })
      expect(error.message).toBe(
        `sandbox "s1" is Lost (Evicted: The node was low on resource: memory.); a Lost Sandbox never comes back: provision a new one`
      )
      // Reported as a cause, it reads as its tag and its sentence.
      expect(Cause.pretty(Cause.fail(error)).split("\n")[0]).toBe(`SandboxLost: ${error.message}`)
      // No time passed: Lost was heard, not timed out.
      expect(yield* TestClock.currentTimeMillis).toBe(0)
    })))

  it.effect("fails with SandboxLost for a Sandbox already Lost, Unknown when the operator gave no reason", () =>
    run(Effect.gen(function*() {
      const fake = yield* FakeSandboxWatch.FakeSandboxWatch
      const o = yield* Orchestrator.Orchestrator
      yield* fake.sync([lost("a", "NodeLost", "node n3 stopped reporting"), sandbox("b", { phase: "Lost" })])
      const a = failure(yield* Effect.exit(o.awaitReady("a", { timeout: "1 minute" })))
      expect(a.message).toBe(
        `sandbox "a" is Lost (NodeLost: node n3 stopped reporting); a Lost Sandbox never comes back: provision a new one`
      )
      const b = failure(yield* Effect.exit(o.awaitReady("b", { timeout: "1 minute" })))
      expect(b).toMatchObject({ _tag: "SandboxLost", reason: "Unknown", detail: Option.none() })
    })))

  it.effect("fails with SandboxGone when the cluster says a seen Sandbox is gone", () =>
    run(Effect.gen(function*() {
      const fake = yield* FakeSandboxWatch.FakeSandboxWatch
      const pending = sandbox("s1", { phase: "Pending" })
      yield* fake.sync([pending])
      const fiber = yield* forkAwaitReady("s1")
      yield* fake.remove("s1")
      const error = failure(yield* Fiber.await(fiber))
      expect(error).toMatchObject({ _tag: "SandboxGone", sandboxName: "s1", lastSeen: Option.some(pending) })
      expect(error.message).toBe(
        `sandbox "s1" is gone: the cluster no longer has it (deleted, or its labels no longer match the watch's selector); provision a new one if it is still needed`
      )
    })))

  const timesOut = (name: string, setup: (fake: FakeSandboxWatch.FakeSandboxWatchControl) => Effect.Effect<void>) =>
    run(Effect.gen(function*() {
      const fake = yield* FakeSandboxWatch.FakeSandboxWatch
      const o = yield* Orchestrator.Orchestrator
      yield* setup(fake)
      const fiber = yield* Effect.fork(o.awaitReady(name, { timeout: "2 minutes" }))
      while (Chunk.isEmpty(yield* TestClock.sleeps())) yield* Effect.yieldNow()
      yield* TestClock.adjust("119 seconds")
      expect(fiber.unsafePoll()).toBeNull()
      yield* TestClock.adjust("1 second")
      const error = failure(yield* Fiber.await(fiber))
      expect(error._tag).toBe("SandboxNotReady")
      return error as Orchestrator.SandboxNotReady
    }))

  it.effect("times out with the phase, Scheduled=False and each waiting container", () =>
    Effect.gen(function*() {
      const error = yield* timesOut("s1", (fake) =>
        fake.sync([
          sandbox("s1", {
            phase: "Pending",
            conditions: [
              {
                type: "Scheduled",
                status: "False",
                reason: "Unschedulable",
                message: "0/3 nodes are available: 3 Insufficient memory."
              }
            ],
            waiting: [
              { container: "repo-init", reason: "ErrImagePull", message: "pull access denied" },
              { container: "harness", reason: "ImagePullBackOff", message: `Back-off pulling image "x"` }
            ]
          })
        ]))
      expect(error.message).toBe(
        `sandbox "s1" is not Ready after 2m: phase Pending; Scheduled=False Unschedulable: 0/3 nodes are available: 3 Insufficient memory.; container repo-init waiting ErrImagePull: pull access denied; container harness waiting ImagePullBackOff: Back-off pulling image "x"`
      )
      expect(error.finding._tag).toBe("Seen")
    }))

  it.effect("times out with a quota's refusal", () =>
    Effect.gen(function*() {
      const error = yield* timesOut("s1", (fake) =>
        fake.sync([
          sandbox("s1", {
            phase: "Pending",
            conditions: [
              {
                type: "Scheduled",
                status: "False",
                reason: "QuotaExceeded",
                message: `pods "s1" is forbidden: exceeded quota: compute`
              }
            ]
          })
        ]))
      expect(error.message).toBe(
        `sandbox "s1" is not Ready after 2m: phase Pending; Scheduled=False QuotaExceeded: pods "s1" is forbidden: exceeded quota: compute`
      )
    }))

  it.effect("times out with the harness's OOMKilled and its memory limit", () =>
    Effect.gen(function*() {
      const error = yield* timesOut("s1", (fake) =>
        fake.sync([
          sandbox(
            "s1",
            {
              phase: "Pending",
              harness: { restartCount: 2, lastTerminated: { reason: "OOMKilled", exitCode: 137 } },
              waiting: [{
                container: "harness",
                reason: "CrashLoopBackOff",
                message: "back-off 20s restarting failed container"
              }]
            },
            "512Mi"
          )
        ]))
      expect(error.message).toBe(
        `sandbox "s1" is not Ready after 2m: phase Pending; container harness waiting CrashLoopBackOff: back-off 20s restarting failed container; harness last terminated OOMKilled (exit 137) at its memory limit 512Mi, 2 restarts`
      )
    }))

  it.effect("times out with the effector's termination message", () =>
    Effect.gen(function*() {
      const error = yield* timesOut("s1", (fake) =>
        fake.sync([
          sandbox("s1", {
            phase: "Pending",
            effector: {
              restartCount: 1,
              lastTerminated: {
                reason: "Error",
                exitCode: 78,
                message: "starting\nlandlock: unavailable on node n2 (kernel 5.4)\n"
              }
            }
          })
        ]))
      expect(error.message).toBe(
        `sandbox "s1" is not Ready after 2m: phase Pending; effector last terminated Error (exit 78), 1 restart: landlock: unavailable on node n2 (kernel 5.4)`
      )
    }))

  it.effect("times out saying the operator has written no status, and Ready=False's reason", () =>
    Effect.gen(function*() {
      const noStatus = yield* timesOut("s1", (fake) => fake.sync([sandbox("s1")]))
      expect(noStatus.message).toBe(
        `sandbox "s1" is not Ready after 2m: no phase yet (the operator has not written a status)`
      )
      const notReady = yield* timesOut("s2", (fake) =>
        fake.sync([
          sandbox("s2", {
            phase: "Pending",
            conditions: [{
              type: "Ready",
              status: "False",
              reason: "EndpointUnreachable",
              message: "no answer on :7000"
            }]
          })
        ]))
      expect(notReady.message).toBe(
        `sandbox "s2" is not Ready after 2m: phase Pending; Ready=False EndpointUnreachable: no answer on :7000`
      )
    }))

  it.effect("times out with never seen when the cluster never had it", () =>
    Effect.gen(function*() {
      const error = yield* timesOut("ghost", (fake) => fake.sync([sandbox("other", { phase: "Ready" })]))
      expect(error.finding._tag).toBe("NeverSeen")
      expect(error.message).toBe(
        `sandbox "ghost" is not Ready after 2m: never seen: the cluster has no Sandbox of that name under the watch's selector; check that it was created in the watched namespace with the selector's label`
      )
    }))

  it.effect("times out saying the cluster said nothing when the watch never synced", () =>
    Effect.gen(function*() {
      const error = yield* timesOut("s1", () => Effect.void)
      expect(error.finding._tag).toBe("NotSynced")
      expect(error.message).toMatch(/^sandbox "s1" is not Ready after 2m: the watch has not finished its first list/)
    }))

  it.effect("reports the Sandbox as last seen, not as first seen", () =>
    Effect.gen(function*() {
      const error = yield* timesOut("s1", (fake) =>
        Effect.gen(function*() {
          yield* fake.sync([
            sandbox("s1", {
              phase: "Pending",
              conditions: [{ type: "Scheduled", status: "False", reason: "Unschedulable", message: "no nodes" }]
            })
          ])
          yield* fake.put(sandbox("s1", { phase: "Pending", conditions: [{ type: "Scheduled", status: "True" }] }))
        }))
      expect(error.message).toBe(`sandbox "s1" is not Ready after 2m: phase Pending`)
    }))
})

const withRepo = (
  name: string,
  repo: { key: string; asked?: string; attempted?: string; fetched?: string; error?: string }
) => sandbox(name, { phase: "Ready", repos: [{ key: "other", fetched: "zzz" }, repo] })

describe("Orchestrator.awaitRepoFetched", () => {
  it.effect("succeeds with the entry once fetched is the asked revision", () =>
    run(Effect.gen(function*() {
      const fake = yield* FakeSandboxWatch.FakeSandboxWatch
      const o = yield* Orchestrator.Orchestrator
      yield* fake.sync([withRepo("s1", { key: "main", asked: "abc", fetched: "old" })])
      const fiber = yield* Effect.fork(o.awaitRepoFetched("s1", "main", "abc", { timeout: "1 minute" }))
      yield* untilWaiting("s1")
      yield* fake.put(withRepo("s1", { key: "main", asked: "abc", attempted: "abc" }))
      expect(fiber.unsafePoll()).toBeNull()
      yield* fake.put(withRepo("s1", { key: "main", asked: "abc", attempted: "abc", fetched: "abc" }))
      expect(yield* Fiber.join(fiber)).toStrictEqual({ key: "main", asked: "abc", attempted: "abc", fetched: "abc" })
    })))

  it.effect("fails with the node cache's error once it attempted the asked revision", () =>
    run(Effect.gen(function*() {
      const fake = yield* FakeSandboxWatch.FakeSandboxWatch
      const o = yield* Orchestrator.Orchestrator
      // An error about an older attempt is not this ask's answer.
      yield* fake.sync([withRepo("s1", { key: "main", asked: "abc", attempted: "old", error: "old failure" })])
      const fiber = yield* Effect.fork(o.awaitRepoFetched("s1", "main", "abc", { timeout: "1 minute" }))
      yield* untilWaiting("s1")
      expect(fiber.unsafePoll()).toBeNull()
      yield* fake.put(
        withRepo("s1", { key: "main", asked: "abc", attempted: "abc", error: "fatal: couldn't find remote ref abc" })
      )
      const error = failure(yield* Fiber.await(fiber))
      expect(error).toMatchObject({
        _tag: "RepoFetchFailed",
        sandboxName: "s1",
        key: "main",
        asked: "abc",
        error: "fatal: couldn't find remote ref abc"
      })
      expect(error.message).toBe(
        `sandbox "s1" could not fetch repo "main" at "abc": fatal: couldn't find remote ref abc`
      )
    })))

  it.effect("fails with SandboxGone when the Sandbox is deleted while a fetch is awaited", () =>
    run(Effect.gen(function*() {
      const fake = yield* FakeSandboxWatch.FakeSandboxWatch
      const o = yield* Orchestrator.Orchestrator
      yield* fake.sync([withRepo("s1", { key: "main", asked: "abc" })])
      const fiber = yield* Effect.fork(o.awaitRepoFetched("s1", "main", "abc", { timeout: "1 minute" }))
      yield* untilWaiting("s1")
      yield* TestClock.adjust("5 seconds")
      // The wait is registered and still running before the delete...
      expect(fiber.unsafePoll()).toBeNull()
      yield* fake.remove("s1")
      const error = failure(yield* Fiber.await(fiber))
      expect(error._tag).toBe("SandboxGone")
      // ...and had seen the Sandbox with its repo entry: it heard the delete, not an absence.
      expect(
        error._tag === "SandboxGone"
          ? Option.map(error.lastSeen, (s) => s.status?.repos?.find((r) => r.key === "main")?.asked)
          : Option.none()
      )
        .toEqual(Option.some("abc"))
      expect(yield* TestClock.currentTimeMillis).toBe(5000)
    })))

  it.effect("fails with SandboxGone at once for a Sandbox the cluster does not have", () =>
    run(Effect.gen(function*() {
      const fake = yield* FakeSandboxWatch.FakeSandboxWatch
      const o = yield* Orchestrator.Orchestrator
      yield* fake.sync([])
      const error = failure(yield* Effect.exit(o.awaitRepoFetched("s1", "main", "abc", { timeout: "1 minute" })))
      expect(error).toMatchObject({ _tag: "SandboxGone", sandboxName: "s1", lastSeen: Option.none() })
    })))

  it.effect("fails with SandboxLost when the Sandbox goes Lost while a fetch is awaited", () =>
    run(Effect.gen(function*() {
      const fake = yield* FakeSandboxWatch.FakeSandboxWatch
      const o = yield* Orchestrator.Orchestrator
      yield* fake.sync([withRepo("s1", { key: "main", asked: "abc" })])
      const fiber = yield* Effect.fork(o.awaitRepoFetched("s1", "main", "abc", { timeout: "1 minute" }))
      yield* untilWaiting("s1")
      yield* fake.put(lost("s1", "PodDeleted", "the pod was deleted"))
      const error = failure(yield* Fiber.await(fiber))
      expect(error).toMatchObject({ _tag: "SandboxLost", reason: "PodDeleted" })
    })))

  it.effect("times out with the entry as last seen", () =>
    run(Effect.gen(function*() {
      const fake = yield* FakeSandboxWatch.FakeSandboxWatch
      const o = yield* Orchestrator.Orchestrator
      yield* fake.sync([withRepo("s1", { key: "main", asked: "abc", fetched: "old" })])
      const fiber = yield* Effect.fork(o.awaitRepoFetched("s1", "main", "abc", { timeout: "90 seconds" }))
      yield* untilWaiting("s1")
      yield* fake.put(withRepo("s1", { key: "main", asked: "abc", attempted: "abc", fetched: "old" }))
      yield* TestClock.adjust("90 seconds")
      const error = failure(yield* Fiber.await(fiber))
      expect(error).toMatchObject({
        _tag: "RepoFetchTimedOut",
        entry: Option.some({ key: "main", asked: "abc", attempted: "abc", fetched: "old" })
      })
      expect(error.message).toBe(
        `sandbox "s1" has not fetched repo "main" at "abc" after 1m 30s: last seen asked "abc", attempted "abc", fetched "old"`
      )
    })))

  it.effect("times out saying there is no entry for the key", () =>
    run(Effect.gen(function*() {
      const fake = yield* FakeSandboxWatch.FakeSandboxWatch
      const o = yield* Orchestrator.Orchestrator
      yield* fake.sync([sandbox("s1", { phase: "Ready" })])
      const fiber = yield* Effect.fork(o.awaitRepoFetched("s1", "main", "abc", { timeout: "1 minute" }))
      yield* untilWaiting("s1")
      yield* TestClock.adjust("1 minute")
      const error = failure(yield* Fiber.await(fiber))
      expect(error.message).toBe(
        `sandbox "s1" has not fetched repo "main" at "abc" after 1m: the Sandbox has no status for that repo yet; check that the node cache is running`
      )
    })))
})

describe("Orchestrator.continuity", () => {
  it.effect("tells each new phase, skips repeats and silence, and ends after Lost", () =>
    run(Effect.gen(function*() {
      const fake = yield* FakeSandboxWatch.FakeSandboxWatch
      const o = yield* Orchestrator.Orchestrator
      yield* fake.sync([sandbox("s1", { phase: "Pending" })])
      const fiber = yield* Effect.fork(Stream.runCollect(o.continuity("s1")))
      while ((yield* fake.readers("s1")) === 0) yield* Effect.yieldNow()
      yield* fake.put(
        sandbox("s1", { phase: "Pending", waiting: [{ container: "harness", reason: "ContainerCreating" }] })
      )
      yield* fake.put(sandbox("s1", { phase: "Ready" }))
      // An outage: the watch tells nothing, so no verdict.
      yield* TestClock.adjust("10 minutes")
      yield* fake.put(sandbox("s1", { phase: "Ready", endpoint: "10.0.0.9:7000" }))
      yield* fake.put(lost("s1", "NodeLost", "node n1 is gone"))
      const verdicts = Chunk.toArray(yield* Fiber.join(fiber))
      expect(verdicts.map((v) =>
        Orchestrator.Verdict.$match(v, {
          Alive: ({ phase }) => `alive ${Option.getOrElse(phase, () => "-")}`,
          Lost: ({ detail, reason }) => `lost ${reason} ${Option.getOrElse(detail, () => "-")}`,
          Gone: () => "gone"
        })
      )).toStrictEqual(["alive Pending", "alive Ready", "lost NodeLost node n1 is gone"])
    })))

  it.effect("ends with Gone when the cluster says the Sandbox is not there", () =>
    run(Effect.gen(function*() {
      const fake = yield* FakeSandboxWatch.FakeSandboxWatch
      const o = yield* Orchestrator.Orchestrator
      yield* fake.sync([sandbox("s1", { phase: "Ready" })])
      const fiber = yield* Effect.fork(Stream.runCollect(o.continuity("s1")))
      while ((yield* fake.readers("s1")) === 0) yield* Effect.yieldNow()
      yield* fake.remove("s1")
      const verdicts = Chunk.toArray(yield* Fiber.join(fiber))
      expect(verdicts.map((v) => v._tag)).toStrictEqual(["Alive", "Gone"])
      expect(yield* fake.readers("s1")).toBe(0)
    })))

  it.effect("says nothing before the watch's first list", () =>
    run(Effect.gen(function*() {
      const fake = yield* FakeSandboxWatch.FakeSandboxWatch
      const o = yield* Orchestrator.Orchestrator
      const fiber = yield* Effect.fork(Stream.runCollect(Stream.take(o.continuity("s1"), 1)))
      yield* TestClock.adjust("5 minutes")
      expect(fiber.unsafePoll()).toBeNull()
      yield* fake.sync([lost("s1", "PodFailed", "exit 1")])
      const verdicts = Chunk.toArray(yield* Fiber.join(fiber))
      expect(verdicts.map((v) => v._tag)).toStrictEqual(["Lost"])
    })))
})

describe("Orchestrator through the real watch and a simulated API server", () => {
  const Live = Orchestrator.layer.pipe(
    Layer.provideMerge(SandboxWatch.layer({ namespace: "ns" })),
    Layer.provide(KubeClient.layer),
    Layer.provideMerge(Sim.layerWithKubeConfig({ resource: SandboxResource, namespace: "ns" }))
  )
  const labelled = (name: string) => ({
    apiVersion: "jr2.dev/v1alpha1",
    kind: "Sandbox",
    metadata: { name, labels: { "jr2.dev/run": "r1" } }
  })

  it.scopedLive("awaits Ready, then a repo fetch that ends with the Sandbox deleted", () =>
    Effect.gen(function*() {
      const server = yield* Sim.SimulatedApiServer
      const o = yield* Orchestrator.Orchestrator
      const watch = yield* SandboxWatch.SandboxWatch
      yield* server.create(labelled("s1"))
      yield* watch.synced
      const ready = yield* Effect.fork(o.awaitReady("s1", { timeout: "30 seconds" }))
      yield* server.mergePatch("s1", { status: { phase: "Pending" } }, { subresource: "status" })
      yield* server.mergePatch("s1", { status: { phase: "Ready", endpoint: "10.0.0.1:7000" } }, {
        subresource: "status"
      })
      const got = yield* Fiber.join(ready)
      expect(got.status).toStrictEqual({ phase: "Ready", endpoint: "10.0.0.1:7000" })

      const fetch = yield* Effect.fork(o.awaitRepoFetched("s1", "main", "abc", { timeout: "30 seconds" }))
      yield* server.mergePatch("s1", { status: { repos: [{ key: "main", asked: "abc" }] } }, { subresource: "status" })
      yield* server.delete("s1")
      const error = failure(yield* Fiber.await(fetch))
      expect(error).toMatchObject({ _tag: "SandboxGone", sandboxName: "s1" })
    }).pipe(Effect.provide(Live)))
})
