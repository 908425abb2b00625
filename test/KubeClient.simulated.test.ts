/**
 * KubeClient against the simulated apiserver: paging, watching from a list's resourceVersion, and
 * the server's failure modes, end to end over loopback HTTP.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Layer, Option, Queue, Stream } from "effect"
import * as KubeClient from "../src/KubeClient.ts"
import * as KubeError from "../src/KubeError.ts"
import { Sandbox, SandboxResource } from "../src/Sandbox.ts"
import * as SimulatedApiServer from "../src/SimulatedApiServer.ts"
import type { WatchEvent } from "../src/WatchEvent.ts"

const Token = "simulated-token-0123456789"

const environment = (options: Partial<SimulatedApiServer.Options> = {}) =>
  KubeClient.layer.pipe(
    Layer.provideMerge(
      SimulatedApiServer.layerWithKubeConfig({ resource: SandboxResource, namespace: "ns", token: Token, ...options })
    ),
    Layer.orDie
  )

const seed = (count: number) =>
  Effect.gen(function*() {
    const server = yield* SimulatedApiServer.SimulatedApiServer
    for (let i = 0; i < count; i++) {
      yield* server.create({
        apiVersion: "jr2.dev/v1alpha1",
        kind: "Sandbox",
        metadata: { name: `sb-${i}`, labels: { "jr2.dev/run": "r" } },
        status: { phase: "Pending" }
      })
    }
  })

/** Runs a watch into a queue, for a test to take events as they come. */
const watchInto = (stream: Stream.Stream<WatchEvent<Sandbox>, KubeError.KubeClientError>) =>
  Effect.gen(function*() {
    const queue = yield* Queue.unbounded<WatchEvent<Sandbox>>()
    const fiber = yield* Effect.fork(Stream.runForEach(stream, (event) => Queue.offer(queue, event)))
    return { queue, fiber }
  })

const summary = (event: WatchEvent<Sandbox>) =>
  event.type === "ADDED" || event.type === "MODIFIED" || event.type === "DELETED"
    ? [event.type, event.name, event.object.status?.phase]
    : [event.type]

