/**
 * A `KubeClient` whose answers a test scripts: each `listAll` takes the next scripted list result;
 * each `watch` hands the test a handle to feed events, fail or end that one watch. Every call is
 * recorded with its options, so a test can assert what the watch asked for.
 */
import { Chunk, Duration, Effect, Either, Layer, Option, Queue, Ref, Stream, Take } from "effect"
import type { FullList, KubeClientService, ListOptions, WatchOptions } from "../../src/KubeClient.ts"
import { KubeClient } from "../../src/KubeClient.ts"
import type { KubeClientError } from "../../src/KubeError.ts"
import * as KubeError from "../../src/KubeError.ts"
import type { Sandbox } from "../../src/Sandbox.ts"
import type { WatchEvent } from "../../src/WatchEvent.ts"
import { isInitialEventsEnd } from "../../src/WatchEvent.ts"

export interface WatchHandle {
  readonly options: WatchOptions
  /** Deliver events in one network chunk. */
  readonly emit: (...events: ReadonlyArray<WatchEvent<Sandbox>>) => Effect.Effect<void>
  readonly fail: (error: KubeClientError) => Effect.Effect<void>
  /** The server closes the watch cleanly. */
  readonly end: Effect.Effect<void>
  /** True once the consumer stopped reading (the request was aborted). */
  readonly aborted: Effect.Effect<boolean>
  /** The watch's stream dies: a defect, as a bug in the code under it would raise. */
  readonly die: (message: string) => Effect.Effect<void>
}

export type Call = { readonly verb: "list"; readonly options: ListOptions } | {
  readonly verb: "watch"
  readonly options: WatchOptions
}

export interface ScriptedKubeClient {
  readonly layer: Layer.Layer<KubeClient>
  readonly respondList: (result: Either.Either<FullList<Sandbox>, KubeClientError>) => Effect.Effect<void>
  /** A page of the list last asked for has been read (its `onPage`), the list not yet answered. */
  readonly pageArrived: Effect.Effect<void>
  /** Waits until the watch asks for its next watch, and returns the handle. */
  readonly nextWatch: Effect.Effect<WatchHandle>
  readonly calls: Effect.Effect<ReadonlyArray<Call>>
  /** How many watches are open (asked and not yet ended or aborted). */
  readonly openWatches: Effect.Effect<number>
}

/** `makeScriptedKubeClient` whose service reports these list budgets (`KubeClientService.limits`). */
export const makeScriptedKubeClientWith = (
  limits: KubeClientService["limits"]
): Effect.Effect<ScriptedKubeClient> =>
  Effect.gen(function*() {
    const lists = yield* Queue.unbounded<Either.Either<FullList<Sandbox>, KubeClientError>>()
    const watches = yield* Queue.unbounded<WatchHandle>()
    const calls = yield* Ref.make<ReadonlyArray<Call>>([])
    const open = yield* Ref.make(0)
    // The `onPage` of the list last asked for: `pageArrived` runs it, as a page read would.
    const listPage = yield* Ref.make<Effect.Effect<void>>(Effect.void)
    const record = (call: Call) => Ref.update(calls, (all) => [...all, call])

    const unsupported = (what: string) => Effect.dieMessage(`ScriptedKubeClient: ${what} is not scripted`)

    const watch: KubeClientService["watch"] = (_resource, _schema, options = {}) =>
      Stream.unwrapScoped(
        Effect.gen(function*() {
          yield* record({ verb: "watch", options })
          const takes = yield* Queue.unbounded<Take.Take<WatchEvent<Sandbox>, KubeClientError>>()
          const aborted = yield* Ref.make(false)
          const ended = yield* Ref.make(false)
          yield* Ref.update(open, (n) => n + 1)
          yield* Effect.addFinalizer(() =>
            Effect.gen(function*() {
              yield* Ref.update(open, (n) => n - 1)
              if (!(yield* Ref.get(ended))) yield* Ref.set(aborted, true)
            })
          )
          yield* Queue.offer(watches, {
            options,
            emit: (...events) => Queue.offer(takes, Take.chunk(Chunk.fromIterable(events))),
            fail: (error) => Ref.set(ended, true).pipe(Effect.zipRight(Queue.offer(takes, Take.fail(error)))),
            end: Ref.set(ended, true).pipe(Effect.zipRight(Queue.offer(takes, Take.end))),
            aborted: Ref.get(aborted),
            die: (message) => Ref.set(ended, true).pipe(Effect.zipRight(Queue.offer(takes, Take.dieMessage(message))))
          })
          // As the real client: silence past `idleTimeout` fails the watch (here, on the test's clock),
          // and a streaming list's end bookmark sets `idleTimeoutAfterInitialEvents` in its place.
          let limit = options.idleTimeout === undefined ? undefined : Duration.decode(options.idleTimeout)
          const after = options.idleTimeoutAfterInitialEvents
          const nextTake = Effect.suspend(() => {
            const current = limit
            return current === undefined ? Queue.take(takes) : Queue.take(takes).pipe(
              Effect.timeoutFail({
                duration: current,
                onTimeout: () =>
                  new KubeError.KubeWatchIdleError({
                    path: "/scripted",
                    idleMillis: Duration.toMillis(current),
                    message: "the scripted watch sent nothing for its idleTimeout"
                  })
              }),
              Effect.catchAll((idle) => Effect.succeed(Take.fail<KubeClientError>(idle)))
            )
          })
          const events = Stream.repeatEffectChunkOption(Effect.flatMap(nextTake, (take) =>
            Effect.tap(Take.done(take), (chunk) => {
              if (after !== undefined && Chunk.some(chunk, isInitialEventsEnd)) limit = Duration.decode(after)
            })))
          return events as Stream.Stream<WatchEvent<any>, KubeClientError>
        })
      )

    const service: KubeClientService = {
      limits,
      list: () => unsupported("list"),
      listAll: (_resource, _schema, { onPage, ...options } = {}) =>
        record({ verb: "list", options }).pipe(
          Effect.zipRight(Ref.set(listPage, onPage ?? Effect.void)),
          Effect.zipRight(Queue.take(lists)),
          Effect.flatMap((result) => result as Either.Either<FullList<any>, KubeClientError>)
        ),
      watch,
      // The same watch as a pull (the handle is offered on the first pull, which the watch makes at once).
      openWatch: (resource, schema, options) => Stream.toPull(watch(resource, schema, options)),
      get: () => unsupported("get"),
      create: () => unsupported("create"),
      replace: () => unsupported("replace"),
      mergePatch: () => unsupported("mergePatch"),
      delete: () => unsupported("delete")
    }

    return {
      layer: Layer.succeed(KubeClient, service),
      respondList: (result) => Queue.offer(lists, result),
      pageArrived: Effect.flatten(Ref.get(listPage)),
      nextWatch: Queue.take(watches),
      calls: Ref.get(calls),
      openWatches: Ref.get(open)
    }
  })

