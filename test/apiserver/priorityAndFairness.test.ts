/**
 * API Priority and Fairness refusing the watch's own user, on the real server: a FlowSchema sends
 * the limited user's Sandbox lists and watches to a priority level that admits nothing, so every
 * one of them is answered 429 with the plain-text body and a Retry-After. The watch must wait what
 * it is told (no busy loop, no re-list storm), stay not synced, log why, and sync once the
 * FlowSchema is gone.
 *
 * 1.37 only: a priority level with no seats (`nominalConcurrencyShares: 0`, nothing to borrow)
 * needs flowcontrol v1 (1.29+). 1.20's v1beta1 gives every level at least one seat, so a refusal
 * there depends on load and timing, not on a rule a test can set.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Logger, Ref } from "effect"
import * as KubeClient from "../../src/KubeClient.ts"
import { collectionPath } from "../../src/KubeResource.ts"
import { SandboxResource } from "../../src/Sandbox.ts"
import * as SandboxWatch from "../../src/SandboxWatch.ts"
import * as Facts from "./ApiServerFacts.ts"
import type { Http } from "./ApiServerFacts.ts"
import { LimitedUser } from "./RealApiServer.ts"
import { clientOn, falselyGone, poll, probe, recordAll, seedPending } from "./watchSupport.ts"

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

const captureLogs = Effect.gen(function*() {
  const lines = yield* Ref.make<ReadonlyArray<string>>([])
  const logger = Logger.make(({ message }) => {
    const text = Array.isArray(message) ? message.join(" ") : String(message)
    Effect.runSync(Ref.update(lines, (all) => [...all, text]))
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
        yield* refuseLimitedUser(http)
        // APF takes the new FlowSchema in from an informer: wait until the user is refused.
        const refused = yield* poll(listAsLimited(http), (r) => r.status === 429, "APF to refuse the limited user")
        // What 1.37's APF answers: a text body, not a Status, and the seconds to wait.
        expect(refused.headers["content-type"]).toMatch(/^text\/plain/)
        expect(refused.json).toBe("Too many requests, please try again later.\n")
        const retryAfter = Number(refused.headers["retry-after"])
        expect(retryAfter).toBeGreaterThanOrEqual(1)

        const logs = yield* captureLogs
        const wire = yield* probe(yield* clientOn(Facts.connection(facts, { token: facts.limitedUserToken })))
        const started = Date.now()
        const watch = yield* SandboxWatch.make({
          namespace: ns,
          labelSelector: `jr2.dev/run=${run}`,
          backoffFloor: "50 millis",
          backoffCap: "30 seconds",
          jitter: false
        }).pipe(Effect.provideService(KubeClient.KubeClient, wire.client), Effect.provide(logs.layer))
        const all = yield* recordAll(watch)
        const throttled = yield* wire.await((l) => l.lists.length >= 3, "three refused lists", "60 seconds")
        const waited = Date.now() - started
        expect(throttled.lists.slice(0, 2).map((l) => l.outcome)).toEqual([
          { _tag: "Failed", failure: "KubeStatusError 429" },
          { _tag: "Failed", failure: "KubeStatusError 429" }
        ])
        // Two waits of Retry-After between the three lists: asked no sooner (a few ms of scheduling allowed).
        expect(waited).toBeGreaterThanOrEqual(2 * retryAfter * 1000 - 20)
        expect(throttled.watches).toEqual([])
        expect((yield* watch.health).synced).toBe(false)
        expect(yield* all.told).toEqual([])
        const lines = yield* logs.lines
        expect(lines.some((l) => l.includes("429") && l.includes(`Retry-After ${retryAfter}s`))).toBe(true)

        yield* lift(http)
        yield* watch.synced
        expect(yield* all.awaitShorts(2)).toEqual(["apf-a:Pending", "apf-b:Pending"])
        expect(falselyGone(yield* all.told, ["apf-a", "apf-b"])).toEqual([])
        const log = yield* wire.await((l) => l.watches.at(-1)?.outcome === "open", "the watch after the refusals")
        // No busy loop: one list per Retry-After at the most while refused, then the one that landed.
        expect(log.lists.length).toBeLessThanOrEqual(Math.ceil((Date.now() - started) / (retryAfter * 1000)) + 1)
        expect((yield* watch.health).relists).toBe(0)
        // Nothing lingers for the next file: the limited user is admitted again.
        yield* poll(listAsLimited(http), (r) => r.status === 200, "APF to admit the limited user again")
      })),
    90_000
  )
})
