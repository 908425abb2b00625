/**
 * kube-apiserver killed and started again on the same port and etcd: what a watch sees. Runs in
 * its own file because it takes the shared server away for a few seconds.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { collectionPath } from "../../src/KubeResource.ts"
import { SandboxResource } from "../../src/Sandbox.ts"
import * as Facts from "./ApiServerFacts.ts"
import type { Http } from "./ApiServerFacts.ts"

const facts = Facts.load()
const ns = facts.namespace
const sandboxes = collectionPath(SandboxResource, ns)
const admin = facts.adminToken

describe("real kube-apiserver restart", () => {
  it.live("a crash breaks open watches; after it, a resourceVersion older than its watch cache is 410", () =>
    Effect.scoped(Effect.gen(function*() {
      const agent = yield* Facts.agent(facts)
      const http: Http = { agent, base: facts.url }
      const created = yield* Facts.request(http, "POST", sandboxes, {
        token: admin,
        body: {
          apiVersion: "jr2.dev/v1alpha1",
          kind: "Sandbox",
          metadata: { name: "restart-a", labels: { "jr2.dev/run": "restart" } }
        }
      })
      expect(created.status).toBe(201)
      const rv = created.json.metadata.resourceVersion as string
      // Another write moves etcd's revision past the Sandbox's, so the restarted server's watch
      // cache starts after `rv`.
      const other = yield* Facts.request(http, "POST", `/api/v1/namespaces/${ns}/configmaps`, {
        token: admin,
        body: { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "restart-bump" }, data: { a: "b" } }
      })
      expect(other.status).toBe(201)

      const before = yield* Facts.openWatch(http, `${sandboxes}?watch=true&resourceVersion=${rv}`, admin)
      expect(before.status).toBe(200)

      const { readyMs } = yield* Facts.restartApiServer(facts, "SIGKILL")
      expect(readyMs).toBeGreaterThan(0)
      // SIGKILL: the kernel closes the socket (a FIN, no TLS close_notify, no last chunk), so the
      // body ends unfinished: undici calls that "other side closed", not a clean end.
      const ended = yield* before.next
      expect(ended).toEqual({ _tag: "Broken", error: "UND_ERR_SOCKET" })

      const freshAgent = yield* Facts.agent(facts)
      const fresh: Http = { agent: freshAgent, base: facts.url }
      // 1.37 answers a watch that comes before its watch cache has caught up after the start with
      // 429 and a Retry-After (1.31+); 1.20 holds it until the cache is ready and answers 200.
      const statuses: Array<number> = []
      let after = yield* Facts.openWatch(fresh, `${sandboxes}?watch=true&resourceVersion=${rv}`, admin)
      while (after.status === 429 && statuses.length < 50) {
        statuses.push(after.status)
        // A real server warming up: a real pause between tries (harness time, not the watch's).
        yield* Effect.sleep("200 millis")
        after = yield* Facts.openWatch(fresh, `${sandboxes}?watch=true&resourceVersion=${rv}`, admin)
      }
      expect(after.status).toBe(200)
      if (facts.minor < 31) expect(statuses).toEqual([])
      const steps = yield* Facts.take(after, 2)
      const first = steps[0]
      expect(first?._tag).toBe("Line")
      const status = first?._tag === "Line" ? first.event : undefined
      expect([status?.type, status?.object?.code, status?.object?.reason]).toEqual(["ERROR", 410, "Expired"])
      expect(steps[1]).toEqual({ _tag: "End" })

      // The object itself survived in etcd.
      const got = yield* Facts.request(fresh, "GET", `${sandboxes}/restart-a`, { token: admin })
      expect([got.status, got.json.metadata.resourceVersion]).toEqual([200, rv])
    })))
})