export const makeScriptedKubeClient: Effect.Effect<ScriptedKubeClient> = makeScriptedKubeClientWith(undefined)

// -- building what the cluster says ------------------------------------------------------------

export const sandbox = (
  name: string,
  resourceVersion: string,
  phase = "Pending",
  extra: Partial<Sandbox> = {}
): Sandbox => ({
  apiVersion: "jr2.dev/v1alpha1",
  kind: "Sandbox",
  metadata: { name, namespace: "ns", resourceVersion, labels: { "jr2.dev/run": "r1" } },
  status: { phase },
  ...extra
})

export const fullList = (
  resourceVersion: string,
  ...items: ReadonlyArray<Sandbox>
): Either.Either<FullList<Sandbox>, KubeClientError> =>
  Either.right({ items, undecodable: [], resourceVersion, pages: 1, restarts: 0 })

const objectEvent = (type: "ADDED" | "MODIFIED" | "DELETED", object: Sandbox): WatchEvent<Sandbox> => ({
  type,
  object,
  name: object.metadata.name,
  resourceVersion: object.metadata.resourceVersion
})
export const added = (object: Sandbox) => objectEvent("ADDED", object)
export const modified = (object: Sandbox) => objectEvent("MODIFIED", object)
export const deleted = (object: Sandbox) => objectEvent("DELETED", object)
export const bookmark = (resourceVersion: string): WatchEvent<Sandbox> => ({
  type: "BOOKMARK",
  resourceVersion,
  annotations: {}
})
export const errorEvent = (code: number, reason: string, message: string): WatchEvent<Sandbox> => ({
  type: "ERROR",
  status: { kind: "Status", apiVersion: "v1", status: "Failure", code, reason, message }
})

export const statusError = (
  code: number,
  reason: string,
  message: string,
  extra: { retryAfterSeconds?: number; causes?: ReadonlyArray<{ reason?: string; message?: string }> } = {}
): KubeClientError =>
  new KubeError.KubeStatusError({
    method: "GET",
    path: "/apis/jr2.dev/v1alpha1/namespaces/ns/sandboxes",
    code,
    reason,
    message,
    causes: extra.causes ?? [],
    retryAfterSeconds: Option.fromNullable(extra.retryAfterSeconds),
    group: Option.none(),
    kind: Option.none(),
    bodyExcerpt: Option.none()
  })

export const transportError = (
  message = "read ECONNRESET",
  reached?: KubeError.KubeTransportError["reached"]
): KubeClientError =>
  new KubeError.KubeTransportError({
    method: "GET",
    path: "/apis/jr2.dev/v1alpha1/namespaces/ns/sandboxes",
    message,
    ...(reached === undefined ? {} : { reached })
  })
