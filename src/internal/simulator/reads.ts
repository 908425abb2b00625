/**
 * The simulated apiserver's reads over HTTP: a list (its page is `listAnswer`'s), a watch (its body
 * is `watchBody`'s) and a get. A list and a get only read the store; a watch also registers itself
 * with the server's open watches for as long as it runs.
 *
 * @internal
 */
import { HttpServerResponse } from "@effect/platform"
import { NodeHttpServerRequest } from "@effect/platform-node"
import { Chunk, Effect, Either, Random, Stream } from "effect"
import * as Zlib from "node:zlib"
import type { RequestContext } from "./http.ts"
import { jsonResponse, selects, statusResponse } from "./http.ts"
import { encodeUnstructured } from "./kubeJson.ts"
import { listAnswer } from "./listAnswer.ts"
import type { ObjectStore } from "./objectStore.ts"
import { listRequestOf, watchRequestOf } from "./requests.ts"
import type { WatchServer } from "./watchBody.ts"
import { watchBody } from "./watchBody.ts"

export const serveList = (
  store: ObjectStore,
  listed: { readonly apiVersion: string; readonly kind: string },
  ctx: RequestContext
) =>
  Effect.sync(() => {
    const answer = Either.flatMap(
      listRequestOf(ctx.query),
      (request) => listAnswer(store, listed, ctx.namespace, request, selects(ctx, request.selectors))
    )
    return Either.isLeft(answer) ? statusResponse(answer.left) : jsonResponse(200, encodeUnstructured(answer.right))
  })

/** The query as a server that does not know streaming lists reads it: without their parameters. */
const withoutStreamingParameters = (query: URLSearchParams): URLSearchParams => {
  const kept = new URLSearchParams(query)
  kept.delete("sendInitialEvents")
  kept.delete("resourceVersionMatch")
  return kept
}

export const serveWatch = (server: WatchServer, ctx: RequestContext) =>
  Effect.gen(function*() {
    // A server that ignores `sendInitialEvents` answers a streaming list as a plain watch from now,
    // and ends it at once, after what it had: nothing.
    const ignored = server.ignoreSendInitialEvents && ctx.query.has("sendInitialEvents")
    const request = watchRequestOf(ignored ? withoutStreamingParameters(ctx.query) : ctx.query, server.watchList)
    if (Either.isLeft(request)) return statusResponse(request.left)
    // The apiserver's default: a random time between its minimum request timeout and twice that.
    const timeoutSeconds = request.right.timeoutSeconds ?? (yield* Random.nextIntBetween(1800, 3600))
    const body = watchBody(
      server,
      ignored
        ? { ...request.right, mode: "from", asked: server.store.resourceVersion, timeoutSeconds, endAtOnce: true }
        : { ...request.right, timeoutSeconds },
      selects(ctx, request.right.selectors),
      NodeHttpServerRequest.toServerResponse(ctx.request)
    )
    if (request.right.mode === "initialWithBookmark" && server.watchListCompression && acceptsGzip(ctx)) {
      // As 1.37's watch handler: each flush (here, each chunk of lines) is a gzip member of its own.
      return HttpServerResponse.stream(
        Stream.mapChunks(body, (lines) => Chunk.of(new Uint8Array(Zlib.gzipSync(Chunk.join(lines, ""))))),
        {
          contentType: "application/json",
          headers: { "cache-control": "no-cache, private", "content-encoding": "gzip", vary: "Accept-Encoding" }
        }
      )
    }
    const encoder = new TextEncoder()
    return HttpServerResponse.stream(Stream.map(body, (line) => encoder.encode(line)), {
      contentType: "application/json",
      headers: { "cache-control": "no-cache, private" }
    })
  })

/** Whether the request's Accept-Encoding names gzip, read as kube-apiserver reads it. */
const acceptsGzip = (ctx: RequestContext): boolean =>
  (ctx.request.headers["accept-encoding"] ?? "").split(",").some((token) => token.trim() === "gzip")

export const serveGet = (store: ObjectStore, ctx: RequestContext) =>
  Effect.sync(() => {
    const object = store.get(ctx.namespace!, ctx.name!)
    return object === undefined
      ? statusResponse(store.notFound(ctx.name!))
      : jsonResponse(200, encodeUnstructured(object))
  })
