/**
 * KubeClient against a tiny loopback server that writes exactly the bytes each test asks for: the
 * apiserver's wire (captured from v1.20.2), its failure shapes, and what proxies and broken
 * connections do instead.
 */
import { describe, expect, it } from "@effect/vitest"
import {
  Cause,
  Chunk,
  Deferred,
  Duration,
  Effect,
  Either,
  Exit,
  Fiber,
  Layer,
  Option,
  Queue,
  Redacted,
  Ref,
  Schema,
  Scope,
  Stream,
  TestClock,
  Tracer
} from "effect"
import { execFileSync } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import * as http from "node:http"
import * as https from "node:https"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as KubeClient from "../src/KubeClient.ts"
import * as KubeConfig from "../src/KubeConfig.ts"
import * as KubeError from "../src/KubeError.ts"
import { Sandbox, SandboxResource } from "../src/Sandbox.ts"
import type { WatchEvent } from "../src/WatchEvent.ts"
import { rotatingTokenConnection } from "./support/rotatingToken.ts"
import { eventually } from "./support/waiting.ts"

const Token = "s3cr3t-token-0123456789abcdef"
const Collection = "/apis/jr2.dev/v1alpha1/namespaces/ns/sandboxes"

// -------------------------------------------------------------------------------------------------
// The fixture server
// -------------------------------------------------------------------------------------------------

interface Seen {
  readonly method: string
  readonly path: string
  readonly query: Record<string, string>
  readonly headers: http.IncomingHttpHeaders
  readonly body: string
  /** Resolves when the connection closed before the response was finished: the client gave up. */
  readonly abandoned: Promise<void>
}

type Handler = (req: http.IncomingMessage, res: http.ServerResponse, seen: Seen, index: number) => unknown

interface Fixture {
  readonly url: string
  readonly seen: Array<Seen>
}

const listen = (server: http.Server, scheme: "http" | "https") =>
  Effect.acquireRelease(
    Effect.async<string>((resume) => {
      server.listen(0, "127.0.0.1", () => {
        resume(Effect.succeed(`${scheme}://127.0.0.1:${(server.address() as AddressInfo).port}`))
      })
    }),
    () =>
      Effect.async<void>((resume) => {
        server.closeAllConnections()
        server.close(() => resume(Effect.void))
      })
  )

const attach = (server: http.Server, handler: Handler, seen: Array<Seen>) =>
  server.on("request", (req: http.IncomingMessage, res: http.ServerResponse) => {
    const chunks: Array<Buffer> = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", () => {
      const url = new URL(req.url ?? "/", "http://fixture")
      const abandoned = new Promise<void>((resolve) =>
        res.once("close", () => {
          if (!res.writableFinished) resolve()
        })
      )
      const entry: Seen = {
        method: req.method ?? "",
        path: url.pathname,
        query: Object.fromEntries(url.searchParams),
        headers: req.headers,
        body: Buffer.concat(chunks).toString("utf8"),
        abandoned
      }
      seen.push(entry)
      void Promise.resolve(handler(req, res, entry, seen.length - 1)).catch((error: unknown) => {
        res.destroy(error instanceof Error ? error : new Error(String(error)))
      })
    })
  })

/** A loopback HTTP server for one test, closed with the test's scope. */
const fixture = (handler: Handler): Effect.Effect<Fixture, never, import("effect").Scope.Scope> =>
  Effect.gen(function*() {
    const seen: Array<Seen> = []
    const server = http.createServer()
    attach(server, handler, seen)
    const url = yield* listen(server, "http")
    return { url, seen }
  })

const sendJson = (res: http.ServerResponse, code: number, body: unknown, headers: Record<string, string> = {}) => {
  res.writeHead(code, { "content-type": "application/json", ...headers })
  res.end(JSON.stringify(body))
}

const sendText = (
  res: http.ServerResponse,
  code: number,
  contentType: string,
  body: string,
  headers: Record<string, string> = {}
) => {
  res.writeHead(code, { "content-type": contentType, ...headers })
  res.end(body)
}

/** A server of list pages by continue token (`""`: the first page); a string page goes as written. */
const pagesByToken = (pages: Record<string, unknown>) =>
  fixture((_req, res, seen) => {
    const page = pages[seen.query.continue ?? ""]
    return typeof page === "string" ? sendText(res, 200, "application/json", page) : sendJson(res, 200, page)
  })

/** A gate a handler waits on, opened by the test once it has seen what came before. */
const makeGate = () => {
  let open!: () => void
  const opened = new Promise<void>((resolve) => (open = resolve))
  return { open: Effect.sync(() => open()), opened }
}

const sandbox = (name: string, resourceVersion: string, phase: unknown = "Ready") => ({
  apiVersion: "jr2.dev/v1alpha1",
  kind: "Sandbox",
  metadata: { name, namespace: "ns", resourceVersion, managedFields: [{ manager: "x" }] },
  status: { phase }
})

/** What the Sandbox schema keeps of `sandbox(...)`. */
const decoded = (name: string, resourceVersion: string, phase = "Ready") => ({
  apiVersion: "jr2.dev/v1alpha1",
  kind: "Sandbox",
  metadata: { name, namespace: "ns", resourceVersion },
  status: { phase }
})

const line = (event: unknown) => `${JSON.stringify(event)}\n`

/** Waits (real I/O, no test time passing) until a TestClock sleep of `millis` from now is pending. */
const pendingSleep = (millis: number) =>
  eventually(
    Effect.gen(function*() {
      const now = yield* TestClock.currentTimeMillis
      return Chunk.toArray(yield* TestClock.sleeps()).some((at) => at - now === millis)
    }),
    (found) => found
  )

/**
 * Runs a request whose body stalls under a client with a 10 s body deadline, and returns its error:
 * not a second early (after 9 s it is still waiting), and on time (at 10 s it has failed).
 */
const failsAtBodyDeadline = <A, E>(request: Effect.Effect<A, E>) =>
  Effect.gen(function*() {
    const fiber = yield* Effect.fork(Effect.flip(request))
    // The client's timer sleeps for the body deadline once it is armed.
    yield* pendingSleep(10_000)
    yield* TestClock.adjust("9 seconds")
    yield* Effect.yieldNow()
    expect(fiber.unsafePoll()).toBeNull()
    yield* TestClock.adjust("1 second")
    return yield* Fiber.join(fiber)
  })

const clientFor = (server: string, options?: KubeClient.KubeClientOptions) =>
  KubeClient.make(options).pipe(Effect.provide(KubeConfig.layerStatic({ server, token: Token })))

/** A watch of `ns` against `server`, read by a fiber into a queue a test takes events from. */
const watchIntoQueue = (server: string, options: KubeClient.WatchOptions = {}) =>
  Effect.gen(function*() {
    const client = yield* clientFor(server)
    const queue = yield* Queue.unbounded<WatchEvent<Sandbox>>()
    const fiber = yield* client.watch(SandboxResource, Sandbox, { namespace: "ns", ...options }).pipe(
      Stream.runForEach((event) => Queue.offer(queue, event)),
      Effect.fork
    )
    return { fiber, queue }
  })

const failure = <A, E>(effect: Effect.Effect<A, E>) =>
  Effect.flatMap(
    Effect.either(effect),
    (result) =>
      Either.isLeft(result)
        ? Effect.succeed(result.left)
        : Effect.dieMessage(`expected a failure, got ${JSON.stringify(result.right)}`)
  )

const watchFailure = <A, E>(stream: Stream.Stream<A, E>) =>
  Effect.gen(function*() {
    const events: Array<A> = []
    const error = yield* failure(Stream.runForEach(stream, (event) => Effect.sync(() => events.push(event))))
    return { events, error }
  })

const expectStatusError = (error: KubeError.KubeClientError): KubeError.KubeStatusError => {
  expect(error._tag).toBe("KubeStatusError")
  return error as KubeError.KubeStatusError
}

// -------------------------------------------------------------------------------------------------
// list and listAll
// -------------------------------------------------------------------------------------------------

describe("KubeClient.list", () => {
  it.scoped("sends every option, the token and accept: json, and decodes the page", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((_req, res) =>
        sendJson(res, 200, {
          kind: "SandboxList",
          apiVersion: "jr2.dev/v1alpha1",
          metadata: { resourceVersion: "42", continue: "next-token", remainingItemCount: 3 },
          items: [sandbox("a", "40"), sandbox("bad", "41", 5), sandbox("b", "42", "Pending")]
        })
      )
      const client = yield* clientFor(fx.url)
      const page = yield* client.list(SandboxResource, Sandbox, {
        namespace: "ns",
        labelSelector: "jr2.dev/run",
        fieldSelector: "metadata.name=a",
        limit: 3,
        continue: "prev-token",
        resourceVersion: "0",
        resourceVersionMatch: "NotOlderThan"
      })
      expect(fx.seen.map((s) => [s.method, s.path, s.query])).toEqual([
        [
          "GET",
          Collection,
          {
            labelSelector: "jr2.dev/run",
            fieldSelector: "metadata.name=a",
            limit: "3",
            continue: "prev-token",
            resourceVersion: "0",
            resourceVersionMatch: "NotOlderThan"
          }
        ]
      ])
      expect(fx.seen[0]?.headers.authorization).toBe(`Bearer ${Token}`)
      expect(fx.seen[0]?.headers.accept).toBe("application/json")
      expect(page.items).toEqual([decoded("a", "40"), decoded("b", "42", "Pending")])
      expect(page.resourceVersion).toBe("42")
      expect(page.continue).toEqual(Option.some("next-token"))
      expect(page.remainingItemCount).toEqual(Option.some(3))
      expect(page.undecodable).toHaveLength(1)
      const bad = page.undecodable[0]!
      expect([bad.type, bad.eventType, bad.name, bad.resourceVersion]).toEqual(["UNDECODABLE", "ADDED", "bad", "41"])
      expect(bad.problem).toBe("status.phase: Expected string, actual 5")
    }))

  it.scoped("reads the last page's empty continue as none, and lists cluster-wide without a namespace", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((_req, res) =>
        sendJson(res, 200, { metadata: { resourceVersion: "7", continue: "" }, items: [] })
      )
      const client = yield* clientFor(fx.url)
      const page = yield* client.list(SandboxResource, Sandbox)
      expect(fx.seen.map((s) => [s.path, s.query])).toEqual([["/apis/jr2.dev/v1alpha1/sandboxes", {}]])
      expect(page).toEqual({
        items: [],
        undecodable: [],
        resourceVersion: "7",
        continue: Option.none(),
        remainingItemCount: Option.none()
      })
    }))

  it.scoped("fails with KubeMalformedBodyError on a 200 that is not a list", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((_req, res) => sendText(res, 200, "text/plain", "hello, world"))
      const client = yield* clientFor(fx.url)
      const error = yield* failure(client.list(SandboxResource, Sandbox, { namespace: "ns" }))
      expect(error._tag).toBe("KubeMalformedBodyError")
      expect(error).toMatchObject({ method: "GET", path: Collection, excerpt: "hello, world" })
    }))
})

