/**
 * The simulated apiserver's writes over HTTP: create, replace (PUT), JSON merge patch and delete,
 * of an object or of its `status`. Each reads the request, stamps it with a `WriteContext` and hands
 * it to the store, the one thing a write changes.
 *
 * @internal
 */
import { Clock, Effect, Either } from "effect"
import { randomUUID } from "node:crypto"
import type { KubeResource } from "../../KubeResource.ts"
import type { RequestContext } from "./http.ts"
import { jsonResponse, managerOf, objectResponse, readJson, statusResponse } from "./http.ts"
import { encodeSuccessStatus } from "./kubeJson.ts"
import type { ObjectStore, WriteContext } from "./objectStore.ts"
import { nameOf } from "./objectStore.ts"

/** Who writes and when, from the environment's `Clock` (so a test's `TestClock` sets the timestamps). */
export const writeContext = (manager: string, requireResourceVersion: boolean, keepStatusOnCreate: boolean) =>
  Effect.map(
    Clock.currentTimeMillis,
    (millis): WriteContext => ({
      now: new Date(millis).toISOString().replace(/\.\d{3}Z$/, "Z"),
      uid: randomUUID(),
      manager,
      requireResourceVersion,
      keepStatusOnCreate
    })
  )

export const serveCreate = (store: ObjectStore, ctx: RequestContext) =>
  Effect.gen(function*() {
    const body = yield* readJson(ctx)
    if (Either.isLeft(body)) return statusResponse(body.left)
    const context = yield* writeContext(managerOf(ctx), true, false)
    return objectResponse(201)(store.create(ctx.namespace!, body.right, context))
  })

export const serveReplace = (store: ObjectStore, ctx: RequestContext) =>
  Effect.gen(function*() {
    const body = yield* readJson(ctx)
    if (Either.isLeft(body)) return statusResponse(body.left)
    const context = yield* writeContext(managerOf(ctx), true, false)
    return objectResponse(200)(store.replace(ctx.namespace!, ctx.name!, body.right, context, ctx.subresource))
  })

export const servePatch = (store: ObjectStore, ctx: RequestContext) =>
  Effect.gen(function*() {
    const contentType = (ctx.request.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase()
    if (contentType !== "application/merge-patch+json") {
      return statusResponse({
        code: 415,
        reason: "UnsupportedMediaType",
        message:
          "the body of the request was in an unknown format - accepted media types include: application/merge-patch+json"
      })
    }
    const body = yield* readJson(ctx)
    if (Either.isLeft(body)) return statusResponse(body.left)
    const context = yield* writeContext(managerOf(ctx), false, false)
    return objectResponse(200)(store.mergePatch(ctx.namespace!, ctx.name!, body.right, context, ctx.subresource))
  })

export const serveDelete = (store: ObjectStore, resource: KubeResource, ctx: RequestContext) =>
  Effect.gen(function*() {
    const context = yield* writeContext(managerOf(ctx), false, false)
    const result = store.delete(ctx.namespace!, ctx.name!, context)
    if (Either.isLeft(result) || store.get(ctx.namespace!, ctx.name!) !== undefined) {
      return objectResponse(200)(result)
    }
    // Gone at once: like kube-apiserver for a custom resource, a Success Status naming what went
    // (the object itself comes back only while finalizers hold the delete).
    return jsonResponse(
      200,
      encodeSuccessStatus({
        name: nameOf(result.right),
        group: resource.group,
        kind: resource.plural,
        uid: String(result.right.metadata.uid ?? "")
      })
    )
  })
