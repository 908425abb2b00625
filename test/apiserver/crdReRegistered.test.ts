/**
 * The Sandbox CRD deleted and created again while the watch runs in `auto` (issue 42, item 6): the
 * 404 while it is gone is no proof that the server cannot stream (rule 18), so on 1.37 the watch
 * goes on streaming afterwards (no LIST of Sandboxes in the server's `apiserver_request_total`); a
 * Sandbox is told gone only once the CRD's deletion removed it; the 404 is said once, in words.
 * 1.20 cannot stream: it pages from the start (its 422) and lists again after the CRD is back.
 *
 * Runs in its own file: deleting the CRD deletes every Sandbox of the shared server, and the CRD is
 * created again (and waited on until served) however the test ends.
 */
import { fetch } from "@effect/platform-node/Undici"
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Logger, Option, Ref, Stream, SubscriptionRef } from "effect"
import * as KubeClient from "../../src/KubeClient.ts"
import { collectionPath } from "../../src/KubeResource.ts"
import { SandboxResource } from "../../src/Sandbox.ts"
import * as SandboxWatch from "../../src/SandboxWatch.ts"
import * as Facts from "./ApiServerFacts.ts"
import type { Http, JsonResponse } from "./ApiServerFacts.ts"
import { sandboxCrd } from "./RealApiServer.ts"
import { clientOn, poll, probe, sandboxBody, waitFor } from "./watchSupport.ts"

const facts = Facts.load()
const ns = facts.namespace
const admin = facts.adminToken
const sandboxes = collectionPath(SandboxResource, ns)
const crdPath = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/sandboxes.jr2.dev"
const hold = "jr2.dev/hold"

/** The server's count of finished LISTs of sandboxes, from its /metrics. */
const listsCounted = (http: Http) =>
  Effect.promise(async () => {
    const answer = await fetch(`${facts.url}/metrics`, {
      headers: { authorization: `Bearer ${admin}` },
      dispatcher: http.agent
    })
    let total = 0
    for (const line of (await answer.text()).split("\n")) {
      if (!line.startsWith("apiserver_request_total{")) continue
      if (!line.includes(`resource="sandboxes"`) || !line.includes(`verb="LIST"`)) continue
      total += Number(line.slice(line.lastIndexOf(" ") + 1))
    }
    return total
  })

/**
 * One GET of the server's truth (never a LIST: the LISTs are what this test counts), waiting out a
 * 429 (a watch cache "(re)initializing" after the CRD came back) for its Retry-After, as the
 * watch does (rule 6).
 */
const read = (http: Http, path: string): Effect.Effect<JsonResponse> =>
  Effect.gen(function*() {
    for (let attempt = 1;; attempt++) {
      const answer = yield* Facts.request(http, "GET", path, { token: admin })
      if (answer.status !== 429 || attempt >= 60) return answer
      // Waiting on another process, for as long as it asked: the pause makes nothing happen here.
      yield* Effect.sleep(Duration.seconds(Math.max(1, Number(answer.headers["retry-after"] ?? "1"))))
    }
  })

/** The CRD is served: an object of it that does not exist is the object's own 404, not the path's. */
const served = (http: Http) =>
  Effect.map(
    read(http, `${sandboxes}/served-probe`),
    (answer) => answer.status === 404 && answer.json?.details?.name === "served-probe"
  )

/** Creates the CRD again if it is gone (its deletion finished first), and waits until it is served. */
const restoreCrd = (http: Http) =>
  Effect.gen(function*() {
    // A Sandbox held by our finalizer would keep the CRD terminating for ever.
    yield* Facts.request(http, "PATCH", `${sandboxes}/crd-held`, {
      token: admin,
      body: { metadata: { finalizers: null } },
      contentType: "application/merge-patch+json"
    })
    yield* poll(
      read(http, crdPath),
      (a) => a.status === 404 || a.json?.metadata?.deletionTimestamp === undefined,
      "the CRD's deletion to finish",
      "90 seconds"
    )
    if ((yield* read(http, crdPath)).status === 404) {
      const created = yield* Facts.request(http, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", {
        token: admin,
        body: sandboxCrd
      })
      if (created.status !== 201 && created.status !== 409) {
        return yield* Effect.dieMessage(
          `creating the CRD again answered ${created.status}: ${JSON.stringify(created.json)}`
        )
      }
    }
    yield* poll(served(http), (ok) => ok, "the Sandbox CRD served again", "90 seconds")
  })

