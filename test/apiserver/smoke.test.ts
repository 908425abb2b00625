/**
 * The real kube-apiserver 1.20.2 on loopback, spoken to with plain HTTP (undici, the server's CA):
 * what the Sandbox watch relies on, as the real server does it. Live by necessity (real sockets and
 * a real server); every wait is on a response or a line, never on a clock of ours.
 */
import { Agent, fetch } from "@effect/platform-node/Undici"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { collectionPath } from "../../src/KubeResource.ts"
import { SandboxResource } from "../../src/Sandbox.ts"
import * as FaultProxy from "../support/FaultProxy.ts"
import * as Facts from "./ApiServerFacts.ts"
import type { Http, WatchStep } from "./ApiServerFacts.ts"
import * as RealApiServer from "./RealApiServer.ts"

const facts = Facts.load()
const ns = facts.namespace
const sandboxes = collectionPath(SandboxResource, ns)
const admin = facts.adminToken

const direct = Effect.map(Facts.agent(facts), (agent): Http => ({ agent, base: facts.url }))

const sandbox = (name: string, run: string, extra: Record<string, unknown> = {}) => ({
  apiVersion: "jr2.dev/v1alpha1",
  kind: "Sandbox",
  metadata: { name, namespace: ns, labels: { "jr2.dev/run": run } },
  spec: { repos: [{ key: "r", url: "https://example.invalid/r.git" }] },
  ...extra
})

const create = (http: Http, body: { metadata: { name: string } }) =>
  Effect.gen(function*() {
    const response = yield* Facts.request(http, "POST", sandboxes, { token: admin, body })
    expect(response.status).toBe(201)
    return response.json
  })

/** `[type, name, phase]` of each step, `End` / `Broken` for how the body ended. */
const summary = (steps: ReadonlyArray<WatchStep>) =>
  steps.map((step) =>
    step._tag === "Line"
      ? [
        step.event.type,
        step.event.object?.metadata?.name ?? step.event.object?.reason,
        step.event.object?.status?.phase
      ]
      : [step._tag]
  )

