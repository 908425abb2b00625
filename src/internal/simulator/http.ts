/**
 * The HTTP side every handler of the simulated apiserver shares: a request as the handlers see it,
 * reading its JSON body and its field manager, which stored objects it selects, and the JSON and
 * Status responses the apiserver sends.
 *
 * @internal
 */
import type { HttpServerRequest } from "@effect/platform"
import { HttpServerResponse } from "@effect/platform"
import { Effect, Either } from "effect"
import { matchesFields, matchesLabels } from "../labelSelector.ts"
import type { FailureStatus } from "./kubeJson.ts"
import { encodeStatus, encodeUnstructured } from "./kubeJson.ts"
import type { KubeObject } from "./objectStore.ts"
import { labelsOf, nameOf, namespaceOf } from "./objectStore.ts"
import type { Selectors } from "./requests.ts"
import { badRequest } from "./requests.ts"

/** The verbs RBAC and the request counters speak of. */
export type Verb = "get" | "list" | "watch" | "create" | "update" | "patch" | "delete"

/** One request, routed: its verb, and the namespace, name and subresource its path names. */
export interface RequestContext {
  readonly request: HttpServerRequest.HttpServerRequest
  readonly verb: Verb
  readonly path: string
  readonly query: URLSearchParams
  readonly namespace: string | undefined
  readonly name: string | undefined
  readonly subresource: "status" | undefined
}

/** What answers a routed request. */
export type Handler = (ctx: RequestContext) => Effect.Effect<HttpServerResponse.HttpServerResponse>

export const jsonResponse = (status: number, body: string, headers?: Record<string, string>) =>
  HttpServerResponse.text(`${body}\n`, {
    status,
    contentType: "application/json",
    headers: { "cache-control": "no-cache, private", ...headers }
  })

export const statusResponse = (status: FailureStatus, headers?: Record<string, string>) =>
  jsonResponse(status.code, encodeStatus(status), headers)

/** A write's answer: the object with `status`, or the Status it failed with. */
export const objectResponse = (status: number) => (result: Either.Either<KubeObject, FailureStatus>) =>
  Either.isLeft(result) ? statusResponse(result.left) : jsonResponse(status, encodeUnstructured(result.right))

export const readJson = (ctx: RequestContext): Effect.Effect<Either.Either<unknown, FailureStatus>> =>
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

/** The field manager of a write: `fieldManager` if given, else the client's user agent's name. */
export const managerOf = (ctx: RequestContext): string => {
  const fromQuery = ctx.query.get("fieldManager")
  if (fromQuery !== null && fromQuery !== "") return fromQuery
  const agent = ctx.request.headers["user-agent"] ?? ""
  return agent.split("/")[0] || "unknown"
}

/** Whether a list or watch of this request keeps an object: its namespace, then its selectors. */
export const selects = (ctx: RequestContext, selectors: Selectors) => (object: KubeObject): boolean =>
  (ctx.namespace === undefined || namespaceOf(object) === ctx.namespace) &&
  matchesLabels(selectors.labels, labelsOf(object)) &&
  matchesFields(selectors.fields, nameOf(object), namespaceOf(object))
