/**
 * The simulated apiserver, over real HTTP on loopback with Node's `fetch`: each wire shape the real
 * apiserver sends, paging, selectors, watches (replay, bookmarks, timeouts, selector leave/enter,
 * initial events, 410 inside a 200) and every fault. Timers run on `TestClock`; every wait is for an
 * event (a line, a request, a registered watch), never for wall time.
 */
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Context, Duration, Effect, Either, Exit, Layer, Option, Redacted, Scope, TestClock } from "effect"
import { parseFieldSelector, parseLabelSelector } from "../src/internal/labelSelector.ts"
import * as KubeConfig from "../src/KubeConfig.ts"
import { SandboxResource } from "../src/Sandbox.ts"
import * as Sim from "../src/SimulatedApiServer.ts"

const collectionPath = "/apis/jr2.dev/v1alpha1/namespaces/ns/sandboxes"

interface Reply {
  readonly status: number
  readonly headers: Headers
  readonly body: string
}

const send = (url: string, init?: RequestInit): Effect.Effect<Reply> =>
  Effect.promise(async () => {
    const response = await fetch(url, init)
    return { status: response.status, headers: response.headers, body: await response.text() }
  })

const json = (method: string, url: string, body: unknown, contentType = "application/json") =>
  send(url, { method, body: JSON.stringify(body), headers: { "content-type": contentType } })

/** What reading a watch body gave: a whole line, the clean end, or the connection failing. */
type Read =
  | { readonly _tag: "Line"; readonly text: string }
  | { readonly _tag: "End"; readonly rest: string }
  | { readonly _tag: "Failed"; readonly rest: string }

interface WatchReader {
  readonly status: number
  readonly headers: Headers
  readonly next: Effect.Effect<Read>
  /** Resolves to the next line, or fails the test with what came instead. */
  readonly line: Effect.Effect<string>
  readonly json: Effect.Effect<{ type: string; object: any }>
}

/** Opens a watch (or any streaming GET) and reads it a line at a time; aborted with the scope. */
const openStream = (url: string, headers?: Record<string, string>) =>
  Effect.gen(function*() {
    const controller = new AbortController()
    yield* Effect.addFinalizer(() => Effect.sync(() => controller.abort()))
    const response = yield* Effect.promise(() =>
      fetch(url, { signal: controller.signal, ...(headers === undefined ? {} : { headers }) })
    )
    const reader = response.body!.getReader()
    const decoder = new TextDecoder()
    // A pump owns the socket; `next` only takes from what it has buffered, so a read that loses a
    // race (and is abandoned) never swallows a line.
    let buffer = ""
    let finished: "End" | "Failed" | undefined
    let wake: () => void = () => {}
    void (async () => {
      try {
        for (;;) {
          const chunk = await reader.read()
          if (chunk.done) break
          buffer += decoder.decode(chunk.value, { stream: true })
          wake()
        }
        finished = "End"
      } catch {
        finished = "Failed"
      }
      wake()
    })()
    const next: Effect.Effect<Read> = Effect.promise(async (): Promise<Read> => {
      for (;;) {
        const newline = buffer.indexOf("\n")
        if (newline !== -1) {
          const text = buffer.slice(0, newline + 1)
          buffer = buffer.slice(newline + 1)
          return { _tag: "Line", text }
        }
        if (finished !== undefined) return { _tag: finished, rest: buffer }
        await new Promise<void>((resolve) => {
          wake = resolve
        })
      }
    })
    const line = Effect.flatMap(next, (read) =>
      read._tag === "Line"
        ? Effect.succeed(read.text)
        : Effect.dieMessage(`expected a line, got ${JSON.stringify(read)}`))
    const reader_: WatchReader = {
      status: response.status,
      headers: response.headers,
      next,
      line,
      json: Effect.map(line, (text) => JSON.parse(text))
    }
    return reader_
  })

/** Waits until the server's timers have registered `count` sleeps on the TestClock. */
const awaitSleeps = (count: number) =>
  Effect.gen(function*() {
    while (Chunk.size(yield* TestClock.sleeps()) < count) {
      // Yield to Node's event loop (not to wall time) so the server's fibers and sockets progress.
      yield* Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve)))
    }
  })

const serverLayer = (options?: Partial<Sim.Options>) =>
  Sim.layer({ resource: SandboxResource, namespace: "ns", ...options })

/** Runs a test body against a fresh server. */
const withServer = <A, E, R>(
  body: (server: Sim.SimulatedApiServerService) => Effect.Effect<A, E, R>,
  options?: Partial<Sim.Options>
) => Effect.flatMap(Sim.SimulatedApiServer, body).pipe(Effect.provide(serverLayer(options)))

const names = (listBody: string): Array<string> =>
  (JSON.parse(listBody).items as Array<{ metadata: { name: string } }>).map((item) => item.metadata.name)

const seed = (
  server: Sim.SimulatedApiServerService,
  items: ReadonlyArray<readonly [string, Record<string, string>?]>
) =>
  Effect.forEach(
    items,
    ([name, labels]) =>
      server.create({ metadata: { name, ...(labels === undefined ? {} : { labels }) }, spec: { repos: [] } }),
    { discard: true }
  )