describe("KubeClient.listAll", () => {
  it.scoped("follows continue tokens and keeps the first page's resourceVersion", () =>
    Effect.gen(function*() {
      const fx = yield* pagesByToken({
        "": { metadata: { resourceVersion: "100", continue: "c1" }, items: [sandbox("a", "1")] },
        c1: {
          metadata: { resourceVersion: "101", continue: "c2" },
          items: [sandbox("b", "2"), sandbox("x", "3", 0)]
        },
        c2: { metadata: { resourceVersion: "102", continue: "" }, items: [sandbox("c", "4")] }
      })
      const client = yield* clientFor(fx.url)
      const all = yield* client.listAll(SandboxResource, Sandbox, { namespace: "ns", limit: 2, labelSelector: "l" })
      expect(fx.seen.map((s) => s.query)).toEqual([
        { labelSelector: "l", limit: "2" },
        { labelSelector: "l", limit: "2", continue: "c1" },
        { labelSelector: "l", limit: "2", continue: "c2" }
      ])
      expect(all.items).toEqual([decoded("a", "1"), decoded("b", "2"), decoded("c", "4")])
      expect(all.undecodable.map((u) => u.name)).toEqual(["x"])
      expect([all.resourceVersion, all.pages, all.restarts]).toEqual(["100", 3, 0])
    }))

  it.scoped("onPage runs as each page has been read, before the list is whole; not for a page that failed", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((_req, res, _seen, index) =>
        index < 2
          ? sendJson(res, 200, {
            metadata: { resourceVersion: "100", continue: `c${index + 1}` },
            items: [sandbox(`s${index}`, String(index + 1))]
          })
          : sendJson(res, 500, { kind: "Status", apiVersion: "v1", status: "Failure", code: 500, message: "etcd" })
      )
      const client = yield* clientFor(fx.url)
      const pagesRead: Array<number> = []
      const failed = yield* Effect.flip(
        client.listAll(SandboxResource, Sandbox, {
          namespace: "ns",
          limit: 1,
          onPage: Effect.sync(() => pagesRead.push(fx.seen.length))
        })
      )
      // Two pages read (the next page is asked for as each arrives), the third answered 500.
      expect(pagesRead.length).toBe(2)
      expect(failed._tag).toBe("KubeStatusError")
      expect(fx.seen.map((s) => s.query.continue)).toEqual([undefined, "c1", "c2"])
    }))

  /** What kube-apiserver answers a continue token older than its compaction window. */
  const expiredContinue = {
    kind: "Status",
    apiVersion: "v1",
    metadata: {},
    status: "Failure",
    message: "The provided continue parameter is too old to display a consistent list result.",
    reason: "Expired",
    code: 410
  }

  it.scoped("starts over in one piece when a continue token has expired (410), counting the restart", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((_req, res, _seen, index) => {
        if (index === 0) {
          return sendJson(res, 200, {
            metadata: { resourceVersion: "100", continue: "c1" },
            items: [sandbox("a", "1")]
          })
        }
        if (index === 1) {
          return sendJson(res, 410, expiredContinue)
        }
        return sendJson(res, 200, {
          metadata: { resourceVersion: "200", continue: "" },
          items: [sandbox("a", "150"), sandbox("b", "160")]
        })
      })
      const client = yield* clientFor(fx.url)
      const all = yield* client.listAll(SandboxResource, Sandbox, { namespace: "ns", limit: 1, resourceVersion: "0" })
      expect(fx.seen.map((s) => s.query)).toEqual([
        { limit: "1", resourceVersion: "0" },
        { limit: "1", continue: "c1", resourceVersion: "0" },
        { resourceVersion: "0" }
      ])
      expect(all.items).toEqual([decoded("a", "150"), decoded("b", "160")])
      // Two pages read in all: the abandoned one counts (against maxListPages too).
      expect([all.resourceVersion, all.pages, all.restarts]).toEqual(["200", 2, 1])
    }))

  it.scoped("starts over once: a second expired continue token fails the list (into the back-off), no loop", () =>
    Effect.gen(function*() {
      // A server whose every continue token has expired, even in the answer to a list without a limit.
      const fx = yield* fixture((req, res) =>
        new URL(req.url ?? "/", "http://x").searchParams.has("continue")
          ? sendJson(res, 410, expiredContinue)
          : sendJson(res, 200, { metadata: { resourceVersion: "100", continue: "c1" }, items: [sandbox("a", "1")] })
      )
      const client = yield* clientFor(fx.url)
      const error = yield* Effect.flip(client.listAll(SandboxResource, Sandbox, { namespace: "ns", limit: 1 }))
      expect(error).toMatchObject({ _tag: "KubeStatusError", code: 410 })
      expect(fx.seen.map((s) => s.query)).toEqual([
        { limit: "1" },
        { limit: "1", continue: "c1" },
        {},
        { continue: "c1" }
      ])
    }))

  it.scoped("a later page that gets no answer fails the list as one whose answer broke off (mid-answer): the server answered its first page", () =>
    Effect.gen(function*() {
      // A continue token routed to a backend that resets: the first page is answered every time, and
      // a list that failed so must be paced as an answered failure (rule 7), not once a second.
      const fx = yield* fixture((req, res) =>
        new URL(req.url ?? "/", "http://x").searchParams.has("continue")
          ? res.destroy()
          : sendJson(res, 200, { metadata: { resourceVersion: "100", continue: "c1" }, items: [sandbox("a", "1")] })
      )
      const client = yield* clientFor(fx.url)
      const error = yield* Effect.flip(client.listAll(SandboxResource, Sandbox, { namespace: "ns", limit: 1 }))
      expect(error._tag).toBe("KubeTransportError")
      expect(error._tag === "KubeTransportError" ? error.reached : undefined).toBe("mid-answer")
      expect(fx.seen.map((s) => s.query)).toEqual([{ limit: "1" }, { limit: "1", continue: "c1" }])
    }))

  it.scoped("a continue token that never ends on pages that repeat their names holds each name once, until maxListPages", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((_req, res, _seen, index) =>
        sendJson(res, 200, {
          metadata: { resourceVersion: "100", continue: `c${index + 1}` },
          items: [sandbox("a", "1"), sandbox("b", "2")]
        })
      )
      // 2 names in 10 pages: within an item budget of 3, because a repeated name is held once.
      const client = yield* clientFor(fx.url, { maxListItems: 3, maxListPages: 10 })
      const error = yield* Effect.flip(client.listAll(SandboxResource, Sandbox, { namespace: "ns", limit: 2 }))
      expect(error).toMatchObject({ _tag: "KubeBodyTooLargeError", limit: 10, unit: "pages" })
    }))

  it.scoped("asks for the next page before parsing this one: a page that then fails to parse hangs that request up", () =>
    Effect.gen(function*() {
      // Two pages that break in their middle but name the next page where a server writes the
      // token: in the metadata before the items (a typed list), or after them (keys sorted).
      const brokenPages = {
        typed: `{"kind":"SandboxList","metadata":{"continue":"c2","resourceVersion":"100"},"items":[{"metadata":}]}`,
        sorted: `{"apiVersion":"jr2.dev/v1alpha1","items":[{"metadata":}],"kind":"SandboxList",` +
          `"metadata":{"continue":"c2","resourceVersion":"100"}}`
      }
      for (const [shape, broken] of Object.entries(brokenPages)) {
        // A server of its own: what the client asked for counts from the moment the request's
        // head arrives, even if the client hangs up before the server reads on.
        const asked: Array<string> = []
        const hungUp: Array<Promise<void>> = []
        const server = http.createServer((req, res) => {
          const query = new URL(req.url ?? "/", "http://fixture").searchParams
          asked.push(query.get("labelSelector") === "warm" ? "warm" : query.get("continue") ?? "first")
          hungUp.push(new Promise((resolve) => req.socket.once("close", () => resolve())))
          res.writeHead(200, { "content-type": "application/json" })
          if (query.get("labelSelector") === "warm") return res.end(`{"metadata":{"resourceVersion":"1"},"items":[]}`)
          if (query.get("continue") === null) return res.end(broken)
          res.write(`{"apiVersion":"jr2.dev/v1alpha1","items":[`) // and never ends
        })
        const client = yield* clientFor(yield* listen(server, "http"))
        // Two kept-alive connections, so the early ask finds one idle rather than opening one
        // (whose connect would wait on the event loop until after the parse).
        yield* Effect.all([0, 1].map(() => client.list(SandboxResource, Sandbox, { labelSelector: "warm" })), {
          concurrency: 2
        })
        const error = yield* failure(client.listAll(SandboxResource, Sandbox, { namespace: "ns", limit: 1 }))
        expect([shape, error._tag]).toEqual([shape, "KubeMalformedBodyError"])
        yield* eventually(Effect.sync(() => asked.length), (n) => n >= 4)
        expect([shape, asked]).toEqual([shape, ["warm", "warm", "first", "c2"]])
        yield* Effect.promise(() => hungUp[3]!)
      }
    }))

  it.scoped("a page whose head names another token than its parse does: the parse is believed, the early ask dropped", () =>
    Effect.gen(function*() {
      const fx = yield* pagesByToken({
        // Two metadata keys: JSON.parse keeps the last one, which names c2.
        "": `{"metadata":{"resourceVersion":"100","continue":"decoy"},"items":[${
          JSON.stringify(sandbox("a", "1"))
        }],"metadata":{"resourceVersion":"100","continue":"c2"}}`,
        decoy: { metadata: { resourceVersion: "100" }, items: [sandbox("wrong", "9")] },
        c2: { metadata: { resourceVersion: "100" }, items: [sandbox("b", "2")] }
      })
      const client = yield* clientFor(fx.url)
      const all = yield* client.listAll(SandboxResource, Sandbox, { namespace: "ns", limit: 1 })
      expect(all.items).toEqual([decoded("a", "1"), decoded("b", "2")])
      expect(fx.seen.map((s) => s.query.continue).at(-1)).toBe("c2")
    }))

  it.scoped("a paged list keeps to one connection: each page is asked for once the last one's connection is free", () =>
    Effect.gen(function*() {
      const sockets: Array<unknown> = []
      const tokens = ["", "c2", "c3", "c4", "c5"]
      const fx = yield* fixture((req, res, seen) => {
        sockets.push(req.socket)
        const at = tokens.indexOf(seen.query.continue ?? "")
        sendJson(res, 200, {
          apiVersion: "jr2.dev/v1alpha1",
          items: [sandbox(`s${at}`, String(at + 1))],
          kind: "SandboxList",
          metadata: { continue: tokens[at + 1] ?? "", resourceVersion: "100" }
        })
      })
      const client = yield* clientFor(fx.url)
      const all = yield* client.listAll(SandboxResource, Sandbox, { namespace: "ns", limit: 1 })
      expect(all.items.map((s) => s.metadata.name)).toEqual(["s0", "s1", "s2", "s3", "s4"])
      // Asked for before undici freed the connection, the next page opened a second one (a second
      // TLS handshake against a real apiserver).
      expect(sockets).toHaveLength(5)
      expect(new Set(sockets).size).toBe(1)
    }))

  it.scoped("a custom resource's list (keys sorted: metadata last) is listed whole", () =>
    Effect.gen(function*() {
      const fx = yield* pagesByToken({
        "": {
          apiVersion: "jr2.dev/v1alpha1",
          items: [sandbox("a", "1")],
          kind: "SandboxList",
          metadata: { continue: "c2", remainingItemCount: 1, resourceVersion: "100" }
        },
        c2: {
          apiVersion: "jr2.dev/v1alpha1",
          items: [sandbox("b", "2")],
          kind: "SandboxList",
          metadata: { continue: "", resourceVersion: "100" }
        }
      })
      const client = yield* clientFor(fx.url)
      const all = yield* client.listAll(SandboxResource, Sandbox, { namespace: "ns", limit: 1 })
      expect(all.items).toEqual([decoded("a", "1"), decoded("b", "2")])
      expect(fx.seen.map((s) => s.query.continue)).toEqual([undefined, "c2"])
    }))

  it.scoped("2. a list whose resourceVersion is empty is malformed, never a point to resume from (`resourceVersion=` is \"from now\")", () =>
    Effect.gen(function*() {
      // Only a server that breaks the API contract sends it: a proxy, an aggregated API, a bug.
      const fx = yield* pagesByToken({
        "": { metadata: { resourceVersion: "", continue: "c1" }, items: [sandbox("a", "1")] },
        c1: { metadata: { resourceVersion: "101", continue: "" }, items: [sandbox("b", "2")] }
      })
      const client = yield* clientFor(fx.url)
      const error = yield* failure(client.listAll(SandboxResource, Sandbox, { namespace: "ns", limit: 1 }))
      expect(error._tag).toBe("KubeMalformedBodyError")
      expect(error).toMatchObject({ method: "GET", path: `${Collection}?limit=1` })
      expect(error.message).toContain("an empty metadata.resourceVersion")
      expect(error.message).toContain("\"from now\"")
      // The same for one page, and for a list of one page only.
      const one = yield* pagesByToken({ "": { metadata: { resourceVersion: "" }, items: [] } })
      const oneClient = yield* clientFor(one.url)
      expect((yield* failure(oneClient.list(SandboxResource, Sandbox, { namespace: "ns" })))._tag).toBe(
        "KubeMalformedBodyError"
      )
      expect((yield* failure(oneClient.listAll(SandboxResource, Sandbox, { namespace: "ns" })))._tag).toBe(
        "KubeMalformedBodyError"
      )
    }))

  it.scoped("fails on a 410 for the first page: that is the resourceVersion, not a token", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((_req, res) =>
        sendJson(res, 410, {
          kind: "Status",
          status: "Failure",
          message: "too old resource version: 1 (183)",
          reason: "Expired",
          code: 410
        })
      )
      const client = yield* clientFor(fx.url)
      const error = yield* failure(client.listAll(SandboxResource, Sandbox, { namespace: "ns", resourceVersion: "1" }))
      expect(KubeError.isExpired(error)).toBe(true)
      expect(fx.seen).toHaveLength(1)
    }))
})

