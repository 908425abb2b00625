/**
 * The watch through a fault proxy in front of the real kube-apiserver: connections reset
 * mid-stream, refused and rejected, a stalled stream, an outage across which the resume meets 410
 * (with deletes during it), and kube-apiserver itself killed and started again.
 *
 * The watch runs with the pauses a user gets (the default floor, cap and reconnectCap). After the
 * faults stop, every subscriber's last value must equal the server's truth (a fresh quorum list);
 * nothing that existed may ever have been told gone; and no name's told resourceVersion may ever
 * have gone backwards. How long after each heal the first change was told is printed
 * (`[back-in-step]`): measured, not asserted.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Metric, Option, SubscriptionRef } from "effect"
import * as KubeClient from "../../src/KubeClient.ts"
import type { KubeResource } from "../../src/KubeResource.ts"
import { SandboxResource } from "../../src/Sandbox.ts"
import * as SandboxWatch from "../../src/SandboxWatch.ts"
import * as FaultProxy from "../support/FaultProxy.ts"
import * as Facts from "./ApiServerFacts.ts"
import type { Recorder, WireLog } from "./watchSupport.ts"
import {
  backInStep,
  backwards,
  clientOn,
  disagreements,
  falselyGone,
  probe,
  recordAll,
  recordChanges,
  sandboxBody,
  seedPending,
  truthOf
} from "./watchSupport.ts"

const facts = Facts.load()
const ns = facts.namespace
const ConfigMaps: KubeResource = { group: "", version: "v1", plural: "configmaps", namespaced: true }
/**
 * How long the checks wait for the watch to catch up once faults stop: a deadline only so that a
 * failure says what was last seen (the time it took is printed by `backInStep`).
 */
const CatchUp = "60 seconds"
/** The server's version, on each printed figure. */
const server = `kube-apiserver ${facts.version}`

/**
 * Seeds `names` (each `Pending`) under `run`, puts a fault proxy in front of the server and a
 * watch behind it (5 s watches, 2 s idle margin, the default pauses), and records what every
 * subscriber is told: `allChanges` and `changes(name)` for each of `watched`.
 */
const scenario = (run: string, names: ReadonlyArray<string>, watched: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const admin = yield* clientOn(Facts.connection(facts))
    const setPhase = yield* seedPending(admin, ns, run, names)
    const proxy = yield* FaultProxy.make({ targetPort: facts.port })
    const wire = yield* probe(yield* clientOn(Facts.connection(facts, { server: proxy.url("https") })))
    const watch = yield* SandboxWatch.make({
      namespace: ns,
      labelSelector: `jr2.dev/run=${run}`,
      timeoutSeconds: 5,
      idleMargin: "2 seconds",
      // These tests read the paged list's requests; streamingList.test.ts has the streaming lists.
      listMode: "paged"
    }).pipe(Effect.provideService(KubeClient.KubeClient, wire.client))
    yield* watch.synced
    const all = yield* recordAll(watch)
    const byName = new Map<string, Recorder>()
    for (const name of watched) byName.set(name, yield* recordChanges(watch, name))
    yield* all.awaitShorts(names.length)
    // The watch is open and delivering (not merely asked for) before any fault.
    const first = names[0]!
    yield* all.awaitLast(first, yield* setPhase(first, "Warm"))
    return { admin, setPhase, proxy, wire, watch, all, byName, run }
  })

type Scenario = Effect.Effect.Success<ReturnType<typeof scenario>>

/** Waits for `count` more watch requests, counted from `from`, that failed as `outcome` says. */
const failures = (s: Scenario, from: number, count: number, outcome: (o: string) => boolean, what: string) =>
  s.wire.await((l) => l.watches.slice(from).filter((w) => outcome(w.outcome)).length >= count, what)

const transport = (o: string) => o === "KubeTransportError" || o === "KubeMalformedLineError"

/**
 * The checks once the faults stopped: each recorder catches up with a fresh list within
 * `CatchUp`; the watch's cache is that list; no resourceVersion told went backwards; none of
 * `alwaysThere` was ever told gone.
 */
const settle = (s: Scenario, alwaysThere: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const truth = yield* truthOf(s.admin, ns, s.run)
    yield* s.all.await(
      (told) => disagreements(told, truth).length === 0,
      "allChanges to agree with the server",
      CatchUp
    )
    for (const [name, recorder] of s.byName) {
      yield* recorder.await(
        (told) => disagreements(told, truth, [name]).length === 0,
        `changes(${name}) to agree with the server`,
        CatchUp
      )
    }
    const snapshot = yield* s.watch.snapshot
    expect([...snapshot.keys()].sort()).toEqual([...truth.keys()].sort())
    for (const [name, sandbox] of truth) expect(snapshot.get(name)).toEqual(sandbox)
    const everyRecord = [yield* s.all.told, ...(yield* Effect.forEach([...s.byName.values()], (r) => r.told))]
    for (const told of everyRecord) {
      expect(backwards(told)).toEqual([])
      expect(falselyGone(told, alwaysThere)).toEqual([])
    }
    return truth
  })

