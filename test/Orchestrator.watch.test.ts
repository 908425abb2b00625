/**
 * The Orchestrator's waits through the real `SandboxWatch` (not the fake), fed by
 * `ScriptedKubeClient`: what a dropped watch, a re-list, an undecodable object or a slow reader do
 * to a wait. Time is TestClock's.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Deferred, Effect, Either, Exit, Fiber, Ref, Stream, TestClock } from "effect"
import * as Orchestrator from "../src/Orchestrator.ts"
import type { Sandbox } from "../src/Sandbox.ts"
import * as SandboxWatch from "../src/SandboxWatch.ts"
import type { UndecodableEvent } from "../src/WatchEvent.ts"
import {
  bookmark,
  deleted,
  errorEvent,
  fullList,
  makeScriptedKubeClient,
  modified,
  sandbox,
  transportError
} from "./support/ScriptedKubeClient.ts"

const start = Effect.gen(function*() {
  const kube = yield* makeScriptedKubeClient
  // The script answers paged lists.
  const watch = yield* SandboxWatch.make({ namespace: "ns", jitter: false, listMode: "paged" }).pipe(
    Effect.provide(kube.layer)
  )
  return { kube, watch, orchestrator: Orchestrator.make(watch) }
})

/** Let every ready fiber run (no time passes). */
const settle = Effect.repeatN(Effect.yieldNow(), 50)

const withRepo = (name: string, resourceVersion: string, repo: { asked: string; fetched?: string }) =>
  sandbox(name, resourceVersion, "Ready", { status: { phase: "Ready", repos: [{ key: "main", ...repo }] } })

const sandboxEvent = (type: "ADDED" | "MODIFIED", object: Sandbox) => ({
  type,
  object,
  name: object.metadata.name,
  resourceVersion: object.metadata.resourceVersion
})

const withUid = (s: Sandbox, uid: string): Sandbox => ({ ...s, metadata: { ...s.metadata, uid } })

const undecodable = (name: string, resourceVersion: string): UndecodableEvent => ({
  type: "UNDECODABLE",
  eventType: "ADDED",
  name,
  resourceVersion,
  problem: "status.phase: expected string, got 42"
})