/** The watch of `run` in `auto` on `client`, on a short back-off; the lines it logs, to read. */
const watchOf = (client: KubeClient.KubeClientService, run: string) =>
  Effect.gen(function*() {
    const lines = yield* Ref.make<ReadonlyArray<string>>([])
    const logger = Logger.make(({ message }) => {
      Effect.runSync(
        Ref.update(lines, (all) => [...all, Array.isArray(message) ? message.map(String).join(" ") : String(message)])
      )
    })
    const watch = yield* SandboxWatch.make({
      namespace: ns,
      labelSelector: `jr2.dev/run=${run}`,
      listMode: "auto",
      backoffFloor: "50 millis",
      backoffCap: "2 seconds",
      jitter: false
    }).pipe(
      Effect.provideService(KubeClient.KubeClient, client),
      Effect.provide(Logger.replace(Logger.defaultLogger, logger))
    )
    return { watch, lines }
  })

/** One thing `allChanges` told, and when (real time). */
interface Stamped {
  readonly name: string
  readonly gone: boolean
  readonly at: number
}

describe("the Sandbox CRD deleted and created again under a running watch (auto)", () => {
  it.live(
    "1.37 goes on streaming (no LIST counted), 1.20 pages throughout; nothing told gone before the deletion removed it; the 404 said once in words",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const run = "crd-reregistered"
        const http: Http = { agent: yield* Facts.agent(facts), base: facts.url }
        const adminClient = yield* clientOn(Facts.connection(facts))
        // `crd-held` carries a finalizer of ours: the CRD's deletion removes the others at once and
        // waits for it, so there is a time when it exists while its CRD is being deleted.
        yield* adminClient.create(SandboxResource, ns, {
          ...sandboxBody(ns, "crd-held", run),
          metadata: { name: "crd-held", namespace: ns, labels: { "jr2.dev/run": run }, finalizers: [hold] }
        })
        for (const name of ["crd-b", "crd-c"]) {
          yield* adminClient.create(SandboxResource, ns, sandboxBody(ns, name, run))
        }
        const wire = yield* probe(yield* clientOn(Facts.connection(facts)))
        const { lines, watch } = yield* watchOf(wire.client, run)
        const told = yield* SubscriptionRef.make<ReadonlyArray<Stamped>>([])
        yield* Effect.forkScoped(
          Stream.runForEach(watch.allChanges, (change) =>
            SubscriptionRef.update(told, (all) => [...all, {
              name: change.name,
              gone: Option.isNone(change.sandbox),
              at: Date.now()
            }]))
        )
        yield* watch.synced.pipe(Effect.timeout("60 seconds"))
        expect(yield* watch.health).toMatchObject({ synced: true, cached: 3 })
        const listsBefore = yield* listsCounted(http)
        const wireBefore = yield* SubscriptionRef.get(wire.log)

        // Delete the CRD; it stays while `crd-held` does, the others are removed by its deletion.
        const deletedAt = Date.now()
        yield* Effect.acquireRelease(
          Effect.flatMap(
            Facts.request(http, "DELETE", crdPath, { token: admin }),
            (answer) =>
              answer.status === 200 ? Effect.void : Effect.dieMessage(`deleting the CRD answered ${answer.status}`)
          ),
          () => restoreCrd(http)
        )
        const goneOf = (all: ReadonlyArray<Stamped>, name: string) => all.find((t) => t.name === name && t.gone)
        yield* waitFor(
          told,
          (all) => goneOf(all, "crd-b") !== undefined && goneOf(all, "crd-c") !== undefined,
          "crd-b and crd-c told gone",
          "60 seconds"
        )
        // `crd-held` exists (terminating): whatever the watch met meanwhile, it was not told gone.
        const held = yield* read(http, `${sandboxes}/crd-held`)
        expect(held.status).toBe(200)
        expect(held.json.metadata.deletionTimestamp).toBeDefined()
        expect(goneOf(yield* SubscriptionRef.get(told), "crd-held")).toBeUndefined()
        const releasedAt = Date.now()
        const released = yield* Facts.request(http, "PATCH", `${sandboxes}/crd-held`, {
          token: admin,
          body: { metadata: { finalizers: null } },
          contentType: "application/merge-patch+json"
        })
        expect(released.status).toBe(200)
        yield* waitFor(told, (all) => goneOf(all, "crd-held") !== undefined, "crd-held told gone", "60 seconds")
        const stamped = yield* SubscriptionRef.get(told)
        expect(goneOf(stamped, "crd-b")!.at).toBeGreaterThanOrEqual(deletedAt)
        expect(goneOf(stamped, "crd-c")!.at).toBeGreaterThanOrEqual(deletedAt)
        expect(goneOf(stamped, "crd-held")!.at).toBeGreaterThanOrEqual(releasedAt)

        // The CRD gone: the resource is Go's plain 404, not a Status (what the simulator answers
        // while withdrawn, test/SimulatedApiServer.test.ts), and the watch meets it at least once
        // before the CRD comes back.
        yield* poll(read(http, crdPath), (a) => a.status === 404, "the CRD gone", "60 seconds")
        const notServed = yield* read(http, `${sandboxes}/crd-held`)
        expect([notServed.status, notServed.headers["content-type"], notServed.json])
          .toEqual([404, "text/plain; charset=utf-8", "404 page not found\n"])
        const met404 = yield* wire.await(
          (log) => log.watches.slice(wireBefore.watches.length).some((w) => w.outcome === "KubeStatusError 404"),
          "the watch to meet the 404",
          "60 seconds"
        )
        const endedByDeletion = met404.watches.slice(wireBefore.watches.length - 1).map((w) => w.outcome)
        console.log(
          `[crdReRegistered] ${facts.version}: watch outcomes from the deletion on: ${endedByDeletion.join(", ")}`
        )
        const atRecreate = met404.watches.length
        yield* restoreCrd(http)
        const recreatedAt = Date.now()

        // Back in step: a Sandbox created now is told, and the cache holds exactly it.
        yield* adminClient.create(SandboxResource, ns, sandboxBody(ns, "crd-after", run))
        yield* waitFor(
          told,
          (all) => all.some((t) => t.name === "crd-after" && !t.gone),
          "crd-after told",
          "60 seconds"
        )
        expect(yield* watch.health).toMatchObject({ synced: true, cached: 1 })
        const log = yield* SubscriptionRef.get(wire.log)
        const after = log.watches.slice(atRecreate)
        const listsAfter = yield* listsCounted(http)
        console.log(
          `[crdReRegistered] ${facts.version}: after the CRD came back (${
            Date.now() - recreatedAt
          } ms to crd-after told): ` +
            `watches ${
              JSON.stringify(
                after.map((w) => ({ rv: w.resourceVersion, stream: w.sendInitialEvents, outcome: w.outcome }))
              )
            }; ` +
            `LISTs counted by the server since the sync: ${
              listsAfter - listsBefore
            }; the watch's own lists: ${log.lists.length}`
        )
        if (facts.minor >= 37) {
          // Still streaming: the re-list after the CRD came back is a streaming list that reached
          // its end bookmark; no LIST at all, by the watch's own log or the server's count.
          expect(log.lists).toEqual([])
          expect(listsAfter - listsBefore).toBe(0)
          const restream = after.find((w) => w.sendInitialEvents === true)
          expect(restream?.events.some((e) => e.type === "BOOKMARK" && e.initialEventsEnd === true)).toBe(true)
        } else {
          // 1.20 paged from the start (its 422) and lists again once the CRD is back.
          expect(log.watches[0]?.outcome).toBe("KubeStatusError 422")
          expect(log.watches.filter((w) => w.sendInitialEvents === true)).toHaveLength(1)
          expect(log.lists.length).toBeGreaterThanOrEqual(2)
          expect(listsAfter - listsBefore).toBeGreaterThanOrEqual(1)
        }
        const said = yield* Ref.get(lines)
        const explained = said.filter((line) => line.includes("may not be installed"))
        expect(explained).toHaveLength(1)
        expect(explained[0]).toContain(`does not serve sandboxes.jr2.dev/v1alpha1 in namespace "${ns}"`)
        expect(said.filter((line) => line.includes("every list is paged"))).toHaveLength(facts.minor >= 37 ? 0 : 1)
      })),
    240_000
  )

  it.live(
    "a watch started before the CRD is installed meets 404s to its streaming list: no proof; once the CRD is there 1.37 syncs by streaming (no LIST counted), 1.20 by pages after its 422",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const run = "crd-late"
        const http: Http = { agent: yield* Facts.agent(facts), base: facts.url }
        yield* Effect.acquireRelease(
          Effect.flatMap(Facts.request(http, "DELETE", crdPath, { token: admin }), (answer) =>
            answer.status === 200 ? Effect.void : Effect.dieMessage(`deleting the CRD answered ${answer.status}`)),
          () =>
            restoreCrd(http)
        )
        yield* poll(
          read(http, crdPath),
          (a) =>
            a.status === 404,
          "the CRD gone",
          "60 seconds"
        )
        const wire = yield* probe(yield* clientOn(Facts.connection(facts)))
        const listsBefore = yield* listsCounted(http)
        const { lines, watch } = yield* watchOf(wire.client, run)
        // Three streaming lists answered 404, each after the back-off: still streaming.
        const refused = yield* wire.await(
          (log) => log.watches.filter((w) => w.outcome === "KubeStatusError 404").length >= 3,
          "three streaming lists answered 404",
          "60 seconds"
        )
        expect(refused.watches.slice(0, 3).map((w) => [w.sendInitialEvents, w.outcome])).toEqual(
          Array(3).fill([true, "KubeStatusError 404"])
        )
        expect(refused.lists).toEqual([])
        expect((yield* watch.health).synced).toBe(false)

        yield* restoreCrd(http)
        const adminClient = yield* clientOn(Facts.connection(facts))
        yield* adminClient.create(SandboxResource, ns, sandboxBody(ns, "crd-late-a", run))
        yield* watch.synced.pipe(Effect.timeout("60 seconds"))
        yield* poll(watch.health, (h) => h.cached === 1, "crd-late-a cached", "60 seconds")
        const log = yield* SubscriptionRef.get(wire.log)
        const listsAfter = yield* listsCounted(http)
        console.log(
          `[crdReRegistered] ${facts.version}: started before the CRD: ${
            JSON.stringify(log.watches.map((w) => ({ stream: w.sendInitialEvents, outcome: w.outcome })))
          }; LISTs counted: ${listsAfter - listsBefore}`
        )
        if (facts.minor >= 37) {
          expect(log.lists).toEqual([])
          expect(listsAfter - listsBefore).toBe(0)
          expect(log.watches.every((w) => w.sendInitialEvents === true)).toBe(true)
        } else {
          // 1.20: once the CRD is served, the streaming request meets its 422, then pages.
          expect(log.watches.some((w) => w.outcome === "KubeStatusError 422")).toBe(true)
          expect(log.lists.length).toBeGreaterThanOrEqual(1)
        }
        const said = yield* Ref.get(lines)
        expect(said.filter((line) => line.includes("may not be installed"))).toHaveLength(1)
        expect(said.filter((line) => line.includes("every list is paged"))).toHaveLength(facts.minor >= 37 ? 0 : 1)
      })),
    240_000
  )
})
