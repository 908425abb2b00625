/**
 * A Kubernetes API client as an Effect service: list, list-all (paged), watch (a `Stream` of typed
 * events, or the same opened as a pull) and the writes a test or a demo operator needs. Nothing in
 * it knows about Sandboxes: a resource is a value and an object is whatever `Schema` the caller
 * hands in.
 */
// The very `undici` that platform-node re-exports (its own HTTP client runs on it), so no
// undeclared dependency is imported.
import { Agent, type Dispatcher, ProxyAgent } from "@effect/platform-node/Undici"
import { Context, Duration, Effect, Layer, Option, Redacted, Scope } from "effect"
import { makeClientService } from "./internal/clientService.ts"
import { DeadlineTimer } from "./internal/deadlineTimer.ts"
import type { KubeClientService } from "./internal/kubeClientTypes.ts"
import { DefaultMaxListBytes, DefaultMaxListItems } from "./internal/listDraft.ts"
import { proxyFor } from "./internal/proxy.ts"
import type { ClusterConnection, ClusterTls } from "./KubeConfig.ts"
import { KubeConfig } from "./KubeConfig.ts"

export type {
  FullList,
  KubeClientLimits,
  KubeClientService,
  ListAllOptions,
  ListOptions,
  ListPage,
  WatchOptions,
  WatchPull
} from "./internal/kubeClientTypes.ts"

export class KubeClient extends Context.Tag("sandbox-watch/KubeClient")<KubeClient, KubeClientService>() {}

// -------------------------------------------------------------------------------------------------
// Implementation: undici over one keep-alive Agent (`internal/undiciExchange.ts` says why not the
// platform's HttpClient).
// -------------------------------------------------------------------------------------------------

/** Options of `make` and `layerWith`. */
export interface KubeClientOptions {
  /**
   * The longest watch line accepted, in bytes. A longer one fails the watch with
   * `KubeLineTooLongError` instead of being buffered. Default `DefaultMaxLineBytes` (16 MiB).
   */
  readonly maxLineBytes?: number
  /**
   * How long any request may wait for the answer's status and headers (a watch's included) before
   * it is abandoned with a `KubeTransportError`; and, before it is sent, for its credentials to be
   * read (an exec plugin's run, stopped when this passes; the error's `reached` is `"not-sent"`).
   * Default `DefaultHeadersTimeout` (30 s).
   */
  readonly headersTimeout?: Duration.DurationInput
  /**
   * How long the body of an answer that is not a watch (a list page, a get, a write, an error's
   * Status) may take to arrive whole. A watch's body is open-ended: its silence is the watcher's
   * to judge. Default `DefaultBodyTimeout` (60 s).
   */
  readonly bodyTimeout?: Duration.DurationInput
  /**
   * The largest list page (or get, or write answer) read, in bytes; past it the read stops and the
   * request fails with `KubeBodyTooLargeError`. Default `DefaultMaxListPageBytes` (128 MiB).
   */
  readonly maxListPageBytes?: number
  /** How much of an error's body is read for its message; the rest is not read. Default 64 KiB. */
  readonly maxErrorBodyBytes?: number
  /**
   * The most pages one `listAll` reads, counting a start-over after an expired continue token (a
   * `continue` that never ends stops there). Default 10,000.
   */
  readonly maxListPages?: number
  /**
   * The most objects one list holds, paged (`listAll`) or streamed (`SandboxWatch`'s streaming list
   * reads it from `limits`): past it the list is abandoned with `KubeBodyTooLargeError`. A name sent
   * twice is held once. Default `DefaultMaxListItems` (100,000).
   */
  readonly maxListItems?: number
  /**
   * The most JSON one list holds, in bytes, paged or streamed: the length of what each object it
   * keeps was read from (a streaming list's watch lines; a page's text shared among its objects),
   * managedFields left out unless the schema reads them. Past it the list is abandoned with
   * `KubeBodyTooLargeError` (unit `bytes`); a name sent again replaces its length. Default
   * `DefaultMaxListBytes` (32 MiB).
   */
  readonly maxListBytes?: number
}

/**
 * 128 MiB: a page of 500 Sandboxes is about 1.6 MB (the bench's 3.2 KB Sandboxes), so this is a
 * margin of some 80 times; and it stays far below V8's longest string (about 512 MiB), which a page
 * must become to be parsed.
 */
export const DefaultMaxListPageBytes = 128 * 1024 * 1024

/** 64 KiB: an apiserver's Status is a few hundred bytes; a proxy's error page a few KB. */
export const DefaultMaxErrorBodyBytes = 64 * 1024

/** 10,000 pages: an endless `continue` stops there, whatever each page holds. */
export const DefaultMaxListPages = 10_000

export { DefaultMaxListBytes, DefaultMaxListItems } from "./internal/listDraft.ts"

