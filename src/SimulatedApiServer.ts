/**
 * A simulated Kubernetes API server for one namespaced resource, over real HTTP on loopback. It
 * answers as kube-apiserver does on the wire (the Status JSON, the 410 inside a 200 watch, the 504
 * for a too-large resourceVersion, the shapes of 429), as 1.20 does where the two releases agree and
 * as 1.37 does where only the modern one speaks (a streaming list's validation and end bookmark, the
 * 429 of a warming watch cache); test/apiserver/differential.test.ts holds it to both. It can misbehave on demand
 * (stall, close, reset, truncate, refuse, lose its CRD for a while) or be a server unlike
 * kube-apiserver (one that ignores `sendInitialEvents`), so the watch can be tested end to end in
 * milliseconds and the program's `--demo` can run against an embedded cluster.
 *
 * Timers (bookmarks, watch timeouts) use Effect's `Clock` of the environment that built the layer:
 * the live clock in the program, `TestClock` in a test.
 *
 * Its parts (the gate of faults, token and RBAC; the reads, writes and watches; the routes; the
 * HTTP server) are in `internal/simulator/`, each given the state it may change; `make` only wires them.
 */
import type { ServeError } from "@effect/platform/HttpServerError"
import { Context, Data, Duration, Effect, Either, Layer, Option, Redacted, Stream, SubscriptionRef } from "effect"
import type * as Net from "node:net"
import type { Access, FaultKind, Gate, RecordedRequest, RequestLog } from "./internal/simulator/gate.ts"
import { guarded } from "./internal/simulator/gate.ts"
import type { Verb } from "./internal/simulator/http.ts"
import { listen } from "./internal/simulator/httpServer.ts"
import type { FailureStatus } from "./internal/simulator/kubeJson.ts"
import { clone } from "./internal/simulator/kubeJson.ts"
import type { KubeObject, WriteContext } from "./internal/simulator/objectStore.ts"
import { namespaceOf, ObjectStore } from "./internal/simulator/objectStore.ts"
import { serveGet, serveList, serveWatch } from "./internal/simulator/reads.ts"
import { routes } from "./internal/simulator/routes.ts"
import type { WatchServer } from "./internal/simulator/watchBody.ts"
import { closeWatches, eachWatch, eventLine, offer } from "./internal/simulator/watchBody.ts"
import { serveCreate, serveDelete, servePatch, serveReplace, writeContext } from "./internal/simulator/writes.ts"
import * as KubeConfig from "./KubeConfig.ts"
import type { KubeResource } from "./KubeResource.ts"
import * as KubeResourceModule from "./KubeResource.ts"

export type { FaultKind, RecordedRequest } from "./internal/simulator/gate.ts"
export type { Verb } from "./internal/simulator/http.ts"

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
  /**
   * The `WatchList` feature gate: streaming lists (`sendInitialEvents`) are served, as on 1.34+ by
   * default. `false` answers them as a server with the gate off does: 422, "sendInitialEvents is
   * forbidden for watch unless the WatchList feature gate is enabled". Default true.
   */
  readonly watchList?: boolean
  /**
   * The `WatchListCompression` feature gate (1.37, on by default): a streaming list whose request
   * accepts gzip is answered gzipped, the whole watch, one gzip member per flush. Default true.
   */
  readonly watchListCompression?: boolean
  /**
   * A server that does not know `sendInitialEvents` (an aggregated API server, a proxy, a test
   * double): a streaming list's request is answered as a plain watch from now, with no initial
   * events and no end bookmark (its `resourceVersionMatch` unread too), which the server ends at
   * once, cleanly, after what it had (nothing). Plain watches and lists are served as ever. Default false.
   */
  readonly ignoreSendInitialEvents?: boolean
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
  /**
   * The resource's CustomResourceDefinition goes away: every open watch ends cleanly (kube-apiserver
   * drops the resource's storage) and every request for the resource answers kube-apiserver's 404
   * Status until `restoreResource`. Objects stay, as while a CRD is registered again after an
   * apiserver restart; to model a CRD's deletion, delete them first, as its finalizer does.
   */
  readonly withdrawResource: Effect.Effect<void>
  /**
   * The resource is served again, from a new watch cache: a watch from a resourceVersion before it
   * answers 410, as after a restart.
   */
  readonly restoreResource: Effect.Effect<void>
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

