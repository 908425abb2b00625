/**
 * The project's `KubeClient` against the real kube-apiserver, connected the way a kubeconfig with
 * `certificate-authority-data` would connect it (`ApiServerFacts.layerKubeConfig`): TLS verified
 * with the server's CA, a bearer token. Also the pattern later SandboxWatch tests follow.
 */
import { fetch } from "@effect/platform-node/Undici"
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Deferred, Effect, Layer, Option, Stream } from "effect"
import { peekContinue, peekHead, peekTail } from "../../src/internal/continuePeek.ts"
import * as KubeClient from "../../src/KubeClient.ts"
import { Sandbox, SandboxResource } from "../../src/Sandbox.ts"
import * as FaultProxy from "../support/FaultProxy.ts"
import * as Facts from "./ApiServerFacts.ts"

const facts = Facts.load()
const ns = facts.namespace
const SandboxCollection = `/apis/jr2.dev/v1alpha1/namespaces/${ns}/sandboxes`

const clientLayer = (options?: { readonly server?: string; readonly token?: string }) =>
  KubeClient.layer.pipe(Layer.provide(Facts.layerKubeConfig(facts, options)))

const sandbox = (name: string, run: string) => ({
  apiVersion: "jr2.dev/v1alpha1",
  kind: "Sandbox",
  metadata: { name, namespace: ns, labels: { "jr2.dev/run": run } }
})

