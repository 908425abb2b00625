/**
 * The watch's integration scenarios against the real kube-apiserver 1.20.2: the paged first list,
 * the watch and its bookmarks, status updates, deletes, a label removal, a resume after the
 * server's own timeout, an expired resourceVersion (410, then a re-list), 401 and 403 — each test
 * asserts what subscribers were told, in order, and what the watch asked of the server.
 *
 * Live by necessity: the server's timers are real. Small back-offs keep it quick; every wait is on
 * something recorded changing (see `watchSupport.ts`), never on a clock.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Option, SubscriptionRef } from "effect"
import * as KubeClient from "../../src/KubeClient.ts"
import type { KubeResource } from "../../src/KubeResource.ts"
import { collectionPath } from "../../src/KubeResource.ts"
import { SandboxResource } from "../../src/Sandbox.ts"
import * as SandboxWatch from "../../src/SandboxWatch.ts"
import * as FaultProxy from "../support/FaultProxy.ts"
import * as Facts from "./ApiServerFacts.ts"
import type { Probe, WireLog } from "./watchSupport.ts"
import {
  clientOn,
  poll,
  probe,
  recordAll,
  recordChanges,
  sandboxBody,
  switchableToken,
  versionOf
} from "./watchSupport.ts"

const facts = Facts.load()
const ns = facts.namespace
const ConfigMaps: KubeResource = { group: "", version: "v1", plural: "configmaps", namespaced: true }

const watchOn = (
  client: KubeClient.KubeClientService,
  run: string,
  options: Partial<SandboxWatch.SandboxWatchOptions> = {}
) =>
  SandboxWatch.make({
    namespace: ns,
    labelSelector: `jr2.dev/run=${run}`,
    backoffFloor: "50 millis",
    backoffCap: "2 seconds",
    jitter: false,
    // These tests read the paged list's requests; streamingList.test.ts has the streaming lists.
    listMode: "paged",
    ...options
  }).pipe(Effect.provideService(KubeClient.KubeClient, client))

/** Creates each Sandbox and gives it `status.phase: Pending` (a create ignores `status`). */
const seed = (admin: KubeClient.KubeClientService, run: string, names: ReadonlyArray<string>) =>
  Effect.forEach(names, (name) =>
    Effect.zipRight(
      admin.create(SandboxResource, ns, sandboxBody(ns, name, run)),
      setPhase(admin, name, "Pending")
    ), { discard: true })

const setPhase = (admin: KubeClient.KubeClientService, name: string, phase: string) =>
  Effect.map(admin.mergePatch(SandboxResource, ns, name, { status: { phase } }, { subresource: "status" }), versionOf)

const listed = (log: WireLog) => log.lists.map((l) => l.outcome)

/** What the watch asked of the server and heard, so far. */
const wireLog = (wire: Probe) => SubscriptionRef.get(wire.log)

/** Where each watch should have resumed from: the last resourceVersion the one before it heard. */
const resumePoints = (log: WireLog) =>
  log.watches.slice(1).map((w, i) => {
    const before = log.watches[i]!
    const heard = before.events.filter((e) => e.resourceVersion !== undefined)
    return { asked: w.resourceVersion, expected: heard.at(-1)?.resourceVersion ?? before.resourceVersion }
  })