// ---- the service: its methods, grouped by the state they change ------------------------------

const toSimulated = (object: KubeObject): SimulatedObject => clone(object) as unknown as SimulatedObject

/** A write by the test's own hand: no resourceVersion needed, and a refusal is a typed error. */
const directWrite = (
  write: (context: WriteContext) => Either.Either<KubeObject, FailureStatus>,
  keepStatusOnCreate = false
) =>
  Effect.flatMap(writeContext("sandbox-watch-simulator", false, keepStatusOnCreate), (context) => {
    const result = write(context)
    return Either.isLeft(result)
      ? Effect.fail(
        new SimulatedWriteError({ code: result.left.code, reason: result.left.reason, message: result.left.message })
      )
      : Effect.succeed(toSimulated(result.right))
  })

/** The direct methods: the store read and written without HTTP. They change only `store`. */
const objectMethods = (
  store: ObjectStore,
  defaultNamespace: string
): Pick<
  SimulatedApiServerService,
  "resourceVersion" | "create" | "get" | "list" | "replace" | "mergePatch" | "delete"
> => {
  const namespaceOfOptions = (o?: ObjectOptions) => o?.namespace ?? defaultNamespace
  return {
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
    delete: (name, o) => directWrite((context) => store.delete(namespaceOfOptions(o), name, context))
  }
}

/** Misbehaviour of the open watches and connections; a restart also forgets the store's history. */
const watchMethods = (
  server: WatchServer,
  sockets: ReadonlySet<Net.Socket>
): Pick<
  SimulatedApiServerService,
  | "closeWatches"
  | "stallWatches"
  | "unstall"
  | "writeMalformedLine"
  | "writeTruncatedLine"
  | "restart"
  | "dropConnections"
  | "openWatches"
  | "awaitOpenWatches"
> => {
  const { openWatchCount, store, watches } = server
  return {
    closeWatches: closeWatches(watches),
    stallWatches: eachWatch(watches, (handle) => handle.gate.close),
    unstall: eachWatch(watches, (handle) => handle.gate.open),
    writeMalformedLine: (text = "this is not json") =>
      Effect.sync(() => {
        for (const handle of watches) offer(handle, { _tag: "Line", text: `${text}\n` })
      }),
    writeTruncatedLine: Effect.sync(() => {
      const sample = store.current()[0]?.[1] ??
        {
          apiVersion: server.apiVersion,
          kind: server.kind,
          metadata: { name: "truncated", resourceVersion: String(store.resourceVersion) }
        }
      const line = eventLine("MODIFIED", sample)
      for (const handle of watches) {
        offer(handle, { _tag: "Truncate", text: line.slice(0, Math.floor(line.length / 2)) })
      }
    }),
    restart: closeWatches(watches).pipe(Effect.zipRight(Effect.sync(() => store.restart()))),
    dropConnections: Effect.sync(() => {
      for (const socket of [...sockets]) socket.resetAndDestroy()
    }),
    openWatches: SubscriptionRef.get(openWatchCount),
    awaitOpenWatches: (count) =>
      openWatchCount.changes.pipe(Stream.filter((n) => n === count), Stream.take(1), Stream.runDrain)
  }
}

/** Whether the resource is served: `access`, and the open watches and history a withdrawal ends. */
const resourceMethods = (
  access: Access,
  server: WatchServer
): Pick<SimulatedApiServerService, "withdrawResource" | "restoreResource"> => ({
  withdrawResource: Effect.sync(() => {
    access.withdrawn = true
  }).pipe(Effect.zipRight(closeWatches(server.watches))),
  restoreResource: Effect.sync(() => {
    server.store.restart()
    access.withdrawn = false
  })
})

