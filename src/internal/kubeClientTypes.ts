/** The client's service shape and the option and result types of its lists and watches (re-exported by KubeClient.ts). */
import type { Chunk, Duration, Effect, Option, Schema, Scope, Stream } from "effect"
import type { KubeClientError } from "../KubeError.ts"
import type { KubeResource } from "../KubeResource.ts"
import type { HasMetadata } from "../ObjectMeta.ts"
import type { UndecodableEvent, WatchEvent } from "../WatchEvent.ts"
import type { Listing } from "./listPaging.ts"

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

/** `listAll`'s options: a list's, less the `continue` token it follows itself. */
export interface ListAllOptions extends Omit<ListOptions, "continue"> {
  /**
   * Run as each page has been read, before the list is whole: for a caller that counts a long
   * list as the server answering (health), or shows progress. A failure of the list is not its.
   */
  readonly onPage?: Effect.Effect<void> | undefined
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
   * Sends `Accept-Encoding: gzip`. kube-apiserver 1.37+ (`WatchListCompression`) then gzips a
   * streaming list's whole answer, which the client inflates as it reads; other watches are not
   * compressed. Worth it where bytes cost more than CPU (see the README's "Lists").
   */
  readonly acceptGzip?: boolean
  /**
   * Silence (no bytes at all, not even a bookmark) longer than this fails the watch with
   * `KubeWatchIdleError` and closes its connection. Bytes that arrived while the reader was busy
   * elsewhere are not silence, however long they wait to be read. Absent: the watch may be silent
   * for ever (its silence is the caller's to judge). A server closes a watch after `timeoutSeconds`
   * and sends bookmarks meanwhile, so a little more than `timeoutSeconds` is a safe limit.
   */
  readonly idleTimeout?: Duration.DurationInput
  /**
   * A streaming list's (`sendInitialEvents`) silence limit once its bookmark annotated
   * `k8s.io/initial-events-end` has arrived, on the same connection; `idleTimeout` is the limit
   * until then. A list asked for with a long term needs a long limit while it arrives, but the
   * watch that goes on after it should be noticed dead as soon as any other. Absent: `idleTimeout`
   * throughout.
   */
  readonly idleTimeoutAfterInitialEvents?: Duration.DurationInput
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

/** The budgets a client keeps that its callers assembling a list of their own apply too. */
export interface KubeClientLimits {
  /** The most objects one list holds (`KubeClientOptions.maxListItems`). */
  readonly maxListItems: number
  /** The most JSON one list holds, in bytes (`KubeClientOptions.maxListBytes`); none: `DefaultMaxListBytes`. */
  readonly maxListBytes?: number | undefined
}

export interface KubeClientService {
  /**
   * The client's list budget, for a caller that gathers a list itself (a streaming list's initial
   * events); none: `DefaultMaxListItems` and `DefaultMaxListBytes`.
   */
  readonly limits?: KubeClientLimits | undefined
  readonly list: Listing["list"]
  /**
   * Follows `continue` page by page, each next page asked for while the one before is parsed (one
   * page ahead); a continue token that expired (410) starts the list over.
   */
  readonly listAll: Listing["listAll"]
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