const lists = (log: WireLog) => log.lists.length

describe("SandboxWatch through faults in front of the real kube-apiserver", () => {
  it.live(
    "connections reset mid-stream, refused and rejected: each time it resumes where it was, and ends equal to the server",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const names = ["flt-a", "flt-b", "flt-c", "flt-d", "flt-e"]
        const s = yield* scenario("flt-resets", names, [...names, "flt-f"])

        const cut: Array<number> = []
        const e = s.byName.get("flt-e")!
        // Resets of an open, delivering watch: a change, told, a cut; the resume hears the next.
        for (const round of [1, 2, 3]) {
          yield* e.awaitLast("flt-e", yield* s.setPhase("flt-e", `Round${round}`))
          cut.push(yield* s.proxy.resetAll)
        }
        // Resets with events in flight: changes and cuts in a burst, nothing waited for.
        for (const round of [4, 5, 6]) {
          yield* s.setPhase("flt-e", `Round${round}`)
          yield* s.proxy.resetAll
        }
        yield* s.byName.get("flt-a")!.awaitLast("flt-a", yield* s.setPhase("flt-a", "Ready"))

        // Refused: the listener is closed and the open watch cut; the watch backs off, retrying.
        const beforeRefuse = (yield* SubscriptionRef.get(s.wire.log)).watches.length
        yield* s.proxy.refuse
        cut.push(yield* s.proxy.resetAll)
        yield* s.admin.delete(SandboxResource, ns, "flt-b")
        yield* s.admin.create(SandboxResource, ns, sandboxBody(ns, "flt-f", s.run))
        yield* s.setPhase("flt-c", "Ready")
        yield* failures(s, beforeRefuse, 3, transport, "three watches refused")
        yield* s.proxy.heal
        yield* backInStep(`faults, refused connections (${server})`, s.all, Date.now())

        // Rejected: accepted, then reset at once.
        yield* s.byName.get("flt-c")!.await(
          (t) => t.some((x) => Option.isSome(x.sandbox) && x.sandbox.value.status?.phase === "Ready"),
          "flt-c told Ready"
        )
        const beforeReject = (yield* SubscriptionRef.get(s.wire.log)).watches.length
        yield* s.proxy.reject
        cut.push(yield* s.proxy.resetAll)
        yield* s.setPhase("flt-d", "Ready")
        yield* failures(s, beforeReject, 2, transport, "two watches rejected")
        yield* s.proxy.heal
        yield* backInStep(`faults, rejected connections (${server})`, s.all, Date.now())

        yield* settle(s, ["flt-a", "flt-c", "flt-d", "flt-e"])
        expect((yield* s.byName.get("flt-b")!.told).at(-1)?.sandbox).toEqual(Option.none())
        expect(yield* s.byName.get("flt-f")!.shorts).toEqual(["flt-f:gone", "flt-f:-"])
        // Every fault was a resume from the last resourceVersion: nothing ever needed a re-list.
        const log = yield* SubscriptionRef.get(s.wire.log)
        expect(lists(log)).toBe(1)
        expect((yield* s.watch.health).relists).toBe(0)
        // Each of those cuts hit an open watch.
        expect(cut.every((n) => n >= 1)).toBe(true)
        expect(yield* s.byName.get("flt-e")!.shorts).toContain("flt-e:Round6")
      })),
    90_000
  )

  it.live(
    "a stalled stream (bytes stop, socket open) is taken for dead after timeoutSeconds plus idleMargin, and resumed",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const names = ["stl-a", "stl-b"]
        const s = yield* scenario("flt-stall", names, names)
        const before = (yield* SubscriptionRef.get(s.wire.log)).watches.length
        const idleRestarts = Effect.map(
          Metric.value(Metric.tagged(SandboxWatch.metrics.restarts, "reason", "idle")),
          (c) => c.count
        )
        const idleBefore = yield* idleRestarts
        yield* s.proxy.stall
        // The change's event, and the server's end of the watch at 5 s, are held in the proxy.
        const ready = yield* s.setPhase("stl-a", "Ready")
        yield* s.admin.delete(SandboxResource, ns, "stl-b")
        // After 5 + 2 s of silence the watch hangs up and asks again (the new request is held too).
        const log = yield* s.wire.await(
          // The client's own silence limit (idleTimeout) ends the stream with KubeWatchIdleError.
          (l) =>
            l.watches.slice(before - 1).some((w) => w.outcome === "KubeWatchIdleError") && l.watches.length > before,
          "the silent watch taken for dead and a new one asked"
        )
        // The held-open watch heard nothing of what happened after the stall: it was hung up on.
        expect(yield* idleRestarts).toBeGreaterThan(idleBefore)
        const hungUp = log.watches.slice(before - 1).find((w) => w.outcome === "KubeWatchIdleError")
        expect(
          hungUp?.events.filter((e) => e.resourceVersion !== undefined && BigInt(e.resourceVersion) >= BigInt(ready))
        ).toEqual([])
        expect((yield* s.watch.health).watchRestarts).toBeGreaterThanOrEqual(1)
        yield* s.proxy.heal
        yield* backInStep(`faults, a stalled stream (${server})`, s.all, Date.now())
        yield* s.byName.get("stl-a")!.awaitLast("stl-a", ready)
        yield* settle(s, ["stl-a"])
        expect(yield* s.byName.get("stl-a")!.shorts).toEqual(["stl-a:Pending", "stl-a:Warm", "stl-a:Ready"])
        expect(yield* s.byName.get("stl-b")!.shorts).toEqual(["stl-b:Pending", "stl-b:gone"])
        expect(lists(yield* SubscriptionRef.get(s.wire.log))).toBe(1)
      })),
    90_000
  )

  it.live(
    "an outage with deletes and a kube-apiserver restart in it: the resume gets 410, a re-list tells only the deleted gone",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const names = ["out-keep1", "out-keep2", "out-goes1", "out-goes2", "out-label"]
        const s = yield* scenario("flt-outage", names, [...names, "out-new"])
        const before = (yield* SubscriptionRef.get(s.wire.log)).watches.length
        yield* s.proxy.refuse
        yield* s.proxy.resetAll
        yield* failures(s, before, 2, transport, "two watches refused")
        yield* s.admin.delete(SandboxResource, ns, "out-goes1")
        yield* s.admin.delete(SandboxResource, ns, "out-goes2")
        yield* s.admin.mergePatch(SandboxResource, ns, "out-label", {
          metadata: { labels: { "jr2.dev/run": "elsewhere" } }
        })
        yield* s.setPhase("out-keep1", "Ready")
        yield* s.admin.create(SandboxResource, ns, sandboxBody(ns, "out-new", s.run))
        // A write elsewhere, then a restart: the new watch cache starts past every resourceVersion
        // the watch could resume from.
        yield* s.admin.create(ConfigMaps, ns, {
          apiVersion: "v1",
          kind: "ConfigMap",
          metadata: { generateName: "flt-bump-" }
        })
        yield* Facts.restartApiServer(facts, "SIGTERM")
        yield* s.setPhase("out-keep2", "Ready")
        yield* s.proxy.heal
        yield* backInStep(`faults, an outage with deletes and a restart, ending in 410 (${server})`, s.all, Date.now())

        yield* settle(s, ["out-keep1", "out-keep2", "out-new"])
        for (const name of ["out-goes1", "out-goes2", "out-label"]) {
          expect(yield* s.byName.get(name)!.shorts).toEqual([`${name}:Pending`, `${name}:gone`])
        }
        expect(yield* s.byName.get("out-keep1")!.shorts).toEqual([
          "out-keep1:Pending",
          "out-keep1:Warm",
          "out-keep1:Ready"
        ])
        expect(yield* s.byName.get("out-keep2")!.shorts).toEqual(["out-keep2:Pending", "out-keep2:Ready"])
        const log = yield* SubscriptionRef.get(s.wire.log)
        expect(log.watches.flatMap((w) => w.events).filter((e) => e.type === "ERROR")).toEqual([
          { type: "ERROR", code: 410, reason: "Expired" }
        ])
        expect(lists(log)).toBe(2)
        expect((yield* s.watch.health).relists).toBe(1)
      })),
    120_000
  )

  it.live(
    "kube-apiserver killed (SIGKILL) under an open watch and started again: the watch backs off, comes back and catches up",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const names = ["crash-a", "crash-b", "crash-c"]
        const s = yield* scenario("flt-crash", names, [...names, "crash-d"])
        const before = (yield* SubscriptionRef.get(s.wire.log)).watches.length
        yield* Facts.restartApiServer(facts, "SIGKILL")
        const restarted = Date.now()
        // While it was down the watch failed (the proxy could not reach it) and backed off.
        const down = yield* SubscriptionRef.get(s.wire.log)
        expect(down.watches.slice(before - 1).some((w) => transport(w.outcome))).toBe(true)
        yield* s.setPhase("crash-a", "Ready")
        yield* s.admin.delete(SandboxResource, ns, "crash-b")
        yield* s.admin.create(SandboxResource, ns, sandboxBody(ns, "crash-d", s.run))
        yield* backInStep(`faults, kube-apiserver killed and started again (${server})`, s.all, restarted)
        yield* settle(s, ["crash-a", "crash-c", "crash-d"])
        expect(yield* s.byName.get("crash-b")!.shorts).toEqual(["crash-b:Pending", "crash-b:gone"])
        expect((yield* s.byName.get("crash-a")!.shorts).at(-1)).toBe("crash-a:Ready")
        expect(yield* s.byName.get("crash-d")!.shorts).toEqual(["crash-d:gone", "crash-d:-"])
      })),
    120_000
  )
})
