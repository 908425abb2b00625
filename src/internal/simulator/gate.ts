/**
 * What stands before every handler of the simulated apiserver: the log of the requests it saw, the
 * faults a test queued, the bearer token, RBAC and whether the resource is served at all. A request
 * is recorded first, then answered with a queued fault, a 401, a 403 or a 404 when one applies, and
 * only otherwise served.
 *
 * @internal
 */
import { HttpServerResponse } from "@effect/platform"
import { NodeHttpServerRequest } from "@effect/platform-node"
import { Effect, Stream, SubscriptionRef } from "effect"
import type { KubeResource } from "../../KubeResource.ts"
import type { Handler, RequestContext, Verb } from "./http.ts"
import { statusResponse } from "./http.ts"
import type { FailureStatus } from "./kubeJson.ts"
import type { ObjectStore } from "./objectStore.ts"
import { namespaceOf } from "./objectStore.ts"
import { parseResourceVersion, tooLarge, unauthorized } from "./requests.ts"
import { eventLine } from "./watchBody.ts"

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
 * - `CutMidStream`: a watch's 200 with the first half of the namespace's objects as ADDED events (a
 *   streaming list's initial events, cut short; the selector is not applied) and half a line, then
 *   the connection destroyed.
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
  | "CutMidStream"

/** One HTTP request the server saw, for a test to assert on (of its headers only Accept-Encoding: the rest hold the token). */
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
  /** The request's `Accept-Encoding`, if it had one. */
  readonly acceptEncoding: string | undefined
}

/** A queued fault, and how many more requests it answers. */
export interface PendingFault {
  remaining: number
  readonly kind: FaultKind
  readonly verbs: ReadonlyArray<Verb> | undefined
  readonly retryAfterSeconds: number
}

/** The requests seen: every request adds one; a test reads, awaits or clears them. */
export interface RequestLog {
  recorded: Array<RecordedRequest>
  /** Counts every request, so a test can wait for one without polling. */
  readonly seen: SubscriptionRef.SubscriptionRef<number>
}

/** What a request must get past: a request uses up a fault; a test sets the rest. */
export interface Access {
  /** The bearer token every request must carry, if any. */
  token: string | undefined
  /** Oldest first; one with nothing remaining is dropped. */
  faults: Array<PendingFault>
  /** The verbs RBAC refuses. */
  readonly forbidden: Set<Verb>
  /** The resource is not served (its CRD is gone): every request for it is the apiserver's 404. */
  withdrawn: boolean
}

/** The gate: the two things it changes, and what its refusals name. */
export interface Gate {
  readonly log: RequestLog
  readonly access: Access
  readonly resource: KubeResource
  /** The user a 403 names. */
  readonly user: string
  /** Read only: its resource's name for a 403, its resourceVersion for a 504. */
  readonly store: ObjectStore
}

const badGatewayHtml =
  "<html><body><h1>502 Bad Gateway</h1>\nThe server returned an invalid or incomplete response.\n</body></html>\n"

/**
 * What kube-apiserver (1.20 and 1.37 alike, test/apiserver/crdReRegistered.test.ts) answers for a
 * resource whose CRD is gone: not a Status, but Go's plain-text 404 of a path no handler serves.
 */
const notServed = () =>
  HttpServerResponse.text("404 page not found\n", {
    status: 404,
    contentType: "text/plain; charset=utf-8",
    headers: { "x-content-type-options": "nosniff" }
  })

/** The RBAC Status of a request its user may not make. */
export const forbiddenStatus = (
  { resource, store, user }: Pick<Gate, "resource" | "store" | "user">,
  ctx: RequestContext
): FailureStatus => {
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

/** The answer a queued fault gives instead of serving the request. */
export const faultResponse = (
  gate: Pick<Gate, "resource" | "store" | "user">,
  fault: PendingFault,
  ctx: RequestContext
): HttpServerResponse.HttpServerResponse => {
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
      return statusResponse(forbiddenStatus(gate, ctx))
    case "BadGatewayHtml":
      return HttpServerResponse.text(badGatewayHtml, { status: 502, contentType: "text/html" })
    case "TooLargeResourceVersion": {
      const asked = parseResourceVersion(ctx.query.get("resourceVersion") ?? "")
      return statusResponse(tooLarge(String(asked ?? gate.store.resourceVersion + 1), gate.store.resourceVersion))
    }
    case "CutMidStream":
      return cutMidStream(gate.store, ctx)
  }
}

const cutMidStream = (store: ObjectStore, ctx: RequestContext): HttpServerResponse.HttpServerResponse => {
  const objects = store.current().map(([, object]) => object).filter((o) => namespaceOf(o) === ctx.namespace)
  const half = objects.slice(0, Math.ceil(objects.length / 2)).map((o) => eventLine("ADDED", o)).join("")
  const text = half + eventLine("ADDED", objects.at(-1) ?? {}).slice(0, 24)
  const nodeResponse = NodeHttpServerRequest.toServerResponse(ctx.request)
  // Written past the platform's stream, so the socket dies once these bytes are out, not before.
  const cut = Effect.async<Uint8Array>((resume) => {
    nodeResponse.write(text, () => {
      nodeResponse.socket?.destroy()
      resume(Effect.succeed(new Uint8Array(0)))
    })
  })
  return HttpServerResponse.stream(Stream.fromEffect(cut), { contentType: "application/json" })
}

/** Adds the request to the log (its query's first value of each parameter). */
const record = (log: RequestLog, ctx: RequestContext): void => {
  const query: Record<string, string> = {}
  for (const [key, value] of ctx.query) if (!(key in query)) query[key] = value
  log.recorded.push({
    verb: ctx.verb,
    method: ctx.request.method,
    path: ctx.path,
    namespace: ctx.namespace,
    name: ctx.name,
    subresource: ctx.subresource,
    query,
    acceptEncoding: ctx.request.headers["accept-encoding"]
  })
}

/** The oldest queued fault for this verb, used up by one request; undefined if none. */
const takeFault = (access: Access, verb: Verb): PendingFault | undefined => {
  const fault = access.faults.find((f) => f.remaining > 0 && (f.verbs === undefined || f.verbs.includes(verb)))
  if (fault !== undefined) {
    fault.remaining -= 1
    access.faults = access.faults.filter((f) => f.remaining > 0)
  }
  return fault
}

/** Records the request, then answers with a queued fault, a 401 or a 403 before serving it. */
export const guarded = (
  gate: Gate,
  ctx: RequestContext,
  serve: Handler
): Effect.Effect<HttpServerResponse.HttpServerResponse> =>
  Effect.suspend(() => {
    record(gate.log, ctx)
    const fault = takeFault(gate.access, ctx.verb)
    return SubscriptionRef.update(gate.log.seen, (n) => n + 1).pipe(
      Effect.zipRight(
        Effect.suspend(() => {
          if (fault !== undefined) return Effect.succeed(faultResponse(gate, fault, ctx))
          const token = gate.access.token
          if (token !== undefined && ctx.request.headers["authorization"] !== `Bearer ${token}`) {
            return Effect.succeed(statusResponse(unauthorized))
          }
          if (gate.access.forbidden.has(ctx.verb)) return Effect.succeed(statusResponse(forbiddenStatus(gate, ctx)))
          // After authentication and authorization, as kube-apiserver routes only what passed both.
          if (gate.access.withdrawn) return Effect.succeed(notServed())
          return serve(ctx)
        })
      )
    )
  })