/** The token, queued faults and RBAC a request must get past. They change only `access`. */
const accessMethods = (
  access: Access
): Pick<SimulatedApiServerService, "token" | "setToken" | "failNext" | "clearFaults" | "forbid" | "allow"> => ({
  token: Effect.sync(() => Option.map(Option.fromNullable(access.token), Redacted.make)),
  setToken: (next) =>
    Effect.sync(() => {
      access.token = next
    }),
  failNext: (count, fault, o) =>
    Effect.sync(() => {
      if (count <= 0) return
      access.faults.push({
        remaining: count,
        kind: fault,
        verbs: o?.verbs,
        retryAfterSeconds: o?.retryAfterSeconds ?? 1
      })
    }),
  clearFaults: Effect.sync(() => {
    access.faults = []
  }),
  forbid: (...verbs) =>
    Effect.sync(() => {
      for (const verb of verbs) access.forbidden.add(verb)
    }),
  allow: (...verbs) =>
    Effect.sync(() => {
      if (verbs.length === 0) access.forbidden.clear()
      for (const verb of verbs) access.forbidden.delete(verb)
    })
})

/** The requests seen, read and awaited. Only `clearRequests` changes `log`. */
const requestMethods = (
  log: RequestLog
): Pick<SimulatedApiServerService, "requests" | "requestsOf" | "awaitRequests" | "clearRequests"> => {
  const ofVerb = (verb?: Verb) => (verb === undefined ? [...log.recorded] : log.recorded.filter((r) => r.verb === verb))
  return {
    requests: Effect.sync(() => [...log.recorded]),
    requestsOf: (verb) => Effect.sync(() => ofVerb(verb)),
    awaitRequests: (count, verb) =>
      log.seen.changes.pipe(
        Stream.filter(() => ofVerb(verb).length >= count),
        Stream.take(1),
        Stream.runDrain,
        Effect.zipRight(Effect.sync(() => ofVerb(verb)))
      ),
    clearRequests: Effect.sync(() => {
      log.recorded = []
    })
  }
}

// ---- wiring ---------------------------------------------------------------------------------

/** Wiring only: the state the parts share, the handlers behind the gate, the server, the service. */
const make = (options: Options) =>
  Effect.gen(function*() {
    const resource = options.resource
    const kind = options.kind ?? kindFromPlural(resource.plural)
    const apiVersion = KubeResourceModule.apiVersion(resource)
    const defaultNamespace = options.namespace ?? "default"
    const store = new ObjectStore({
      resource,
      kind,
      historySize: Math.max(1, options.historySize ?? 100),
      initialResourceVersion: options.initialResourceVersion ?? 1
    })
    const watchServer: WatchServer = {
      store,
      apiVersion,
      kind,
      watches: new Set(),
      openWatchCount: yield* SubscriptionRef.make(0),
      bookmarkInterval: Duration.decode(options.bookmarkInterval ?? Duration.seconds(60)),
      watchList: options.watchList ?? true,
      watchListCompression: options.watchListCompression ?? true,
      ignoreSendInitialEvents: options.ignoreSendInitialEvents ?? false
    }
    const gate: Gate = {
      log: { recorded: [], seen: yield* SubscriptionRef.make(0) },
      access: { token: options.token, faults: [], forbidden: new Set(), withdrawn: false },
      resource,
      user: options.user ?? `system:serviceaccount:${defaultNamespace}:default`,
      store
    }

    const app = routes(resource, {
      list: (ctx) => serveList(store, { apiVersion, kind }, ctx),
      watch: (ctx) => serveWatch(watchServer, ctx),
      get: (ctx) => serveGet(store, ctx),
      create: (ctx) => serveCreate(store, ctx),
      replace: (ctx) => serveReplace(store, ctx),
      patch: (ctx) => servePatch(store, ctx),
      delete: (ctx) => serveDelete(store, resource, ctx)
    }, (ctx, serve) => guarded(gate, ctx, serve))
    const { sockets, url } = yield* listen(app, options.port ?? 0, watchServer)

    const service: SimulatedApiServerService = {
      url,
      resource,
      kind,
      namespace: defaultNamespace,
      ...objectMethods(store, defaultNamespace),
      ...watchMethods(watchServer, sockets),
      ...accessMethods(gate.access),
      ...resourceMethods(gate.access, watchServer),
      ...requestMethods(gate.log)
    }
    return service
  })