describe("SimulatedApiServer: objects", () => {
  it.scoped("creates over HTTP: 201, server-set metadata, status dropped, keys sorted like a Go map", () =>
    withServer((server) =>
      Effect.gen(function*() {
        const reply = yield* json("POST", server.url + collectionPath, {
          apiVersion: "jr2.dev/v1alpha1",
          kind: "Sandbox",
          metadata: { name: "a", labels: { "jr2.dev/run": "r1" } },
          spec: { repos: [{ key: "k", url: "u" }] },
          status: { phase: "Ready" }
        })
        expect(reply.status).toBe(201)
        expect(reply.headers.get("content-type")).toBe("application/json")
        expect(reply.body.endsWith("}\n")).toBe(true)
        const object = JSON.parse(reply.body)
        expect(Object.keys(object)).toEqual(["apiVersion", "kind", "metadata", "spec"])
        expect(Object.keys(object.metadata)).toEqual([
          "creationTimestamp",
          "generation",
          "labels",
          "managedFields",
          "name",
          "namespace",
          "resourceVersion",
          "uid"
        ])
        expect(object.metadata.creationTimestamp).toBe("1970-01-01T00:00:00Z")
        expect(object.metadata.generation).toBe(1)
        expect(object.metadata.namespace).toBe("ns")
        expect(object.metadata.resourceVersion).toBe("2")
        expect(object.metadata.uid).toMatch(/^[0-9a-f-]{36}$/)
        expect(object.status).toBeUndefined()
        expect(yield* server.resourceVersion).toBe("2")
      })
    ))

  it.scoped("create of a taken name is 409 AlreadyExists; get of a missing one is 404 NotFound", () =>
    withServer((server) =>
      Effect.gen(function*() {
        yield* seed(server, [["a"]])
        const again = yield* json("POST", server.url + collectionPath, { metadata: { name: "a" } })
        expect(again.status).toBe(409)
        expect(again.body).toBe(
          `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"sandboxes.jr2.dev \\"a\\" already exists","reason":"AlreadyExists","details":{"name":"a","group":"jr2.dev","kind":"sandboxes"},"code":409}\n`
        )
        const missing = yield* send(`${server.url}${collectionPath}/nope`)
        expect(missing.status).toBe(404)
        expect(missing.body).toBe(
          `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"sandboxes.jr2.dev \\"nope\\" not found","reason":"NotFound","details":{"name":"nope","group":"jr2.dev","kind":"sandboxes"},"code":404}\n`
        )
        const unknownPath = yield* send(`${server.url}/apis/other.dev/v1/namespaces/ns/things`)
        expect(unknownPath.status).toBe(404)
        expect(JSON.parse(unknownPath.body).message).toBe("the server could not find the requested resource")
      })
    ))

  it.scoped("PUT needs the current resourceVersion (409 Conflict when stale, 422 when absent) and ignores status", () =>
    withServer((server) =>
      Effect.gen(function*() {
        const created = yield* server.create({
          metadata: { name: "a" },
          spec: { repos: [] },
          status: { phase: "Pending" }
        })
        const url = `${server.url}${collectionPath}/a`
        const stale = yield* json("PUT", url, { metadata: { name: "a", resourceVersion: "1" }, spec: {} })
        expect(stale.status).toBe(409)
        expect(stale.body).toBe(
          `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Operation cannot be fulfilled on sandboxes.jr2.dev \\"a\\": the object has been modified; please apply your changes to the latest version and try again","reason":"Conflict","details":{"name":"a","group":"jr2.dev","kind":"sandboxes"},"code":409}\n`
        )
        const unconditional = yield* json("PUT", url, { metadata: { name: "a" }, spec: {} })
        expect(unconditional.status).toBe(422)
        expect(JSON.parse(unconditional.body).message).toBe(
          `Sandbox.jr2.dev "a" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update`
        )
        const ok = yield* json("PUT", url, {
          metadata: { name: "a", resourceVersion: created.metadata.resourceVersion },
          spec: { repos: [{ key: "k" }] },
          status: { phase: "Ready" }
        })
        expect(ok.status).toBe(200)
        const updated = JSON.parse(ok.body)
        expect(updated.metadata.resourceVersion).toBe("3")
        expect(updated.metadata.generation).toBe(2)
        expect(updated.metadata.uid).toBe(created.metadata.uid)
        expect(updated.spec).toEqual({ repos: [{ key: "k" }] })
        expect(updated.status).toEqual({ phase: "Pending" })
      })
    ))

  it.scoped("merge patch of the object ignores status; of .../status changes only status and not generation", () =>
    withServer((server) =>
      Effect.gen(function*() {
        yield* server.create({ metadata: { name: "a" }, spec: { repos: [] } })
        const url = `${server.url}${collectionPath}/a`
        const wrongType = yield* json(
          "PATCH",
          url,
          { metadata: { labels: { x: "1" } } },
          "application/strategic-merge-patch+json"
        )
        expect(wrongType.status).toBe(415)
        expect(JSON.parse(wrongType.body).reason).toBe("UnsupportedMediaType")
        const labels = yield* json(
          "PATCH",
          url,
          { metadata: { labels: { x: "1" } }, status: { phase: "Ready" } },
          "application/merge-patch+json"
        )
        expect(labels.status).toBe(200)
        expect(JSON.parse(labels.body).metadata.labels).toEqual({ x: "1" })
        expect(JSON.parse(labels.body).metadata.generation).toBe(1)
        expect(JSON.parse(labels.body).status).toBeUndefined()
        const status = yield* json(
          "PATCH",
          `${url}/status`,
          { metadata: { labels: { y: "2" } }, spec: { repos: [{ key: "ignored" }] }, status: { phase: "Ready" } },
          "application/merge-patch+json"
        )
        expect(status.status).toBe(200)
        const object = JSON.parse(status.body)
        expect(object.status).toEqual({ phase: "Ready" })
        expect(object.metadata.labels).toEqual({ x: "1" })
        expect(object.spec).toEqual({ repos: [] })
        expect(object.metadata.generation).toBe(1)
        expect(object.metadata.resourceVersion).toBe("4")
        const statusPut = yield* json("PUT", `${url}/status`, {
          metadata: { name: "a", resourceVersion: "4" },
          status: { phase: "Lost" }
        })
        expect(statusPut.status).toBe(200)
        expect(JSON.parse(statusPut.body).status).toEqual({ phase: "Lost" })
        const specPatch = yield* json("PATCH", url, { spec: { repos: [{ key: "k" }] } }, "application/merge-patch+json")
        expect(JSON.parse(specPatch.body).metadata.generation).toBe(2)
        const stalePatch = yield* json(
          "PATCH",
          url,
          { metadata: { resourceVersion: "2" }, spec: {} },
          "application/merge-patch+json"
        )
        expect(stalePatch.status).toBe(409)
      })
    ))

  it.scoped("a no-op write makes no new resourceVersion; delete answers a Success Status; finalizers hold a delete", () =>
    withServer((server) =>
      Effect.gen(function*() {
        const created = yield* server.create({ metadata: { name: "a" }, spec: { repos: [] } })
        const same = yield* server.mergePatch("a", { spec: { repos: [] } })
        expect(same.metadata.resourceVersion).toBe(created.metadata.resourceVersion)
        const deleted = yield* send(`${server.url}${collectionPath}/a`, { method: "DELETE" })
        expect(deleted.status).toBe(200)
        // As kube-apiserver 1.20 answers for a custom resource (checked by test/apiserver/differential).
        expect(deleted.body).toBe(
          `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","details":{"name":"a","group":"jr2.dev","kind":"sandboxes","uid":"${created.metadata.uid}"}}\n`
        )
        expect(yield* server.get("a")).toEqual(Option.none())
        expect(yield* server.resourceVersion).toBe("3")

        yield* server.create({ metadata: { name: "f", finalizers: ["jr2.dev/cleanup"] } })
        const marked = yield* server.delete("f")
        expect(marked.metadata.deletionTimestamp).toBe("1970-01-01T00:00:00Z")
        expect(Option.isSome(yield* server.get("f"))).toBe(true)
        yield* server.mergePatch("f", { metadata: { finalizers: null } })
        expect(yield* server.get("f")).toEqual(Option.none())
        const error = yield* Effect.flip(server.delete("f"))
        expect(error).toEqual(
          new Sim.SimulatedWriteError({ code: 404, reason: "NotFound", message: `sandboxes.jr2.dev "f" not found` })
        )
      })
    ))
})