/**
 * 30 s for the headers: an apiserver answers a list's first page or a watch's headers in
 * milliseconds; the platform's own client would wait an hour.
 */
export const DefaultHeadersTimeout: Duration.Duration = Duration.seconds(30)

/**
 * 60 s for a whole body: the platform's client has no body deadline at all, so a list whose body
 * stalls (an apiserver shutting down mid-list, a half-dead proxy) would hang the watch for ever. A
 * page of 500 Sandboxes is ~1.5 MB.
 */
export const DefaultBodyTimeout: Duration.Duration = Duration.seconds(60)

/** 16 MiB: far above what etcd lets an object be (1.5 MiB by default), envelope and all. */
export const DefaultMaxLineBytes = 16 * 1024 * 1024

/** The TLS part of undici's connect options, from the kubeconfig's. */
const connectOptions = (tls: ClusterTls) => ({
  rejectUnauthorized: !tls.insecureSkipTlsVerify,
  ...(Option.isSome(tls.ca) ? { ca: tls.ca.value } : {}),
  ...(Option.isSome(tls.clientCertificate) ? { cert: tls.clientCertificate.value } : {}),
  ...(Option.isSome(tls.clientKey) ? { key: Redacted.value(tls.clientKey.value) } : {}),
  ...(Option.isSome(tls.serverName) ? { servername: tls.serverName.value } : {})
})

/**
 * One dispatcher per client, closed with the scope: an Agent whose pool keeps connections alive
 * between requests, or a ProxyAgent (CONNECT) when the cluster is reached through a proxy.
 */
const makeAgent = (connection: ClusterConnection): Effect.Effect<Dispatcher, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.sync((): Dispatcher => {
      // Reuse idle connections for a while, but drop them before a server's idle timeout does.
      const keepAlive = { keepAliveTimeout: 30_000, keepAliveMaxTimeout: 300_000 }
      return Option.match(proxyFor(connection.server, connection.proxyUrl, process.env), {
        onNone: () => new Agent({ ...keepAlive, connect: connectOptions(connection.tls) }),
        onSome: (uri) => new ProxyAgent({ ...keepAlive, uri, requestTls: connectOptions(connection.tls) })
      })
    }),
    // `destroy`, not `close`: close waits for open watches, which may never end by themselves.
    (agent) => Effect.promise(() => agent.destroy().catch(() => undefined))
  )

/**
 * A client for the cluster `KubeConfig` names: one undici Agent (keep-alive, the cluster's CA,
 * client certificate and server name) that lives as long as the scope.
 */
export const make = (
  options: KubeClientOptions = {}
): Effect.Effect<KubeClientService, never, KubeConfig | Scope.Scope> =>
  Effect.gen(function*() {
    const maxLineBytes = options.maxLineBytes ?? DefaultMaxLineBytes
    if (!Number.isInteger(maxLineBytes) || maxLineBytes < 1) {
      return yield* Effect.dieMessage(`KubeClient: maxLineBytes must be a positive integer, not ${maxLineBytes}`)
    }
    const connection = yield* KubeConfig
    const agent = yield* makeAgent(connection)
    // One fiber keeps every request's headers deadline, for as long as the client lives.
    const timer = new DeadlineTimer(yield* Effect.clock)
    yield* Effect.forkScoped(timer.run)
    const counts = {
      maxListPageBytes: options.maxListPageBytes ?? DefaultMaxListPageBytes,
      maxErrorBodyBytes: options.maxErrorBodyBytes ?? DefaultMaxErrorBodyBytes,
      maxListPages: options.maxListPages ?? DefaultMaxListPages,
      maxListItems: options.maxListItems ?? DefaultMaxListItems,
      maxListBytes: options.maxListBytes ?? DefaultMaxListBytes
    }
    for (const [name, value] of Object.entries(counts)) {
      if (!Number.isSafeInteger(value) || value < 1) {
        return yield* Effect.dieMessage(`KubeClient: ${name} must be a positive integer, not ${value}`)
      }
    }
    return makeClientService(connection, agent, timer, yield* Effect.scope, {
      maxLineBytes,
      headersTimeout: Duration.decode(options.headersTimeout ?? DefaultHeadersTimeout),
      bodyTimeout: Duration.decode(options.bodyTimeout ?? DefaultBodyTimeout),
      ...counts
    })
  })

/** `layer` with options (`maxLineBytes`, the request deadlines). */
export const layerWith = (options: KubeClientOptions): Layer.Layer<KubeClient, never, KubeConfig> =>
  Layer.scoped(KubeClient, make(options))

/** The client for the cluster `KubeConfig` names; its connections close with the layer. */
export const layer: Layer.Layer<KubeClient, never, KubeConfig> = layerWith({})
