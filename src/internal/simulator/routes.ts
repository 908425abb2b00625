/**
 * The simulated apiserver's routes for its one resource: the namespaced and all-namespaces
 * collections, an item and its `status`, and `/version`. Each request is routed to its verb and
 * handler and passed through `guard` first; any other path is the apiserver's 404 Status.
 *
 * @internal
 */
import { HttpRouter, HttpServerRequest } from "@effect/platform"
import { Effect } from "effect"
import type { KubeResource } from "../../KubeResource.ts"
import * as KubeResourceModule from "../../KubeResource.ts"
import type { Handler, RequestContext, Verb } from "./http.ts"
import { jsonResponse, statusResponse } from "./http.ts"
import { queryBool } from "./requests.ts"

/** The handler of each kind of request. */
export interface Handlers {
  readonly list: Handler
  readonly watch: Handler
  readonly get: Handler
  readonly create: Handler
  readonly replace: Handler
  readonly patch: Handler
  readonly delete: Handler
}

/** What every request passes before its handler (the log, faults, token and RBAC). */
export type Guard = (ctx: RequestContext, serve: Handler) => ReturnType<Handler>

const route = (
  guard: Guard,
  verbOf: (query: URLSearchParams) => Verb,
  scope: "namespace" | "all",
  subresource: "status" | undefined,
  serve: Handler
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
    return yield* guard(ctx, serve)
  })

const listOrWatch = (query: URLSearchParams): Verb => (queryBool(query, "watch") === true ? "watch" : "list")
const always = (verb: Verb) => () => verb

const version = jsonResponse(
  200,
  JSON.stringify({ major: "1", minor: "20", gitVersion: "v1.20.2", platform: "linux/amd64" }, null, 2)
)

const notFound = () =>
  statusResponse({
    code: 404,
    reason: "NotFound",
    message: "the server could not find the requested resource",
    details: {}
  })

/** The HTTP app of the server: every route of `resource`, each behind `guard`. */
export const routes = (resource: KubeResource, handlers: Handlers, guard: Guard) => {
  const root = KubeResourceModule.collectionPath(resource)
  const base = root.slice(0, root.length - resource.plural.length - 1)
  const collection = `${base}/namespaces/:namespace/${resource.plural}` as HttpRouter.PathInput
  const allNamespaces = `${base}/${resource.plural}` as HttpRouter.PathInput
  const item = `${collection}/:name` as HttpRouter.PathInput
  const status = `${item}/status` as HttpRouter.PathInput
  const collectionHandler: Handler = (ctx) => (ctx.verb === "watch" ? handlers.watch(ctx) : handlers.list(ctx))
  const at = (verbOf: (query: URLSearchParams) => Verb, subresource: "status" | undefined, serve: Handler) =>
    route(guard, verbOf, "namespace", subresource, serve)

  return HttpRouter.empty.pipe(
    HttpRouter.get(collection, at(listOrWatch, undefined, collectionHandler)),
    HttpRouter.get(allNamespaces, route(guard, listOrWatch, "all", undefined, collectionHandler)),
    HttpRouter.post(collection, at(always("create"), undefined, handlers.create)),
    HttpRouter.get(item, at(always("get"), undefined, handlers.get)),
    HttpRouter.put(item, at(always("update"), undefined, handlers.replace)),
    HttpRouter.patch(item, at(always("patch"), undefined, handlers.patch)),
    HttpRouter.del(item, at(always("delete"), undefined, handlers.delete)),
    HttpRouter.get(status, at(always("get"), "status", handlers.get)),
    HttpRouter.put(status, at(always("update"), "status", handlers.replace)),
    HttpRouter.patch(status, at(always("patch"), "status", handlers.patch)),
    HttpRouter.get("/version", Effect.succeed(version)),
    Effect.catchTag("RouteNotFound", () => Effect.succeed(notFound()))
  )
}