// -------------------------------------------------------------------------------------------------
// Failure shapes
// -------------------------------------------------------------------------------------------------

describe("KubeClient failures", () => {
  it.scoped("a too-large resourceVersion (504 Timeout with the cause) is recognised, with its retry-after", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((_req, res) =>
        sendJson(res, 504, {
          kind: "Status",
          apiVersion: "v1",
          metadata: {},
          status: "Failure",
          message: "Timeout: Too large resource version: 999999, current: 186",
          reason: "Timeout",
          details: {
            causes: [{ reason: "ResourceVersionTooLarge", message: "Too large resource version" }],
            retryAfterSeconds: 1
          },
          code: 504
        })
      )
      const client = yield* clientFor(fx.url)
      const error = yield* failure(
        client.list(SandboxResource, Sandbox, { namespace: "ns", resourceVersion: "999999" })
      )
      const status = expectStatusError(error)
      expect([status.code, status.reason, status.method, status.path]).toEqual([
        504,
        "Timeout",
        "GET",
        `${Collection}?resourceVersion=999999`
      ])
      expect(status.causes).toEqual([{ reason: "ResourceVersionTooLarge", message: "Too large resource version" }])
      expect(status.message).toBe(
        `GET ${Collection}?resourceVersion=999999 answered 504 Timeout: Timeout: Too large resource version: 999999, current: 186`
      )
      expect(KubeError.isTooLargeResourceVersion(error)).toBe(true)
      expect(KubeError.isExpired(error)).toBe(false)
      expect(KubeError.retryAfter(error)).toEqual(Option.some(Duration.seconds(1)))
      expect(status.bodyExcerpt).toEqual(Option.none())
    }))

  it.scoped("401 invalidates the cached credential, and the next request reads a fresh one", () =>
    Effect.gen(function*() {
      const invalidations = yield* Ref.make(0)
      const fx = yield* fixture((_req, res, _seen, index) =>
        index === 0
          ? sendJson(res, 401, {
            kind: "Status",
            apiVersion: "v1",
            metadata: {},
            status: "Failure",
            message: "Unauthorized",
            reason: "Unauthorized",
            code: 401
          })
          : sendJson(res, 200, { metadata: { resourceVersion: "1" }, items: [] })
      )
      const connection = Layer.succeed(KubeConfig.KubeConfig, rotatingTokenConnection(fx.url, invalidations))
      const client = yield* KubeClient.make().pipe(Effect.provide(connection))
      const error = yield* failure(client.list(SandboxResource, Sandbox, { namespace: "ns" }))
      expect(KubeError.isUnauthorized(error)).toBe(true)
      expect(expectStatusError(error).reason).toBe("Unauthorized")
      expect(yield* Ref.get(invalidations)).toBe(1)
      yield* client.list(SandboxResource, Sandbox, { namespace: "ns" })
      expect(fx.seen.map((s) => s.headers.authorization)).toEqual([
        "Bearer token-generation-0",
        "Bearer token-generation-1"
      ])
      expect(yield* Ref.get(invalidations)).toBe(1)
    }))

  // The headers deadline covers reading the credentials; an exec plugin that hangs
  // (a browser login nobody answers) would otherwise hold the request for ever.
  it.scoped("credentials not read within the headers deadline: not sent, their source named, the read interrupted", () =>
    Effect.gen(function*() {
      const interrupted = yield* Deferred.make<void>()
      const hanging: KubeConfig.ClusterConnection = {
        server: "https://127.0.0.1:1",
        namespace: Option.none(),
        tls: KubeConfig.defaultTls,
        authorization: Effect.onInterrupt(Effect.never, () => Deferred.succeed(interrupted, undefined)),
        invalidate: Effect.void,
        source: "kubeconfig /home/me/.kube/config, context eks",
        credentials: `exec plugin "aws-iam-authenticator" for user "eks-admin"`
      }
      const client = yield* KubeClient.make({ headersTimeout: "10 seconds" }).pipe(
        Effect.provide(Layer.succeed(KubeConfig.KubeConfig, hanging))
      )
      const request = yield* Effect.fork(Effect.flip(client.list(SandboxResource, Sandbox, { namespace: "ns" })))
      yield* pendingSleep(10_000)
      yield* TestClock.adjust("9 seconds")
      yield* Effect.yieldNow()
      expect(request.unsafePoll()).toBeNull()
      yield* TestClock.adjust("1 second")
      const error = yield* Fiber.join(request)
      expect(error._tag === "KubeTransportError" && error.reached).toBe("not-sent")
      expect(KubeError.answerBegan(error)).toBe(false)
      expect(error.message).toBe(
        `GET ${Collection} to https://127.0.0.1:1 was not sent: reading its credentials (exec plugin ` +
          `"aws-iam-authenticator" for user "eks-admin") took longer than 10s and was abandoned. A plugin may ` +
          `be waiting for a person (a browser login, a prompt: nobody answers them here), or an identity ` +
          `provider or file system not answering: check that the credentials can be read on this host ` +
          `without a person; if it is only slow, raise KubeClientOptions.headersTimeout, the program's --headers-timeout`
      )
      yield* Deferred.await(interrupted)
    }))

  // Review 3 of bea82b1: the read's fiber is forked from the request's, so it inherits the request's
  // interruptibility. A request made in an uninterruptible region (an `acquireRelease`'s acquire or
  // release: a create, or a DELETE on cleanup) fails at its deadline, but its read can no longer be
  // interrupted: a hung plugin is never stopped, holds the credentials' lock, and closing the
  // client's scope (the program's exit) waits on it for ever.
  it.scoped("credentials read for a request in an uninterruptible region are still stopped at the deadline, and the client's scope closes", () =>
    Effect.gen(function*() {
      const interrupted = yield* Deferred.make<void>()
      const release = yield* Deferred.make<Option.Option<Redacted.Redacted<string>>>()
      // Registered first, run last: whatever the outcome, the read ends once the test is over.
      yield* Effect.addFinalizer(() => Deferred.succeed(release, Option.none()))
      const hanging: KubeConfig.ClusterConnection = {
        server: "https://127.0.0.1:1",
        namespace: Option.none(),
        tls: KubeConfig.defaultTls,
        authorization: Effect.onInterrupt(Deferred.await(release), () => Deferred.succeed(interrupted, undefined)),
        invalidate: Effect.void,
        source: "kubeconfig /home/me/.kube/config, context eks",
        credentials: `exec plugin "aws-iam-authenticator" for user "eks-admin"`
      }
      const clientScope = yield* Scope.make()
      const client = yield* KubeClient.make({ headersTimeout: "10 seconds" }).pipe(
        Effect.provide(Layer.succeed(KubeConfig.KubeConfig, hanging)),
        Scope.extend(clientScope)
      )
      const request = yield* Effect.fork(
        Effect.uninterruptible(Effect.flip(client.list(SandboxResource, Sandbox, { namespace: "ns" })))
      )
      yield* pendingSleep(10_000)
      yield* TestClock.adjust("10 seconds")
      const error = yield* Fiber.join(request)
      expect(error._tag === "KubeTransportError" && error.reached).toBe("not-sent")
      const closing = yield* Effect.fork(Scope.close(clientScope, Exit.void))
      yield* eventually(Effect.sync(() => closing.unsafePoll() !== null), (closed) => closed, 2_000)
      expect(yield* Deferred.isDone(interrupted)).toBe(true)
    }))

  it.scoped("403 names the group and kind", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((_req, res) =>
        sendJson(res, 403, {
          kind: "Status",
          apiVersion: "v1",
          metadata: {},
          status: "Failure",
          message:
            "sandboxes.jr2.dev is forbidden: User \"system:serviceaccount:ns:default\" cannot list resource \"sandboxes\"",
          reason: "Forbidden",
          details: { group: "jr2.dev", kind: "sandboxes" },
          code: 403
        })
      )
      const client = yield* clientFor(fx.url)
      const error = yield* failure(client.list(SandboxResource, Sandbox, { namespace: "ns" }))
      const status = expectStatusError(error)
      expect(KubeError.isForbidden(error)).toBe(true)
      expect(KubeError.isUnauthorized(error)).toBe(false)
      expect([status.group, status.kind, status.reason]).toEqual([
        Option.some("jr2.dev"),
        Option.some("sandboxes"),
        "Forbidden"
      ])
    }))

  it.scoped("429 as a Status takes details.retryAfterSeconds over the header", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((_req, res) =>
        sendJson(
          res,
          429,
          {
            kind: "Status",
            status: "Failure",
            message: "Too many requests, please try again later.",
            reason: "TooManyRequests",
            details: { retryAfterSeconds: 3 },
            code: 429
          },
          { "retry-after": "5" }
        )
      )
      const client = yield* clientFor(fx.url)
      const error = yield* failure(client.list(SandboxResource, Sandbox, { namespace: "ns" }))
      expect(KubeError.isTooManyRequests(error)).toBe(true)
      expect(expectStatusError(error).reason).toBe("TooManyRequests")
      expect(KubeError.retryAfter(error)).toEqual(Option.some(Duration.seconds(3)))
    }))

  it.scoped("429 as plain text keeps an excerpt and reads Retry-After in seconds", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((_req, res) =>
        sendText(res, 429, "text/plain; charset=utf-8", "Too many requests, please try again later.\n", {
          "retry-after": "7"
        })
      )
      const client = yield* clientFor(fx.url)
      const error = yield* failure(client.list(SandboxResource, Sandbox, { namespace: "ns" }))
      const status = expectStatusError(error)
      expect(KubeError.isTooManyRequests(error)).toBe(true)
      expect([status.code, status.reason, status.causes]).toEqual([429, "", []])
      expect(status.bodyExcerpt).toEqual(Option.some("Too many requests, please try again later."))
      expect(status.retryAfterSeconds).toEqual(Option.some(7))
      expect(status.message).toBe(
        `GET ${Collection} answered 429 with a plain-text body, not a Kubernetes Status: "Too many requests, please try again later."`
      )
    }))

  it.scoped("reads a Retry-After HTTP-date against the clock", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.UTC(2025, 0, 1, 0, 0, 0))
      const fx = yield* fixture((_req, res) =>
        sendText(res, 503, "text/plain", "overloaded", { "retry-after": "Wed, 01 Jan 2025 00:02:00 GMT" })
      )
      const client = yield* clientFor(fx.url)
      const error = yield* failure(client.list(SandboxResource, Sandbox, { namespace: "ns" }))
      expect(expectStatusError(error).retryAfterSeconds).toEqual(Option.some(120))
    }))

  it.scoped("a proxy's HTML 502 page says so, with the page's title", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((_req, res) =>
        sendText(
          res,
          502,
          "text/html",
          "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
        )
      )
      const client = yield* clientFor(fx.url)
      const error = yield* failure(client.list(SandboxResource, Sandbox, { namespace: "ns" }))
      const status = expectStatusError(error)
      expect(status.message).toBe(
        `GET ${Collection} answered 502 with an HTML page, not a Kubernetes Status: "502 Bad Gateway"`
      )
      expect([status.code, status.reason, status.bodyExcerpt]).toEqual([502, "", Option.some("502 Bad Gateway")])
      expect(KubeError.isExpired(error) || KubeError.isTooManyRequests(error) || KubeError.isForbidden(error)).toBe(
        false
      )
    }))

  it.scoped("caps a long non-Status body's excerpt at 200 characters, whitespace collapsed", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((_req, res) => sendText(res, 500, "text/plain", `oops\n\n   ${"z".repeat(5000)}`))
      const client = yield* clientFor(fx.url)
      const status = expectStatusError(yield* failure(client.list(SandboxResource, Sandbox, { namespace: "ns" })))
      const shown = Option.getOrThrow(status.bodyExcerpt)
      expect(shown.length).toBe(200)
      expect(shown.startsWith("oops zzz")).toBe(true)
    }))

  it.scoped("a refused connection is a KubeTransportError naming the server and the cause", () =>
    Effect.gen(function*() {
      // A port that was free a moment ago and is closed now.
      const server = http.createServer()
      const url = yield* Effect.scoped(listen(server, "http"))
      const port = new URL(url).port
      const client = yield* clientFor(url)
      const error = yield* failure(client.list(SandboxResource, Sandbox, { namespace: "ns" }))
      expect(error._tag).toBe("KubeTransportError")
      expect(error.message).toBe(`GET ${Collection} to ${url} got no answer: connect ECONNREFUSED 127.0.0.1:${port}`)
      const streamed = yield* watchFailure(client.watch(SandboxResource, Sandbox, { namespace: "ns" }))
      expect(streamed.events).toEqual([])
      expect(streamed.error._tag).toBe("KubeTransportError")
    }))

  it.scoped("no error, message or field ever carries the bearer token, even when a server echoes it", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((req, res, seen) => {
        const echoed = `${req.headers.authorization}`
        switch (seen.path.split("/").pop()) {
          case "plain":
            return sendText(res, 500, "text/plain", `bad header: ${echoed}`)
          case "status":
            return sendJson(res, 401, {
              kind: "Status",
              message: `token ${echoed} is not valid`,
              reason: "Unauthorized",
              code: 401
            })
          case "html":
            return sendText(res, 502, "text/html", `<html><title>${echoed}</title></html>`)
          default:
            res.writeHead(200, { "content-type": "application/json" })
            return res.end(`not json ${echoed}\n`)
        }
      })
      const client = yield* clientFor(fx.url)
      const resource = { group: "", version: "v1", plural: "x", namespaced: false }
      const errors: Array<KubeError.KubeClientError> = [
        yield* failure(client.get(resource, undefined, "plain")),
        yield* failure(client.get(resource, undefined, "status")),
        yield* failure(client.get(resource, undefined, "html")),
        (yield* watchFailure(client.watch(resource, Sandbox))).error
      ]
      // Each server did echo it: the test would pass for the wrong reason otherwise.
      expect(fx.seen.map((s) => s.headers.authorization)).toEqual(Array(4).fill(`Bearer ${Token}`))
      expect(errors.map((e) => e._tag)).toEqual([
        "KubeStatusError",
        "KubeStatusError",
        "KubeStatusError",
        "KubeMalformedLineError"
      ])
      for (const error of errors) {
        expect(JSON.stringify(error)).toContain("[redacted]")
        expect(JSON.stringify(error)).not.toContain(Token)
        expect(String(error)).not.toContain(Token)
        expect(Object.values(error).map(String).join(" ")).not.toContain(Token)
      }
    }))

  it.scoped("a user name and password in a connection's server URL are never sent, and never said", () =>
    Effect.gen(function*() {
      const Password = "s3cretPW-in-the-url"
      /** A connection as a library user may build one, past KubeConfig's refusal. */
      const withUserInfo = (url: string) =>
        KubeClient.make().pipe(
          Effect.provide(
            Layer.effect(
              KubeConfig.KubeConfig,
              Effect.map(KubeConfig.KubeConfig, (plain) => ({
                ...plain,
                server: url.replace("//", `//admin:${Password}@`)
              }))
            ).pipe(Layer.provide(KubeConfig.layerStatic({ server: url, token: Token })))
          )
        )
      // A port that was free a moment ago and is closed now.
      const closed = yield* Effect.scoped(listen(http.createServer(), "http"))
      const refused = yield* failure((yield* withUserInfo(closed)).list(SandboxResource, Sandbox, { namespace: "ns" }))
      expect(refused.message).toBe(
        `GET ${Collection} to ${closed} got no answer: connect ECONNREFUSED 127.0.0.1:${new URL(closed).port}`
      )
      const fx = yield* fixture((_req, res, seen) =>
        seen.query.watch === "1" ? res.destroy() : sendText(res, 500, "text/html", "<html><title>down</title></html>")
      )
      const client = yield* withUserInfo(fx.url)
      const answered = yield* failure(client.list(SandboxResource, Sandbox, { namespace: "ns" }))
      const dropped = (yield* watchFailure(client.watch(SandboxResource, Sandbox, { namespace: "ns" }))).error
      expect(answered._tag).toBe("KubeStatusError")
      expect(dropped.message).toContain(` to ${fx.url} got no answer`)
      // The server heard the bearer token only, never the URL's user and password.
      expect(fx.seen.map((s) => s.headers.authorization)).toEqual([`Bearer ${Token}`, `Bearer ${Token}`])
      for (const error of [refused, answered, dropped]) {
        expect(JSON.stringify(error)).not.toContain(Password)
        expect(String(error)).not.toContain(Password)
      }
    }))
})