describe("SandboxWatch against the real kube-apiserver", () => {
  it.live("lists page by page (pageSize 2 over 5), then tells status updates, a label removal, a create and a delete, in order", () =>
    Effect.scoped(Effect.gen(function*() {
      const run = "swr-paging"
      const names = ["swr-p1", "swr-p2", "swr-p3", "swr-p4", "swr-p5"]
      const admin = yield* clientOn(Facts.connection(facts))
      yield* seed(admin, run, names)
      const wire = yield* probe(yield* clientOn(Facts.connection(facts)))
      const watch = yield* watchOn(wire.client, run, { pageSize: 2 })
      yield* watch.synced
      const log = yield* wire.await((l) => l.watches.length >= 1, "the first watch")
      const [list] = listed(log)
      expect(log.lists.map((l) => [l.limit, l.resourceVersion, l.labelSelector])).toEqual([[
        2,
        undefined,
        `jr2.dev/run=${run}`
      ]])
      expect(list).toEqual({
        _tag: "Listed",
        names,
        pages: 3,
        restarts: 0,
        resourceVersion: expect.stringMatching(/^\d+$/)
      })
      // The watch starts from the list's resourceVersion, with bookmarks and the default timeout.
      expect(log.watches[0]).toMatchObject({
        resourceVersion: list?._tag === "Listed" ? list.resourceVersion : "?",
        allowWatchBookmarks: true,
        timeoutSeconds: 240,
        labelSelector: `jr2.dev/run=${run}`
      })

      const all = yield* recordAll(watch)
      const p1 = yield* recordChanges(watch, "swr-p1")
      const p2 = yield* recordChanges(watch, "swr-p2")
      const p6 = yield* recordChanges(watch, "swr-p6")
      // Subscribed once synced: each hears the cache at once, a name not there as gone.
      expect(yield* p6.awaitShorts(1)).toEqual(["swr-p6:gone"])
      expect([...(yield* all.awaitShorts(5))].sort()).toEqual(names.map((n) => `${n}:Pending`))

      yield* p1.awaitLast("swr-p1", yield* setPhase(admin, "swr-p1", "Ready"))
      yield* admin.mergePatch(SandboxResource, ns, "swr-p2", { metadata: { labels: { "jr2.dev/run": null } } })
      yield* p2.awaitLast("swr-p2", "gone")
      const created = yield* admin.create(SandboxResource, ns, sandboxBody(ns, "swr-p6", run))
      yield* p6.awaitLast("swr-p6", versionOf(created))
      yield* p6.awaitLast("swr-p6", yield* setPhase(admin, "swr-p6", "Pending"))
      yield* admin.delete(SandboxResource, ns, "swr-p1")
      yield* p1.awaitLast("swr-p1", "gone")

      expect(yield* p1.shorts).toEqual(["swr-p1:Pending", "swr-p1:Ready", "swr-p1:gone"])
      expect(yield* p2.shorts).toEqual(["swr-p2:Pending", "swr-p2:gone"])
      expect(yield* p6.shorts).toEqual(["swr-p6:gone", "swr-p6:-", "swr-p6:Pending"])
      const everything = yield* all.awaitShorts(10)
      expect(everything.slice(5)).toEqual(["swr-p1:Ready", "swr-p2:gone", "swr-p6:-", "swr-p6:Pending", "swr-p1:gone"])
      expect([...(yield* watch.snapshot).keys()].sort()).toEqual(["swr-p3", "swr-p4", "swr-p5", "swr-p6"])
      // The object as the server has it, decoded: its labels, spec and status.
      const p6Now = Option.getOrThrow(yield* watch.get("swr-p6"))
      expect(p6Now).toMatchObject({
        metadata: { name: "swr-p6", namespace: ns, labels: { "jr2.dev/run": run } },
        spec: { resources: { limits: { memory: "2Gi" } } },
        status: { phase: "Pending" }
      })
      const after = yield* wireLog(wire)
      expect(after.lists.length).toBe(1)
      // One watch heard it all, in the order the server committed it.
      expect(after.watches[0]?.events.filter((e) => e.type !== "BOOKMARK").map((e) => `${e.type} ${e.name}`)).toEqual([
        "MODIFIED swr-p1",
        "DELETED swr-p2",
        "ADDED swr-p6",
        "MODIFIED swr-p6",
        "DELETED swr-p1"
      ])
      expect(yield* watch.health).toMatchObject({ synced: true, relists: 0, watchRestarts: 0, cached: 4 })
    })))

  it.live("a watch the server ends at its timeout resumes from the last resourceVersion heard, a bookmark's included, with no re-list", () =>
    Effect.scoped(Effect.gen(function*() {
      const run = "swr-resume"
      const admin = yield* clientOn(Facts.connection(facts))
      yield* seed(admin, run, ["swr-r1"])
      // Not selected: its changes move the resource's resourceVersion, which bookmarks carry.
      yield* seed(admin, `${run}-other`, ["swr-r-other"])
      const wire = yield* probe(yield* clientOn(Facts.connection(facts)))
      // 5 s: 1.20 sends bookmarks in a watch's last 3 s, after the changes below have landed.
      const watch = yield* watchOn(wire.client, run, { timeoutSeconds: 5 })
      yield* watch.synced
      const r1 = yield* recordChanges(watch, "swr-r1")
      yield* r1.awaitShorts(1)
      const ready = yield* setPhase(admin, "swr-r1", "Ready")
      // Told: the first watch is registered at the server, so what follows reaches it live.
      yield* r1.awaitLast("swr-r1", ready)
      const other = yield* setPhase(admin, "swr-r-other", "Elsewhere")
      const log = yield* wire.await((l) => l.watches.length >= 3, "three watches")
      const [first, second] = log.watches
      // The first watch heard the change, then bookmarks at the newer resourceVersion of the
      // Sandbox it does not select; the server ended it; the next resumed from the bookmark.
      expect(first?.outcome).toBe("end")
      expect(first?.events[0]).toEqual({ type: "MODIFIED", name: "swr-r1", resourceVersion: ready })
      expect(first?.events.slice(1).map((e) => `${e.type} ${e.resourceVersion}`)).toContain(`BOOKMARK ${other}`)
      expect(first?.events.at(-1)).toEqual({ type: "BOOKMARK", resourceVersion: other })
      expect(second?.resourceVersion).toBe(other)
      // Nothing newer than where it stands: 1.20 sends a quiet watch no bookmark at all.
      expect([second?.events, second?.outcome]).toEqual([[], "end"])
      const points = resumePoints(log)
      expect(points.map((p) => p.asked)).toEqual(points.map((p) => p.expected))

      const terminating = yield* setPhase(admin, "swr-r1", "Terminating")
      yield* r1.awaitLast("swr-r1", terminating)
      expect(yield* r1.shorts).toEqual(["swr-r1:Pending", "swr-r1:Ready", "swr-r1:Terminating"])
      const later = yield* wireLog(wire)
      expect(later.lists.length).toBe(1)
      expect(later.watches.slice(0, -1).every((w) => w.outcome === "end")).toBe(true)
      expect((yield* watch.health).relists).toBe(0)
    })))

  it.live(
    "an expired resourceVersion (writes unseen across an apiserver restart): 410, a quorum re-list, and only the deleted told gone",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const run = "swr-expired"
        const admin = yield* clientOn(Facts.connection(facts))
        yield* seed(admin, run, ["swr-e-keep", "swr-e-goes"])
        const proxy = yield* FaultProxy.make({ targetPort: facts.port })
        const wire = yield* probe(yield* clientOn(Facts.connection(facts, { server: proxy.url("https") })))
        const watch = yield* watchOn(wire.client, run)
        yield* watch.synced
        yield* wire.await((l) => l.watches.length >= 1, "the first watch")
        const keep = yield* recordChanges(watch, "swr-e-keep")
        const goes = yield* recordChanges(watch, "swr-e-goes")
        const fresh = yield* recordChanges(watch, "swr-e-new")
        const all = yield* recordAll(watch)
        yield* all.awaitShorts(2)

        // Nothing reaches the watch from here: its connection is held open, silent.
        yield* proxy.stall
        const ready = yield* setPhase(admin, "swr-e-keep", "Ready")
        yield* admin.delete(SandboxResource, ns, "swr-e-goes")
        const created = yield* admin.create(SandboxResource, ns, sandboxBody(ns, "swr-e-new", run))
        // A write elsewhere moves etcd past the last Sandbox event, so the restarted server's watch
        // cache starts after every resourceVersion the watch could resume from.
        yield* admin.create(ConfigMaps, ns, {
          apiVersion: "v1",
          kind: "ConfigMap",
          metadata: { generateName: "swr-bump-" },
          data: { a: "b" }
        })
        yield* Facts.restartApiServer(facts, "SIGKILL")
        // What the proxy held (the events of those writes) is thrown away with the connections.
        yield* proxy.resetAll
        yield* proxy.heal

        yield* goes.awaitLast("swr-e-goes", "gone")
        yield* keep.awaitLast("swr-e-keep", ready)
        yield* fresh.awaitLast("swr-e-new", versionOf(created))
        expect(yield* keep.shorts).toEqual(["swr-e-keep:Pending", "swr-e-keep:Ready"])
        expect(yield* goes.shorts).toEqual(["swr-e-goes:Pending", "swr-e-goes:gone"])
        expect(yield* fresh.shorts).toEqual(["swr-e-new:gone", "swr-e-new:-"])
        const log = yield* wire.await(
          (l) => l.lists.length >= 2 && l.watches.at(-1)?.outcome === "open",
          "the re-list and a new watch"
        )
        // The resume from the old resourceVersion met the ERROR 410 inside a 200; then a quorum list.
        const expired = log.watches.filter((w) => w.events.some((e) => e.type === "ERROR"))
        expect(expired.map((w) => [w.resourceVersion, w.events])).toEqual([
          [log.watches[0]!.resourceVersion, [{ type: "ERROR", code: 410, reason: "Expired" }]]
        ])
        expect(log.lists.map((l) => l.resourceVersion)).toEqual([undefined, undefined])
        expect(log.lists[1]?.outcome).toMatchObject({ _tag: "Listed", names: ["swr-e-keep", "swr-e-new"] })
        const rest = (yield* all.told).slice(2).map((t) =>
          `${t.name}:${Option.isSome(t.sandbox) ? t.sandbox.value.status?.phase ?? "-" : "gone"}`
        )
        expect([...rest].sort()).toEqual(["swr-e-goes:gone", "swr-e-keep:Ready", "swr-e-new:-"])
        expect((yield* watch.health).relists).toBe(1)
      })),
    90_000
  )

  it.live("401 with a wrong token: the watch backs off, keeps its cache and tells nobody; the right token heals it", () =>
    Effect.scoped(Effect.gen(function*() {
      const run = "swr-401"
      const admin = yield* clientOn(Facts.connection(facts))
      yield* seed(admin, run, ["swr-u1", "swr-u2"])
      const proxy = yield* FaultProxy.make({ targetPort: facts.port })
      const token = switchableToken(facts, { server: proxy.url("https"), token: facts.adminToken })
      const wire = yield* probe(yield* clientOn(token.connection))
      const watch = yield* watchOn(wire.client, run)
      yield* watch.synced
      yield* wire.await((l) => l.watches.length >= 1, "the first watch")
      const u1 = yield* recordChanges(watch, "swr-u1")
      const all = yield* recordAll(watch)
      yield* all.awaitShorts(2)
      // The watch is open and delivering (not merely asked for): only then cut it.
      const warm = yield* setPhase(admin, "swr-u1", "Warm")
      yield* u1.awaitLast("swr-u1", warm)

      yield* token.set("not-the-token")
      // Cut the open watch: the next request carries the wrong token.
      yield* proxy.resetAll
      const refused = yield* wire.await(
        (l) => l.watches.filter((w) => w.outcome === "KubeStatusError 401").length >= 3,
        "three watches refused with 401"
      )
      // Resumes from where it was, never a re-list: a 401 says nothing about the resourceVersion.
      expect(refused.watches.slice(1).map((w) => w.resourceVersion)).toEqual(refused.watches.slice(1).map(() => warm))
      const ready = yield* setPhase(admin, "swr-u1", "Ready")
      expect([...(yield* watch.snapshot).keys()].sort()).toEqual(["swr-u1", "swr-u2"])
      expect(yield* all.shorts).toHaveLength(3)

      yield* token.set(facts.adminToken)
      yield* u1.awaitLast("swr-u1", ready)
      expect(yield* u1.shorts).toEqual(["swr-u1:Pending", "swr-u1:Warm", "swr-u1:Ready"])
      expect((yield* all.shorts).slice(2)).toEqual(["swr-u1:Warm", "swr-u1:Ready"])
      const log = yield* wireLog(wire)
      expect(log.lists.length).toBe(1)
      expect(log.watches.at(-1)?.outcome).toBe("open")
      expect(yield* watch.health).toMatchObject({ synced: true, relists: 0, cached: 2 })
    })))

  it.live("403 for a user that may list but not watch: the watch backs off; granting watch heals it without a restart", () =>
    Effect.scoped(Effect.gen(function*() {
      const run = "swr-403"
      const admin = yield* clientOn(Facts.connection(facts))
      yield* seed(admin, run, ["swr-f1"])
      const agent = yield* Facts.agent(facts)
      const http = { agent, base: facts.url }
      // Another file may have granted watch and taken it back moments ago: RBAC takes the
      // revocation in from an informer, so wait until the user is really refused.
      const refusedNow = poll(
        Facts.request(http, "GET", `${collectionPath(SandboxResource, ns)}?watch=true&timeoutSeconds=1`, {
          token: facts.limitedUserToken
        }),
        (r) => r.status === 403,
        "the limited user to be refused watch"
      )
      yield* refusedNow
      // The watch, and the grant, live in this scope; once it closed the grant is gone.
      yield* Effect.scoped(Effect.gen(function*() {
        const wire = yield* probe(yield* clientOn(Facts.connection(facts, { token: facts.limitedUserToken })))
        const watch = yield* watchOn(wire.client, run)
        // The list is allowed: the cache is filled and told.
        yield* watch.synced
        const f1 = yield* recordChanges(watch, "swr-f1")
        expect(yield* f1.awaitShorts(1)).toEqual(["swr-f1:Pending"])
        const refused = yield* wire.await(
          (l) => l.watches.filter((w) => w.outcome === "KubeStatusError 403").length >= 3,
          "three watches refused with 403"
        )
        expect(refused.lists.length).toBe(1)
        const ready = yield* setPhase(admin, "swr-f1", "Ready")

        yield* Facts.grantWatch(http, facts)
        // RBAC takes the grant in from its informer; the back-off (capped at 2 s) asks again meanwhile.
        yield* f1.awaitLast("swr-f1", ready)
        expect(yield* f1.shorts).toEqual(["swr-f1:Pending", "swr-f1:Ready"])
        const log = yield* wireLog(wire)
        expect(log.lists.length).toBe(1)
        expect(log.watches.at(-1)?.outcome).toBe("open")
        // Every refused watch resumed from the list's resourceVersion.
        const rv = log.lists[0]?.outcome._tag === "Listed" ? log.lists[0].outcome.resourceVersion : "?"
        expect(log.watches.every((w) => w.resourceVersion === rv)).toBe(true)
        expect((yield* watch.health).relists).toBe(0)
      }))
      // No grant may outlive the test: wait until RBAC has taken the revocation in.
      yield* refusedNow
    })))
})