describe("SimulatedApiServer: list", () => {
  it.scoped("a list body: apiVersion, items (with apiVersion and kind), kind, metadata with continue \"\"", () =>
    withServer((server) =>
      Effect.gen(function*() {
        yield* seed(server, [["b"], ["a"]])
        const reply = yield* send(server.url + collectionPath)
        expect(reply.status).toBe(200)
        expect(reply.headers.get("content-type")).toBe("application/json")
        const list = JSON.parse(reply.body)
        expect(Object.keys(list)).toEqual(["apiVersion", "items", "kind", "metadata"])
        expect(list.apiVersion).toBe("jr2.dev/v1alpha1")
        expect(list.kind).toBe("SandboxList")
        expect(list.metadata).toEqual({ continue: "", resourceVersion: "3" })
        expect(list.items.map((i: any) => [i.apiVersion, i.kind, i.metadata.name])).toEqual([
          ["jr2.dev/v1alpha1", "Sandbox", "a"],
          ["jr2.dev/v1alpha1", "Sandbox", "b"]
        ])
      })
    ))

  it.scoped("pages with limit/continue are one snapshot at the first page's resourceVersion", () =>
    withServer((server) =>
      Effect.gen(function*() {
        yield* seed(server, [["a"], ["b"], ["c"], ["d"], ["e"]])
        const page1 = JSON.parse((yield* send(`${server.url}${collectionPath}?limit=2`)).body)
        expect(page1.items.map((i: any) => i.metadata.name)).toEqual(["a", "b"])
        expect(page1.metadata.resourceVersion).toBe("6")
        expect(page1.metadata.remainingItemCount).toBe(3)
        expect(Object.keys(page1.metadata)).toEqual(["continue", "remainingItemCount", "resourceVersion"])
        expect(JSON.parse(Buffer.from(page1.metadata.continue, "base64url").toString())).toEqual({
          v: "meta.k8s.io/v1",
          rv: 6,
          start: "b\u0000"
        })
        // Writes between pages do not show in the rest of this list.
        yield* server.delete("d")
        yield* server.create({ metadata: { name: "c2" } })
        yield* server.mergePatch("e", { metadata: { labels: { late: "yes" } } })
        const page2 = JSON.parse(
          (yield* send(`${server.url}${collectionPath}?limit=2&continue=${page1.metadata.continue}`)).body
        )
        expect(page2.items.map((i: any) => i.metadata.name)).toEqual(["c", "d"])
        expect(page2.metadata.resourceVersion).toBe("6")
        expect(page2.metadata.remainingItemCount).toBe(1)
        const page3 = JSON.parse(
          (yield* send(`${server.url}${collectionPath}?limit=2&continue=${page2.metadata.continue}`)).body
        )
        expect(page3.items.map((i: any) => [i.metadata.name, i.metadata.labels])).toEqual([["e", undefined]])
        expect(page3.metadata).toEqual({ continue: "", resourceVersion: "6" })
      })
    ))

  it.scoped("a continue token older than the history window is 410 Expired, with an inconsistent token to go on", () =>
    withServer(
      (server) =>
        Effect.gen(function*() {
          yield* seed(server, [["a"], ["b"], ["c"]])
          const page1 = JSON.parse((yield* send(`${server.url}${collectionPath}?limit=1`)).body)
          yield* seed(server, [["d"], ["e"], ["f"], ["g"]]) // the window of 3 now starts after rv 5
          const reply = yield* send(`${server.url}${collectionPath}?limit=1&continue=${page1.metadata.continue}`)
          expect(reply.status).toBe(410)
          const token = Buffer.from(JSON.stringify({ v: "meta.k8s.io/v1", rv: -1, start: "a\u0000" })).toString(
            "base64url"
          )
          expect(reply.body).toBe(
            `{"kind":"Status","apiVersion":"v1","metadata":{"continue":"${token}"},"status":"Failure","message":"The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.","reason":"Expired","code":410}\n`
          )
          const rest = yield* send(`${server.url}${collectionPath}?continue=${token}`)
          expect(names(rest.body)).toEqual(["b", "c", "d", "e", "f", "g"])
          expect(JSON.parse(rest.body).metadata.resourceVersion).toBe("8")
          const garbage = yield* send(`${server.url}${collectionPath}?continue=not-a-token`)
          expect(garbage.status).toBe(400)
          expect(JSON.parse(garbage.body).reason).toBe("BadRequest")
          const withVersion = yield* send(`${server.url}${collectionPath}?continue=${token}&resourceVersion=5`)
          expect(withVersion.status).toBe(400)
          expect(JSON.parse(withVersion.body).message).toBe(
            "specifying resource version is not allowed when using continue"
          )
        }),
      { historySize: 3 }
    ))

  it.scoped("label selectors: =, ==, !=, exists, !exists, in, notin, comma as AND; a bad one is 400", () =>
    withServer((server) =>
      Effect.gen(function*() {
        yield* seed(server, [
          ["a", { env: "prod", tier: "web" }],
          ["b", { env: "dev", tier: "web" }],
          ["c", { env: "test" }],
          ["d", {}]
        ])
        const select = (selector: string) =>
          Effect.map(send(`${server.url}${collectionPath}?labelSelector=${encodeURIComponent(selector)}`), (r) =>
            names(r.body))
        expect(yield* select("env=prod")).toEqual(["a"])
        expect(yield* select("env==dev")).toEqual(["b"])
        expect(yield* select("env!=prod")).toEqual(["b", "c", "d"])
        expect(yield* select("tier")).toEqual(["a", "b"])
        expect(yield* select("!tier")).toEqual(["c", "d"])
        expect(yield* select("env in (dev, test)")).toEqual(["b", "c"])
        expect(yield* select("env notin (dev,test)")).toEqual(["a", "d"])
        expect(yield* select("tier=web,env!=dev")).toEqual(["a"])
        expect(yield* select("")).toEqual(["a", "b", "c", "d"])
        const bad = yield* send(`${server.url}${collectionPath}?labelSelector=${encodeURIComponent("env in prod")}`)
        expect(bad.status).toBe(400)
        expect(bad.body).toBe(
          `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"unable to parse requirement: found 'prod' expected: '('","reason":"BadRequest","code":400}\n`
        )
        // A selector narrows the page but remainingItemCount is then not reported, as etcd cannot count it.
        const paged = JSON.parse((yield* send(`${server.url}${collectionPath}?labelSelector=tier&limit=1`)).body)
        expect(paged.items.map((i: any) =>
          i.metadata.name
        )).toEqual(["a"])
        expect(paged.metadata.remainingItemCount).toBeUndefined()
        expect(paged.metadata.continue).not.toBe("")
        // etcd pages keys, not matches: a full page with keys after it (selected or not) has a
        // token, and the selection can end in an empty page (as kube-apiserver answers).
        const full = JSON.parse((yield* send(`${server.url}${collectionPath}?labelSelector=tier&limit=2`)).body)
        expect(full.items.map((i: any) => i.metadata.name)).toEqual(["a", "b"])
        expect(full.metadata.continue).not.toBe("")
        const empty = JSON.parse(
          (yield* send(`${server.url}${collectionPath}?labelSelector=tier&limit=2&continue=${full.metadata.continue}`))
            .body
        )
        expect([empty.items, empty.metadata.continue]).toEqual([[], ""])
        // A page that is not full read to the end of the keys: no token.
        const short = JSON.parse((yield* send(`${server.url}${collectionPath}?labelSelector=tier&limit=3`)).body)
        expect([short.items.length, short.metadata.continue]).toEqual([2, ""])
      })
    ))

  it.effect("label selector grammar, unit by unit", () =>
    Effect.sync(() => {
      expect(parseLabelSelector("a=1,b!=2, c in (x,y),d notin (z),e,!f,g==3,h>4,i<5")).toEqual(
        Either.right({
          requirements: [
            { op: "in", key: "a", values: ["1"] },
            { op: "notIn", key: "b", values: ["2"] },
            { op: "in", key: "c", values: ["x", "y"] },
            { op: "notIn", key: "d", values: ["z"] },
            { op: "exists", key: "e" },
            { op: "notExists", key: "f" },
            { op: "in", key: "g", values: ["3"] },
            { op: "gt", key: "h", value: 4n },
            { op: "lt", key: "i", value: 5n }
          ]
        })
      )
      expect(parseLabelSelector("jr2.dev/run=")).toEqual(
        Either.right({ requirements: [{ op: "in", key: "jr2.dev/run", values: [""] }] })
      )
      expect(Either.isLeft(parseLabelSelector("a=1,"))).toBe(true)
      expect(Either.isLeft(parseLabelSelector("-bad-=1"))).toBe(true)
      expect(Either.isLeft(parseLabelSelector("a=(1)"))).toBe(true)
      expect(Either.isLeft(parseLabelSelector("a>x"))).toBe(true)
      expect(parseFieldSelector("metadata.name!=a\\,b")).toEqual(
        Either.right({ requirements: [{ field: "metadata.name", op: "!=", value: "a,b" }] })
      )
      expect(parseFieldSelector("status.phase=Ready")).toEqual(
        Either.left({
          message: `"status.phase" is not a known field selector: only "metadata.name", "metadata.namespace"`
        })
      )
    }))

  it.scoped("field selectors on metadata.name and metadata.namespace; another field is 400", () =>
    withServer((server) =>
      Effect.gen(function*() {
        yield* seed(server, [["a"], ["b"], ["c"]])
        yield* server.create({ metadata: { name: "a" } }, { namespace: "other" })
        const select = (selector: string, path = collectionPath) =>
          Effect.map(send(`${server.url}${path}?fieldSelector=${encodeURIComponent(selector)}`), (r) => names(r.body))
        expect(yield* select("metadata.name=b")).toEqual(["b"])
        expect(yield* select("metadata.name!=b")).toEqual(["a", "c"])
        expect(yield* select("metadata.namespace=ns")).toEqual(["a", "b", "c"])
        expect(yield* select("metadata.namespace=other")).toEqual([])
        const all = yield* send(`${server.url}/apis/jr2.dev/v1alpha1/sandboxes?fieldSelector=metadata.name%3Da`)
        expect(JSON.parse(all.body).items.map((i: any) => i.metadata.namespace)).toEqual(["ns", "other"])
        // Across namespaces, pages go by namespace then name and the token's start key says both.
        const page = JSON.parse((yield* send(`${server.url}/apis/jr2.dev/v1alpha1/sandboxes?limit=3`)).body)
        expect(page.items.map((i: any) => `${i.metadata.namespace}/${i.metadata.name}`)).toEqual([
          "ns/a",
          "ns/b",
          "ns/c"
        ])
        expect(JSON.parse(Buffer.from(page.metadata.continue, "base64url").toString()).start).toBe("ns/c\u0000")
        const rest = JSON.parse(
          (yield* send(`${server.url}/apis/jr2.dev/v1alpha1/sandboxes?limit=3&continue=${page.metadata.continue}`)).body
        )
        expect(rest.items.map((i: any) => `${i.metadata.namespace}/${i.metadata.name}`)).toEqual(["other/a"])
        const allWatch = yield* openStream(`${server.url}/apis/jr2.dev/v1alpha1/sandboxes?watch=true&resourceVersion=4`)
        expect((yield* allWatch.json).object.metadata.namespace).toBe("other")
        const bad = yield* send(`${server.url}${collectionPath}?fieldSelector=spec.x%3D1`)
        expect(bad.status).toBe(400)
        expect(JSON.parse(bad.body).message).toBe(
          `"spec.x" is not a known field selector: only "metadata.name", "metadata.namespace"`
        )
      })
    ))

  it.scoped("resourceVersion: latest, exact from history, too old (410), too large (504), NotOlderThan", () =>
    withServer(
      (server) =>
        Effect.gen(function*() {
          yield* seed(server, [["a"], ["b"]]) // rv 2, 3
          yield* server.delete("a") // rv 4
          const list = (query: string) => send(`${server.url}${collectionPath}?${query}`)
          expect(names((yield* list("resourceVersion=")).body)).toEqual(["b"])
          expect(names((yield* list("resourceVersion=0")).body)).toEqual(["b"])
          const exact = JSON.parse((yield* list("resourceVersion=3&resourceVersionMatch=Exact")).body)
          expect([exact.items.map((i: any) => i.metadata.name), exact.metadata.resourceVersion]).toEqual([
            ["a", "b"],
            "3"
          ])
          // With a limit and no match, a resourceVersion is exact too.
          expect(names((yield* list("resourceVersion=2&limit=10")).body)).toEqual(["a"])
          expect(names((yield* list("resourceVersion=2&resourceVersionMatch=NotOlderThan")).body)).toEqual(["b"])
          yield* seed(server, [["c"], ["d"]]) // rv 5, 6: the window (3 events) now starts at 3
          const old = yield* list("resourceVersion=2&resourceVersionMatch=Exact")
          expect(old.status).toBe(410)
          expect(old.body).toBe(
            `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"The resourceVersion for the provided list is too old.","reason":"Expired","code":410}\n`
          )
          const large = yield* list("resourceVersion=999999")
          expect(large.status).toBe(504)
          expect(large.body).toBe(
            `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Timeout: Too large resource version: 999999, current: 6","reason":"Timeout","details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],"retryAfterSeconds":1},"code":504}\n`
          )
          const noVersion = yield* list("resourceVersionMatch=Exact")
          expect(noVersion.status).toBe(422)
          expect(JSON.parse(noVersion.body).message).toBe(
            `ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided`
          )
        }),
      { historySize: 3 }
    ))
})