// -------------------------------------------------------------------------------------------------
// watch
// -------------------------------------------------------------------------------------------------

const bookmarkLine = (rv: string, annotations?: Record<string, string>) =>
  line({
    type: "BOOKMARK",
    object: {
      apiVersion: "jr2.dev/v1alpha1",
      kind: "Sandbox",
      metadata: { resourceVersion: rv, ...(annotations ? { annotations } : {}) }
    }
  })

describe("KubeClient.watch", () => {
  it.scoped("sends every option in the query string", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((_req, res) => sendText(res, 200, "application/json", ""))
      const client = yield* clientFor(fx.url)
      const events = yield* Stream.runCollect(
        client.watch(SandboxResource, Sandbox, {
          namespace: "ns",
          labelSelector: "jr2.dev/run",
          fieldSelector: "metadata.name=a",
          resourceVersion: "186",
          allowWatchBookmarks: true,
          timeoutSeconds: 240,
          sendInitialEvents: true,
          resourceVersionMatch: "NotOlderThan"
        })
      )
      expect(Chunk.toReadonlyArray(events)).toEqual([])
      expect(fx.seen.map((s) => [s.method, s.path, s.query, s.headers.authorization])).toEqual([
        [
          "GET",
          Collection,
          {
            watch: "1",
            labelSelector: "jr2.dev/run",
            fieldSelector: "metadata.name=a",
            resourceVersion: "186",
            resourceVersionMatch: "NotOlderThan",
            allowWatchBookmarks: "true",
            sendInitialEvents: "true",
            timeoutSeconds: "240"
          },
          `Bearer ${Token}`
        ]
      ])
    }))

  it.scoped("decodes every event type; a bookmark needs no name; a misfit is UNDECODABLE, not a failure", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((_req, res) => {
        res.writeHead(200, { "content-type": "application/json" })
        res.write(line({ type: "ADDED", object: sandbox("a", "10", "Pending") }))
        res.write(
          line({ type: "MODIFIED", object: sandbox("a", "11") }) +
            line({ type: "MODIFIED", object: sandbox("b", "12", { no: 1 }) })
        )
        res.write(bookmarkLine("13", { "k8s.io/initial-events-end": "true", odd: 5 as unknown as string }))
        res.write(line({ type: "DELETED", object: sandbox("a", "14") }))
        res.write(bookmarkLine("186"))
        res.end(
          line({
            type: "ERROR",
            object: {
              kind: "Status",
              apiVersion: "v1",
              metadata: {},
              status: "Failure",
              message: "too old resource version: 1 (183)",
              reason: "Expired",
              code: 410
            }
          })
        )
      })
      const client = yield* clientFor(fx.url)
      const events = Chunk.toReadonlyArray(
        yield* Stream.runCollect(client.watch(SandboxResource, Sandbox, { namespace: "ns" }))
      )
      expect(events.map((e) => e.type)).toEqual([
        "ADDED",
        "MODIFIED",
        "UNDECODABLE",
        "BOOKMARK",
        "DELETED",
        "BOOKMARK",
        "ERROR"
      ])
      expect(events[0]).toEqual({
        type: "ADDED",
        object: decoded("a", "10", "Pending"),
        name: "a",
        resourceVersion: "10",
        bytes: expect.any(Number)
      })
      expect(events[1]).toEqual({
        type: "MODIFIED",
        object: decoded("a", "11"),
        name: "a",
        resourceVersion: "11",
        bytes: expect.any(Number)
      })
      expect(events[2]).toMatchObject({ type: "UNDECODABLE", eventType: "MODIFIED", name: "b", resourceVersion: "12" })
      expect((events[2] as Extract<WatchEvent<Sandbox>, { type: "UNDECODABLE" }>).problem).toBe(
        "status.phase: Expected string, actual {\"no\":1}"
      )
      expect(events[3]).toEqual({
        type: "BOOKMARK",
        resourceVersion: "13",
        annotations: { "k8s.io/initial-events-end": "true" }
      })
      expect(events[4]).toEqual({
        type: "DELETED",
        object: decoded("a", "14"),
        name: "a",
        resourceVersion: "14",
        bytes: expect.any(Number)
      })
      expect(events[5]).toEqual({ type: "BOOKMARK", resourceVersion: "186", annotations: {} })
      expect(events[6]).toEqual({
        type: "ERROR",
        status: {
          kind: "Status",
          apiVersion: "v1",
          status: "Failure",
          message: "too old resource version: 1 (183)",
          reason: "Expired",
          code: 410
        }
      })
    }))

  it.scoped("fails before any event when the watch itself is refused (non-2xx)", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((_req, res) =>
        sendJson(res, 403, {
          kind: "Status",
          status: "Failure",
          message: "forbidden",
          reason: "Forbidden",
          details: { group: "jr2.dev", kind: "sandboxes" },
          code: 403
        })
      )
      const client = yield* clientFor(fx.url)
      const { error, events } = yield* watchFailure(client.watch(SandboxResource, Sandbox, { namespace: "ns" }))
      expect(events).toEqual([])
      expect(KubeError.isForbidden(error)).toBe(true)
      expect(expectStatusError(error).path).toBe(`${Collection}?watch=1`)
    }))

  it.scoped("drops metadata.managedFields unread, keeps a label of that name, and gives it to a schema that reads it", () =>
    Effect.gen(function*() {
      const object = {
        apiVersion: "jr2.dev/v1alpha1",
        kind: "Sandbox",
        metadata: {
          name: "a",
          namespace: "ns",
          resourceVersion: "7",
          labels: { managedFields: "[x]" },
          managedFields: [{ manager: "kubectl", fieldsV1: { "f:metadata": {} } }]
        },
        status: { phase: "Ready" }
      }
      const fx = yield* fixture((_req, res) => {
        res.writeHead(200, { "content-type": "application/json" })
        res.end(line({ type: "MODIFIED", object }) + line({ type: "MODIFIED", object }))
      })
      const client = yield* clientFor(fx.url)
      const [sandboxEvent] = Chunk.toArray(
        yield* Stream.runCollect(client.watch(SandboxResource, Sandbox, { namespace: "ns" }))
      )
      expect(sandboxEvent?.type === "MODIFIED" ? sandboxEvent.object.metadata.labels : undefined).toEqual({
        managedFields: "[x]"
      })
      const Reads = Schema.Struct({
        metadata: Schema.Struct({
          name: Schema.String,
          resourceVersion: Schema.String,
          managedFields: Schema.Array(Schema.Unknown)
        })
      })
      const [readsEvent] = Chunk.toArray(
        yield* Stream.runCollect(client.watch(SandboxResource, Reads, { namespace: "ns" }))
      )
      expect(readsEvent?.type === "MODIFIED" ? readsEvent.object.metadata.managedFields : undefined).toEqual(
        object.metadata.managedFields
      )
    }))

  it.scoped("keeps a character split across two network chunks whole (é and an emoji)", () =>
    Effect.gen(function*() {
      const gate = makeGate()
      const payload = Buffer.from(line({ type: "ADDED", object: sandbox("café-🦀", "20") }))
      const cut = payload.indexOf(Buffer.from("é")) + 1
      const fx = yield* fixture(async (_req, res) => {
        res.writeHead(200, { "content-type": "application/json" })
        res.write(Buffer.concat([Buffer.from(bookmarkLine("19")), payload.subarray(0, cut)]))
        await gate.opened
        // The emoji split too: its first two bytes now, the rest with the bookmark after it.
        const emoji = payload.indexOf(Buffer.from("🦀")) + 2
        res.write(payload.subarray(cut, emoji))
        res.end(Buffer.concat([payload.subarray(emoji), Buffer.from(bookmarkLine("21"))]))
      })
      const { fiber, queue } = yield* watchIntoQueue(fx.url)
      expect(yield* Queue.take(queue)).toEqual({ type: "BOOKMARK", resourceVersion: "19", annotations: {} })
      yield* gate.open
      expect(yield* Fiber.join(fiber)).toBeUndefined()
      const rest = Chunk.toReadonlyArray(yield* Queue.takeAll(queue))
      expect(rest).toEqual([
        {
          type: "ADDED",
          object: decoded("café-🦀", "20"),
          name: "café-🦀",
          resourceVersion: "20",
          bytes: expect.any(Number)
        },
        { type: "BOOKMARK", resourceVersion: "21", annotations: {} }
      ])
    }))

  it.scoped("refuses a line longer than the cap with KubeLineTooLongError", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((_req, res) => {
        res.writeHead(200, { "content-type": "application/json" })
        res.write(bookmarkLine("1"))
        res.write(line({ type: "ADDED", object: { ...sandbox("big", "2"), spec: { pad: "p".repeat(500) } } }))
        res.end(bookmarkLine("3"))
      })
      const client = yield* clientFor(fx.url, { maxLineBytes: 256 })
      const { error, events } = yield* watchFailure(client.watch(SandboxResource, Sandbox, { namespace: "ns" }))
      expect(events).toEqual([{ type: "BOOKMARK", resourceVersion: "1", annotations: {} }])
      expect(error._tag).toBe("KubeLineTooLongError")
      expect(error).toMatchObject({ limitBytes: 256, path: `${Collection}?watch=1` })
      expect(error.message).toContain("raise KubeClientOptions.maxLineBytes, the program's --max-line-bytes")
    }))

  it.scoped("fails a malformed line with KubeMalformedLineError and a short excerpt", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((_req, res) => {
        res.writeHead(200, { "content-type": "application/json" })
        // And the response stays open: the client must hang up on its own.
        res.write(bookmarkLine("1") + `<html>${"garbage ".repeat(100)}</html>\n` + bookmarkLine("2"))
      })
      const client = yield* clientFor(fx.url)
      const { error, events } = yield* watchFailure(client.watch(SandboxResource, Sandbox, { namespace: "ns" }))
      expect(events).toEqual([{ type: "BOOKMARK", resourceVersion: "1", annotations: {} }])
      expect(error._tag).toBe("KubeMalformedLineError")
      const malformed = error as KubeError.KubeMalformedLineError
      expect(malformed.excerpt.length).toBeLessThanOrEqual(200)
      expect(malformed.excerpt.startsWith("<html>garbage garbage")).toBe(true)
      expect(malformed.message).toContain(`the watch GET ${Collection}?watch=1 sent a line that is not JSON`)
      // The failed watch let go of its connection (resolves only when the server saw it close).
      yield* Effect.promise(() => fx.seen[0]!.abandoned)
    }))

  it.scoped("a 256 KiB line of `\"managedFields\":[` never closed fails as any malformed line does", () =>
    Effect.gen(function*() {
      const key = "\"managedFields\":["
      const hostile = `{"type":"ADDED","object":{"metadata":{${key.repeat(Math.ceil((256 * 1024) / key.length))}`
      const fx = yield* fixture((_req, res) => {
        res.writeHead(200, { "content-type": "application/json" })
        res.write(bookmarkLine("1") + `${hostile}\n` + bookmarkLine("2"))
      })
      const client = yield* clientFor(fx.url, { maxLineBytes: 512 * 1024 })
      const { error, events } = yield* watchFailure(client.watch(SandboxResource, Sandbox, { namespace: "ns" }))
      expect(events).toEqual([{ type: "BOOKMARK", resourceVersion: "1", annotations: {} }])
      expect(error._tag).toBe("KubeMalformedLineError")
      expect((error as KubeError.KubeMalformedLineError).excerpt.startsWith("{\"type\":\"ADDED\"")).toBe(true)
    }))

  it.scoped("fails a line of an unknown event type", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((_req, res) =>
        sendText(res, 200, "application/json", line({ type: "UPSERTED", object: {} }))
      )
      const client = yield* clientFor(fx.url)
      const { error } = yield* watchFailure(client.watch(SandboxResource, Sandbox, { namespace: "ns" }))
      expect(error._tag).toBe("KubeMalformedLineError")
      expect(error.message).toContain("unknown type \"UPSERTED\"")
    }))

  it.scoped("fails a body that ends in the middle of a line, after the events before it", () =>
    Effect.gen(function*() {
      const body = bookmarkLine("1") + "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"na"
      const fx = yield* fixture((_req, res) => {
        // A complete HTTP body (Content-Length) whose last line is cut short.
        res.writeHead(200, { "content-type": "application/json", "content-length": String(Buffer.byteLength(body)) })
        res.end(body)
      })
      const client = yield* clientFor(fx.url)
      const { error, events } = yield* watchFailure(client.watch(SandboxResource, Sandbox, { namespace: "ns" }))
      expect(events).toEqual([{ type: "BOOKMARK", resourceVersion: "1", annotations: {} }])
      expect(error._tag).toBe("KubeMalformedLineError")
      expect(error.message).toContain("ended in the middle of a line")
      expect((error as KubeError.KubeMalformedLineError).excerpt).toBe(
        "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"na"
      )
    }))

  it.scoped("accepts a last event that lacks only its newline", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((_req, res) => sendText(res, 200, "application/json", bookmarkLine("1").trimEnd()))
      const client = yield* clientFor(fx.url)
      const events = yield* Stream.runCollect(client.watch(SandboxResource, Sandbox, { namespace: "ns" }))
      expect(Chunk.toReadonlyArray(events)).toEqual([{ type: "BOOKMARK", resourceVersion: "1", annotations: {} }])
    }))

  it.scoped("a connection reset mid-line is a KubeTransportError, not a parse error of half a line", () =>
    Effect.gen(function*() {
      const gate = makeGate()
      const fx = yield* fixture(async (req, res) => {
        res.writeHead(200, { "content-type": "application/json" })
        res.write(bookmarkLine("1") + "{\"type\":\"ADDED\",\"object\":{\"metad")
        await gate.opened
        req.socket.resetAndDestroy()
      })
      const { fiber, queue } = yield* watchIntoQueue(fx.url)
      expect(yield* Queue.take(queue)).toEqual({ type: "BOOKMARK", resourceVersion: "1", annotations: {} })
      yield* gate.open
      const exit = yield* Fiber.await(fiber)
      expect(Exit.isFailure(exit)).toBe(true)
      const error = yield* failure(exit)
      expect(error._tag).toBe("KubeTransportError")
      expect(error.message).toMatch(
        new RegExp(`^the answer to GET ${Collection}\\?watch=1 from ${fx.url} broke off mid-body: `)
      )
      expect(yield* Queue.size(queue)).toBe(0)
    }))

  it.scoped("every request has a deadline: no headers within headersTimeout abandons it with a transport error", () =>
    Effect.gen(function*() {
      const fx = yield* fixture(() => undefined) // reads the request, never answers
      const client = yield* clientFor(fx.url, { headersTimeout: "20 seconds" })
      const fiber = yield* Effect.fork(Effect.flip(client.list(SandboxResource, Sandbox, { namespace: "ns" })))
      yield* pendingSleep(20_000)
      yield* TestClock.adjust("20 seconds")
      const error = yield* Fiber.join(fiber)
      expect(error._tag).toBe("KubeTransportError")
      expect(error.message).toContain("got no answer within 20s")
      expect(error.message).toContain("raise KubeClientOptions.headersTimeout, the program's --headers-timeout")
      yield* Effect.promise(() => fx.seen[0]!.abandoned)
    }))

  it.scoped("interrupted before the headers came, a request is aborted: the server sees the connection close", () =>
    Effect.gen(function*() {
      const fx = yield* fixture(() => undefined) // reads the request, never answers
      const client = yield* clientFor(fx.url)
      const fiber = yield* Effect.fork(client.list(SandboxResource, Sandbox, { namespace: "ns" }))
      yield* eventually(Effect.sync(() => fx.seen.length), (seen) => seen === 1)
      yield* Fiber.interrupt(fiber)
      // Resolves only when the server's request closed unanswered: the client hung up.
      yield* Effect.promise(() => fx.seen[0]!.abandoned)
      expect(fx.seen).toHaveLength(1)
    }))

  it.scoped("bug 2: a list whose body stalls fails after bodyTimeout, and the request is abandoned", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((_req, res) => {
        res.writeHead(200, { "content-type": "application/json" })
        res.write(`{"kind":"SandboxList","metadata":{"resourceVersion":"5"},"items":[`) // and never ends
      })
      // Shorter than the headers' 30 s, so the client's timer sleeps for it once it is armed.
      const client = yield* clientFor(fx.url, { bodyTimeout: "10 seconds" })
      const error = yield* failsAtBodyDeadline(client.listAll(SandboxResource, Sandbox, { namespace: "ns" }))
      expect(error._tag).toBe("KubeTransportError")
      expect(error.message).toContain("did not arrive whole within 10s")
      yield* Effect.promise(() => fx.seen[0]!.abandoned)
    }))

  it.scoped("an error answer whose body stalls still fails with its status once bodyTimeout passes", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((_req, res) => {
        res.writeHead(500, { "content-type": "application/json" })
        res.write(`{"kind":"Status","code":500,`) // and never ends
      })
      const client = yield* clientFor(fx.url, { bodyTimeout: "10 seconds" })
      const error = yield* failsAtBodyDeadline(client.list(SandboxResource, Sandbox, { namespace: "ns" }))
      expect(error._tag).toBe("KubeStatusError")
      expect(error._tag === "KubeStatusError" ? error.code : undefined).toBe(500)
      yield* Effect.promise(() => fx.seen[0]!.abandoned)
    }))

  it.scoped("a watch's body has no such deadline: its silence is the watcher's to judge", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((_req, res) => {
        res.writeHead(200, { "content-type": "application/json" })
        res.write(bookmarkLine("1")) // and never ends
      })
      const { fiber, queue } = yield* watchIntoQueue(fx.url)
      expect(yield* Queue.take(queue)).toEqual({ type: "BOOKMARK", resourceVersion: "1", annotations: {} })
      yield* TestClock.adjust("1 hour")
      yield* Effect.yieldNow()
      expect(fiber.unsafePoll()).toBeNull()
    }))

  it.scoped("with idleTimeout, silence that long fails the watch with KubeWatchIdleError and closes the connection", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((_req, res) => {
        res.writeHead(200, { "content-type": "application/json" })
        res.write(bookmarkLine("1")) // and never ends
      })
      const { fiber, queue } = yield* watchIntoQueue(fx.url, { idleTimeout: "60 seconds" })
      expect(yield* Queue.take(queue)).toEqual({ type: "BOOKMARK", resourceVersion: "1", annotations: {} })
      yield* TestClock.adjust("59 seconds")
      yield* Effect.yieldNow()
      expect(fiber.unsafePoll()).toBeNull()
      yield* TestClock.adjust("1 second")
      const exit = yield* Fiber.await(fiber)
      const error = Exit.isFailure(exit) ? Cause.failureOption(exit.cause) : Option.none()
      expect(Option.map(error, (e) => e._tag)).toEqual(Option.some("KubeWatchIdleError"))
      expect(Option.map(error, (e) => e.message)).toEqual(
        Option.some(expect.stringContaining("sent nothing for 1m (its idleTimeout)"))
      )
      yield* Effect.promise(() => fx.seen[0]!.abandoned)
    }))

  it.scoped("with idleTimeout, every read starts the silence again", () =>
    Effect.gen(function*() {
      let send: (line: string) => void = () => undefined
      const fx = yield* fixture((_req, res) => {
        res.writeHead(200, { "content-type": "application/json" })
        res.write(bookmarkLine("1"))
        send = (line) => res.write(line)
      })
      const { fiber, queue } = yield* watchIntoQueue(fx.url, { idleTimeout: "60 seconds" })
      yield* Queue.take(queue)
      yield* TestClock.adjust("40 seconds")
      send(bookmarkLine("2"))
      expect(yield* Queue.take(queue)).toEqual({ type: "BOOKMARK", resourceVersion: "2", annotations: {} })
      // 80 s since the watch opened, 40 s since it last spoke: alive.
      yield* TestClock.adjust("40 seconds")
      yield* Effect.yieldNow()
      expect(fiber.unsafePoll()).toBeNull()
      // 60 s since it last spoke.
      yield* TestClock.adjust("20 seconds")
      const exit = yield* Fiber.await(fiber)
      expect(Exit.isFailure(exit) && Cause.failureOption(exit.cause).pipe(Option.map((e) => e._tag))).toEqual(
        Option.some("KubeWatchIdleError")
      )
    }))

  it.scoped("a streaming list's long idleTimeout becomes idleTimeoutAfterInitialEvents at its end bookmark, on the same connection", () =>
    Effect.gen(function*() {
      let send: (line: string) => void = () => undefined
      const fx = yield* fixture((_req, res) => {
        res.writeHead(200, { "content-type": "application/json" })
        res.write(line({ type: "ADDED", object: sandbox("a", "7") }))
        send = (text) => res.write(text)
      })
      const { fiber, queue } = yield* watchIntoQueue(fx.url, {
        sendInitialEvents: true,
        idleTimeout: "1 hour",
        idleTimeoutAfterInitialEvents: "270 seconds"
      })
      yield* Queue.take(queue)
      // While the list arrives, its long limit: 20 minutes of silence is no death.
      yield* TestClock.adjust("20 minutes")
      yield* Effect.yieldNow()
      expect(fiber.unsafePoll()).toBeNull()
      send(bookmarkLine("9", { "k8s.io/initial-events-end": "true" }))
      expect((yield* Queue.take(queue)).type).toBe("BOOKMARK")
      // Landed: a watch's limit, counted from the bookmark.
      yield* TestClock.adjust("269 seconds")
      yield* Effect.yieldNow()
      expect(fiber.unsafePoll()).toBeNull()
      yield* TestClock.adjust("1 second")
      const exit = yield* Fiber.await(fiber)
      const error = Exit.isFailure(exit) ? Cause.failureOption(exit.cause) : Option.none()
      expect(Option.map(error, (e) => e._tag)).toEqual(Option.some("KubeWatchIdleError"))
      expect(Option.map(error, (e) => e.message)).toEqual(
        Option.some(expect.stringContaining("sent nothing for 4m 30s"))
      )
      yield* Effect.promise(() => fx.seen[0]!.abandoned)
    }))

  it.scoped("interrupting the consumer aborts the request: the server sees the connection close", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((_req, res) => {
        res.writeHead(200, { "content-type": "application/json" })
        res.write(bookmarkLine("1")) // and never ends
      })
      const { fiber, queue } = yield* watchIntoQueue(fx.url)
      expect(yield* Queue.take(queue)).toEqual({ type: "BOOKMARK", resourceVersion: "1", annotations: {} })
      yield* Fiber.interrupt(fiber)
      // Resolves only when the server's response closed unfinished: the client hung up.
      yield* Effect.promise(() => fx.seen[0]!.abandoned)
      expect(fx.seen).toHaveLength(1)
    }))

  it.scoped("openWatch: the request goes out when opened; pulls give the events, then none at the end", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((_req, res) => {
        res.writeHead(200, { "content-type": "application/json" })
        res.end(bookmarkLine("7"))
      })
      const client = yield* clientFor(fx.url)
      const pull = yield* client.openWatch(SandboxResource, Sandbox, { namespace: "ns", resourceVersion: "5" })
      // Sent before the first pull.
      expect(fx.seen.map((r) => [r.path, r.query])).toEqual([
        ["/apis/jr2.dev/v1alpha1/namespaces/ns/sandboxes", { watch: "1", resourceVersion: "5" }]
      ])
      expect(Chunk.toReadonlyArray(yield* pull)).toEqual([{ type: "BOOKMARK", resourceVersion: "7", annotations: {} }])
      expect(yield* Effect.flip(pull)).toEqual(Option.none())
    }))

  it.scoped("openWatch: closing its scope hangs up an open watch", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((_req, res) => {
        res.writeHead(200, { "content-type": "application/json" })
        res.write(bookmarkLine("1")) // and never ends
      })
      const client = yield* clientFor(fx.url)
      const first = yield* Effect.scoped(
        Effect.flatMap(client.openWatch(SandboxResource, Sandbox, { namespace: "ns" }), (pull) => pull)
      )
      expect(Chunk.toReadonlyArray(first)).toEqual([{ type: "BOOKMARK", resourceVersion: "1", annotations: {} }])
      // Resolves only when the server's response closed unfinished: the client hung up.
      yield* Effect.promise(() => fx.seen[0]!.abandoned)
    }))

  it.scoped("opens a span per watch and list with the resource, namespace and resourceVersion, passed on as traceparent", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((req, res) =>
        req.url?.includes("watch=1")
          ? sendText(res, 200, "application/json", "")
          : sendJson(res, 200, { metadata: { resourceVersion: "5" }, items: [] })
      )
      const spans: Array<Tracer.Span> = []
      const native = yield* Effect.tracer
      const tracer = Tracer.make({
        span: (...args) => {
          const span = native.span(...args)
          spans.push(span)
          return span
        },
        context: (f, fiber) => native.context(f, fiber)
      })
      const client = yield* clientFor(fx.url)
      yield* client.list(SandboxResource, Sandbox, { namespace: "ns", resourceVersion: "0" }).pipe(
        Effect.withTracer(tracer)
      )
      yield* Stream.runDrain(
        client.watch(SandboxResource, Sandbox, { namespace: "ns", labelSelector: "jr2.dev/run", resourceVersion: "5" })
      ).pipe(Effect.withTracer(tracer))
      const ours = spans.filter((s) => s.name.startsWith("KubeClient."))
      expect(ours.map((s) => [s.name, Object.fromEntries(s.attributes)])).toEqual([
        ["KubeClient.list", { resource: "jr2.dev/v1alpha1/sandboxes", namespace: "ns", resourceVersion: "0" }],
        [
          "KubeClient.watch",
          {
            resource: "jr2.dev/v1alpha1/sandboxes",
            namespace: "ns",
            labelSelector: "jr2.dev/run",
            resourceVersion: "5"
          }
        ]
      ])
      // The watch's span ends with its stream; each request carries its caller's span as W3C trace
      // context, so a traced apiserver's spans join the same trace.
      const [listSpan, watchSpan] = ours as [Tracer.Span, Tracer.Span]
      expect(watchSpan.status._tag).toBe("Ended")
      const traceparent = (span: Tracer.Span) => `00-${span.traceId}-${span.spanId}-${span.sampled ? "01" : "00"}`
      expect(fx.seen.map((request) => request.headers.traceparent)).toEqual([
        traceparent(listSpan),
        traceparent(watchSpan)
      ])
    }))
})

