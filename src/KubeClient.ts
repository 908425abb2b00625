/**
 * A Kubernetes API client as an Effect service: list, list-all (paged), watch (a `Stream` of typed
 * events) and the writes a test or a demo operator needs. Nothing in it knows about Sandboxes:
 * a resource is a value and an object is whatever `Schema` the caller hands in.
 *
 * @since 0.1.0
 */
import type { Effect, Option, Schema, Stream } from "effect"
import { Context } from "effect"
import type { KubeClientError } from "./KubeError.ts"
import type { KubeResource } from "./KubeResource.ts"
import type { HasMetadata } from "./ObjectMeta.ts"
import type { UndecodableEvent, WatchEvent } from "./WatchEvent.ts"

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
}

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

/** @since 0.1.0 */
export interface KubeClientService {
  readonly list: <A extends HasMetadata, I>(
    resource: KubeResource,
    schema: Schema.Schema<A, I>,
    options?: ListOptions
  ) => Effect.Effect<ListPage<A>, KubeClientError>
  /** Follows `continue` page by page; a continue token that expired (410) starts the list over. */
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
  /** Plain JSON writes, for tests, the demo operator and tooling. Bodies are not schema-checked. */
  readonly get: (resource: KubeResource, namespace: string | undefined, name: string) => Effect.Effect<unknown, KubeClientError>
  readonly create: (resource: KubeResource, namespace: string | undefined, body: unknown) => Effect.Effect<unknown, KubeClientError>
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
  readonly delete: (resource: KubeResource, namespace: string | undefined, name: string) => Effect.Effect<unknown, KubeClientError>
}

/** @since 0.1.0 */
export class KubeClient extends Context.Tag("sandbox-watch/KubeClient")<KubeClient, KubeClientService>() {}
