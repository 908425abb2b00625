/**
 * A Kubernetes API client as an Effect service: list, list-all (paged), watch (a `Stream` of typed
 * events, or the same opened as a pull) and the writes a test or a demo operator needs. Nothing in
 * it knows about Sandboxes: a resource is a value and an object is whatever `Schema` the caller
 * hands in.
 */
// The very `undici` that platform-node re-exports (its own HTTP client runs on it), so no
// undeclared dependency is imported.
import { Agent, type Dispatcher, ProxyAgent } from "@effect/platform-node/Undici"
import type { Chunk } from "effect"
import {
  Clock,
  Context,
  Duration,
  Effect,
  Either,
  Fiber,
  Layer,
  Option,
  ParseResult,
  Redacted,
  type Schema,
  Scope,
  Stream,
  type Tracer
} from "effect"
import { boundedIssues } from "./internal/boundedIssues.ts"
import { continueOf, peekContinue } from "./internal/continuePeek.ts"
import { DeadlineTimer } from "./internal/deadlineTimer.ts"
import { bodyBroke, deadlinePassed, requestFailed, scrub, statusError, toStatus } from "./internal/httpFailure.ts"
import { isRecord } from "./internal/isRecord.ts"
import { cutsFor, decodeObjectWithoutManagedFields, decodeWithoutManagedFields } from "./internal/managedFields.ts"
import { excerpt, type LineHandler, pullLines } from "./internal/ndjsonLines.ts"
import { ownedDecoderFor } from "./internal/plainDecoder.ts"
import { proxyFor } from "./internal/proxy.ts"
import type { Answer, Outgoing } from "./internal/undiciExchange.ts"
import {
  BodyOverLimit,
  HeadersDeadlinePassed,
  headerValue,
  send as sendOn,
  targetOf
} from "./internal/undiciExchange.ts"
import type { ClusterConnection, ClusterTls } from "./KubeConfig.ts"
import { KubeConfig } from "./KubeConfig.ts"
import type { KubeClientError } from "./KubeError.ts"
import {
  isExpired,
  KubeBodyTooLargeError,
  KubeLineTooLongError,
  KubeMalformedBodyError,
  KubeMalformedLineError,
  KubeTransportError,
  KubeWatchIdleError
} from "./KubeError.ts"
import type { KubeResource } from "./KubeResource.ts"
import { apiVersion, collectionPath, objectPath } from "./KubeResource.ts"
import type { HasMetadata } from "./ObjectMeta.ts"
import type { BookmarkEvent, UndecodableEvent, WatchEvent } from "./WatchEvent.ts"

export interface ListOptions {
  readonly namespace?: string
  readonly labelSelector?: string
  readonly fieldSelector?: string
  readonly limit?: number
  readonly continue?: string
  /** Absent: a quorum read from etcd. `"0"`: any cached state. */
  readonly resourceVersion?: string
  readonly resourceVersionMatch?: "Exact" | "NotOlderThan"
}

export interface WatchOptions {
  readonly namespace?: string
  readonly labelSelector?: string
  readonly fieldSelector?: string
  readonly resourceVersion?: string
  readonly allowWatchBookmarks?: boolean
  readonly timeoutSeconds?: number
  readonly sendInitialEvents?: boolean
  readonly resourceVersionMatch?: "NotOlderThan"
  /**
   * Silence (no bytes at all, not even a bookmark) longer than this fails the watch with
   * `KubeWatchIdleError` and closes its connection. Bytes that arrived while the reader was busy
   * elsewhere are not silence, however long they wait to be read. Absent: the watch may be silent
   * for ever (its silence is the caller's to judge). A server closes a watch after `timeoutSeconds`
   * and sends bookmarks meanwhile, so a little more than `timeoutSeconds` is a safe limit.
   */
  readonly idleTimeout?: Duration.DurationInput
}

/**
 * The next events of an open watch, as they arrived in one read (what `Stream.toPull` gives): it
 * fails with none when the server closed the watch, with some error when the watch broke.
 */
export type WatchPull<A> = Effect.Effect<Chunk.Chunk<WatchEvent<A>>, Option.Option<KubeClientError>>

/** One page of a list. Objects that did not fit the schema are set apart, not dropped silently. */
export interface ListPage<A> {
  readonly items: ReadonlyArray<A>
  readonly undecodable: ReadonlyArray<UndecodableEvent>
  readonly resourceVersion: string
  /** The token for the next page; none on the last page (the server sends `""`). */
  readonly continue: Option.Option<string>
  readonly remainingItemCount: Option.Option<number>
}

/** A whole list, all pages joined, at the resourceVersion of its first page. */
export interface FullList<A> {
  readonly items: ReadonlyArray<A>
  readonly undecodable: ReadonlyArray<UndecodableEvent>
  readonly resourceVersion: string
  /** How many pages it took, and how many times an expired continue token made it start over. */
  readonly pages: number
  readonly restarts: number
}