// -------------------------------------------------------------------------------------------------
// TLS: a throwaway CA, a server certificate for 127.0.0.1 and kube.test, a client certificate
// -------------------------------------------------------------------------------------------------

const hasOpenssl = (() => {
  try {
    execFileSync("openssl", ["version"], { stdio: "ignore" })
    return true
  } catch {
    return false
  }
})()

interface Pki {
  readonly ca: string
  readonly serverCert: string
  readonly serverKey: string
  readonly clientCert: string
  readonly clientKey: string
}

let pki: Pki | undefined
/** Generated once per run with openssl (EC keys: fast), in a fresh temporary directory. */
const makePki = (): Pki => {
  if (pki !== undefined) return pki
  const dir = mkdtempSync(join(tmpdir(), "kubeclient-tls-"))
  const at = (name: string) => join(dir, name)
  const openssl = (...args: Array<string>) => execFileSync("openssl", args, { cwd: dir, stdio: "pipe" })
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
  openssl("req", "-x509", ...ec, "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=test-ca", "-days", "1")
  const issue = (name: string, cn: string, extensions: string) => {
    openssl("req", ...ec, "-keyout", `${name}.key`, "-out", `${name}.csr`, "-subj", `/CN=${cn}`)
    writeFileSync(at(`${name}.ext`), `${extensions}\n`)
    openssl(
      "x509",
      "-req",
      "-in",
      `${name}.csr`,
      "-CA",
      "ca.crt",
      "-CAkey",
      "ca.key",
      "-CAcreateserial",
      "-out",
      `${name}.crt`,
      "-days",
      "1",
      "-extfile",
      `${name}.ext`
    )
  }
  issue("server", "kube.test", "subjectAltName=IP:127.0.0.1,DNS:kube.test")
  issue("client", "tester", "extendedKeyUsage=clientAuth")
  pki = {
    ca: readFileSync(at("ca.crt"), "utf8"),
    serverCert: readFileSync(at("server.crt"), "utf8"),
    serverKey: readFileSync(at("server.key"), "utf8"),
    clientCert: readFileSync(at("client.crt"), "utf8"),
    clientKey: readFileSync(at("client.key"), "utf8")
  }
  rmSync(dir, { recursive: true, force: true })
  return pki
}

