/**
 * A simulated Kubernetes API server for one namespaced resource, over real HTTP on loopback. It
 * answers as kube-apiserver does on the wire (the Status JSON, the 410 inside a 200 watch, the 504
 * for a too-large resourceVersion, the shapes of 429), as 1.20 does where the two releases agree and
 * as 1.37 does where only the modern one speaks (a streaming list's validation and end bookmark, the
 * 429 of a warming watch cache); test/apiserver/differential.test.ts holds it to both. It can misbehave on demand
 * (stall, close, reset, truncate, refuse), so the watch can be tested end to end in milliseconds and
 * the program's `--demo` can run against an embedded cluster.
 *
 * Timers (bookmarks, watch timeouts) use Effect's `Clock` of the environment that built the layer:
 * the live clock in the program, `TestClock` in a test.
 */
import { HttpRouter, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { NodeHttpServer, NodeHttpServerRequest } from "@effect/platform-node"
import type { ServeError } from "@effect/platform/HttpServerError"
import {
  Clock,
  Context,
  Data,
  Deferred,
  Duration,
  Effect,
  Either,
  Layer,
  Option,
  Random,
  Redacted,
  Stream,
  SubscriptionRef
} from "effect"
import { randomUUID } from "node:crypto"
import * as Http from "node:http"
import type * as Net from "node:net"
import { matchesFields, matchesLabels } from "./internal/labelSelector.ts"
import type { FailureStatus } from "./internal/simulator/kubeJson.ts"
import { clone, encodeStatus, encodeSuccessStatus, encodeUnstructured } from "./internal/simulator/kubeJson.ts"
import { listAnswer } from "./internal/simulator/listAnswer.ts"
import type { KubeObject, WriteContext } from "./internal/simulator/objectStore.ts"
import { labelsOf, nameOf, namespaceOf, ObjectStore } from "./internal/simulator/objectStore.ts"
import type { Selectors } from "./internal/simulator/requests.ts"
import {
  badRequest,
  listRequestOf,
  parseResourceVersion,
  queryBool,
  tooLarge,
  unauthorized,
  watchRequestOf
} from "./internal/simulator/requests.ts"
import type { WatchHandle } from "./internal/simulator/watchBody.ts"
import { offer, watchBody } from "./internal/simulator/watchBody.ts"
import * as KubeConfig from "./KubeConfig.ts"
import type { KubeResource } from "./KubeResource.ts"
import * as KubeResourceModule from "./KubeResource.ts"

/** The verbs RBAC and the request counters speak of. */
export type Verb = "get" | "list" | "watch" | "create" | "update" | "patch" | "delete"

/**
 * A failure the server can be told to answer with, instead of serving the request:
 * - `TooManyRequests`: 429, a Status JSON with `details.retryAfterSeconds` and a `Retry-After` header.
 * - `TooManyRequestsText`: 429, the plain-text "Too many requests, please try again later." and `Retry-After`.
 * - `StorageInitializing`: 429, the Status of a watch cache not yet ready ("storage is (re)initializing",
 *   `details.retryAfterSeconds` and `Retry-After`), as 1.31+ answers a list or watch at start-up.
 * - `InternalError`: 500, a Status.
 * - `Unauthorized`: 401, the apiserver's Status.
 * - `Forbidden`: 403, the RBAC Status for the request's verb.
 * - `BadGatewayHtml`: 502, an HTML page, as a proxy in front of the apiserver sends.
 * - `TooLargeResourceVersion`: 504, the "Too large resource version" Status.
 */
export type FaultKind =
  | "TooManyRequests"
  | "TooManyRequestsText"
  | "StorageInitializing"
  | "InternalError"
  | "Unauthorized"
  | "Forbidden"
  | "BadGatewayHtml"
  | "TooLargeResourceVersion"

/** One HTTP request the server saw, for a test to assert on (never its headers: they hold the token). */
export interface RecordedRequest {
  readonly verb: Verb
  readonly method: string
  /** The path, without the query. */
  readonly path: string
  /** Undefined for the all-namespaces path. */
  readonly namespace: string | undefined
  readonly name: string | undefined
  readonly subresource: string | undefined
  /** The query parameters, first value of each. */
  readonly query: Readonly<Record<string, string>>
}

/** An object as the server stores and serves it. A copy: changing it changes nothing on the server. */
export interface SimulatedObject {
  readonly apiVersion: string
  readonly kind: string
  readonly metadata: {
    readonly name: string
    readonly namespace: string
    readonly uid: string
    readonly resourceVersion: string
    readonly generation: number
    readonly creationTimestamp: string
    readonly labels?: Readonly<Record<string, string>>
    readonly annotations?: Readonly<Record<string, string>>
    readonly [field: string]: unknown
  }
  readonly [field: string]: unknown
}

/** A direct (non-HTTP) write the server refused, for the same reason it would refuse it over HTTP. */
export class SimulatedWriteError extends Data.TaggedError("SimulatedWriteError")<{
  /** The HTTP status the apiserver would have answered (404, 409, 422, ...). */
  readonly code: number
  /** The Status reason (`NotFound`, `AlreadyExists`, `Conflict`, `Invalid`, ...). */
  readonly reason: string
  readonly message: string
}> {}

/** Options of {@link layer}. */
export interface Options {
  /** The one resource served (its path, apiVersion, plural). */
  readonly resource: KubeResource
  /** The object kind; by default the singular of the plural, capitalised (`sandboxes` → `Sandbox`). */
  readonly kind?: string
  /** The namespace the direct methods write to and `layerKubeConfig` points at. Default `default`. */
  readonly namespace?: string
  /** Events kept for watch resumption and consistent paging, like the watch cache. Default 100. */
  readonly historySize?: number
  /**
   * How often a watch with `allowWatchBookmarks` gets a BOOKMARK (newer servers send one a minute;
   * 1.20 only in a watch's last seconds), and one more at its timeout — only once some object of the
   * resource changed after the watch's starting resourceVersion, as kube-apiserver does. Default 60 seconds.
   */
  readonly bookmarkInterval?: Duration.DurationInput
  /** When set, every request must carry `Authorization: Bearer <token>`, else 401. */
  readonly token?: string
  /** The user named in 403 messages. Default `system:serviceaccount:<namespace>:default`. */
  readonly user?: string
  /** Loopback port; 0 (the default) picks a free one. */
  readonly port?: number
  /** The resourceVersion before the first write. Default 1. */
  readonly initialResourceVersion?: number
}

/** Where an object is, for the direct methods. */
export interface ObjectOptions {
  /** Default: the server's `namespace`. */
  readonly namespace?: string
}

export interface SimulatedApiServerService {
  /** `http://127.0.0.1:PORT`, no trailing slash. */
  readonly url: string
  readonly resource: KubeResource
  readonly kind: string
  readonly namespace: string
  /** The bearer token the server requires now, if any (a secret: never log it). */
  readonly token: Effect.Effect<Option.Option<Redacted.Redacted<string>>>
  /** Require another token from now on (a rotation), or none. */
  readonly setToken: (token: string | undefined) => Effect.Effect<void>

  /** The latest resourceVersion, as a string. */
  readonly resourceVersion: Effect.Effect<string>
  /** Creates an object. Unlike an HTTP create, a `status` in it is kept, so a test can seed any state. */
  readonly create: (object: unknown, options?: ObjectOptions) => Effect.Effect<SimulatedObject, SimulatedWriteError>
  readonly get: (name: string, options?: ObjectOptions) => Effect.Effect<Option.Option<SimulatedObject>>
  /** Every object of the namespace, ordered by name. */
  readonly list: (options?: ObjectOptions) => Effect.Effect<ReadonlyArray<SimulatedObject>>
  /**
   * Replaces an object (or its `status`), as PUT does, except that a body without
   * `metadata.resourceVersion` is an unconditional write rather than 422.
   */
  readonly replace: (
    object: unknown,
    options?: ObjectOptions & { readonly subresource?: "status" }
  ) => Effect.Effect<SimulatedObject, SimulatedWriteError>
  /** A JSON merge patch of an object (or of its `status`). */
  readonly mergePatch: (
    name: string,
    patch: unknown,
    options?: ObjectOptions & { readonly subresource?: "status" }
  ) => Effect.Effect<SimulatedObject, SimulatedWriteError>
  /** Deletes an object; one with finalizers only gets a `deletionTimestamp`. Returns its last state. */
  readonly delete: (name: string, options?: ObjectOptions) => Effect.Effect<SimulatedObject, SimulatedWriteError>

  /** Ends every open watch cleanly (the response completes). */
  readonly closeWatches: Effect.Effect<void>
  /** Open watches send nothing more (sockets stay open) until `unstall` or their close. */
  readonly stallWatches: Effect.Effect<void>
  readonly unstall: Effect.Effect<void>
  /**
   * The next `count` requests (of the given verbs, or any) get `fault` instead of an answer.
   * `retryAfterSeconds` (default 1) is for the 429s. Faults queue in the order they were asked.
   */
  readonly failNext: (
    count: number,
    fault: FaultKind,
    options?: { readonly verbs?: ReadonlyArray<Verb>; readonly retryAfterSeconds?: number }
  ) => Effect.Effect<void>
  readonly clearFaults: Effect.Effect<void>
  /** Writes a line that is not JSON into every open watch (default `this is not json`). */
  readonly writeMalformedLine: (text?: string) => Effect.Effect<void>
  /** Writes half of a JSON event into every open watch, then destroys its socket. */
  readonly writeTruncatedLine: Effect.Effect<void>
  /** An apiserver restart: history and open watches are gone, objects stay, resourceVersions go on. */
  readonly restart: Effect.Effect<void>
  /** Resets every client connection (TCP RST), open watches included. */
  readonly dropConnections: Effect.Effect<void>
  /** RBAC: these verbs answer 403 from now on. */
  readonly forbid: (...verbs: ReadonlyArray<Verb>) => Effect.Effect<void>
  /** RBAC: these verbs are allowed again; with no verb, every verb is. */
  readonly allow: (...verbs: ReadonlyArray<Verb>) => Effect.Effect<void>

  /** Every request seen so far, oldest first. */
  readonly requests: Effect.Effect<ReadonlyArray<RecordedRequest>>
  /** The requests of one verb seen so far, oldest first. */
  readonly requestsOf: (verb: Verb) => Effect.Effect<ReadonlyArray<RecordedRequest>>
  /** Waits until `count` requests (of `verb`, or any) have been seen; returns those of that verb. */
  readonly awaitRequests: (count: number, verb?: Verb) => Effect.Effect<ReadonlyArray<RecordedRequest>>
  readonly clearRequests: Effect.Effect<void>
  /** Watches registered and not yet ended. */
  readonly openWatches: Effect.Effect<number>
  /** Waits until exactly `count` watches are open (registered: they will see every later write). */
  readonly awaitOpenWatches: (count: number) => Effect.Effect<void>
}

export class SimulatedApiServer extends Context.Tag("sandbox-watch/SimulatedApiServer")<
  SimulatedApiServer,
  SimulatedApiServerService
>() {}

/** `sandboxes` → `Sandbox`, `policies` → `Policy`, `pods` → `Pod`. */
export const kindFromPlural = (plural: string): string => {
  const singular = plural.endsWith("ies")
    ? `${plural.slice(0, -3)}y`
    : /(x|s|z|ch|sh)es$/.test(plural)
    ? plural.slice(0, -2)
    : plural.endsWith("s")
    ? plural.slice(0, -1)
    : plural
  return singular.charAt(0).toUpperCase() + singular.slice(1)
}

interface PendingFault {
  remaining: number
  readonly kind: FaultKind
  readonly verbs: ReadonlyArray<Verb> | undefined
  readonly retryAfterSeconds: number
}

interface RequestContext {
  readonly request: HttpServerRequest.HttpServerRequest
  readonly verb: Verb
  readonly path: string
  readonly query: URLSearchParams
  readonly namespace: string | undefined
  readonly name: string | undefined
  readonly subresource: "status" | undefined
}

const jsonResponse = (status: number, body: string, headers?: Record<string, string>) =>
  HttpServerResponse.text(`${body}\n`, {
    status,
    contentType: "application/json",
    headers: { "cache-control": "no-cache, private", ...headers }
  })

const statusResponse = (status: FailureStatus, headers?: Record<string, string>) =>
  jsonResponse(status.code, encodeStatus(status), headers)

const badGatewayHtml =
  "<html><body><h1>502 Bad Gateway</h1>\nThe server returned an invalid or incomplete response.\n</body></html>\n"

/**
 * A simulated apiserver on a loopback port, for as long as the layer's scope lives: closing it ends
 * every open watch, then every connection, then the server.
 */
export const layer = (options: Options): Layer.Layer<SimulatedApiServer, ServeError> =>
  Layer.scoped(SimulatedApiServer, make(options))

/**
 * A `KubeConfig` (`layerStatic`) pointing at the simulated server: its URL, namespace and token.
 */
export const layerKubeConfig: Layer.Layer<KubeConfig.KubeConfig, never, SimulatedApiServer> = Layer.unwrapEffect(
  Effect.gen(function*() {
    const server = yield* SimulatedApiServer
    const token = yield* server.token
    return KubeConfig.layerStatic({
      server: server.url,
      namespace: server.namespace,
      ...(Option.isSome(token) ? { token: Redacted.value(token.value) } : {})
    })
  })
)

/** The simulated server and a `KubeConfig` pointing at it, together. */
export const layerWithKubeConfig = (
  options: Options
): Layer.Layer<SimulatedApiServer | KubeConfig.KubeConfig, ServeError> =>
  Layer.provideMerge(layerKubeConfig, layer(options))

const make = (options: Options) =>
  Effect.gen(function*() {
    const resource = options.resource
    const kind = options.kind ?? kindFromPlural(resource.plural)
    const apiVersion = KubeResourceModule.apiVersion(resource)
    const defaultNamespace = options.namespace ?? "default"
    const user = options.user ?? `system:serviceaccount:${defaultNamespace}:default`
    const bookmarkInterval = Duration.decode(options.bookmarkInterval ?? Duration.seconds(60))
    const store = new ObjectStore({
      resource,
      kind,
      historySize: Math.max(1, options.historySize ?? 100),
      initialResourceVersion: options.initialResourceVersion ?? 1
    })

    let token = options.token
    const watches = new Set<WatchHandle>()
    const sockets = new Set<Net.Socket>()
    let faults: Array<PendingFault> = []
    const forbidden = new Set<Verb>()
    let recorded: Array<RecordedRequest> = []
    const requestsSeen = yield* SubscriptionRef.make(0)
    const openWatchCount = yield* SubscriptionRef.make(0)

    const writeContext = (manager: string, requireResourceVersion: boolean, keepStatusOnCreate: boolean) =>
      Effect.map(
        Clock.currentTimeMillis,
        (millis): WriteContext => ({
          now: new Date(millis).toISOString().replace(/\.\d{3}Z$/, "Z"),
          uid: randomUUID(),
          manager,
          requireResourceVersion,
          keepStatusOnCreate
        })
      )

    // ---- watch lines ----------------------------------------------------------------------------

    const eventLine = (type: string, object: unknown) => `{"type":"${type}","object":${encodeUnstructured(object)}}\n`

    const bookmarkLine = (resourceVersion: number, annotations?: Record<string, string>) =>
      eventLine("BOOKMARK", {
        apiVersion,
        kind,
        metadata: { ...(annotations === undefined ? {} : { annotations }), resourceVersion: String(resourceVersion) }
      })

    // ---- HTTP handlers --------------------------------------------------------------------------

    const forbiddenStatus = (ctx: RequestContext): FailureStatus => {
      const resourceName = ctx.subresource === undefined ? resource.plural : `${resource.plural}/${ctx.subresource}`
      const scope = ctx.namespace === undefined ? "at the cluster scope" : `in the namespace "${ctx.namespace}"`
      const subject = ctx.name === undefined ? store.qualifiedResource : `${store.qualifiedResource} "${ctx.name}"`
      return {
        code: 403,
        reason: "Forbidden",
        message:
          `${subject} is forbidden: User "${user}" cannot ${ctx.verb} resource "${resourceName}" in API group "${resource.group}" ${scope}`,
        details: { ...(ctx.name === undefined ? {} : { name: ctx.name }), group: resource.group, kind: resource.plural }
      }
    }

    const faultResponse = (fault: PendingFault, ctx: RequestContext) => {
      const retryAfter = String(fault.retryAfterSeconds)
      switch (fault.kind) {
        case "TooManyRequests":
        case "StorageInitializing":
          return statusResponse(
            {
              code: 429,
              reason: "TooManyRequests",
              message: fault.kind === "TooManyRequests"
                ? "Too many requests, please try again later."
                : "storage is (re)initializing",
              details: { retryAfterSeconds: fault.retryAfterSeconds }
            },
            { "retry-after": retryAfter }
          )
        case "TooManyRequestsText":
          return HttpServerResponse.text("Too many requests, please try again later.\n", {
            status: 429,
            contentType: "text/plain; charset=utf-8",
            headers: { "retry-after": retryAfter, "x-content-type-options": "nosniff" }
          })
        case "InternalError":
          return statusResponse({
            code: 500,
            reason: "InternalError",
            message: "Internal error occurred: simulated failure",
            details: { causes: [{ message: "simulated failure" }] }
          })
        case "Unauthorized":
          return statusResponse(unauthorized)
        case "Forbidden":
          return statusResponse(forbiddenStatus(ctx))
        case "BadGatewayHtml":
          return HttpServerResponse.text(badGatewayHtml, { status: 502, contentType: "text/html" })
        case "TooLargeResourceVersion": {
          const asked = parseResourceVersion(ctx.query.get("resourceVersion") ?? "")
          return statusResponse(tooLarge(String(asked ?? store.resourceVersion + 1), store.resourceVersion))
        }
      }
    }

    /** Records the request, then answers with a queued fault, a 401 or a 403 before serving it. */
    const guarded = (
      ctx: RequestContext,
      serve: (ctx: RequestContext) => Effect.Effect<HttpServerResponse.HttpServerResponse>
    ): Effect.Effect<HttpServerResponse.HttpServerResponse> =>
      Effect.suspend(() => {
        const query: Record<string, string> = {}
        for (const [key, value] of ctx.query) if (!(key in query)) query[key] = value
        recorded.push({
          verb: ctx.verb,
          method: ctx.request.method,
          path: ctx.path,
          namespace: ctx.namespace,
          name: ctx.name,
          subresource: ctx.subresource,
          query
        })
        const fault = faults.find((f) => f.remaining > 0 && (f.verbs === undefined || f.verbs.includes(ctx.verb)))
        if (fault !== undefined) {
          fault.remaining -= 1
          faults = faults.filter((f) => f.remaining > 0)
        }
        return SubscriptionRef.update(requestsSeen, (n) => n + 1).pipe(
          Effect.zipRight(
            Effect.suspend(() => {
              if (fault !== undefined) return Effect.succeed(faultResponse(fault, ctx))
              if (token !== undefined && ctx.request.headers["authorization"] !== `Bearer ${token}`) {
                return Effect.succeed(statusResponse(unauthorized))
              }
              if (forbidden.has(ctx.verb)) return Effect.succeed(statusResponse(forbiddenStatus(ctx)))
              return serve(ctx)
            })
          )
        )
      })

    const readJson = (ctx: RequestContext): Effect.Effect<Either.Either<unknown, FailureStatus>> =>
      ctx.request.text.pipe(
        Effect.map((text) => {
          try {
            return Either.right(JSON.parse(text) as unknown)
          } catch (error) {
            return Either.left(badRequest(`the body of the request could not be decoded as JSON: ${String(error)}`))
          }
        }),
        Effect.catchAll(() => Effect.succeed(Either.left(badRequest("the body of the request could not be read"))))
      )

    const managerOf = (ctx: RequestContext): string => {
      const fromQuery = ctx.query.get("fieldManager")
      if (fromQuery !== null && fromQuery !== "") return fromQuery
      const agent = ctx.request.headers["user-agent"] ?? ""
      return agent.split("/")[0] || "unknown"
    }

    const objectResponse = (status: number) => (result: Either.Either<KubeObject, FailureStatus>) =>
      Either.isLeft(result) ? statusResponse(result.left) : jsonResponse(status, encodeUnstructured(result.right))

    const selects = (ctx: RequestContext, selectors: Selectors) => (object: KubeObject): boolean =>
      (ctx.namespace === undefined || namespaceOf(object) === ctx.namespace) &&
      matchesLabels(selectors.labels, labelsOf(object)) &&
      matchesFields(selectors.fields, nameOf(object), namespaceOf(object))

    const serveList = (ctx: RequestContext) =>
      Effect.sync(() => {
        const answer = Either.flatMap(
          listRequestOf(ctx.query),
          (request) => listAnswer(store, { apiVersion, kind }, ctx.namespace, request, selects(ctx, request.selectors))
        )
        return Either.isLeft(answer) ? statusResponse(answer.left) : jsonResponse(200, encodeUnstructured(answer.right))
      })

    const serveWatch = (ctx: RequestContext) =>
      Effect.gen(function*() {
        const request = watchRequestOf(ctx.query)
        if (Either.isLeft(request)) return statusResponse(request.left)
        // The apiserver's default: a random time between its minimum request timeout and twice that.
        const timeoutSeconds = request.right.timeoutSeconds ?? (yield* Random.nextIntBetween(1800, 3600))
        const body = watchBody(
          { store, watches, openWatchCount, bookmarkInterval, eventLine, bookmarkLine },
          { ...request.right, timeoutSeconds },
          selects(ctx, request.right.selectors),
          NodeHttpServerRequest.toServerResponse(ctx.request)
        )
        const encoder = new TextEncoder()
        return HttpServerResponse.stream(Stream.map(body, (line) => encoder.encode(line)), {
          contentType: "application/json",
          headers: { "cache-control": "no-cache, private" }
        })
      })

    const serveGet = (ctx: RequestContext) =>
      Effect.sync(() => {
        const object = store.get(ctx.namespace!, ctx.name!)
        return object === undefined
          ? statusResponse(store.notFound(ctx.name!))
          : jsonResponse(200, encodeUnstructured(object))
      })

    const serveCreate = (ctx: RequestContext) =>
      Effect.gen(function*() {
        const body = yield* readJson(ctx)
        if (Either.isLeft(body)) return statusResponse(body.left)
        const context = yield* writeContext(managerOf(ctx), true, false)
        return objectResponse(201)(store.create(ctx.namespace!, body.right, context))
      })

    const serveReplace = (ctx: RequestContext) =>
      Effect.gen(function*() {
        const body = yield* readJson(ctx)
        if (Either.isLeft(body)) return statusResponse(body.left)
        const context = yield* writeContext(managerOf(ctx), true, false)
        return objectResponse(200)(store.replace(ctx.namespace!, ctx.name!, body.right, context, ctx.subresource))
      })

    const servePatch = (ctx: RequestContext) =>
      Effect.gen(function*() {
        const contentType = (ctx.request.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase()
        if (contentType !== "application/merge-patch+json") {
          return statusResponse({
            code: 415,
            reason: "UnsupportedMediaType",
            message:
              "the body of the request was in an unknown format - accepted media types include: application/merge-patch+json"
          })
        }
        const body = yield* readJson(ctx)
        if (Either.isLeft(body)) return statusResponse(body.left)
        const context = yield* writeContext(managerOf(ctx), false, false)
        return objectResponse(200)(store.mergePatch(ctx.namespace!, ctx.name!, body.right, context, ctx.subresource))
      })

    const serveDelete = (ctx: RequestContext) =>
      Effect.gen(function*() {
        const context = yield* writeContext(managerOf(ctx), false, false)
        const result = store.delete(ctx.namespace!, ctx.name!, context)
        if (Either.isLeft(result) || store.get(ctx.namespace!, ctx.name!) !== undefined) {
          return objectResponse(200)(result)
        }
        // Gone at once: like kube-apiserver for a custom resource, a Success Status naming what went
        // (the object itself comes back only while finalizers hold the delete).
        return jsonResponse(
          200,
          encodeSuccessStatus({
            name: nameOf(result.right),
            group: resource.group,
            kind: resource.plural,
            uid: String(result.right.metadata.uid ?? "")
          })
        )
      })

    // ---- routes ---------------------------------------------------------------------------------

    const root = KubeResourceModule.collectionPath(resource)
    const base = root.slice(0, root.length - resource.plural.length - 1)
    const collection = `${base}/namespaces/:namespace/${resource.plural}` as HttpRouter.PathInput
    const allNamespaces = `${base}/${resource.plural}` as HttpRouter.PathInput
    const item = `${collection}/:name` as HttpRouter.PathInput
    const status = `${item}/status` as HttpRouter.PathInput

    const route = (
      verbOf: (query: URLSearchParams) => Verb,
      scope: "namespace" | "all",
      subresource: "status" | undefined,
      serve: (ctx: RequestContext) => Effect.Effect<HttpServerResponse.HttpServerResponse>
    ) =>
      Effect.gen(function*() {
        const request = yield* HttpServerRequest.HttpServerRequest
        const params = yield* HttpRouter.params
        const url = new URL(request.url, "http://simulated")
        const ctx: RequestContext = {
          request,
          verb: verbOf(url.searchParams),
          path: url.pathname,
          query: url.searchParams,
          namespace: scope === "all" ? undefined : params.namespace,
          name: params.name,
          subresource
        }
        return yield* guarded(ctx, serve)
      })

    const listOrWatch = (query: URLSearchParams): Verb => (queryBool(query, "watch") === true ? "watch" : "list")
    const serveCollection = (ctx: RequestContext) => (ctx.verb === "watch" ? serveWatch(ctx) : serveList(ctx))
    const always = (verb: Verb) => () => verb

    const router = HttpRouter.empty.pipe(
      HttpRouter.get(collection, route(listOrWatch, "namespace", undefined, serveCollection)),
      HttpRouter.get(allNamespaces, route(listOrWatch, "all", undefined, serveCollection)),
      HttpRouter.post(collection, route(always("create"), "namespace", undefined, serveCreate)),
      HttpRouter.get(item, route(always("get"), "namespace", undefined, serveGet)),
      HttpRouter.put(item, route(always("update"), "namespace", undefined, serveReplace)),
      HttpRouter.patch(item, route(always("patch"), "namespace", undefined, servePatch)),
      HttpRouter.del(item, route(always("delete"), "namespace", undefined, serveDelete)),
      HttpRouter.get(status, route(always("get"), "namespace", "status", serveGet)),
      HttpRouter.put(status, route(always("update"), "namespace", "status", serveReplace)),
      HttpRouter.patch(status, route(always("patch"), "namespace", "status", servePatch)),
      HttpRouter.get(
        "/version",
        Effect.succeed(
          jsonResponse(
            200,
            JSON.stringify({ major: "1", minor: "20", gitVersion: "v1.20.2", platform: "linux/amd64" }, null, 2)
          )
        )
      )
    )
    const app = router.pipe(
      Effect.catchTag("RouteNotFound", () =>
        Effect.succeed(
          statusResponse({
            code: 404,
            reason: "NotFound",
            message: "the server could not find the requested resource",
            details: {}
          })
        ))
    )

    // ---- the server -----------------------------------------------------------------------------

    const nodeServer = Http.createServer()
    nodeServer.on("connection", (socket: Net.Socket) => {
      sockets.add(socket)
      socket.on("close", () => sockets.delete(socket))
    })
    const httpServer = yield* NodeHttpServer.make(() => nodeServer, { port: options.port ?? 0, host: "127.0.0.1" })
    yield* httpServer.serve(app)
    const address = httpServer.address
    const url = address._tag === "TcpAddress" ? `http://127.0.0.1:${address.port}` : "http://127.0.0.1"

    // Suspended: the set of open watches is read when it runs, not when this is defined.
    const eachWatch = (f: (handle: WatchHandle) => Effect.Effect<unknown>) =>
      Effect.suspend(() => Effect.forEach([...watches], f, { discard: true }))
    const closeAllWatches = eachWatch((handle) => Deferred.succeed(handle.closed, undefined))

    // Runs before the server's own close: end watches cleanly, then cut whatever is left.
    yield* Effect.addFinalizer(() =>
      closeAllWatches.pipe(
        Effect.zipRight(openWatchCount.changes.pipe(Stream.filter((n) => n === 0), Stream.take(1), Stream.runDrain)),
        Effect.zipRight(Effect.sync(() => nodeServer.closeAllConnections()))
      )
    )

    // ---- the service ----------------------------------------------------------------------------

    const toSimulated = (object: KubeObject): SimulatedObject => clone(object) as unknown as SimulatedObject
    const directWrite = (
      write: (context: WriteContext) => Either.Either<KubeObject, FailureStatus>,
      keepStatusOnCreate = false
    ) =>
      Effect.flatMap(writeContext("sandbox-watch-simulator", false, keepStatusOnCreate), (context) => {
        const result = write(context)
        return Either.isLeft(result)
          ? Effect.fail(
            new SimulatedWriteError({
              code: result.left.code,
              reason: result.left.reason,
              message: result.left.message
            })
          )
          : Effect.succeed(toSimulated(result.right))
      })
    const namespaceOfOptions = (o?: ObjectOptions) => o?.namespace ?? defaultNamespace
    const countOf = (
      verb?: Verb
    ) => (verb === undefined ? recorded.length : recorded.filter((r) => r.verb === verb).length)

    const service: SimulatedApiServerService = {
      url,
      resource,
      kind,
      namespace: defaultNamespace,
      token: Effect.sync(() => Option.map(Option.fromNullable(token), Redacted.make)),
      setToken: (next) =>
        Effect.sync(() => {
          token = next
        }),
      resourceVersion: Effect.sync(() => String(store.resourceVersion)),
      create: (object, o) => directWrite((context) => store.create(namespaceOfOptions(o), object, context), true),
      get: (name, o) =>
        Effect.sync(() => Option.map(Option.fromNullable(store.get(namespaceOfOptions(o), name)), toSimulated)),
      list: (o) =>
        Effect.sync(() =>
          store
            .current()
            .filter(([, object]) => namespaceOf(object) === namespaceOfOptions(o))
            .map(([, object]) => toSimulated(object))
        ),
      replace: (object, o) =>
        directWrite((context) => {
          const name = typeof object === "object" && object !== null
            ? (object as { metadata?: { name?: unknown } }).metadata?.name
            : undefined
          return store.replace(
            namespaceOfOptions(o),
            typeof name === "string" ? name : "",
            object,
            context,
            o?.subresource
          )
        }),
      mergePatch: (name, patch, o) =>
        directWrite((context) => store.mergePatch(namespaceOfOptions(o), name, patch, context, o?.subresource)),
      delete: (name, o) => directWrite((context) => store.delete(namespaceOfOptions(o), name, context)),

      closeWatches: closeAllWatches,
      stallWatches: eachWatch((handle) => handle.gate.close),
      unstall: eachWatch((handle) => handle.gate.open),
      failNext: (count, fault, o) =>
        Effect.sync(() => {
          if (count <= 0) return
          faults.push({ remaining: count, kind: fault, verbs: o?.verbs, retryAfterSeconds: o?.retryAfterSeconds ?? 1 })
        }),
      clearFaults: Effect.sync(() => {
        faults = []
      }),
      writeMalformedLine: (text = "this is not json") =>
        Effect.sync(() => {
          for (const handle of watches) offer(handle, { _tag: "Line", text: `${text}\n` })
        }),
      writeTruncatedLine: Effect.sync(() => {
        const sample = store.current()[0]?.[1] ??
          { apiVersion, kind, metadata: { name: "truncated", resourceVersion: String(store.resourceVersion) } }
        const line = eventLine("MODIFIED", sample)
        for (const handle of watches) {
          offer(handle, { _tag: "Truncate", text: line.slice(0, Math.floor(line.length / 2)) })
        }
      }),
      restart: closeAllWatches.pipe(Effect.zipRight(Effect.sync(() => store.restart()))),
      dropConnections: Effect.sync(() => {
        for (const socket of [...sockets]) socket.resetAndDestroy()
      }),
      forbid: (...verbs) =>
        Effect.sync(() => {
          for (const verb of verbs) forbidden.add(verb)
        }),
      allow: (...verbs) =>
        Effect.sync(() => {
          if (verbs.length === 0) forbidden.clear()
          for (const verb of verbs) forbidden.delete(verb)
        }),

      requests: Effect.sync(() => [...recorded]),
      requestsOf: (verb) => Effect.sync(() => recorded.filter((r) => r.verb === verb)),
      awaitRequests: (count, verb) =>
        requestsSeen.changes.pipe(
          Stream.filter(() => countOf(verb) >= count),
          Stream.take(1),
          Stream.runDrain,
          Effect.zipRight(
            Effect.sync(() => (verb === undefined ? [...recorded] : recorded.filter((r) => r.verb === verb)))
          )
        ),
      clearRequests: Effect.sync(() => {
        recorded = []
      }),
      openWatches: SubscriptionRef.get(openWatchCount),
      awaitOpenWatches: (count) =>
        openWatchCount.changes.pipe(Stream.filter((n) => n === count), Stream.take(1), Stream.runDrain)
    }
    return service
  })