export interface KubeClientService {
  readonly list: <A extends HasMetadata, I>(
    resource: KubeResource,
    schema: Schema.Schema<A, I>,
    options?: ListOptions
  ) => Effect.Effect<ListPage<A>, KubeClientError>
  /**
   * Follows `continue` page by page, each next page asked for while the one before is parsed (one
   * page ahead); a continue token that expired (410) starts the list over.
   */
  readonly listAll: <A extends HasMetadata, I>(
    resource: KubeResource,
    schema: Schema.Schema<A, I>,
    options?: Omit<ListOptions, "continue">
  ) => Effect.Effect<FullList<A>, KubeClientError>
  /** Events as they arrive; the stream ends when the server closes the watch. */
  readonly watch: <A extends HasMetadata, I>(
    resource: KubeResource,
    schema: Schema.Schema<A, I>,
    options?: WatchOptions
  ) => Stream.Stream<WatchEvent<A>, KubeClientError>
  /**
   * The same watch, opened in the caller's scope and read by pulling (`watch` is this pull as a
   * `Stream`): for a loop that resumes a watch hundreds of times a second, where a stream's own
   * machinery per watch costs twice the rest of it (`npx tsx scratchpad/watchLayers.ts`). The
   * request is sent when it opens; closing the scope closes the watch.
   */
  readonly openWatch: <A extends HasMetadata, I>(
    resource: KubeResource,
    schema: Schema.Schema<A, I>,
    options?: WatchOptions
  ) => Effect.Effect<WatchPull<A>, KubeClientError, Scope.Scope>
  /** Plain JSON writes, for tests, the demo operator and tooling. Bodies are not schema-checked. */
  readonly get: (
    resource: KubeResource,
    namespace: string | undefined,
    name: string
  ) => Effect.Effect<unknown, KubeClientError>
  readonly create: (
    resource: KubeResource,
    namespace: string | undefined,
    body: unknown
  ) => Effect.Effect<unknown, KubeClientError>
  readonly replace: (
    resource: KubeResource,
    namespace: string | undefined,
    name: string,
    body: unknown,
    options?: { readonly subresource?: "status" }
  ) => Effect.Effect<unknown, KubeClientError>
  readonly mergePatch: (
    resource: KubeResource,
    namespace: string | undefined,
    name: string,
    patch: unknown,
    options?: { readonly subresource?: "status" }
  ) => Effect.Effect<unknown, KubeClientError>
  readonly delete: (
    resource: KubeResource,
    namespace: string | undefined,
    name: string
  ) => Effect.Effect<unknown, KubeClientError>
}

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
   * it is abandoned with a `KubeTransportError`. Default `DefaultHeadersTimeout` (30 s).
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
  /** The most pages one `listAll` reads (a `continue` that never ends stops there). Default 10,000. */
  readonly maxListPages?: number
  /** The most items one `listAll` gathers. Default 5,000,000. */
  readonly maxListItems?: number
}

/**
 * 128 MiB: a page of 500 Sandboxes is about 1.6 MB (the bench's 3.2 KB Sandboxes), so this is a
 * margin of some 80 times; and it stays far below V8's longest string (about 512 MiB), which a page
 * must become to be parsed.
 */
export const DefaultMaxListPageBytes = 128 * 1024 * 1024

/** 64 KiB: an apiserver's Status is a few hundred bytes; a proxy's error page a few KB. */
export const DefaultMaxErrorBodyBytes = 64 * 1024

/** 10,000 pages of 500: five million objects, far past any namespace; an endless `continue` stops. */
export const DefaultMaxListPages = 10_000

/** 5,000,000 items: the same bound for a server that pages in pages of any size. */
export const DefaultMaxListItems = 5_000_000

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

const UserAgent = "sandbox-watch/0.1.0"
const ProblemChars = 1_000

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

type Query = ReadonlyArray<readonly [string, string | number | boolean | undefined]>

/**
 * `?a=1&b=2` (only the defined ones, each value percent-encoded), or `""`. Built by hand: a
 * `URLSearchParams` per watch request cost a resume 2–3 µs (`npm run bench -- --profile
 * sw@22:storm`). The keys are this file's own, plain ASCII.
 */
const queryString = (params: Query): string => {
  let text = ""
  for (const [key, value] of params) {
    if (value !== undefined) text += `${text === "" ? "?" : "&"}${key}=${encodeURIComponent(String(value))}`
  }
  return text
}

const resourceName = (resource: KubeResource): string => `${apiVersion(resource)}/${resource.plural}`

const spanAttributes = (
  resource: KubeResource,
  namespace: string | undefined,
  resourceVersion?: string,
  labelSelector?: string
) => {
  const attributes: Record<string, string> = { resource: resourceName(resource) }
  if (namespace !== undefined) attributes.namespace = namespace
  if (labelSelector !== undefined) attributes.labelSelector = labelSelector
  if (resourceVersion !== undefined) attributes.resourceVersion = resourceVersion
  return attributes
}

/** The credential itself (without its scheme), so error texts can be scrubbed of it. */
const secretOf = (authorization: Option.Option<Redacted.Redacted<string>>): string | undefined =>
  Option.isSome(authorization) ? Redacted.value(authorization.value).replace(/^\S+\s+/, "") : undefined

