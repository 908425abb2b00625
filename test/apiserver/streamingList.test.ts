/**
 * Streaming lists against the real kube-apiserver (rules 16–18 of `src/internal/watchMachine.ts`):
 * on 1.37 the watch syncs from one `sendInitialEvents` watch and no LIST of Sandboxes reaches the
 * server (its own `apiserver_request_total`, read before and after); 1.20 refuses the parameters
 * with a 422, and `auto` ends on a paged list, telling nothing on the way.
 */
import { fetch } from "@effect/platform-node/Undici"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Option, Stream, SubscriptionRef } from "effect"
import * as KubeClient from "../../src/KubeClient.ts"
import type { Sandbox } from "../../src/Sandbox.ts"
import { SandboxResource } from "../../src/Sandbox.ts"
import * as SandboxWatch from "../../src/SandboxWatch.ts"
import * as Facts from "./ApiServerFacts.ts"
import { clientOn, poll, probe, sandboxBody } from "./watchSupport.ts"

const facts = Facts.load()
const ns = facts.namespace

/** The server's count of finished requests of `verb` on sandboxes, from its /metrics. */
const requestsOf = (verb: "LIST" | "WATCH") =>
  Effect.scoped(Effect.gen(function*() {
    const agent = yield* Facts.agent(facts)
    const text = yield* Effect.promise(async () => {
      const answer = await fetch(`${facts.url}/metrics`, {
        headers: { authorization: `Bearer ${facts.adminToken}` },
        dispatcher: agent
      })
      return answer.text()
    })
    let total = 0
    for (const line of text.split("\n")) {
      if (!line.startsWith("apiserver_request_total{")) continue
      if (!line.includes(`resource="sandboxes"`) || !line.includes(`verb="${verb}"`)) continue
      total += Number(line.slice(line.lastIndexOf(" ") + 1))
    }
    return total
  }))

const seed = (admin: KubeClient.KubeClientService, run: string, count: number) =>
  Effect.forEach(
    Array.from({ length: count }, (_, i) => `${run}-${String(i).padStart(3, "0")}`),
    (name) => admin.create(SandboxResource, ns, sandboxBody(ns, name, run)),
    { concurrency: 8, discard: true }
  )

describe("streaming lists against the real kube-apiserver", () => {
  it.live("auto: 1.37 syncs from the streaming list with no LIST; 1.20 refuses it (422) and the watch lists in pages", () =>
    Effect.scoped(Effect.gen(function*() {
      const run = "stream-auto"
      const count = 40
      const admin = yield* clientOn(Facts.connection(facts))
      yield* seed(admin, run, count)
      const wire = yield* probe(yield* clientOn(Facts.connection(facts)))
      const listsBefore = yield* requestsOf("LIST")
      const watch = yield* SandboxWatch.make({
        namespace: ns,
        labelSelector: `jr2.dev/run=${run}`,
        listMode: "auto",
        backoffFloor: "50 millis",
        backoffCap: "2 seconds",
        jitter: false
      }).pipe(Effect.provideService(KubeClient.KubeClient, wire.client))
      // Told before synced? A subscriber on one name hears only the reconcile and what follows.
      const told: Array<string> = []
      yield* Effect.forkScoped(
        Stream.runForEach(
          watch.changes(`${run}-000`),
          (v: Option.Option<Sandbox>) =>
            Effect.sync(() => told.push(Option.match(v, { onNone: () => "gone", onSome: (s) => s.metadata.name })))
        )
      )
      yield* watch.synced
      expect((yield* watch.health).cached).toBe(count)
      const listsAfter = yield* requestsOf("LIST")
      const log = yield* SubscriptionRef.get(wire.log)
      if (facts.minor >= 37) {
        // One watch, asked for the initial events; no list request at all.
        expect(listsAfter - listsBefore).toBe(0)
        expect(log.lists).toEqual([])
        expect(log.watches[0]).toMatchObject({ resourceVersion: undefined, outcome: "open" })
      } else {
        // The 422, then the paged list (the counter counts it; etcd answered it).
        expect(listsAfter - listsBefore).toBeGreaterThanOrEqual(1)
        expect(log.lists).toHaveLength(1)
        expect(log.watches[0]?.outcome).toBe("KubeStatusError 422")
      }
      // Then the watch goes on: a change is told.
      yield* admin.mergePatch(SandboxResource, ns, `${run}-000`, { status: { phase: "Ready" } }, {
        subresource: "status"
      })
      yield* poll(Effect.sync(() => told.length), (n) => n >= 2, "the change told")
      expect(told).toEqual([`${run}-000`, `${run}-000`])
    })))
})