describe("SimulatedApiServer: watch", () => {
  const watchUrl = (server: Sim.SimulatedApiServerService, query: string) =>
    `${server.url}${collectionPath}?watch=true&${query}`

  it.scoped("from no resourceVersion: ADDED for each object, then live events, chunked application/json", () =>
    withServer((server) =>
      Effect.gen(function*() {
        yield* seed(server, [["b"], ["a"]])
        const watch = yield* openStream(`${server.url}${collectionPath}?watch=1`)
        expect(watch.status).toBe(200)
        expect(watch.headers.get("content-type")).toBe("application/json")
        expect(watch.headers.get("transfer-encoding")).toBe("chunked")
        const first = yield* watch.line
        expect(
          first.startsWith(`{"type":"ADDED","object":{"apiVersion":"jr2.dev/v1alpha1","kind":"Sandbox","metadata":{`)
        ).toBe(true)
        expect(JSON.parse(first).object.metadata.name).toBe("a")
        expect((yield* watch.json).object.metadata.name).toBe("b")
        yield* server.awaitOpenWatches(1)
        yield* server.create({ metadata: { name: "c" } })
        yield* server.mergePatch("a", { metadata: { labels: { x: "1" } } })
        const b = Option.getOrThrow(yield* server.get("b"))
        yield* server.delete("b")
        const events = [yield* watch.json, yield* watch.json, yield* watch.json]
        expect(events.map((e) => [e.type, e.object.metadata.name, e.object.metadata.resourceVersion])).toEqual([
          ["ADDED", "c", "4"],
          ["MODIFIED", "a", "5"],
          ["DELETED", "b", "6"]
        ])
        // DELETED carries the last state, stamped with the delete's resourceVersion.
        expect(events[2]!.object).toEqual({ ...b, metadata: { ...b.metadata, resourceVersion: "6" } })
        expect(yield* server.openWatches).toBe(1)
      })
    ))

  it.scoped("from a resourceVersion in the window: replays only what came after it", () =>
    withServer((server) =>
      Effect.gen(function*() {
        yield* seed(server, [["a"], ["b"], ["c"]]) // rv 2, 3, 4
        yield* server.mergePatch("a", { spec: { repos: [{ key: "k" }] } }) // rv 5
        const watch = yield* openStream(watchUrl(server, "resourceVersion=3"))
        const replay = [yield* watch.json, yield* watch.json]
        expect(replay.map((e) => [e.type, e.object.metadata.name, e.object.metadata.resourceVersion])).toEqual([
          ["ADDED", "c", "4"],
          ["MODIFIED", "a", "5"]
        ])
        yield* server.awaitOpenWatches(1)
        yield* server.delete("c")
        const deleted = yield* watch.json
        expect([deleted.type, deleted.object.metadata.name, deleted.object.metadata.resourceVersion]).toEqual([
          "DELETED",
          "c",
          "6"
        ])
      })
    ))

  it.scoped("from a resourceVersion older than the window: HTTP 200, then the 410 ERROR line, then the end", () =>
    withServer(
      (server) =>
        Effect.gen(function*() {
          yield* seed(server, [["a"], ["b"], ["c"], ["d"]]) // rv 2..5, window of 2 starts at 3
          const watch = yield* openStream(watchUrl(server, "resourceVersion=1"))
          expect(watch.status).toBe(200)
          expect(yield* watch.line).toBe(
            `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (3)","reason":"Expired","code":410}}\n`
          )
          expect(yield* watch.next).toEqual({ _tag: "End", rest: "" })
          expect(yield* server.openWatches).toBe(0)
        }),
      { historySize: 2 }
    ))

  it.scoped("from a future resourceVersion: accepted, and only events after it arrive", () =>
    withServer((server) =>
      Effect.gen(function*() {
        yield* seed(server, [["a"]]) // rv 2
        const watch = yield* openStream(watchUrl(server, "resourceVersion=3"))
        yield* server.awaitOpenWatches(1)
        yield* server.create({ metadata: { name: "b" } }) // rv 3: not after 3
        yield* server.create({ metadata: { name: "c" } }) // rv 4
        const event = yield* watch.json
        expect([event.type, event.object.metadata.name]).toEqual(["ADDED", "c"])
      })
    ))

  it.scoped("bookmarks every bookmarkInterval once something changed after the watch's start, one more at timeoutSeconds, then a clean end", () =>
    withServer(
      (server) =>
        Effect.gen(function*() {
          yield* seed(server, [["a"]])
          const watch = yield* openStream(
            watchUrl(server, "resourceVersion=2&allowWatchBookmarks=true&timeoutSeconds=12")
          )
          yield* server.awaitOpenWatches(1)
          yield* awaitSleeps(2)
          // Nothing newer than resourceVersion 2 yet: the first interval passes without a bookmark,
          // as kube-apiserver's watch cache does (see test/apiserver/differential.test.ts).
          yield* TestClock.adjust(Duration.seconds(5))
          yield* server.create({ metadata: { name: "b" } })
          expect(yield* watch.line).toMatch(/^\{"type":"ADDED","object":\{.*"name":"b".*"resourceVersion":"3"/)
          yield* awaitSleeps(2)
          yield* TestClock.adjust(Duration.seconds(5))
          expect(JSON.parse(yield* watch.line).object.metadata).toEqual({ resourceVersion: "3" })
          yield* awaitSleeps(2)
          yield* TestClock.adjust(Duration.seconds(2))
          expect(JSON.parse(yield* watch.line)).toEqual({
            type: "BOOKMARK",
            object: { apiVersion: "jr2.dev/v1alpha1", kind: "Sandbox", metadata: { resourceVersion: "3" } }
          })
          expect(yield* watch.next).toEqual({ _tag: "End", rest: "" })
          yield* server.awaitOpenWatches(0)
        }),
      { bookmarkInterval: Duration.seconds(5) }
    ))

  it.scoped("a watch stands at the last event it replayed: no bookmark until something newer happens, even at its timeout", () =>
    withServer(
      (server) =>
        Effect.gen(function*() {
          yield* seed(server, [["a"]])
          yield* server.mergePatch("a", { metadata: { labels: { x: "y" } } })
          // From resourceVersion 2: the change at 3 is replayed; nothing newer follows.
          const watch = yield* openStream(
            watchUrl(server, "resourceVersion=2&allowWatchBookmarks=true&timeoutSeconds=12")
          )
          expect((yield* watch.json).object.metadata.resourceVersion).toBe("3")
          yield* server.awaitOpenWatches(1)
          yield* awaitSleeps(2)
          yield* TestClock.adjust(Duration.seconds(12))
          expect(yield* watch.next).toEqual({ _tag: "End", rest: "" })
        }),
      { bookmarkInterval: Duration.seconds(5) }
    ))

  it.scoped("without bookmarks, timeoutSeconds ends the watch cleanly with nothing sent", () =>
    withServer((server) =>
      Effect.gen(function*() {
        const watch = yield* openStream(watchUrl(server, "timeoutSeconds=30"))
        yield* server.awaitOpenWatches(1)
        yield* awaitSleeps(1)
        yield* TestClock.adjust(Duration.seconds(30))
        expect(yield* watch.next).toEqual({ _tag: "End", rest: "" })
      })
    ))

  it.scoped("with a label selector: leaving the selection is DELETED (previous state, new rv), entering is ADDED", () =>
    withServer((server) =>
      Effect.gen(function*() {
        yield* seed(server, [["a", { run: "r1" }], ["b", { run: "r2" }]])
        const watch = yield* openStream(watchUrl(server, "labelSelector=run%3Dr1"))
        expect((yield* watch.json).object.metadata.name).toBe("a")
        yield* server.awaitOpenWatches(1)
        yield* server.mergePatch("a", { metadata: { labels: { run: "r2" } } }) // rv 4: leaves
        yield* server.mergePatch("b", { spec: { repos: [{ key: "x" }] } }) // rv 5: never in
        yield* server.mergePatch("b", { metadata: { labels: { run: "r1" } } }) // rv 6: enters
        const left = yield* watch.json
        expect([
          left.type,
          left.object.metadata.name,
          left.object.metadata.resourceVersion,
          left.object.metadata.labels
        ]).toEqual([
          "DELETED",
          "a",
          "4",
          { run: "r1" }
        ])
        const entered = yield* watch.json
        expect([entered.type, entered.object.metadata.name, entered.object.metadata.resourceVersion]).toEqual([
          "ADDED",
          "b",
          "6"
        ])
      })
    ))

  it.scoped("with a field selector: only the named object", () =>
    withServer((server) =>
      Effect.gen(function*() {
        yield* seed(server, [["a"], ["b"]])
        const watch = yield* openStream(watchUrl(server, "fieldSelector=metadata.name%3Db&resourceVersion=1"))
        const added = yield* watch.json
        expect([added.type, added.object.metadata.name]).toEqual(["ADDED", "b"])
        yield* server.awaitOpenWatches(1)
        yield* server.delete("a")
        yield* server.delete("b")
        const deleted = yield* watch.json
        expect([deleted.type, deleted.object.metadata.name, deleted.object.metadata.resourceVersion]).toEqual([
          "DELETED",
          "b",
          "5"
        ])
      })
    ))

  it.scoped("sendInitialEvents: ADDED for each object, then the initial-events-end BOOKMARK, then live", () =>
    withServer((server) =>
      Effect.gen(function*() {
        yield* seed(server, [["a"], ["b"]])
        const watch = yield* openStream(
          watchUrl(
            server,
            "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion="
          )
        )
        expect([(yield* watch.json).object.metadata.name, (yield* watch.json).object.metadata.name]).toEqual(["a", "b"])
        expect(yield* watch.line).toBe(
          `{"type":"BOOKMARK","object":{"apiVersion":"jr2.dev/v1alpha1","kind":"Sandbox","metadata":{"annotations":{"k8s.io/initial-events-end":"true"},"resourceVersion":"3"}}}\n`
        )
        yield* server.awaitOpenWatches(1)
        yield* server.create({ metadata: { name: "c" } })
        expect([(yield* watch.json).type]).toEqual(["ADDED"])
        const refused = yield* send(watchUrl(server, "sendInitialEvents=true&resourceVersionMatch=NotOlderThan"))
        expect(refused.status).toBe(422)
        expect(JSON.parse(refused.body).message).toBe(
          `ListOptions.meta.k8s.io "" is invalid: allowWatchBookmarks: Forbidden: sendInitialEvents requires setting allowWatchBookmarks to true`
        )
      })
    ))
})

describe("SimulatedApiServer: servers that differ from kube-apiserver", () => {
  it.scoped("ignoreSendInitialEvents: a streaming list is answered as a plain watch from now (no ADDED set, no end bookmark) that ends at once, cleanly; plain watches as ever", () =>
    withServer((server) =>
      Effect.gen(function*() {
        yield* seed(server, [["a"], ["b"]])
        const streaming = yield* openStream(
          `${server.url}${collectionPath}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true`
        )
        expect(streaming.status).toBe(200)
        expect(yield* streaming.next).toEqual({ _tag: "End", rest: "" })
        // Even what a 1.20 would refuse (resourceVersionMatch on a watch) is not looked at.
        const unchecked = yield* openStream(
          `${server.url}${collectionPath}?watch=true&sendInitialEvents=true&resourceVersionMatch=Bogus`
        )
        expect(unchecked.status).toBe(200)
        expect(yield* unchecked.next).toEqual({ _tag: "End", rest: "" })
        const plain = yield* openStream(`${server.url}${collectionPath}?watch=true&resourceVersion=2`)
        expect((yield* plain.json).object.metadata.name).toBe("b")
        yield* server.awaitOpenWatches(1)
        yield* server.create({ metadata: { name: "c" } })
        expect((yield* plain.json).object.metadata.name).toBe("c")
        expect(names((yield* send(server.url + collectionPath)).body)).toEqual(["a", "b", "c"])
      }), { ignoreSendInitialEvents: true }))

  it.scoped("withdrawResource: open watches end cleanly, every request is kube-apiserver's 404 until restoreResource; then a new watch cache (old resourceVersions 410), objects kept", () =>
    withServer((server) =>
      Effect.gen(function*() {
        yield* seed(server, [["a"], ["b"]]) // rv 2, 3
        const watch = yield* openStream(`${server.url}${collectionPath}?watch=true&resourceVersion=3`)
        yield* server.awaitOpenWatches(1)
        yield* server.withdrawResource
        expect(yield* watch.next).toEqual({ _tag: "End", rest: "" })
        yield* server.awaitOpenWatches(0)
        // What kube-apiserver answers for a resource whose CRD is gone: Go's plain 404, not a Status
        // (test/apiserver/crdReRegistered.test.ts holds it to the real ones).
        for (
          const url of [
            `${server.url}${collectionPath}`,
            `${server.url}${collectionPath}?watch=true&resourceVersion=3`,
            `${server.url}${collectionPath}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true`,
            `${server.url}${collectionPath}/a`
          ]
        ) {
          const answer = yield* send(url)
          expect([url, answer.status, answer.headers.get("content-type"), answer.body])
            .toEqual([url, 404, "text/plain; charset=utf-8", "404 page not found\n"])
        }
        yield* server.restoreResource
        const resumed = yield* openStream(`${server.url}${collectionPath}?watch=true&resourceVersion=2`)
        expect(JSON.parse(yield* resumed.line).object.code).toBe(410)
        expect(names((yield* send(server.url + collectionPath)).body)).toEqual(["a", "b"])
      })
    ))
})

describe("SimulatedApiServer: auth and RBAC", () => {
  it.scoped("with a token, a request without the right bearer is 401; the token is never echoed", () =>
    withServer(
      (server) =>
        Effect.gen(function*() {
          const none = yield* send(server.url + collectionPath)
          expect(none.status).toBe(401)
          expect(none.body).toBe(
            `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}\n`
          )
          const wrong = yield* send(server.url + collectionPath, { headers: { authorization: "Bearer nope" } })
          expect(wrong.status).toBe(401)
          expect(wrong.body.includes("s3cret")).toBe(false)
          const right = yield* send(server.url + collectionPath, { headers: { authorization: "Bearer s3cret" } })
          expect(right.status).toBe(200)
          yield* server.setToken("rotated")
          expect((yield* send(server.url + collectionPath, { headers: { authorization: "Bearer s3cret" } })).status)
            .toBe(401)
          expect(Option.map(yield* server.token, Redacted.value)).toEqual(Option.some("rotated"))
        }),
      { token: "s3cret" }
    ))

  it.scoped("forbidden verbs are 403 in the apiserver's words, until allowed again", () =>
    withServer(
      (server) =>
        Effect.gen(function*() {
          yield* seed(server, [["a"]])
          yield* server.forbid("watch", "get")
          const watch = yield* send(`${server.url}${collectionPath}?watch=true`)
          expect(watch.status).toBe(403)
          expect(watch.body).toBe(
            `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"sandboxes.jr2.dev is forbidden: User \\"u\\" cannot watch resource \\"sandboxes\\" in API group \\"jr2.dev\\" in the namespace \\"ns\\"","reason":"Forbidden","details":{"group":"jr2.dev","kind":"sandboxes"},"code":403}\n`
          )
          const get = yield* send(`${server.url}${collectionPath}/a`)
          expect(JSON.parse(get.body).message).toBe(
            `sandboxes.jr2.dev "a" is forbidden: User "u" cannot get resource "sandboxes" in API group "jr2.dev" in the namespace "ns"`
          )
          expect((yield* send(`${server.url}${collectionPath}`)).status).toBe(200)
          yield* server.allow("watch")
          const healed = yield* openStream(`${server.url}${collectionPath}?watch=true`)
          expect(healed.status).toBe(200)
          expect((yield* healed.json).object.metadata.name).toBe("a")
          expect((yield* send(`${server.url}${collectionPath}/a`)).status).toBe(403)
          yield* server.allow()
          expect((yield* send(`${server.url}${collectionPath}/a`)).status).toBe(200)
        }),
      { user: "u" }
    ))
})

describe("SimulatedApiServer: faults", () => {
  it.scoped("429 as a Status with Retry-After, only for the verbs asked, for as many requests as asked", () =>
    withServer((server) =>
      Effect.gen(function*() {
        yield* server.failNext(2, "TooManyRequests", { verbs: ["watch"], retryAfterSeconds: 7 })
        expect((yield* send(server.url + collectionPath)).status).toBe(200)
        for (let i = 0; i < 2; i++) {
          const reply = yield* send(`${server.url}${collectionPath}?watch=true`)
          expect(reply.status).toBe(429)
          expect(reply.headers.get("retry-after")).toBe("7")
          expect(reply.body).toBe(
            `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Too many requests, please try again later.","reason":"TooManyRequests","details":{"retryAfterSeconds":7},"code":429}\n`
          )
        }
        const ok = yield* openStream(`${server.url}${collectionPath}?watch=true`)
        expect(ok.status).toBe(200)
      })
    ))

  it.scoped("429 of a warming watch cache: the Status 1.31+ answers (test/apiserver/restart.test.ts checks the real one)", () =>
    withServer((server) =>
      Effect.gen(function*() {
        yield* server.failNext(1, "StorageInitializing", { verbs: ["list"], retryAfterSeconds: 3 })
        const reply = yield* send(server.url + collectionPath)
        expect([reply.status, reply.headers.get("retry-after")]).toEqual([429, "3"])
        expect(JSON.parse(reply.body)).toStrictEqual({
          kind: "Status",
          apiVersion: "v1",
          metadata: {},
          status: "Failure",
          message: "storage is (re)initializing",
          reason: "TooManyRequests",
          details: { retryAfterSeconds: 3 },
          code: 429
        })
        expect((yield* send(server.url + collectionPath)).status).toBe(200)
      })
    ))

  it.scoped("429 as plain text with Retry-After", () =>
    withServer((server) =>
      Effect.gen(function*() {
        yield* server.failNext(1, "TooManyRequestsText")
        const reply = yield* send(server.url + collectionPath)
        expect([reply.status, reply.headers.get("content-type"), reply.headers.get("retry-after"), reply.body]).toEqual(
          [
            429,
            "text/plain; charset=utf-8",
            "1",
            "Too many requests, please try again later.\n"
          ]
        )
      })
    ))

  it.scoped("500, 401, 403, an HTML 502 and the 504 too-large, in the order they were queued", () =>
    withServer(
      (server) =>
        Effect.gen(function*() {
          yield* server.failNext(1, "InternalError")
          yield* server.failNext(1, "Unauthorized")
          yield* server.failNext(1, "Forbidden")
          yield* server.failNext(1, "BadGatewayHtml")
          yield* server.failNext(1, "TooLargeResourceVersion")
          const replies: Array<Reply> = []
          for (let i = 0; i < 6; i++) replies.push(yield* send(`${server.url}${collectionPath}?resourceVersion=50`))
          expect(replies.map((r) => r.status)).toEqual([500, 401, 403, 502, 504, 504])
          expect(JSON.parse(replies[0]!.body)).toEqual({
            kind: "Status",
            apiVersion: "v1",
            metadata: {},
            status: "Failure",
            message: "Internal error occurred: simulated failure",
            reason: "InternalError",
            details: { causes: [{ message: "simulated failure" }] },
            code: 500
          })
          expect(JSON.parse(replies[1]!.body).reason).toBe("Unauthorized")
          expect(JSON.parse(replies[2]!.body).message).toBe(
            `sandboxes.jr2.dev is forbidden: User "system:serviceaccount:ns:default" cannot list resource "sandboxes" in API group "jr2.dev" in the namespace "ns"`
          )
          expect(replies[3]!.headers.get("content-type")).toBe("text/html")
          expect(replies[3]!.body.startsWith("<html><body><h1>502 Bad Gateway</h1>")).toBe(true)
          expect(JSON.parse(replies[4]!.body).message).toBe("Timeout: Too large resource version: 50, current: 1")
          // The sixth is the server's own answer to a resourceVersion it has not reached.
          expect(JSON.parse(replies[5]!.body).details.causes).toEqual([
            { reason: "ResourceVersionTooLarge", message: "Too large resource version" }
          ])
        }),
      { initialResourceVersion: 1 }
    ))

  it.scoped("closeWatches ends every open watch cleanly", () =>
    withServer((server) =>
      Effect.gen(function*() {
        const one = yield* openStream(`${server.url}${collectionPath}?watch=true`)
        const two = yield* openStream(`${server.url}${collectionPath}?watch=true&labelSelector=x`)
        yield* server.awaitOpenWatches(2)
        yield* server.closeWatches
        expect(yield* one.next).toEqual({ _tag: "End", rest: "" })
        expect(yield* two.next).toEqual({ _tag: "End", rest: "" })
        yield* server.awaitOpenWatches(0)
      })
    ))

  it.scoped("stallWatches: an open watch goes silent while a new one still hears; unstall delivers the rest", () =>
    withServer((server) =>
      Effect.gen(function*() {
        const stalled = yield* openStream(`${server.url}${collectionPath}?watch=true`)
        yield* server.awaitOpenWatches(1)
        yield* server.stallWatches
        const fresh = yield* openStream(`${server.url}${collectionPath}?watch=true`)
        yield* server.awaitOpenWatches(2)
        yield* server.create({ metadata: { name: "a" } })
        yield* server.create({ metadata: { name: "b" } })
        // The fresh watch got both: the stalled one, fanned out in the same step, would have had them by now.
        expect((yield* fresh.json).object.metadata.name).toBe("a")
        expect((yield* fresh.json).object.metadata.name).toBe("b")
        const raced = yield* Effect.raceFirst(
          Effect.map(stalled.next, (read) => Option.some(read)),
          Effect.as(Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve))), Option.none())
        )
        expect(raced).toEqual(Option.none())
        yield* server.unstall
        const events = [yield* stalled.json, yield* stalled.json]
        expect(events.map((e) => e.object.metadata.name)).toEqual(["a", "b"])
      })
    ))

  it.scoped("a stalled watch still ends on closeWatches", () =>
    withServer((server) =>
      Effect.gen(function*() {
        const watch = yield* openStream(`${server.url}${collectionPath}?watch=true`)
        yield* server.awaitOpenWatches(1)
        yield* server.stallWatches
        yield* server.create({ metadata: { name: "a" } })
        yield* server.closeWatches
        expect(yield* watch.next).toEqual({ _tag: "End", rest: "" })
        yield* server.awaitOpenWatches(0)
      })
    ))

  it.scoped("writeMalformedLine puts a non-JSON line into every open watch", () =>
    withServer((server) =>
      Effect.gen(function*() {
        const watch = yield* openStream(`${server.url}${collectionPath}?watch=true`)
        yield* server.awaitOpenWatches(1)
        yield* server.writeMalformedLine()
        expect(yield* watch.line).toBe("this is not json\n")
        yield* server.writeMalformedLine("{\"type\":")
        expect(yield* watch.line).toBe("{\"type\":\n")
      })
    ))

  it.scoped("writeTruncatedLine sends half an event, then the connection dies", () =>
    withServer((server) =>
      Effect.gen(function*() {
        yield* seed(server, [["a"]])
        const watch = yield* openStream(`${server.url}${collectionPath}?watch=true&resourceVersion=2`)
        yield* server.awaitOpenWatches(1)
        yield* server.writeTruncatedLine
        const read = yield* watch.next
        expect(read._tag).toBe("Failed")
        const rest = read._tag === "Failed" ? read.rest : ""
        expect(rest.startsWith(`{"type":"MODIFIED","object":{"apiVersion":"jr2.dev/v1alpha1"`)).toBe(true)
        expect(rest.includes("\n")).toBe(false)
        yield* server.awaitOpenWatches(0)
      })
    ))

  it.scoped("restart: open watches end, history is gone (old resourceVersions are 410), objects and the counter stay", () =>
    withServer((server) =>
      Effect.gen(function*() {
        yield* seed(server, [["a"], ["b"]]) // rv 2, 3
        const watch = yield* openStream(`${server.url}${collectionPath}?watch=true`)
        yield* server.awaitOpenWatches(1)
        yield* server.restart
        expect((yield* watch.json).object.metadata.name).toBe("a")
        expect((yield* watch.json).object.metadata.name).toBe("b")
        expect(yield* watch.next).toEqual({ _tag: "End", rest: "" })
        const resumed = yield* openStream(`${server.url}${collectionPath}?watch=true&resourceVersion=2`)
        expect(JSON.parse(yield* resumed.line).object.message).toBe("too old resource version: 2 (3)")
        const created = yield* server.create({ metadata: { name: "c" } })
        expect(created.metadata.resourceVersion).toBe("4")
        expect(names((yield* send(server.url + collectionPath)).body)).toEqual(["a", "b", "c"])
      })
    ))

  it.scoped("dropConnections resets open watches: the reader fails and the watch is no longer open", () =>
    withServer((server) =>
      Effect.gen(function*() {
        const watch = yield* openStream(`${server.url}${collectionPath}?watch=true`)
        yield* server.awaitOpenWatches(1)
        yield* server.dropConnections
        expect(yield* watch.next).toEqual({ _tag: "Failed", rest: "" })
        yield* server.awaitOpenWatches(0)
      })
    ))
})