/**
 * Decodes what this client just parsed and holds alone (`ownedDecoderFor`): a Sandbox with nothing
 * the Schema would drop is validated in place, not copied. On top of the parse, 2.1–2.5 → about
 * 0.9 µs per watch event, and a cached Sandbox holds 3,304 bytes instead of 3,750
 * (`npx tsx scratchpad/ownedDecode.ts`, and its `heap` runs).
 */
type Decode<A> = (u: unknown) => Either.Either<A, ParseResult.ParseError>

/** An object that did not fit the schema, with what could still be read of it. */
const undecodable = (
  eventType: UndecodableEvent["eventType"],
  object: unknown,
  error: ParseResult.ParseError
): UndecodableEvent => {
  const metadata = isRecord(object) && isRecord(object.metadata) ? object.metadata : undefined
  const name = metadata?.name
  const resourceVersion = metadata?.resourceVersion
  // The array form names the path (`status.phase: Expected string, actual 5`); the tree form
  // spends its first kilobyte restating the schema's type.
  // Effect's formatters walk the actual value recursively and overflow the stack on deep nesting.
  const issues = boundedIssues(error.issue)
  // An optional field is `T | undefined`: each miss also reports "Expected undefined", noise.
  const real = issues.filter((issue) => !issue.message.startsWith("Expected undefined,"))
  const problem = (real.length > 0 ? real : issues)
    .map((issue) => (issue.path.length === 0 ? issue.message : `${issue.path.map(String).join(".")}: ${issue.message}`))
    .join("; ")
  return {
    type: "UNDECODABLE",
    eventType,
    name: typeof name === "string" ? name : undefined,
    resourceVersion: typeof resourceVersion === "string" ? resourceVersion : undefined,
    problem: problem.length > ProblemChars ? `${problem.slice(0, ProblemChars - 1)}…` : problem
  }
}

const NoAnnotations: Readonly<Record<string, string>> = Object.freeze({})

/** A bookmark promises only `metadata.resourceVersion` (and annotations): nothing else is read. */
const toBookmark = (object: unknown): BookmarkEvent | undefined => {
  const metadata = isRecord(object) ? object.metadata : undefined
  if (!isRecord(metadata) || typeof metadata.resourceVersion !== "string") return undefined
  let annotations = NoAnnotations
  if (isRecord(metadata.annotations)) {
    const kept: Record<string, string> = {}
    for (const [key, value] of Object.entries(metadata.annotations)) if (typeof value === "string") kept[key] = value
    annotations = kept
  }
  return { type: "BOOKMARK", resourceVersion: metadata.resourceVersion, annotations }
}

/** An excerpt of what arrived, the credential scrubbed before the cut so no prefix of it shows. */
const safeExcerpt = (text: string, secret: string | undefined): string => excerpt(scrub(text.slice(0, 2_000), secret))

/**
 * Turns each line of a watch body into at most one event. Object events go through the caller's
 * schema; a misfit becomes `UNDECODABLE` (it still carries a resourceVersion to resume from).
 */
const watchLines = <A extends HasMetadata>(
  decode: Decode<A>,
  path: string,
  secret: string | undefined
): LineHandler<WatchEvent<A>, KubeMalformedLineError | KubeLineTooLongError> => {
  const malformed = (what: string, line: string) =>
    new KubeMalformedLineError({ path, message: `the watch GET ${path} ${what}`, excerpt: safeExcerpt(line, secret) })

  const push = (parsed: unknown, line: string, out: Array<WatchEvent<A>>): KubeMalformedLineError | undefined => {
    if (!isRecord(parsed)) return malformed("sent a line that is not a JSON object", line)
    const type = parsed.type
    switch (type) {
      case "ADDED":
      case "MODIFIED":
      case "DELETED": {
        const result = decode(parsed.object)
        if (result._tag === "Right") {
          const object = result.right
          out.push({ type, object, name: object.metadata.name, resourceVersion: object.metadata.resourceVersion })
        } else {
          out.push(undecodable(type, parsed.object, result.left))
        }
        return undefined
      }
      case "BOOKMARK": {
        const bookmark = toBookmark(parsed.object)
        if (bookmark === undefined) return malformed("sent a BOOKMARK without metadata.resourceVersion", line)
        out.push(bookmark)
        return undefined
      }
      case "ERROR":
        out.push({ type: "ERROR", status: toStatus(parsed.object) })
        return undefined
      default:
        return malformed(
          typeof type === "string"
            ? `sent an event of unknown type "${excerpt(type, 40)}"`
            : "sent a line without an event type",
          line
        )
    }
  }

  return {
    onLine: (line: string, out: Array<WatchEvent<A>>) => {
      if (line.length === 0) return undefined
      let parsed: unknown
      try {
        parsed = JSON.parse(line)
      } catch {
        if (line.trim() === "") return undefined
        // Not the parser's message: it quotes the line, where the excerpt is already scrubbed.
        return malformed("sent a line that is not JSON", line)
      }
      return push(parsed, line, out)
    },
    onEnd: (rest: string, out: Array<WatchEvent<A>>) => {
      if (rest.trim() === "") return undefined
      let parsed: unknown
      try {
        // A last event complete but for its newline is still an event.
        parsed = JSON.parse(rest)
      } catch {
        return malformed(
          "ended in the middle of a line: the connection was closed or a proxy cut the body short; resume the watch from the last resourceVersion",
          rest
        )
      }
      return push(parsed, rest, out)
    },
    onTooLong: (limitBytes: number) =>
      new KubeLineTooLongError({
        path,
        limitBytes,
        message:
          `the watch GET ${path} sent a line longer than ${limitBytes} bytes; it was refused rather than buffered (if objects that large are expected, raise KubeClientOptions.maxLineBytes, the program's --max-line-bytes)`
      })
  }
}