describe("real kube-apiserver", () => {
  it.live("is the version asked for, ready, and verified over TLS with its own CA", () =>
    Effect.scoped(Effect.gen(function*() {
      const http = yield* direct
      const version = yield* Facts.request(http, "GET", "/version", { token: admin })
      expect([version.status, version.json.gitVersion]).toEqual([200, `v${RealApiServer.selectedVersion()}`])
      const ready = yield* Facts.request(http, "GET", "/readyz", { token: admin })
      expect([ready.status, ready.json]).toEqual([200, "ok"])
      // Without the CA the chain ends in an untrusted self-signed CA: verification is on.
      const untrusted = yield* Effect.promise(() =>
        fetch(`${facts.url}/version`, { dispatcher: new Agent() }).then(
          () => "trusted",
          (error) => String(error.cause?.code)
        )
      )
      expect(untrusted).toBe("SELF_SIGNED_CERT_IN_CHAIN")
    })))

  it.live("lists in pages with continue tokens at the first page's resourceVersion; no remainingItemCount with a selector", () =>
    Effect.scoped(Effect.gen(function*() {
      const http = yield* direct
      for (const i of [0, 1, 2, 3, 4]) yield* create(http, sandbox(`paging-${i}`, "paging"))
      const pages: Array<
        { names: Array<string>; rv: string; continue: string | undefined; remaining: number | undefined }
      > = []
      let token: string | undefined
      do {
        const query = `labelSelector=${encodeURIComponent("jr2.dev/run=paging")}&limit=2` +
          (token === undefined ? "" : `&continue=${encodeURIComponent(token)}`)
        const page = yield* Facts.request(http, "GET", `${sandboxes}?${query}`, { token: admin })
        expect(page.status).toBe(200)
        token = page.json.metadata.continue || undefined
        pages.push({
          names: page.json.items.map((item: any) => item.metadata.name),
          rv: page.json.metadata.resourceVersion,
          continue: token === undefined ? undefined : "token",
          remaining: page.json.metadata.remainingItemCount
        })
      } while (token !== undefined && pages.length < 10)
      const rv = pages[0]!.rv
      // The server counts what is left only for a list without a label or field selector.
      expect(pages).toEqual([
        { names: ["paging-0", "paging-1"], rv, continue: "token", remaining: undefined },
        { names: ["paging-2", "paging-3"], rv, continue: "token", remaining: undefined },
        { names: ["paging-4"], rv, continue: undefined, remaining: undefined }
      ])
    })))

  it.live("watches from a list's resourceVersion: added, status update, deleted, then bookmarks before the timeout", () =>
    Effect.scoped(Effect.gen(function*() {
      const http = yield* direct
      const selector = encodeURIComponent("jr2.dev/run=watch")
      const list = yield* Facts.request(http, "GET", `${sandboxes}?labelSelector=${selector}`, { token: admin })
      expect([list.status, list.json.items]).toEqual([200, []])
      // Bookmarks are sent from 2 s before the watch's deadline (1.20: per-second buckets, so one
      // or two): a 5 s watch shows them and then ends.
      const watch = yield* Facts.openWatch(
        http,
        `${sandboxes}?watch=true&allowWatchBookmarks=true&timeoutSeconds=5&labelSelector=${selector}` +
          `&resourceVersion=${list.json.metadata.resourceVersion}`,
        admin
      )
      expect(watch.status).toBe(200)

      // With the status subresource, a create (or a plain update) ignores `status`.
      const created = yield* create(http, sandbox("watch-a", "watch", { status: { phase: "Ready" } }))
      expect(created.status).toBeUndefined()
      const withStatus = { ...created, status: { phase: "Ready", endpoint: "10.0.0.9:7000" } }
      const updated = yield* Facts.request(http, "PUT", `${sandboxes}/watch-a/status`, {
        token: admin,
        body: withStatus
      })
      expect([updated.status, updated.json.status]).toEqual([200, { phase: "Ready", endpoint: "10.0.0.9:7000" }])
      const deleted = yield* Facts.request(http, "DELETE", `${sandboxes}/watch-a`, { token: admin })
      expect(deleted.status).toBe(200)

      const steps = yield* Facts.take(watch, 10)
      const bookmarks = steps.slice(3, -1)
      expect(summary([...steps.slice(0, 3), ...steps.slice(-1)])).toEqual([
        ["ADDED", "watch-a", undefined],
        ["MODIFIED", "watch-a", "Ready"],
        ["DELETED", "watch-a", "Ready"],
        ["End"]
      ])
      expect(bookmarks.length).toBeGreaterThanOrEqual(1)
      expect(summary(bookmarks).every(([type]) => type === "BOOKMARK")).toBe(true)
      const [added, modified, removed] = steps.map((s) => (s._tag === "Line" ? s.event.object : undefined))
      expect(added.metadata.resourceVersion).toBe(created.metadata.resourceVersion)
      expect(modified.metadata.resourceVersion).toBe(updated.json.metadata.resourceVersion)
      // A bookmark is an empty object of the kind carrying only a resourceVersion, never older than
      // the last event.
      for (const step of bookmarks) {
        const bookmark = step._tag === "Line" ? step.event.object : undefined
        expect([bookmark.kind, bookmark.apiVersion, Object.keys(bookmark.metadata)]).toEqual([
          "Sandbox",
          "jr2.dev/v1alpha1",
          ["resourceVersion"]
        ])
        expect(Number(bookmark.metadata.resourceVersion)).toBeGreaterThanOrEqual(
          Number(removed.metadata.resourceVersion)
        )
      }
    })))

  it.live("a watch from an expired resourceVersion answers 200 and then one ERROR 410 Expired line", () =>
    Effect.scoped(Effect.gen(function*() {
      const http = yield* direct
      const watch = yield* Facts.openWatch(http, `${sandboxes}?watch=true&resourceVersion=1`, admin)
      expect(watch.status).toBe(200)
      const steps = yield* Facts.take(watch, 2)
      expect(summary(steps)).toEqual([["ERROR", "Expired", undefined], ["End"]])
      const status = (steps[0] as Extract<WatchStep, { _tag: "Line" }>).event.object
      expect([status.kind, status.code, status.reason]).toEqual(["Status", 410, "Expired"])
      expect(status.message).toMatch(/too old resource version: 1 \(\d+\)/)
    })))

  it.live("a wrong token is 401 Unauthorized", () =>
    Effect.scoped(Effect.gen(function*() {
      const http = yield* direct
      const response = yield* Facts.request(http, "GET", sandboxes, { token: "not-a-token" })
      expect([response.status, response.json.kind, response.json.reason, response.json.code]).toEqual([
        401,
        "Status",
        "Unauthorized",
        401
      ])
    })))

  it.live("the limited user may list but not watch (403) until watch is granted", () =>
    Effect.scoped(Effect.gen(function*() {
      const http = yield* direct
      const limited = facts.limitedUserToken
      const list = yield* Facts.request(http, "GET", sandboxes, { token: limited })
      expect(list.status).toBe(200)
      const forbidden = yield* Facts.request(http, "GET", `${sandboxes}?watch=true&timeoutSeconds=1`, {
        token: limited
      })
      expect([forbidden.status, forbidden.json.reason, forbidden.json.details]).toEqual([
        403,
        "Forbidden",
        { group: "jr2.dev", kind: "sandboxes" }
      ])
      expect(forbidden.json.message).toContain(`cannot watch resource "sandboxes" in API group "jr2.dev"`)

      yield* Facts.grantWatch(http, facts)
      // RBAC reads its rules from an informer: the grant takes effect within a few requests.
      let status = 403
      for (let attempt = 0; attempt < 500 && status === 403; attempt++) {
        const watch = yield* Effect.scoped(Facts.openWatch(http, `${sandboxes}?watch=true&timeoutSeconds=1`, limited))
        status = watch.status
      }
      expect(status).toBe(200)
    })))

  it.live("through the fault proxy: TLS still verifies, a reset breaks a watch, a new connection works", () =>
    Effect.scoped(Effect.gen(function*() {
      const proxy = yield* FaultProxy.make({ targetPort: facts.port })
      const agent = yield* Facts.agent(facts)
      const http: Http = { agent, base: proxy.url("https") }
      const list = yield* Facts.request(http, "GET", `${sandboxes}?limit=1`, { token: admin })
      expect(list.status).toBe(200)
      const watch = yield* Facts.openWatch(
        http,
        `${sandboxes}?watch=true&resourceVersion=${list.json.metadata.resourceVersion}&labelSelector=${
          encodeURIComponent("jr2.dev/run=proxy")
        }`,
        admin
      )
      expect(watch.status).toBe(200)
      yield* create(yield* direct, sandbox("proxy-a", "proxy"))
      expect(summary(yield* Facts.take(watch, 1))).toEqual([["ADDED", "proxy-a", undefined]])
      expect(yield* proxy.resetAll).toBeGreaterThanOrEqual(1)
      expect(yield* watch.next).toEqual({ _tag: "Broken", error: "ECONNRESET" })
      const accepted = (yield* proxy.stats).accepted
      const again = yield* Facts.request(http, "GET", `${sandboxes}/proxy-a`, { token: admin })
      expect([again.status, again.json.metadata.name]).toEqual([200, "proxy-a"])
      // The pool's connections were all cut: the request took a new one.
      expect((yield* proxy.stats).accepted).toBe(accepted + 1)
    })))
})