describe("KubeClient against the simulated apiserver", () => {
  it.scoped("lists page by page and gets every object, at the first page's resourceVersion", () =>
    Effect.gen(function*() {
      const server = yield* SimulatedApiServer.SimulatedApiServer
      const client = yield* KubeClient.KubeClient
      yield* seed(5)
      const rv = yield* server.resourceVersion
      yield* server.clearRequests
      const all = yield* client.listAll(SandboxResource, Sandbox, {
        namespace: "ns",
        limit: 2,
        labelSelector: "jr2.dev/run"
      })
      expect(all.items.map((s) => s.metadata.name)).toEqual(["sb-0", "sb-1", "sb-2", "sb-3", "sb-4"])
      expect([all.resourceVersion, all.pages, all.restarts, all.undecodable]).toEqual([rv, 3, 0, []])
      const lists = yield* server.requestsOf("list")
      expect(lists.map((r) => [r.query.limit, r.query.continue !== undefined])).toEqual([
        ["2", false],
        ["2", true],
        ["2", true]
      ])
      const page = yield* client.list(SandboxResource, Sandbox, { namespace: "ns", limit: 10 })
      expect([page.items.length, page.continue]).toEqual([5, Option.none()])
    }).pipe(Effect.provide(environment())))

  it.scoped("watches from a list's resourceVersion: added, modified, deleted, then a clean end", () =>
    Effect.gen(function*() {
      const server = yield* SimulatedApiServer.SimulatedApiServer
      const client = yield* KubeClient.KubeClient
      yield* seed(1)
      const page = yield* client.list(SandboxResource, Sandbox, { namespace: "ns" })
      const { fiber, queue } = yield* watchInto(
        client.watch(SandboxResource, Sandbox, { namespace: "ns", resourceVersion: page.resourceVersion })
      )
      yield* server.awaitOpenWatches(1)
      yield* server.create({
        apiVersion: "jr2.dev/v1alpha1",
        kind: "Sandbox",
        metadata: { name: "sb-new" },
        status: { phase: "Pending" }
      })
      yield* server.mergePatch("sb-0", { status: { phase: "Ready" } }, { subresource: "status" })
      yield* server.delete("sb-new")
      const events = [yield* Queue.take(queue), yield* Queue.take(queue), yield* Queue.take(queue)]
      expect(events.map(summary)).toEqual([
        ["ADDED", "sb-new", "Pending"],
        ["MODIFIED", "sb-0", "Ready"],
        ["DELETED", "sb-new", "Pending"]
      ])
      yield* server.closeWatches
      expect(yield* Fiber.join(fiber)).toBeUndefined()
      const watches = yield* server.requestsOf("watch")
      expect(watches.map((r) => [r.query.watch, r.query.resourceVersion])).toEqual([["1", page.resourceVersion]])
    }).pipe(Effect.provide(environment())))

  it.scoped("maps the server's failure answers to the typed errors their helpers recognise", () =>
    Effect.gen(function*() {
      const server = yield* SimulatedApiServer.SimulatedApiServer
      const client = yield* KubeClient.KubeClient
      const list = client.list(SandboxResource, Sandbox, { namespace: "ns" }).pipe(Effect.flip)
      yield* server.failNext(1, "BadGatewayHtml")
      const html = yield* list
      expect([
        html._tag,
        (html as KubeError.KubeStatusError).code,
        Option.isSome((html as KubeError.KubeStatusError).bodyExcerpt)
      ]).toEqual([
        "KubeStatusError",
        502,
        true
      ])
      expect(html.message).toContain("with an HTML page, not a Kubernetes Status")
      yield* server.failNext(1, "TooManyRequestsText", { retryAfterSeconds: 4 })
      const text429 = yield* list
      expect(KubeError.isTooManyRequests(text429)).toBe(true)
      expect((text429 as KubeError.KubeStatusError).retryAfterSeconds).toEqual(Option.some(4))
      yield* server.failNext(1, "TooLargeResourceVersion")
      expect(KubeError.isTooLargeResourceVersion(yield* list)).toBe(true)
      yield* server.forbid("list")
      expect(KubeError.isForbidden(yield* list)).toBe(true)
      yield* server.allow()
      yield* server.setToken("rotated-token-0123456789")
      expect(KubeError.isUnauthorized(yield* list)).toBe(true)
    }).pipe(Effect.provide(environment())))

  // One server each: a watch the client hung up on may stay counted as open until the server
  // next writes to it, so `awaitOpenWatches(1)` is only exact on a fresh server.
  it.scoped("a malformed line ends a watch with KubeMalformedLineError", () =>
    Effect.gen(function*() {
      const server = yield* SimulatedApiServer.SimulatedApiServer
      const client = yield* KubeClient.KubeClient
      const { fiber } = yield* watchInto(client.watch(SandboxResource, Sandbox, { namespace: "ns" }))
      yield* server.awaitOpenWatches(1)
      yield* server.writeMalformedLine("this is not json")
      const error = yield* Effect.flip(Fiber.join(fiber))
      expect(error._tag).toBe("KubeMalformedLineError")
      expect((error as KubeError.KubeMalformedLineError).excerpt).toBe("this is not json")
    }).pipe(Effect.provide(environment())))

  it.scoped("half a line then a dead socket ends a watch with KubeTransportError, not a parse error", () =>
    Effect.gen(function*() {
      const server = yield* SimulatedApiServer.SimulatedApiServer
      const client = yield* KubeClient.KubeClient
      const { fiber } = yield* watchInto(client.watch(SandboxResource, Sandbox, { namespace: "ns" }))
      yield* server.awaitOpenWatches(1)
      yield* server.writeTruncatedLine
      expect((yield* Effect.flip(Fiber.join(fiber)))._tag).toBe("KubeTransportError")
    }).pipe(Effect.provide(environment())))

  it.scoped("dropped connections end a watch with KubeTransportError", () =>
    Effect.gen(function*() {
      const server = yield* SimulatedApiServer.SimulatedApiServer
      const client = yield* KubeClient.KubeClient
      const { fiber } = yield* watchInto(client.watch(SandboxResource, Sandbox, { namespace: "ns" }))
      yield* server.awaitOpenWatches(1)
      yield* server.dropConnections
      const error = yield* Effect.flip(Fiber.join(fiber))
      expect(error._tag).toBe("KubeTransportError")
      expect(error.message).toContain(`from ${server.url} broke off mid-body`)
    }).pipe(Effect.provide(environment())))
})