describe("SimulatedApiServer: counters, lifecycle, KubeConfig", () => {
  it.scoped("records every request's verb and query, in order", () =>
    withServer((server) =>
      Effect.gen(function*() {
        yield* send(`${server.url}${collectionPath}?limit=500`)
        yield* json("POST", server.url + collectionPath, { metadata: { name: "a" } })
        yield* send(`${server.url}${collectionPath}/a`)
        yield* json("PATCH", `${server.url}${collectionPath}/a/status`, { status: {} }, "application/merge-patch+json")
        const watch = yield* openStream(
          `${server.url}${collectionPath}?watch=true&resourceVersion=2&allowWatchBookmarks=true`
        )
        expect(watch.status).toBe(200)
        const watches = yield* server.awaitRequests(1, "watch")
        expect(watches.map((r) => r.query)).toEqual([{
          watch: "true",
          resourceVersion: "2",
          allowWatchBookmarks: "true"
        }])
        const all = yield* server.requests
        expect(all.map((r) => [r.verb, r.method, r.name, r.subresource])).toEqual([
          ["list", "GET", undefined, undefined],
          ["create", "POST", undefined, undefined],
          ["get", "GET", "a", undefined],
          ["patch", "PATCH", "a", "status"],
          ["watch", "GET", undefined, undefined]
        ])
        expect((yield* server.requestsOf("list"))[0]!.query).toEqual({ limit: "500" })
        expect(all[0]!.path).toBe(collectionPath)
        yield* server.clearRequests
        expect(yield* server.requests).toEqual([])
      })
    ))

  it.effect("closing the layer's scope ends open watches cleanly and stops the server", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const context = yield* Layer.buildWithScope(serverLayer(), scope)
      const server = Context.get(context, Sim.SimulatedApiServer)
      const watchScope = yield* Scope.make()
      const watch = yield* Scope.extend(openStream(`${server.url}${collectionPath}?watch=true`), watchScope)
      yield* server.awaitOpenWatches(1)
      yield* Scope.close(scope, Exit.void)
      expect(yield* watch.next).toEqual({ _tag: "End", rest: "" })
      const refused = yield* Effect.promise(() =>
        fetch(server.url + collectionPath).then(() => "answered", () => "refused")
      )
      expect(refused).toBe("refused")
      yield* Scope.close(watchScope, Exit.void)
    }))

  it.scoped("layerKubeConfig points a KubeConfig at the server, with its namespace and token", () =>
    Effect.gen(function*() {
      const server = yield* Sim.SimulatedApiServer
      const config = yield* KubeConfig.KubeConfig
      expect(config.server).toBe(server.url)
      expect(config.server).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/)
      expect(config.namespace).toEqual(Option.some("ns"))
      expect(Option.map(yield* config.authorization, Redacted.value)).toEqual(Option.some("Bearer t0k"))
    }).pipe(Effect.provide(Sim.layerWithKubeConfig({ resource: SandboxResource, namespace: "ns", token: "t0k" }))))

  it.effect("kindFromPlural singularises and capitalises", () =>
    Effect.sync(() => {
      expect(["sandboxes", "pods", "policies", "statuses", "ingresses"].map(Sim.kindFromPlural)).toEqual([
        "Sandbox",
        "Pod",
        "Policy",
        "Status",
        "Ingress"
      ])
    }))
})
