/**
 * The `KubeClient` service over a connection, a dispatcher and a deadline timer: the wiring of the
 * requests, the listing and the watch that `KubeClient.make` does over an undici Agent, and the
 * simulation over its scripted dispatcher (one wiring, so a budget added here reaches both). The
 * dispatcher's, the timer's and the credential reads' scope's lifetimes are the caller's.
 */
import type { Dispatcher } from "@effect/platform-node/Undici"
import { Effect, type Schema, type Scope, Stream } from "effect"
import type { ClusterConnection } from "../KubeConfig.ts"
import type { KubeClientError } from "../KubeError.ts"
import type { KubeResource } from "../KubeResource.ts"
import { collectionPath, objectPath } from "../KubeResource.ts"
import type { HasMetadata } from "../ObjectMeta.ts"
import type { WatchEvent } from "../WatchEvent.ts"
import type { DeadlineTimer } from "./deadlineTimer.ts"
import type { KubeClientService, WatchOptions } from "./kubeClientTypes.ts"
import { makeListing } from "./listPaging.ts"
import { spanAttributes } from "./requestParts.ts"
import { type Limits, makeRequests } from "./requestSender.ts"
import { makeOpenWatch } from "./watchOpening.ts"

export const makeClientService = (
  connection: ClusterConnection,
  dispatcher: Dispatcher,
  timer: DeadlineTimer,
  /** Where credential reads run: closing it waits for an exec plugin being stopped. */
  reads: Scope.Scope,
  limits: Limits
): KubeClientService => {
  const requests = makeRequests(connection, dispatcher, timer, reads, limits)
  const { json } = requests
  const { list, listAll } = makeListing(requests, limits)
  const openWatch = makeOpenWatch(requests, timer, limits.maxLineBytes)

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
    limits: { maxListItems: limits.maxListItems, maxListBytes: limits.maxListBytes },
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