/** An HTTPS fixture that asks for (but does not insist on) a client certificate and records its CN. */
const tlsFixture = (handler: Handler) =>
  Effect.gen(function*() {
    const keys = makePki()
    const seen: Array<Seen> = []
    const clients: Array<string | undefined> = []
    const server = https.createServer({
      key: keys.serverKey,
      cert: keys.serverCert,
      ca: keys.ca,
      requestCert: true,
      rejectUnauthorized: false
    })
    server.on("request", (req: http.IncomingMessage) => {
      const peer = (req.socket as import("node:tls").TLSSocket).getPeerCertificate()
      clients.push(typeof peer.subject?.CN === "string" ? peer.subject.CN : undefined)
    })
    attach(server, handler, seen)
    const url = yield* listen(server, "https")
    return { url, seen, clients, keys }
  })

const tlsClient = (server: string, tls: Partial<KubeConfig.ClusterTls>) =>
  KubeClient.make().pipe(
    Effect.provide(
      Layer.succeed(KubeConfig.KubeConfig, {
        server,
        namespace: Option.none(),
        tls: { ...KubeConfig.defaultTls, ...tls },
        authorization: Effect.succeed(Option.none()),
        invalidate: Effect.void,
        source: "test"
      })
    )
  )

const emptyList = (_req: http.IncomingMessage, res: http.ServerResponse) =>
  sendJson(res, 200, { metadata: { resourceVersion: "3" }, items: [] })