/** Where a body's text starts: past a leading byte-order mark, as a decoder skips it. */
const textStart = (bytes: Buffer): number =>
  bytes.length >= 3 && bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf ? 3 : 0

/** A body's text, without its managedFields when `cuts`; a leading byte-order mark skipped, as a decoder does. */
const decodeBody = (bytes: Buffer, cuts: boolean): string => {
  const start = textStart(bytes)
  return cuts ? decodeWithoutManagedFields(bytes, start, bytes.length) : bytes.toString("utf8", start, bytes.length)
}

/**
 * What an answer said it was, for a body that is not JSON: an HTML page or a gzip body nobody asked
 * for points at a proxy or load balancer in front of the apiserver, not at the apiserver.
 */
const bodyLabels = (answer: Answer): string => {
  const type = headerValue(answer, "content-type")
  const encoding = headerValue(answer, "content-encoding")
  const said = [
    `content-type ${type ?? "(none)"}`,
    ...(encoding === undefined || encoding === "identity" ? [] : [`content-encoding ${encoding}`])
  ].join(", ")
  const proxyLike = (type !== undefined && !type.includes("json")) ||
    (encoding !== undefined && encoding !== "identity")
  return proxyLike ? `${said}: likely a proxy or load balancer between us and the apiserver` : said
}

/** A list answer to a `ListPage`, each item through the caller's schema. */
const toListPage = <A extends HasMetadata>(
  text: string,
  decode: Decode<A>,
  path: string,
  secret: string | undefined,
  labels: string
): Either.Either<ListPage<A>, KubeMalformedBodyError> => {
  const malformed = (what: string) =>
    Either.left(
      new KubeMalformedBodyError({
        method: "GET",
        path,
        message: `GET ${path} answered 2xx with ${what}`,
        excerpt: safeExcerpt(text, secret)
      })
    )
  let body: unknown
  try {
    body = JSON.parse(text)
  } catch {
    return malformed(`a body that is not JSON (${labels})`)
  }
  if (!isRecord(body)) return malformed("a body that is not a JSON object")
  const rawItems = body.items
  if (rawItems !== null && !Array.isArray(rawItems)) return malformed("a body that is not a list (no items)")
  const metadata = isRecord(body.metadata) ? body.metadata : undefined
  const resourceVersion = metadata?.resourceVersion
  if (typeof resourceVersion !== "string") return malformed("a list without metadata.resourceVersion")
  const items: Array<A> = []
  const bad: Array<UndecodableEvent> = []
  for (const item of rawItems ?? []) {
    const result = decode(item)
    if (result._tag === "Right") items.push(result.right)
    else bad.push(undecodable("ADDED", item, result.left))
  }
  const next = continueOf(body)
  const remaining = metadata?.remainingItemCount
  return Either.right({
    items,
    undecodable: bad,
    resourceVersion,
    continue: Option.fromNullable(next),
    remainingItemCount: typeof remaining === "number" ? Option.some(remaining) : Option.none()
  })
}

const listQuery = (options: ListOptions): string =>
  queryString([
    ["labelSelector", options.labelSelector],
    ["fieldSelector", options.fieldSelector],
    ["limit", options.limit],
    ["continue", options.continue],
    ["resourceVersion", options.resourceVersion],
    ["resourceVersionMatch", options.resourceVersionMatch]
  ])

const watchQuery = (options: WatchOptions): string =>
  queryString([
    ["watch", "1"],
    ["labelSelector", options.labelSelector],
    ["fieldSelector", options.fieldSelector],
    ["resourceVersion", options.resourceVersion],
    ["resourceVersionMatch", options.resourceVersionMatch],
    ["allowWatchBookmarks", options.allowWatchBookmarks],
    ["sendInitialEvents", options.sendInitialEvents],
    ["timeoutSeconds", options.timeoutSeconds]
  ])

/** Resumes in the event loop's check phase (`setImmediate`), after what the poll phase queued there. */
const untilCheckPhase: Effect.Effect<void> = Effect.async<void>((resume) => {
  setImmediate(() => resume(Effect.void))
})

/** A list page as it came: its bytes, and what an error about them may name. */
interface FetchedPage {
  readonly path: string
  readonly secret: string | undefined
  readonly bytes: Buffer
  /** The answer's content-type and content-encoding, for a page that is not JSON. */
  readonly labels: string
}

interface Sent {
  readonly answer: Answer
  readonly secret: string | undefined
}

