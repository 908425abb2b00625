/**
 * API Priority and Fairness refusing the watch's own user, on the real server. A FlowSchema sends
 * the limited user's Sandbox lists and watches to a priority level with no seats of its own and
 * none to borrow; APF still admits one request when none of that level is executing, so a "holder"
 * (a large list whose body is never read, which keeps its seat while the server is blocked writing)
 * keeps the level full. Every other request of that user is then answered 429 with a plain-text
 * body and a Retry-After. The watch must wait what it is told (no busy loop, no re-list), stay not
 * synced, log why, and sync once the holder lets go and the FlowSchema is gone.
 *
 * 1.37 only: a level with no seats (`nominalConcurrencyShares: 0`) needs flowcontrol v1 (1.29+);
 * 1.20's v1beta1 gives every level at least one seat, so a refusal there depends on load and
 * timing, not on a rule a test can set.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Logger, Ref, Scope } from "effect"
import { randomBytes } from "node:crypto"
import * as KubeClient from "../../src/KubeClient.ts"
import { collectionPath } from "../../src/KubeResource.ts"
import { SandboxResource } from "../../src/Sandbox.ts"
import * as SandboxWatch from "../../src/SandboxWatch.ts"
import * as Facts from "./ApiServerFacts.ts"
import type { Http } from "./ApiServerFacts.ts"
import { LimitedUser } from "./RealApiServer.ts"
import { clientOn, falselyGone, poll, probe, recordAll, sandboxBody, seedPending } from "./watchSupport.ts"

const facts = Facts.load()
const ns = facts.namespace
const flowcontrol = "/apis/flowcontrol.apiserver.k8s.io/v1"
const Refuse = "sandbox-watch-refuse"
const sandboxes = collectionPath(SandboxResource, ns)

/** The priority level that admits nothing and the FlowSchema that sends the limited user to it. */
const refuseLimitedUser = (http: Http) =>
  Effect.acquireRelease(
    Effect.gen(function*() {
      const level = yield* Facts.request(http, "POST", `${flowcontrol}/prioritylevelconfigurations`, {
        token: facts.adminToken,
        body: {
          apiVersion: "flowcontrol.apiserver.k8s.io/v1",
          kind: "PriorityLevelConfiguration",
          metadata: { name: Refuse },
          spec: {
            type: "Limited",
            limited: {
              nominalConcurrencyShares: 0,
              lendablePercent: 0,
              borrowingLimitPercent: 0,
              limitResponse: { type: "Reject" }
            }
          }
        }
      })
      const schema = yield* Facts.request(http, "POST", `${flowcontrol}/flowschemas`, {
        token: facts.adminToken,
        body: {
          apiVersion: "flowcontrol.apiserver.k8s.io/v1",
          kind: "FlowSchema",
          metadata: { name: Refuse },
          spec: {
            priorityLevelConfiguration: { name: Refuse },
            matchingPrecedence: 50,
            distinguisherMethod: { type: "ByUser" },
            rules: [{
              subjects: [{ kind: "User", user: { name: LimitedUser } }],
              resourceRules: [{
                verbs: ["list", "watch"],
                apiGroups: ["jr2.dev"],
                resources: ["sandboxes"],
                namespaces: ["*"]
              }]
            }]
          }
        }
      })
      if (level.status !== 201 || schema.status !== 201) {
        return yield* Effect.dieMessage(
          `creating the refusing FlowSchema failed: level ${level.status} ${
            JSON.stringify(level.json)
          }, schema ${schema.status} ${JSON.stringify(schema.json)}`
        )
      }
      return String(schema.json.metadata.uid)
    }),
    () => lift(http)
  )

const lift = (http: Http) =>
  Effect.all([
    Facts.request(http, "DELETE", `${flowcontrol}/flowschemas/${Refuse}`, { token: facts.adminToken }),
    Facts.request(http, "DELETE", `${flowcontrol}/prioritylevelconfigurations/${Refuse}`, { token: facts.adminToken })
  ])

const listAsLimited = (http: Http) =>
  Facts.request(http, "GET", `${sandboxes}?limit=1`, { token: facts.limitedUserToken })

/**
 * A Sandbox of about 1 MB (etcd takes 1.5 MB at most): a list of a dozen fills every buffer. The
 * padding is random because the server gzips large answers to a client that accepts it (fetch
 * does): twelve megabytes of one letter would leave as a few kilobytes and free the seat at once.
 */
const HolderRun = "apf-holder"
const HolderCount = 12
const seedHeavy = (admin: KubeClient.KubeClientService, count: number) =>
  Effect.forEach(Array.from({ length: count }, (_, i) => i), (i) =>
    admin.create(SandboxResource, ns, {
      ...sandboxBody(ns, `apf-heavy-${i}`, HolderRun),
      spec: { padding: randomBytes(750_000).toString("base64") }
    }), { discard: true, concurrency: 4 })

const dropHeavy = (admin: KubeClient.KubeClientService, count: number) =>
  Effect.forEach(
    Array.from({ length: count }, (_, i) => i),
    (i) => Effect.ignore(admin.delete(SandboxResource, ns, `apf-heavy-${i}`)),
    { discard: true }
  )