// Skipped only where openssl, which makes the certificates, is not installed.
describe.skipIf(!hasOpenssl)("KubeClient over TLS", () => {
  it.scoped("trusts the kubeconfig's CA and presents the client certificate", () =>
    Effect.gen(function*() {
      const fx = yield* tlsFixture(emptyList)
      const client = yield* tlsClient(fx.url, {
        ca: Option.some(fx.keys.ca),
        clientCertificate: Option.some(fx.keys.clientCert),
        clientKey: Option.some(Redacted.make(fx.keys.clientKey))
      })
      const page = yield* client.list(SandboxResource, Sandbox, { namespace: "ns" })
      expect(page.resourceVersion).toBe("3")
      expect(fx.clients).toEqual(["tester"])
    }))

  it.scoped("refuses a server its CA bundle does not vouch for, with a transport error that says it is the CA", () =>
    Effect.gen(function*() {
      const fx = yield* tlsFixture(emptyList)
      const client = yield* tlsClient(fx.url, {})
      const error = yield* failure(client.list(SandboxResource, Sandbox, { namespace: "ns" }))
      expect(error._tag).toBe("KubeTransportError")
      expect(error.message).toMatch(
        new RegExp(
          `^GET ${Collection} to ${fx.url} got no answer: the server's certificate is not signed by the system's ` +
            "CA roots \\(test names no CA\\); give the cluster's CA \\(.*(certificate|UNABLE_TO_GET_ISSUER).*\\)$"
        )
      )
      // Another cluster's CA: the same, naming where that CA came from.
      const otherCa = readFileSync(new URL("./fixtures/kubeconfig/pki/ca.pem", import.meta.url), "utf8")
      const wrong = yield* tlsClient(fx.url, { ca: Option.some(otherCa) })
      const wrongError = yield* failure(wrong.list(SandboxResource, Sandbox, { namespace: "ns" }))
      expect(wrongError.message).toMatch(
        new RegExp(
          `^GET ${Collection} to ${fx.url} got no answer: the server's certificate is not signed by the CA ` +
            "of test; is it this cluster's CA\\? \\(.*\\)$"
        )
      )
      expect(wrongError.message).not.toContain("\n")
      expect(fx.seen).toEqual([])
    }))

  it.scoped("skips verification only when told to", () =>
    Effect.gen(function*() {
      const fx = yield* tlsFixture(emptyList)
      const client = yield* tlsClient(fx.url, { insecureSkipTlsVerify: true })
      expect((yield* client.list(SandboxResource, Sandbox, { namespace: "ns" })).resourceVersion).toBe("3")
      expect(fx.clients).toEqual([undefined])
    }))

  it.scoped("verifies the server against tls-server-name when the kubeconfig sets one", () =>
    Effect.gen(function*() {
      const fx = yield* tlsFixture(emptyList)
      const right = yield* tlsClient(fx.url, { ca: Option.some(fx.keys.ca), serverName: Option.some("kube.test") })
      expect((yield* right.list(SandboxResource, Sandbox, { namespace: "ns" })).resourceVersion).toBe("3")
      const wrong = yield* tlsClient(fx.url, { ca: Option.some(fx.keys.ca), serverName: Option.some("other.test") })
      const error = yield* failure(wrong.list(SandboxResource, Sandbox, { namespace: "ns" }))
      expect(error._tag).toBe("KubeTransportError")
      expect(error.message).toContain("other.test")
    }))
})

// -------------------------------------------------------------------------------------------------
// Writes, through the layer
// -------------------------------------------------------------------------------------------------

describe("KubeClient writes", () => {
  it.scoped("get, create, replace (status), mergePatch and delete send JSON and return what came back", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((req, res, seen) =>
        sendJson(res, req.method === "POST" ? 201 : 200, {
          echo: seen.method,
          body: seen.body === "" ? null : JSON.parse(seen.body)
        })
      )
      const object = sandbox("a", "1")
      // Through the layer: the client lives in the layer's scope, around the requests.
      const results = yield* Effect.gen(function*() {
        const client = yield* KubeClient.KubeClient
        return [
          yield* client.get(SandboxResource, "ns", "a"),
          yield* client.create(SandboxResource, "ns", object),
          yield* client.replace(SandboxResource, "ns", "a", object),
          yield* client.replace(SandboxResource, "ns", "a", object, { subresource: "status" }),
          yield* client.mergePatch(SandboxResource, "ns", "a", { metadata: { labels: { x: "y" } } }),
          yield* client.delete(SandboxResource, "ns", "a")
        ]
      }).pipe(
        Effect.provide(KubeClient.layer.pipe(Layer.provide(KubeConfig.layerStatic({ server: fx.url, token: Token }))))
      )
      expect(fx.seen.map((s) => [s.method, s.path, s.headers["content-type"] ?? null])).toEqual([
        ["GET", `${Collection}/a`, null],
        ["POST", Collection, "application/json"],
        ["PUT", `${Collection}/a`, "application/json"],
        ["PUT", `${Collection}/a/status`, "application/json"],
        ["PATCH", `${Collection}/a`, "application/merge-patch+json"],
        ["DELETE", `${Collection}/a`, null]
      ])
      expect(results).toEqual([
        { echo: "GET", body: null },
        { echo: "POST", body: object },
        { echo: "PUT", body: object },
        { echo: "PUT", body: object },
        { echo: "PATCH", body: { metadata: { labels: { x: "y" } } } },
        { echo: "DELETE", body: null }
      ])
    }))
})

describe("KubeClient: values nested deep enough to overflow a recursive walk", () => {
  const deep = (depth: number) => "[".repeat(depth) + "]".repeat(depth)
  const withDeep = (text: string, depth: number) => text.replace("\"DEEP\"", deep(depth))
  for (const depth of [2_000, 10_000, 100_000]) {
    it.scoped(`depth ${depth}: a list item, a watch event and a bookmark are read; the misfit is UNDECODABLE, briefly`, () =>
      Effect.gen(function*() {
        const fx = yield* fixture((req, res) => {
          res.writeHead(200, { "content-type": "application/json" })
          if (!(req.url ?? "").includes("watch=")) {
            return res.end(withDeep(
              JSON.stringify({
                metadata: { resourceVersion: "20" },
                items: [sandbox("a", "18"), sandbox("bad", "19", "DEEP")]
              }),
              depth
            ))
          }
          res.write(withDeep(line({ type: "MODIFIED", object: sandbox("bad", "21", "DEEP") }), depth))
          res.write(withDeep(bookmarkLine("22", { odd: "DEEP" }), depth))
          res.end(line({ type: "ADDED", object: sandbox("c", "23") }))
        })
        const client = yield* clientFor(fx.url)
        const page = yield* client.list(SandboxResource, Sandbox, { namespace: "ns" })
        expect(page.items).toEqual([decoded("a", "18")])
        expect(page.undecodable.map((u) => [u.name, u.resourceVersion])).toEqual([["bad", "19"]])
        const problem = page.undecodable[0]!.problem
        expect(problem.startsWith("status.phase: Expected string, actual [[[[")).toBe(true)
        expect(problem.length).toBeLessThanOrEqual(160)
        const events = Chunk.toReadonlyArray(
          yield* Stream.runCollect(client.watch(SandboxResource, Sandbox, { namespace: "ns" }))
        )
        expect(events.map((e) => e.type)).toEqual(["UNDECODABLE", "BOOKMARK", "ADDED"])
        expect(events[0]).toMatchObject({ eventType: "MODIFIED", name: "bad", resourceVersion: "21" })
        expect((events[0] as Extract<WatchEvent<Sandbox>, { type: "UNDECODABLE" }>).problem.length)
          .toBeLessThanOrEqual(160)
        expect(events[1]).toEqual({ type: "BOOKMARK", resourceVersion: "22", annotations: {} })
        expect(events[2]).toMatchObject({ type: "ADDED", name: "c" })
      }))
  }
})