describe("Orchestrator through the real watch", () => {
  it.scoped("awaitReady rides through a dropped watch and a re-list, and succeeds when the re-list says Ready", () =>
    Effect.gen(function*() {
      const { kube, orchestrator } = yield* start
      yield* kube.respondList(fullList("10", sandbox("a", "5", "Pending")))
      const ready = yield* Effect.fork(orchestrator.awaitReady("a", { timeout: "5 minutes" }))
      const w1 = yield* kube.nextWatch
      yield* w1.fail(transportError())
      yield* TestClock.adjust("1 second")
      const w2 = yield* kube.nextWatch
      yield* w2.emit(errorEvent(410, "Expired", "too old resource version"))
      yield* TestClock.adjust("1 second")
      yield* settle
      expect(ready.unsafePoll()).toBeNull()
      // The re-list is the first word on "a" since the drop: Ready.
      yield* kube.respondList(fullList("30", sandbox("a", "25", "Ready")))
      const got = yield* Fiber.join(ready)
      expect(got.metadata.resourceVersion).toBe("25")
    }))

  it.scoped("a Sandbox the first list holds undecodable is neither ready nor gone: the waits wait, continuity says nothing", () =>
    Effect.gen(function*() {
      const { kube, orchestrator } = yield* start
      const fetch = yield* Effect.fork(orchestrator.awaitRepoFetched("b", "main", "abc", { timeout: "5 minutes" }))
      const ready = yield* Effect.fork(orchestrator.awaitReady("b", { timeout: "5 minutes" }))
      const verdicts = yield* Ref.make<ReadonlyArray<string>>([])
      yield* Effect.forkScoped(
        Stream.runForEach(orchestrator.continuity("b"), (v) => Ref.update(verdicts, (all) => [...all, v._tag]))
      )
      yield* kube.respondList(
        Either.right({ items: [], undecodable: [undecodable("b", "7")], resourceVersion: "10", pages: 1, restarts: 0 })
      )
      const w = yield* kube.nextWatch
      yield* TestClock.adjust("1 minute")
      yield* settle
      expect(fetch.unsafePoll()).toBeNull()
      expect(ready.unsafePoll()).toBeNull()
      expect(yield* Ref.get(verdicts)).toEqual([])
      // Its next state decodes: everyone hears it.
      yield* w.emit(modified(withRepo("b", "12", { asked: "abc", fetched: "abc" })))
      expect((yield* Fiber.join(fetch)).fetched).toBe("abc")
      expect((yield* Fiber.join(ready)).metadata.resourceVersion).toBe("12")
      yield* settle
      expect(yield* Ref.get(verdicts)).toEqual(["Alive"])
    }))

  it.scoped("continuity with a slow reader: a delete and a re-create under the same name is the old Sandbox gone", () =>
    Effect.gen(function*() {
      const { kube, orchestrator } = yield* start
      yield* kube.respondList(fullList("10", withUid(sandbox("a", "5", "Ready"), "uid-1")))
      const gate = yield* Deferred.make<void>()
      const verdicts = yield* Ref.make<ReadonlyArray<string>>([])
      // A reader that takes its time over each verdict: it is busy while the cluster moves on.
      const reader = yield* Effect.forkScoped(
        Stream.runForEach(
          orchestrator.continuity("a"),
          (v) => Effect.zipRight(Ref.update(verdicts, (all) => [...all, v._tag]), Deferred.await(gate))
        )
      )
      const w = yield* kube.nextWatch
      yield* settle
      expect(yield* Ref.get(verdicts)).toEqual(["Alive"])
      // While the reader is busy, "a" is deleted and created again: a new Sandbox, a new uid.
      yield* w.emit(deleted(withUid(sandbox("a", "20", "Ready"), "uid-1")))
      yield* w.emit(modified(withUid(sandbox("a", "21", "Pending"), "uid-2")))
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(reader)
      expect(yield* Ref.get(verdicts)).toEqual(["Alive", "Gone"])
    }))

  it.scoped("awaitReady with the create's resourceVersion: never seen, and the watch past it, is gone, not 'not yet'", () =>
    Effect.gen(function*() {
      const { kube, orchestrator } = yield* start
      yield* kube.respondList(fullList("10"))
      const w = yield* kube.nextWatch
      // Created at 12 and the watch is not there yet: waiting is right.
      const early = yield* Effect.fork(orchestrator.awaitReady("c", { timeout: "5 minutes", createdAt: "12" }))
      yield* settle
      expect(early.unsafePoll()).toBeNull()
      yield* w.emit(bookmark("15"))
      yield* settle
      // A wait that starts once the watch has heard past the create, with no such Sandbox, fails.
      const late = yield* Effect.exit(orchestrator.awaitReady("c", { timeout: "5 minutes", createdAt: "12" }))
      expect(Exit.isFailure(late) && late.cause._tag === "Fail" ? late.cause.error._tag : "no failure").toBe(
        "SandboxGone"
      )
      // Without the option a Sandbox never seen is only "not yet".
      const plain = yield* Effect.fork(orchestrator.awaitReady("c", { timeout: "5 minutes" }))
      yield* settle
      expect(plain.unsafePoll()).toBeNull()
      yield* Fiber.interrupt(early)
      yield* Fiber.interrupt(plain)
    }))

  it.scoped("awaitReady with createdAt: an older Sandbox of the same name, heard and then deleted, is the past, not this one gone", () =>
    Effect.gen(function*() {
      // Simulation seed 1767036110 (waits): a watch behind the cluster hears, in one catch-up, the
      // old "c" (5), its deletion (8), and the new "c" created at 9. The wait for the new one must
      // not fail SandboxGone on the old one's deletion, nor answer with the old one.
      const { kube, orchestrator } = yield* start
      yield* kube.respondList(fullList("4"))
      const w = yield* kube.nextWatch
      const ready = yield* Effect.fork(orchestrator.awaitReady("c", { timeout: "1 minute", createdAt: "9" }))
      yield* settle
      yield* w.emit(sandboxEvent("ADDED", sandbox("c", "5", "Ready")))
      yield* settle
      // The old one's Ready is not this one's.
      expect(ready.unsafePoll()).toBeNull()
      yield* w.emit(deleted(sandbox("c", "8", "Ready")))
      yield* settle
      expect(ready.unsafePoll()).toBeNull()
      yield* w.emit(sandboxEvent("ADDED", sandbox("c", "9", "Pending")), modified(sandbox("c", "10", "Ready")))
      const got = yield* Fiber.join(ready)
      expect(got.metadata.resourceVersion).toBe("10")
    }))

  it.scoped("awaitReady with createdAt never fails SandboxGone while the watch applies the create, whatever yields between its readings", () =>
    Effect.gen(function*() {
      // The wait hears "absent" and decides whether the watch has heard past the create; the ADDED
      // carrying the create may land between two readings, wherever the wait's fiber yields (its
      // op budget runs out, a step that awaits). Every read the wait can make of the watch yields
      // first here, so the watch's step always lands in that gap.
      const { kube, watch } = yield* start
      const aside = Effect.repeatN(Effect.yieldNow(), 10)
      const yielding: SandboxWatch.SandboxWatchService = {
        ...watch,
        health: Effect.zipRight(aside, watch.health),
        get: (name) => Effect.zipRight(aside, watch.get(name)),
        lookup: (name) => Effect.zipRight(aside, watch.lookup(name)),
        snapshot: Effect.zipRight(aside, watch.snapshot)
      }
      const orchestrator = Orchestrator.make(yielding)
      yield* kube.respondList(fullList("5"))
      const w = yield* kube.nextWatch
      yield* watch.synced
      const ready = yield* Effect.fork(orchestrator.awaitReady("c", { timeout: "1 minute", createdAt: "7" }))
      // The wait runs to its first reading past the mailbox, and yields there; the ADDED comes then.
      yield* Effect.yieldNow()
      yield* w.emit(sandboxEvent("ADDED", sandbox("c", "7", "Pending")))
      yield* settle
      expect(ready.unsafePoll()).toBeNull()
      yield* w.emit(modified(sandbox("c", "8", "Ready")))
      const got = yield* Fiber.join(ready)
      expect(got.metadata.resourceVersion).toBe("8")
    }))

  it.scoped("awaitReady hears a quiet Sandbox's Ready that lands while the wait is between looking and sleeping, at every op budget", () =>
    Effect.gen(function*() {
      // A wait looks in its mailbox, finds nothing, then registers to be woken. A Ready told between
      // the two once found nobody to wake; the Sandbox said nothing more, so the wait slept until
      // its timeout and failed SandboxNotReady, "phase Pending". Only the wait's op budget running
      // out makes its fiber yield there, so this sweeps the budget (with the Ready sent at once or
      // after a yield): one Sandbox per case, all on one watch. (Budgets under about 11 can stall a
      // forked fiber outright in effect 3.22's run loop.)
      const { kube, orchestrator, watch } = yield* start
      const cases = [0, 1].flatMap((lead) => Array.from({ length: 38 }, (_, i) => ({ lead, budget: 11 + i })))
      const nameOf = (c: { readonly lead: number; readonly budget: number }) => `s-${c.lead}-${c.budget}`
      yield* kube.respondList(fullList("10", ...cases.map((c) => sandbox(nameOf(c), "5", "Pending"))))
      const w = yield* kube.nextWatch
      yield* watch.synced
      const waits: Array<readonly [string, Fiber.RuntimeFiber<Sandbox, unknown>]> = []
      let resourceVersion = 10
      for (const c of cases) {
        const wait = yield* Effect.withMaxOpsBeforeYield(
          Effect.fork(orchestrator.awaitReady(nameOf(c), { timeout: "1 minute" })),
          c.budget
        )
        for (let i = 0; i < c.lead; i++) yield* Effect.yieldNow()
        yield* w.emit(modified(sandbox(nameOf(c), String(++resourceVersion), "Ready")))
        for (let i = 0; i < 100 && wait.unsafePoll() === null; i++) yield* Effect.yieldNow()
        waits.push([`budget ${c.budget}, lead ${c.lead}`, wait])
      }
      // The waits' timeout: a wait still asleep now fails.
      yield* TestClock.adjust("1 minute")
      const failed: Array<string> = []
      for (const [label, wait] of waits) {
        const exit = yield* Fiber.await(wait)
        if (Exit.isFailure(exit)) failed.push(`${label}: ${Cause.squash(exit.cause)}`)
        else expect(exit.value.status?.phase).toBe("Ready")
      }
      expect(failed).toEqual([])
    }))
})