type HttpMethod = Outgoing["method"]

/** The service over a connection and an HTTP client (the client's lifetime is the caller's). */
interface Limits {
  readonly maxLineBytes: number
  readonly headersTimeout: Duration.Duration
  readonly bodyTimeout: Duration.Duration
  readonly maxListPageBytes: number
  readonly maxErrorBodyBytes: number
  readonly maxListPages: number
  readonly maxListItems: number
}

const makeService = (
  connection: ClusterConnection,
  dispatcher: Dispatcher,
  timer: DeadlineTimer,
  { bodyTimeout, headersTimeout, maxErrorBodyBytes, maxLineBytes, maxListItems, maxListPageBytes, maxListPages }: Limits
): KubeClientService => {
  const server = connection.server
  const target = targetOf(server)
  const headersLimit = { timer, millis: Duration.toMillis(headersTimeout) }
  // Interrupting a request or a body read aborts the request, so a deadline frees the connection
  // as well as the caller.
  const headersDeadline = Duration.format(headersTimeout)
  const bodyDeadline = Duration.format(bodyTimeout)
  const bodyMillis = Duration.toMillis(bodyTimeout)

  /** Sends one request with fresh credentials; a non-2xx answer fails as a `KubeStatusError`. */
  /**
   * Sends a request and hands a 2xx answer to `use`, uninterruptibly: `use` must take the body at
   * once (so an interrupt can never leave a connection holding an unread body) and wait only in
   * interruptible reads.
   */
  const send = <A, R>(
    method: HttpMethod,
    path: string,
    body: { readonly text: string; readonly contentType: string } | undefined,
    /** The span the request belongs to; by default the current one. */
    parent: Tracer.AnySpan | undefined,
    use: (sent: Sent) => Effect.Effect<A, KubeClientError, R>
  ): Effect.Effect<A, KubeClientError, R> =>
    Effect.flatMap(
      // Nested, not `Effect.zip` (which runs as a `forEach`): a watch resume sends one of these.
      Effect.flatMap(
        Effect.mapError(
          connection.authorization,
          (error) =>
            new KubeTransportError({
              method,
              path,
              message:
                `${method} ${path} to ${server} was not sent: its credentials could not be read: ${error.message}`
            })
        ),
        (authorization) =>
          Effect.map(
            parent === undefined ? Effect.option(Effect.currentSpan) : Effect.succeed(Option.some(parent)),
            (span) => [authorization, span] as const
          )
      ),
      ([authorization, span]) => {
        const secret = secretOf(authorization)
        const headers: Record<string, string> = { accept: "application/json", "user-agent": UserAgent }
        // The request's trace context, as W3C `traceparent`: the caller's span (KubeClient.list,
        // .watch, ...). No span of its own: a span per request cost a watch resume two context
        // changes and a span, and said nothing the caller's span and its typed error do not.
        if (Option.isSome(span)) {
          headers.traceparent = `00-${span.value.traceId}-${span.value.spanId}-${span.value.sampled ? "01" : "00"}`
        }
        if (Option.isSome(authorization)) headers.authorization = Redacted.value(authorization.value)
        if (body !== undefined) headers["content-type"] = body.contentType
        const outgoing = { method, path, headers, ...(body === undefined ? {} : { body: body.text }) }
        const sent = Effect.mapError(sendOn(dispatcher, target, outgoing, headersLimit), (cause) =>
          cause instanceof HeadersDeadlinePassed
            ? deadlinePassed({ method, path, server, secret }, "headers", headersDeadline)
            : requestFailed({ method, path, server, cause, secret }))
        // The answer is handed over uninterruptibly, so no interrupt falls between its arrival and
        // whoever takes its body: `use` takes it at once (a watch's scope finalizer, or `readBody`,
        // which discards it when interrupted and reads interruptibly). The gap closed is two or
        // three runtime steps, where a fiber yields only when its op budget runs out. A guard of its
        // own around `use` cost a watch resume 14 runtime instructions (`npx tsx
        // scratchpad/effectOps.ts`: 202 → 216); this costs 3 (→ 205).
        return Effect.uninterruptibleMask((restore) =>
          Effect.flatMap(restore(sent), (answer) =>
            answer.status >= 200 && answer.status < 300
              ? use({ answer, secret })
              : failWithStatus(method, path, answer, secret))
        )
      }
    )

  const failWithStatus = (
    method: string,
    path: string,
    answer: Answer,
    secret: string | undefined
  ): Effect.Effect<never, KubeClientError> =>
    Effect.gen(function*() {
      // A body that breaks off or stalls still leaves the status code to speak; only its first
      // bytes are read, which is all a message needs.
      const body = yield* Effect.orElseSucceed(
        Effect.map(readBody(method, path, { answer, secret }, "error"), (bytes) => decodeBody(bytes, false)),
        () => ""
      )
      const nowMillis = yield* Clock.currentTimeMillis
      const error = statusError({
        method,
        path,
        code: answer.status,
        contentType: headerValue(answer, "content-type"),
        retryAfter: headerValue(answer, "retry-after"),
        body,
        nowMillis,
        secret
      })
      // Whatever credential is cached is stale: the next request reads it afresh.
      if (error.code === 401) yield* connection.invalidate
      return yield* Effect.fail(error)
    })

  /**
   * A whole body's bytes, under the body deadline; the body destroyed (its connection closed) if
   * the read is cut short. The deadline is kept by the client's timer, as the headers' is:
   * `Effect.timeoutFail` raced two fibers and a sleep per body, and a list reads one body a page.
   */
  const readBody = (
    method: string,
    path: string,
    sent: Sent,
    kind: "answer" | "error" = "answer"
  ): Effect.Effect<Buffer, KubeTransportError | KubeBodyTooLargeError> =>
    Effect.suspend(() => {
      const body = sent.answer.body
      let late = false
      const deadline = timer.arm(bodyMillis, () => {
        late = true
        body.fail(new Error("the body deadline passed"))
      })
      // Interruptible even when `send` hands the answer over uninterruptibly: a read may stall.
      const read = kind === "error" ? body.upTo(maxErrorBodyBytes, "truncate") : body.upTo(maxListPageBytes, "fail")
      return Effect.onInterrupt(Effect.interruptible(read), () => Effect.sync(() => body.discard())).pipe(
        Effect.mapError((cause) =>
          cause instanceof BodyOverLimit
            ? new KubeBodyTooLargeError({
              method,
              path: scrub(path, sent.secret),
              limit: cause.limit,
              unit: "bytes",
              message:
                `${method} ${
                  scrub(path, sent.secret)
                } sent a body of more than ${cause.limit} bytes; reading stopped there (if pages that large are expected, raise ` +
                `KubeClientOptions.maxListPageBytes, the program's --max-list-page-bytes; else a proxy or ` +
                `server is sending more than a list)`
            })
            : late
            ? deadlinePassed({ method, path, server, secret: sent.secret }, "body", bodyDeadline)
            : bodyBroke({ method, path, server, cause, secret: sent.secret })
        ),
        Effect.ensuring(Effect.sync(() => deadline.clear()))
      )
    })

  const readText = (
    method: string,
    path: string,
    sent: Sent
  ): Effect.Effect<string, KubeTransportError | KubeBodyTooLargeError> =>
    Effect.map(readBody(method, path, sent), (bytes) => decodeBody(bytes, false))

  /** A write or a get: JSON (or nothing) back. */
  const json = (
    method: HttpMethod,
    path: string,
    body?: unknown,
    contentType = "application/json"
  ): Effect.Effect<unknown, KubeClientError> =>
    Effect.suspend(() =>
      send(
        method,
        path,
        body === undefined ? undefined : { text: JSON.stringify(body), contentType },
        undefined,
        (sent) =>
          Effect.flatMap(readText(method, path, sent), (text) =>
            Effect.try({
              try: (): unknown => (text.length === 0 ? null : JSON.parse(text)),
              catch: () =>
                new KubeMalformedBodyError({
                  method,
                  path,
                  message: `${method} ${path} answered 2xx with a body that is not JSON (${bodyLabels(sent.answer)})`,
                  excerpt: safeExcerpt(text, sent.secret)
                })
            }))
      )
    )

  /** A list page asked for and its whole body read, each under its deadline. */
  const fetchPage = (resource: KubeResource, options: ListOptions): Effect.Effect<FetchedPage, KubeClientError> => {
    const path = collectionPath(resource, options.namespace) + listQuery(options)
    return send(
      "GET",
      path,
      undefined,
      undefined,
      (sent) =>
        Effect.map(
          readBody("GET", path, sent),
          (bytes): FetchedPage => ({ path, secret: sent.secret, bytes, labels: bodyLabels(sent.answer) })
        )
    )
  }

  const pageOf = <A extends HasMetadata>(fetched: FetchedPage, decode: Decode<A>, cuts: boolean) =>
    toListPage(decodeBody(fetched.bytes, cuts), decode, fetched.path, fetched.secret, fetched.labels)

  const listPage = <A extends HasMetadata>(
    resource: KubeResource,
    decode: Decode<A>,
    cuts: boolean,
    options: ListOptions
  ): Effect.Effect<ListPage<A>, KubeClientError> =>
    Effect.flatMap(fetchPage(resource, options), (fetched) => pageOf(fetched, decode, cuts))

  const list = <A extends HasMetadata, I>(
    resource: KubeResource,
    schema: Schema.Schema<A, I>,
    options: ListOptions = {}
  ): Effect.Effect<ListPage<A>, KubeClientError> =>
    Effect.withSpan(listPage(resource, ownedDecoderFor(schema), cutsFor(schema), options), "KubeClient.list", {
      attributes: spanAttributes(resource, options.namespace, options.resourceVersion, options.labelSelector)
    })

  const listAll = <A extends HasMetadata, I>(
    resource: KubeResource,
    schema: Schema.Schema<A, I>,
    options: Omit<ListOptions, "continue"> = {}
  ): Effect.Effect<FullList<A>, KubeClientError> => {
    // Made once the first page is asked for: the first time (a process's first list), its compile
    // (~2 ms) then runs while the server answers rather than before the request.
    let decode: Decode<A> | undefined
    const cuts = cutsFor(schema)
    const attempt = (
      first: Omit<ListOptions, "continue">,
      restarts: number
    ): Effect.Effect<FullList<A>, KubeClientError> =>
      Effect.scoped(Effect.gen(function*() {
        const items: Array<A> = []
        const bad: Array<UndecodableEvent> = []
        let resourceVersion: string | undefined = undefined
        let pages = 0
        let token: string | undefined = undefined
        // The next page, asked for as soon as this one is here, before it is parsed and decoded:
        // the server makes it meanwhile. One page ahead at most, as client-go's pager buffers
        // pages for EachListItem. 10,000 Sandboxes from a server that takes 5 / 20 ms a page
        // (`npx tsx scratchpad/listAhead.ts 5`): 156–171 against 225–237 ms, 465–472 against
        // 530–550 one page after another; level on the benchmark's sync. (Asked for from a page's
        // first bytes while the rest still came, two bodies were read at once, and the
        // benchmark's sync took up to 10% more CPU in A/B runs: not kept.)
        let ahead: Fiber.RuntimeFiber<FetchedPage, KubeClientError> | undefined
        // A page asked for and not wanted is interrupted, and its read hangs up (the list's scope
        // does the same for one still asked for when the list ends otherwise).
        const dropAhead = Effect.suspend(() => {
          const dropped = ahead
          ahead = undefined
          return dropped === undefined ? Effect.void : Fiber.interrupt(dropped)
        })
        /**
         * Asks for a page in a fiber of the list's scope, and returns once its request is out, so
         * the parse or compile that follows does not hold it back. A forked fiber starts when this
         * one yields, and undici writes on a keep-alive connection that was idle only in the event
         * loop's check phase (it looks first for bytes the server sent unasked; a new connection's
         * connect completes in the poll phase before it): so the fiber runs to its dispatch, then
         * this one waits for the check phase behind it.
         */
        const askAhead = (page: ListOptions) =>
          Effect.forkScoped(fetchPage(resource, page)).pipe(
            Effect.zipLeft(Effect.yieldNow()),
            Effect.zipLeft(untilCheckPhase)
          )
        if (decode === undefined) {
          ahead = yield* askAhead(first)
          decode = ownedDecoderFor(schema)
        }
        while (true) {
          const fetched: Either.Either<FetchedPage, KubeClientError> = yield* Effect.either(
            ahead !== undefined
              ? Fiber.join(ahead)
              : fetchPage(resource, token === undefined ? first : { ...first, continue: token })
          )
          ahead = undefined
          if (fetched._tag === "Left") {
            // The continue token outlived the server's compaction window. As client-go's pager
            // does, list again in one piece (no limit, so no token that could expire again).
            if (token !== undefined && isExpired(fetched.left)) {
              const { limit: _limit, ...whole } = first
              return yield* attempt(whole, restarts + 1)
            }
            return yield* Effect.fail(fetched.left)
          }
          const next = peekContinue(fetched.right.bytes, textStart(fetched.right.bytes))
          if (next !== null) {
            // The connection this page came on is free again only in the check phase (undici waits
            // a loop turn before reusing one): asked for before that, the next page opened a
            // second connection, whose connect completes in the loop's poll phase, after the
            // parse, so nothing overlapped on page 2 (seen with undici's diagnostics channels).
            yield* untilCheckPhase
            ahead = yield* askAhead({ ...first, continue: next })
          }
          const page: ListPage<A> = yield* pageOf(fetched.right, decode, cuts)
          pages += 1
          const past = pages > maxListPages
            ? { limit: maxListPages, unit: "pages" as const, option: "maxListPages" }
            : items.length + bad.length + page.items.length + page.undecodable.length > maxListItems
            ? { limit: maxListItems, unit: "items" as const, option: "maxListItems" }
            : undefined
          if (past !== undefined) {
            yield* dropAhead
            return yield* new KubeBodyTooLargeError({
              method: "GET",
              path: fetched.right.path,
              limit: past.limit,
              unit: past.unit,
              message: `the list of ${fetched.right.path} went past ${past.limit} ${past.unit} without an end ` +
                `(a continue token that never ends, or more objects than expected); it was abandoned ` +
                `(a namespace that really holds that many needs KubeClientOptions.${past.option} raised)`
            })
          }
          resourceVersion ??= page.resourceVersion
          for (const item of page.items) items.push(item)
          for (const item of page.undecodable) bad.push(item)
          token = Option.getOrUndefined(page.continue)
          // The page as parsed is the truth: a peek that read it otherwise costs its request only.
          if (token !== next) yield* dropAhead
          if (token === undefined) return { items, undecodable: bad, resourceVersion, pages, restarts }
        }
      }))
    return Effect.withSpan(attempt(options, 0), "KubeClient.listAll", {
      attributes: spanAttributes(resource, options.namespace, options.resourceVersion, options.labelSelector)
    })
  }

  const openWatch = <A extends HasMetadata, I>(
    resource: KubeResource,
    schema: Schema.Schema<A, I>,
    options: WatchOptions = {}
  ): Effect.Effect<WatchPull<A>, KubeClientError, Scope.Scope> => {
    const path = collectionPath(resource, options.namespace) + watchQuery(options)
    const idleMillis = options.idleTimeout === undefined ? undefined : Duration.toMillis(options.idleTimeout)
    const decode = ownedDecoderFor(schema)
    // Lines are decoded without their managedFields, unless the schema reads them.
    const decodeLine = cutsFor(schema) ? decodeObjectWithoutManagedFields : undefined
    // The span lives as long as the watch's scope. (`Stream.withSpan` would provide it afresh to
    // every chunk read: a watch reads thousands a second, and that doubled what each allocated.)
    // Nested `flatMap`s, not `Effect.gen`: a resume runs this once, and the generator's four
    // resumptions cost it ~5 µs of CPU (`npm run bench -- --profile sw@22:storm`).
    const opened = (sent: Sent, scope: Scope.Scope): Effect.Effect<WatchPull<A>> => {
      const body = sent.answer.body
      // The silence limit, kept by the client's timer (no fiber per watch); every read touches it.
      // Bytes that arrived and wait for a slow reader are not silence (`body.unread`).
      const silence = idleMillis === undefined ? undefined : timer.armSilence(
        idleMillis,
        () =>
          body.fail(
            new KubeWatchIdleError({
              path,
              idleMillis,
              message: `the watch GET ${path} to ${server} sent nothing for ${
                Duration.format(idleMillis)
              } (its idleTimeout); the connection was taken for dead and closed`
            })
          ),
        () => body.unread
      )
      const read = Effect.mapBoth(body.next, {
        onFailure: (cause) =>
          cause instanceof KubeWatchIdleError
            ? cause
            : bodyBroke({ method: "GET", path, server, cause, secret: sent.secret }),
        onSuccess: (bytes) => {
          silence?.touch()
          return bytes
        }
      })
      // However the watch ends, an unfinished body is destroyed (that aborts the request). Added to
      // the scope directly: `Effect.addFinalizer` would capture the fiber's refs to run it under,
      // five copies of the fiber's FiberRefs per watch (`npx tsx scratchpad/fiberRefWrites.ts`),
      // which a plain side effect does not need.
      return Effect.map(
        Scope.addFinalizer(
          scope,
          Effect.sync(() => {
            silence?.clear()
            body.discard()
          })
        ),
        () => pullLines(read, maxLineBytes, watchLines(decode, path, sent.secret), decodeLine)
      )
    }
    return Effect.flatMap(
      Effect.makeSpanScoped("KubeClient.watch", {
        // A stack trace per watch costs an Error each resume; the attributes say which watch it is.
        captureStackTrace: false,
        attributes: spanAttributes(resource, options.namespace, options.resourceVersion, options.labelSelector)
      }),
      (span) =>
        send("GET", path, undefined, span, (sent) => Effect.flatMap(Effect.scope, (scope) => opened(sent, scope)))
    )
  }

  const watch = <A extends HasMetadata, I>(
    resource: KubeResource,
    schema: Schema.Schema<A, I>,
    options?: WatchOptions
  ): Stream.Stream<WatchEvent<A>, KubeClientError> =>
    Stream.unwrapScoped(Effect.map(openWatch(resource, schema, options), Stream.repeatEffectChunkOption))

  const span = (name: string, resource: KubeResource, namespace: string | undefined) =>
    Effect.withSpan(`KubeClient.${name}`, { attributes: spanAttributes(resource, namespace) })

  const subresourcePath = (
    resource: KubeResource,
    namespace: string | undefined,
    name: string,
    options: { readonly subresource?: "status" } | undefined
  ) => objectPath(resource, namespace, name) + (options?.subresource === "status" ? "/status" : "")

  return {
    list,
    listAll,
    watch,
    openWatch,
    get: (resource, namespace, name) =>
      json("GET", objectPath(resource, namespace, name)).pipe(span("get", resource, namespace)),
    create: (resource, namespace, body) =>
      json("POST", collectionPath(resource, namespace), body).pipe(span("create", resource, namespace)),
    replace: (resource, namespace, name, body, options) =>
      json("PUT", subresourcePath(resource, namespace, name, options), body).pipe(span("replace", resource, namespace)),
    mergePatch: (resource, namespace, name, patch, options) =>
      json("PATCH", subresourcePath(resource, namespace, name, options), patch, "application/merge-patch+json").pipe(
        span("mergePatch", resource, namespace)
      ),
    delete: (resource, namespace, name) =>
      json("DELETE", objectPath(resource, namespace, name)).pipe(span("delete", resource, namespace))
  }
}

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
      maxListItems: options.maxListItems ?? DefaultMaxListItems
    }
    for (const [name, value] of Object.entries(counts)) {
      if (!Number.isSafeInteger(value) || value < 1) {
        return yield* Effect.dieMessage(`KubeClient: ${name} must be a positive integer, not ${value}`)
      }
    }
    return makeService(connection, agent, timer, {
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