describe("KubeClient: every body bounded", () => {
  /** Writes `chunk` for as long as the client reads; resolves with the bytes written once the socket closes. */
  const endless = (res: http.ServerResponse, chunk: Buffer) =>
    new Promise<number>((resolve) => {
      let written = 0
      let closed = false
      res.on("close", () => {
        closed = true
        resolve(written)
      })
      // One chunk a turn: a write after the client hung up may still return true, and a loop that
      // never yields would never hear the close.
      const pump = () => {
        if (closed) return
        written += chunk.length
        if (res.write(chunk)) setImmediate(pump)
        else res.once("drain", pump)
      }
      pump()
    })

  it.scoped("a list page that never ends stops at maxListPageBytes: a typed error with the number, the connection closed", () =>
    Effect.gen(function*() {
      const closed = yield* Deferred.make<number>()
      const fx = yield* fixture(async (_req, res) => {
        res.writeHead(200, { "content-type": "application/json" })
        res.write("{\"kind\":\"SandboxList\",\"metadata\":{\"resourceVersion\":\"1\"},\"items\":[")
        Deferred.unsafeDone(closed, Exit.succeed(await endless(res, Buffer.alloc(64 * 1024, " "))))
      })
      const client = yield* clientFor(fx.url, { maxListPageBytes: 4 * 1024 * 1024 })
      const error = yield* Effect.flip(client.list(SandboxResource, Sandbox, { namespace: "ns" }))
      expect(error._tag).toBe("KubeBodyTooLargeError")
      expect(error).toMatchObject({ limit: 4 * 1024 * 1024, unit: "bytes" })
      expect(error.message).toContain("more than 4194304 bytes")
      expect(error.message).toContain("raise KubeClientOptions.maxListPageBytes, the program's --max-list-page-bytes")
      // The server saw its connection closed, well before it could write much past the limit.
      expect(yield* Deferred.await(closed)).toBeLessThan(64 * 1024 * 1024)
    }))

  it.scoped("a 500 whose body never ends: its first bytes make the message, the rest is not read", () =>
    Effect.gen(function*() {
      const closed = yield* Deferred.make<number>()
      const fx = yield* fixture(async (_req, res) => {
        res.writeHead(500, { "content-type": "text/plain" })
        res.write("upstream exploded: ")
        Deferred.unsafeDone(closed, Exit.succeed(await endless(res, Buffer.alloc(64 * 1024, "x"))))
      })
      const client = yield* clientFor(fx.url, { maxErrorBodyBytes: 1024 })
      const error = yield* Effect.flip(client.list(SandboxResource, Sandbox, { namespace: "ns" }))
      expect(error._tag).toBe("KubeStatusError")
      expect((error as KubeError.KubeStatusError).code).toBe(500)
      expect(error.message).toContain("upstream exploded")
      expect(yield* Deferred.await(closed)).toBeLessThan(64 * 1024 * 1024)
    }))

  it.scoped("a 500 labelled JSON whose body is cut at maxErrorBodyBytes is said so, not called plain text", () =>
    Effect.gen(function*() {
      const fx = yield* fixture(async (_req, res) => {
        res.writeHead(500, { "content-type": "application/json" })
        res.write("{\"kind\":\"Status\",\"message\":\"")
        await endless(res, Buffer.alloc(64 * 1024, "x"))
      })
      const client = yield* clientFor(fx.url, { maxErrorBodyBytes: 1024 })
      const error = yield* Effect.flip(client.list(SandboxResource, Sandbox, { namespace: "ns" }))
      expect(error.message).toContain("answered 500 with a body labelled JSON that does not parse")
    }))

  it.scoped("a list whose continue never ends stops at maxListPages, with a typed error that says so", () =>
    Effect.gen(function*() {
      let served = 0
      const fx = yield* fixture((_req, res) => {
        served++
        sendJson(res, 200, {
          kind: "SandboxList",
          metadata: { resourceVersion: "1", continue: `token-${served}` },
          items: [{ apiVersion: "jr2.dev/v1alpha1", kind: "Sandbox", metadata: { name: `s${served}` } }]
        })
      })
      const client = yield* clientFor(fx.url, { maxListPages: 5 })
      const error = yield* Effect.flip(client.listAll(SandboxResource, Sandbox, { namespace: "ns", limit: 1 }))
      expect(error).toMatchObject({ _tag: "KubeBodyTooLargeError", limit: 5, unit: "pages" })
      expect(error.message).toContain("went past 5 pages")
      // Five pages and the one asked ahead, then nothing more.
      expect(served).toBeLessThanOrEqual(7)
    }))

  it.scoped("a list of more items than maxListItems is abandoned the same way", () =>
    Effect.gen(function*() {
      const items = Array.from({ length: 30 }, (_, i) => ({
        apiVersion: "jr2.dev/v1alpha1",
        kind: "Sandbox",
        metadata: { name: `s${i}` }
      }))
      const fx = yield* fixture((_req, res) =>
        sendJson(res, 200, { kind: "SandboxList", metadata: { resourceVersion: "1" }, items })
      )
      const client = yield* clientFor(fx.url, { maxListItems: 20 })
      const error = yield* Effect.flip(client.listAll(SandboxResource, Sandbox, { namespace: "ns" }))
      expect(error).toMatchObject({ _tag: "KubeBodyTooLargeError", limit: 20, unit: "items" })
    }))

  /** A Sandbox whose Ready condition's message is `size` characters: kept by the schema, as a server's bloat would be. */
  const heavy = (name: string, resourceVersion: string, size: number) => ({
    apiVersion: "jr2.dev/v1alpha1",
    kind: "Sandbox",
    metadata: { name, namespace: "ns", resourceVersion },
    status: { phase: "Pending", conditions: [{ type: "Ready", status: "False", message: "m".repeat(size) }] }
  })

  it.scoped("a list holding more JSON than maxListBytes is abandoned: a typed error in bytes that names the flag", () =>
    Effect.gen(function*() {
      let served = 0
      const fx = yield* fixture((_req, res) => {
        served++
        // 10 KB objects, one a page, the continue token never ending: 5 pages pass a 40,000-byte budget.
        sendJson(res, 200, {
          kind: "SandboxList",
          metadata: { resourceVersion: "1", continue: `token-${served}` },
          items: [heavy(`s${served}`, String(served), 10_000)]
        })
      })
      const client = yield* clientFor(fx.url, { maxListBytes: 40_000, maxListPages: 50 })
      const error = yield* Effect.flip(client.listAll(SandboxResource, Sandbox, { namespace: "ns", limit: 1 }))
      expect(error).toMatchObject({ _tag: "KubeBodyTooLargeError", limit: 40_000, unit: "bytes" })
      expect(error.message).toContain("went past 39.1 KiB (40000 bytes) of JSON held")
      expect(error.message).toContain("bytes in 4 objects")
      expect(error.message).toContain("KubeClientOptions.maxListBytes raised: --max-list-bytes")
      // Four pages held, the fifth past the budget, and the one asked ahead: then nothing more.
      expect(served).toBeLessThanOrEqual(6)
    }))

  it.scoped("objects that do not decode count against maxListBytes too: pages of long-named ones are abandoned", () =>
    Effect.gen(function*() {
      let served = 0
      const fx = yield* fixture((_req, res) => {
        served++
        // One a page, its name 10,000 characters (kept as the undecodable's name), the continue
        // token never ending: 5 pages pass a 40,000-byte budget long before the 50 pages do.
        sendJson(res, 200, {
          kind: "SandboxList",
          metadata: { resourceVersion: "1", continue: `token-${served}` },
          items: [{
            apiVersion: "jr2.dev/v1alpha1",
            kind: "Sandbox",
            metadata: { name: `${served}-${"n".repeat(10_000)}`, resourceVersion: String(served) },
            status: { phase: 42 }
          }]
        })
      })
      const client = yield* clientFor(fx.url, { maxListBytes: 40_000, maxListPages: 50 })
      const error = yield* Effect.flip(client.listAll(SandboxResource, Sandbox, { namespace: "ns", limit: 1 }))
      expect(error).toMatchObject({ _tag: "KubeBodyTooLargeError", limit: 40_000, unit: "bytes" })
      expect(error.message).toContain("bytes in 4 objects")
      expect(served).toBeLessThanOrEqual(6)
    }))

  it.scoped("a name sent again gives its bytes back: pages that repeat large objects stay within maxListBytes", () =>
    Effect.gen(function*() {
      const fx = yield* pagesByToken({
        "": { metadata: { resourceVersion: "100", continue: "c1" }, items: [heavy("a", "1", 10_000)] },
        c1: { metadata: { resourceVersion: "101", continue: "c2" }, items: [heavy("a", "2", 10_000)] },
        c2: { metadata: { resourceVersion: "102", continue: "c3" }, items: [heavy("a", "3", 10_000)] },
        c3: { metadata: { resourceVersion: "103", continue: "" }, items: [heavy("b", "4", 10_000)] }
      })
      const client = yield* clientFor(fx.url, { maxListBytes: 25_000 })
      const all = yield* client.listAll(SandboxResource, Sandbox, { namespace: "ns", limit: 1 })
      expect(all.items.map((s) => `${s.metadata.name}@${s.metadata.resourceVersion}`)).toEqual(["a@3", "b@4"])
    }))

  it.scoped("a watch event carries the length of the line its object was read from, managedFields left out", () =>
    Effect.gen(function*() {
      const fx = yield* fixture((_req, res) => {
        res.writeHead(200, { "content-type": "application/json" })
        res.end(
          line({ type: "ADDED", object: sandbox("a", "7") }) + line({ type: "ADDED", object: heavy("b", "8", 5_000) })
        )
      })
      const client = yield* clientFor(fx.url)
      const events = Chunk.toReadonlyArray(
        yield* Stream.runCollect(client.watch(SandboxResource, Sandbox, { namespace: "ns" }))
      )
      const { managedFields: _cut, ...metadata } = sandbox("a", "7").metadata
      expect(events.map((e) => (e.type === "ADDED" ? e.bytes : undefined))).toEqual([
        JSON.stringify({ type: "ADDED", object: { ...sandbox("a", "7"), metadata } }).length,
        JSON.stringify({ type: "ADDED", object: heavy("b", "8", 5_000) }).length
      ])
    }))

  it.scoped("a 200 HTML page or an unasked-for gzip body names its content-type and content-encoding", () =>
    Effect.gen(function*() {
      const html = yield* fixture((_req, res) => sendText(res, 200, "text/html", "<html>Sign in to the proxy</html>"))
      const htmlError = yield* Effect.flip(
        (yield* clientFor(html.url)).list(SandboxResource, Sandbox, { namespace: "ns" })
      )
      expect(htmlError._tag).toBe("KubeMalformedBodyError")
      expect(htmlError.message).toContain("not JSON (content-type text/html: likely a proxy or load balancer")
      const gzip = yield* fixture((_req, res) =>
        sendText(res, 200, "application/json", "\u001f\u008b\u0008binary", { "content-encoding": "gzip" })
      )
      const gzipError = yield* Effect.flip(
        (yield* clientFor(gzip.url)).list(SandboxResource, Sandbox, { namespace: "ns" })
      )
      expect(gzipError.message).toContain("content-type application/json, content-encoding gzip")
    }))
})