describe("KubeClient against the real kube-apiserver", () => {
  it.live("creates, pages through and watches Sandboxes with a verified TLS connection", () =>
    Effect.gen(function*() {
      const kube = yield* KubeClient.KubeClient
      for (const i of [0, 1, 2]) yield* kube.create(SandboxResource, ns, sandbox(`kc-${i}`, "kubeclient"))
      const labelSelector = "jr2.dev/run=kubeclient"
      const all = yield* kube.listAll(SandboxResource, Sandbox, { namespace: ns, labelSelector, limit: 2 })
      expect([all.items.map((s) => s.metadata.name), all.pages, all.restarts, all.undecodable]).toEqual([
        ["kc-0", "kc-1", "kc-2"],
        2,
        0,
        []
      ])

      const watched = yield* kube
        .watch(SandboxResource, Sandbox, {
          namespace: ns,
          labelSelector,
          resourceVersion: all.resourceVersion,
          allowWatchBookmarks: true,
          timeoutSeconds: 4
        })
        .pipe(Stream.runCollect, Effect.fork)
      yield* kube.mergePatch(SandboxResource, ns, "kc-1", { status: { phase: "Ready" } }, { subresource: "status" })
      yield* kube.delete(SandboxResource, ns, "kc-2")
      // kube-apiserver sends a watch a bookmark only once some Sandbox, selected or not, moved past
      // where the watch stands (the differential test pins this): a change outside the selector
      // makes one due, rather than whatever other tests happen to be doing meanwhile.
      yield* kube.create(SandboxResource, ns, sandbox("kc-elsewhere", "kubeclient-elsewhere"))
      const events = Chunk.toArray(yield* watched.await.pipe(Effect.flatten))
      const objectEvents = events.filter((e) => e.type !== "BOOKMARK")
      expect(
        objectEvents.map((
          e
        ) => (e.type === "MODIFIED" || e.type === "DELETED" ? [e.type, e.name, e.object.status?.phase] : [e.type]))
      )
        .toEqual([
          ["MODIFIED", "kc-1", "Ready"],
          ["DELETED", "kc-2", undefined]
        ])
      const deleted = objectEvents.find((e) => e.type === "DELETED")
      const deletedAt = Number(deleted?.type === "DELETED" ? deleted.resourceVersion : Number.NaN)
      // kube-apiserver 1.20 sends a BOOKMARK about 2 s before a watch's timeout, from a timer a busy
      // server can miss. So: up to three 4 s watches from the same point (changes after it make a
      // bookmark due), and the one that comes must carry a resourceVersion at or past the delete.
      let bookmark = events.find((e) => e.type === "BOOKMARK")
      for (let attempt = 1; bookmark === undefined && attempt < 3; attempt++) {
        const again = yield* kube.watch(SandboxResource, Sandbox, {
          namespace: ns,
          labelSelector,
          resourceVersion: all.resourceVersion,
          allowWatchBookmarks: true,
          timeoutSeconds: 4
        }).pipe(Stream.runCollect)
        bookmark = Chunk.toArray(again).find((e) => e.type === "BOOKMARK")
      }
      expect(bookmark?.type).toBe("BOOKMARK")
      expect(bookmark?.type === "BOOKMARK" ? Number(bookmark.resourceVersion) : 0).toBeGreaterThanOrEqual(deletedAt)
    }).pipe(Effect.provide(clientLayer())))

  it.live("set-based and inequality selectors (spaces, parentheses, commas) reach the server as written", () =>
    Effect.gen(function*() {
      const kube = yield* KubeClient.KubeClient
      for (const [name, run] of [["sel-a", "selector-a"], ["sel-b", "selector-b"], ["sel-c", "selector-c"]] as const) {
        yield* kube.create(SandboxResource, ns, sandbox(name, run))
      }
      const names = (labelSelector: string) =>
        Effect.map(
          kube.listAll(SandboxResource, Sandbox, { namespace: ns, labelSelector }),
          (list) => list.items.map((s) => s.metadata.name).filter((name) => name.startsWith("sel-")).sort()
        )
      expect(yield* names("jr2.dev/run in (selector-a, selector-c)")).toEqual(["sel-a", "sel-c"])
      expect(yield* names("jr2.dev/run notin (selector-a),jr2.dev/run")).toEqual(["sel-b", "sel-c"])
      expect(yield* names("jr2.dev/run!=selector-b,jr2.dev/run in (selector-a,selector-b,selector-c)")).toEqual([
        "sel-a",
        "sel-c"
      ])
    }).pipe(Effect.provide(clientLayer())))

  it.live("a custom resource's list page names its continue token in its last bytes, where listAll reads it early", () =>
    Effect.scoped(Effect.gen(function*() {
      const kube = yield* KubeClient.KubeClient
      for (const name of ["wire-a", "wire-b", "wire-c"]) yield* kube.create(SandboxResource, ns, sandbox(name, "wire"))
      const agent = yield* Facts.agent(facts)
      const bytes = yield* Effect.promise(async () => {
        const answer = await fetch(`${facts.url}${SandboxCollection}?limit=1&labelSelector=jr2.dev%2Frun%3Dwire`, {
          headers: { accept: "application/json", authorization: `Bearer ${facts.adminToken}` },
          dispatcher: agent
        })
        return Buffer.from(await answer.arrayBuffer())
      })
      const page = JSON.parse(bytes.toString()) as { metadata: { continue: string } }
      expect(page.metadata.continue).not.toBe("")
      // Keys sorted (the list is a map, not a struct): the items first, the metadata last.
      expect(peekHead(bytes, 0)).toBeUndefined()
      expect(peekTail(bytes, 0)).toBe(page.metadata.continue)
      expect(peekContinue(bytes, 0)).toBe(page.metadata.continue)
    })).pipe(Effect.provide(clientLayer())))

  it.live("a watch from an expired resourceVersion yields the ERROR 410 event", () =>
    Effect.gen(function*() {
      const kube = yield* KubeClient.KubeClient
      const events = yield* kube.watch(SandboxResource, Sandbox, { namespace: ns, resourceVersion: "1" }).pipe(
        Stream.runCollect
      )
      expect(
        Chunk.toArray(events).map((e) => (e.type === "ERROR" ? [e.type, e.status.code, e.status.reason] : [e.type]))
      )
        .toEqual([["ERROR", 410, "Expired"]])
    }).pipe(Effect.provide(clientLayer())))

  it.live("401 and 403 come back as typed KubeStatusErrors", () =>
    Effect.gen(function*() {
      const unauthorized = yield* KubeClient.KubeClient.pipe(
        Effect.flatMap((kube) => kube.list(SandboxResource, Sandbox, { namespace: ns })),
        Effect.provide(clientLayer({ token: "wrong" })),
        Effect.flip
      )
      expect([unauthorized._tag, unauthorized._tag === "KubeStatusError" ? unauthorized.code : 0]).toEqual([
        "KubeStatusError",
        401
      ])
      const forbidden = yield* KubeClient.KubeClient.pipe(
        Effect.flatMap((kube) =>
          kube.watch(SandboxResource, Sandbox, { namespace: ns, timeoutSeconds: 1 }).pipe(Stream.runDrain)
        ),
        Effect.provide(clientLayer({ token: facts.limitedUserToken })),
        Effect.flip
      )
      expect(
        forbidden._tag === "KubeStatusError"
          ? [forbidden.code, forbidden.reason, forbidden.group, forbidden.kind]
          : forbidden
      )
        .toEqual([403, "Forbidden", Option.some("jr2.dev"), Option.some("sandboxes")])
    }))

  it.live("through the fault proxy, a reset mid-watch is a KubeTransportError, not a clean end", () =>
    Effect.scoped(Effect.gen(function*() {
      const proxy = yield* FaultProxy.make({ targetPort: facts.port })
      const result = yield* Effect.gen(function*() {
        const kube = yield* KubeClient.KubeClient
        const labelSelector = "jr2.dev/run=kubeclient-proxy"
        const list = yield* kube.list(SandboxResource, Sandbox, { namespace: ns, labelSelector })
        const first = yield* Deferred.make<string>()
        const watch = yield* kube.watch(SandboxResource, Sandbox, {
          namespace: ns,
          labelSelector,
          resourceVersion: list.resourceVersion
        })
          .pipe(
            Stream.tap((event) => Deferred.succeed(first, event.type)),
            Stream.runDrain,
            Effect.flip,
            Effect.fork
          )
        yield* kube.create(SandboxResource, ns, sandbox("kc-proxy", "kubeclient-proxy"))
        // The watch is open and delivering: now cut every connection under it.
        expect(yield* Deferred.await(first)).toBe("ADDED")
        expect(yield* proxy.resetAll).toBeGreaterThanOrEqual(1)
        return yield* watch.await.pipe(Effect.flatten)
      }).pipe(Effect.provide(clientLayer({ server: proxy.url("https") })))
      expect(result._tag).toBe("KubeTransportError")
    })))
})