/** Each line the watch logs, with when (epoch ms). */
const captureLogs = Effect.gen(function*() {
  const lines = yield* Ref.make<ReadonlyArray<{ readonly at: number; readonly text: string }>>([])
  const logger = Logger.make(({ date, message }) => {
    const text = Array.isArray(message) ? message.join(" ") : String(message)
    Effect.runSync(Ref.update(lines, (all) => [...all, { at: date.getTime(), text }]))
  })
  return { lines: Ref.get(lines), layer: Logger.replace(Logger.defaultLogger, logger) }
})

describe("API Priority and Fairness against the real kube-apiserver", () => {
  it.live.skipIf(facts.minor < 29)(
    "a priority level that admits nothing: 429 in plain text with Retry-After; the watch waits it, unsynced, then syncs",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const run = "apf-refuse"
        const admin = yield* clientOn(Facts.connection(facts))
        yield* seedPending(admin, ns, run, ["apf-a", "apf-b"])
        const agent = yield* Facts.agent(facts)
        const http: Http = { agent, base: facts.url }
        yield* Facts.grantWatch(http, facts)
        const uid = yield* refuseLimitedUser(http)
        // APF takes the FlowSchema in from an informer: wait until it classifies the user's lists.
        yield* poll(
          listAsLimited(http),
          (r) => r.headers["x-kubernetes-pf-flowschema-uid"] === uid,
          "APF to classify the limited user's lists by the new FlowSchema"
        )
        yield* Effect.acquireRelease(seedHeavy(admin, HolderCount), () => dropHeavy(admin, HolderCount))
        const holderScope = yield* Scope.make()
        yield* Effect.addFinalizer(() => Scope.close(holderScope, Exit.void))
        const holder = yield* Facts.openWatch(
          http,
          `${sandboxes}?labelSelector=${encodeURIComponent(`jr2.dev/run=${HolderRun}`)}`,
          facts.limitedUserToken
        ).pipe(Scope.extend(holderScope))
        expect(holder.status).toBe(200)
        const refused = yield* listAsLimited(http)
        // What 1.37's APF answers: a text body, not a Status, and the seconds to wait (1, doubling
        // to 32 while requests keep being dropped).
        expect([refused.status, refused.headers["content-type"], refused.json]).toEqual([
          429,
          "text/plain; charset=utf-8",
          "Too many requests, please try again later.\n"
        ])
        expect(Number(refused.headers["retry-after"])).toBeGreaterThanOrEqual(1)

        const logs = yield* captureLogs
        const wire = yield* probe(yield* clientOn(Facts.connection(facts, { token: facts.limitedUserToken })))
        const watch = yield* SandboxWatch.make({
          namespace: ns,
          labelSelector: `jr2.dev/run=${run}`,
          backoffFloor: "50 millis",
          backoffCap: "30 seconds",
          jitter: false,
          // These tests read the paged list's requests; streamingList.test.ts has the streaming lists.
          listMode: "paged"
        }).pipe(Effect.provideService(KubeClient.KubeClient, wire.client), Effect.provide(logs.layer))
        const all = yield* recordAll(watch)
        const throttled = yield* wire.await((l) => l.lists.length >= 3, "three lists while refused", "40 seconds")
        expect(throttled.lists.slice(0, 2).map((l) => l.outcome)).toEqual([
          { _tag: "Failed", failure: "KubeStatusError 429" },
          { _tag: "Failed", failure: "KubeStatusError 429" }
        ])
        expect(throttled.watches).toEqual([])
        expect((yield* watch.health).synced).toBe(false)
        expect(yield* all.told).toEqual([])
        // Each refusal is logged with the wait asked; the next try comes no sooner (a few ms of
        // scheduling allowed): one request per Retry-After, no busy loop.
        const waits = (yield* logs.lines).flatMap(({ at, text }) => {
          const asked = /429, Retry-After (\d+)s/.exec(text)
          return asked === null ? [] : [{ at, seconds: Number(asked[1]) }]
        })
        expect(waits.length).toBeGreaterThanOrEqual(2)
        for (let i = 1; i < waits.length; i++) {
          expect(waits[i]!.at - waits[i - 1]!.at).toBeGreaterThanOrEqual(waits[i - 1]!.seconds * 1000 - 20)
        }

        // The holder lets go and the FlowSchema goes: the next try lists, then watches.
        yield* Scope.close(holderScope, Exit.void)
        yield* lift(http)
        yield* watch.synced
        expect(yield* all.awaitShorts(2)).toEqual(["apf-a:Pending", "apf-b:Pending"])
        expect(falselyGone(yield* all.told, ["apf-a", "apf-b"])).toEqual([])
        const log = yield* wire.await((l) => l.watches.at(-1)?.outcome === "open", "the watch after the refusals")
        expect(log.lists.filter((l) => l.outcome._tag === "Listed").length).toBe(1)
        expect((yield* watch.health).relists).toBe(0)
        // Nothing lingers for the next file: the limited user is admitted again.
        yield* poll(listAsLimited(http), (r) => r.status === 200, "APF to admit the limited user again")
      })),
    90_000
  )
})
