/**
 * One watch of the simulated apiserver, as its body's lines: the starting state (a replay from the
 * asked resourceVersion, or every object now), then every change of the store the selection keeps,
 * bookmarks when asked, the end at the timeout, and the faults a test sets on the open watches
 * (`WatchHandle`). Registered with the server for as long as it is open.
 *
 * @internal
 */
import { Deferred, Duration, Effect, Exit, Queue, Stream, SubscriptionRef } from "effect"
import type * as Http from "node:http"
import { InitialEventsEndAnnotation } from "../../WatchEvent.ts"
import { encodeStatus, encodeUnstructured } from "./kubeJson.ts"
import type { KubeObject, ObjectStore, StoreEvent } from "./objectStore.ts"
import type { WatchRequest } from "./requests.ts"
import { expired } from "./requests.ts"

export type WatchItem =
  | { readonly _tag: "Line"; readonly text: string }
  | { readonly _tag: "Truncate"; readonly text: string }
  | { readonly _tag: "End" }

export interface WatchHandle {
  readonly queue: Queue.Queue<WatchItem>
  readonly gate: Effect.Latch
  readonly closed: Deferred.Deferred<void>
}

/** What an open watch is handed, through its handle's queue. */
export const offer = (handle: WatchHandle, item: WatchItem): void => {
  Queue.unsafeOffer(handle.queue, item)
}

/** What a watch needs of the server. A watch adds itself to `watches` and counts itself in `openWatchCount`. */
export interface WatchServer {
  readonly store: ObjectStore
  /** Of the one resource served, for the bookmarks. */
  readonly apiVersion: string
  readonly kind: string
  /** The open watches, for the faults a test sets. */
  readonly watches: Set<WatchHandle>
  readonly openWatchCount: SubscriptionRef.SubscriptionRef<number>
  readonly bookmarkInterval: Duration.Duration
  /** Feature gates: streaming lists served; gzipped when the client accepts it. */
  readonly watchList: boolean
  readonly watchListCompression: boolean
  /** A server that does not know `sendInitialEvents`: see the option of the same name. */
  readonly ignoreSendInitialEvents: boolean
}

/** One line of a watch's body. */
export const eventLine = (type: string, object: unknown): string =>
  `{"type":"${type}","object":${encodeUnstructured(object)}}\n`

/** A BOOKMARK: an object of the resource with only a resourceVersion (and maybe annotations). */
export const bookmarkLine = (
  { apiVersion, kind }: Pick<WatchServer, "apiVersion" | "kind">,
  resourceVersion: number,
  annotations?: Record<string, string>
): string =>
  eventLine("BOOKMARK", {
    apiVersion,
    kind,
    metadata: { ...(annotations === undefined ? {} : { annotations }), resourceVersion: String(resourceVersion) }
  })

/** Runs `f` on each open watch. Suspended: the set of open watches is read when it runs, not when this is defined. */
export const eachWatch = (watches: Set<WatchHandle>, f: (handle: WatchHandle) => Effect.Effect<unknown>) =>
  Effect.suspend(() => Effect.forEach([...watches], f, { discard: true }))

/** Ends every open watch cleanly (its response completes). */
export const closeWatches = (watches: Set<WatchHandle>): Effect.Effect<void> =>
  eachWatch(watches, (handle) => Deferred.succeed(handle.closed, undefined))

/** The body of one watch; `keep` is its selection. */
export const watchBody = (
  server: WatchServer,
  { allowBookmarks, asked, endAtOnce, mode, timeoutSeconds }: WatchRequest & {
    readonly timeoutSeconds: number
    /** The server ends the watch as soon as it has sent what it had (a server that answers so). */
    readonly endAtOnce?: boolean
  },
  keep: (object: KubeObject) => boolean,
  nodeResponse: Http.ServerResponse
): Stream.Stream<string> => {
  const { bookmarkInterval, openWatchCount, store, watches } = server
  const convert = (event: StoreEvent): string | undefined => {
    const now = event.type !== "DELETED" && keep(event.object)
    const before = event.previous !== undefined && keep(event.previous)
    if (now && !before) return eventLine("ADDED", event.object)
    if (now && before) return eventLine("MODIFIED", event.object)
    if (!before) return undefined
    if (event.type === "DELETED") return eventLine("DELETED", event.object)
    // It left the selection: its previous state, stamped with this event's resourceVersion.
    const previous = event.previous!
    return eventLine("DELETED", {
      ...previous,
      metadata: { ...previous.metadata, resourceVersion: String(event.resourceVersion) }
    })
  }

  return Stream.unwrapScoped(
    Effect.gen(function*() {
      const handle: WatchHandle = {
        queue: yield* Queue.unbounded<WatchItem>(),
        gate: yield* Effect.makeLatch(true),
        closed: yield* Deferred.make<void>()
      }
      // One synchronous step: the starting state and the subscription, so nothing falls between.
      const registration = yield* Effect.sync(() => {
        // What the watch has been given so far: a bookmark must be newer (see `bookmarkNow`).
        let fromRv = mode === "from" && asked !== 0 ? asked : store.resourceVersion
        if (mode === "from" && asked !== 0) {
          const events = store.eventsAfter(asked)
          if (events === undefined) return { _tag: "Expired" as const }
          for (const event of events) {
            const line = convert(event)
            if (line !== undefined) offer(handle, { _tag: "Line", text: line })
          }
          // As the watch cache does: after a replay, the last replayed event (of any object of
          // the resource, selected or not) is where the watch stands.
          const last = events[events.length - 1]
          if (last !== undefined) fromRv = last.resourceVersion
        } else if (mode !== "from") {
          for (const [, object] of store.current()) {
            if (keep(object)) offer(handle, { _tag: "Line", text: eventLine("ADDED", object) })
          }
          if (mode === "initialWithBookmark") {
            offer(handle, {
              _tag: "Line",
              text: bookmarkLine(server, store.resourceVersion, { [InitialEventsEndAnnotation]: "true" })
            })
          }
        }
        const unsubscribe = store.subscribe((event) => {
          if (event.resourceVersion <= fromRv) return
          const line = convert(event)
          if (line !== undefined) offer(handle, { _tag: "Line", text: line })
        })
        watches.add(handle)
        if (endAtOnce === true) offer(handle, { _tag: "End" })
        return { _tag: "Open" as const, unsubscribe, fromRv }
      })
      if (registration._tag === "Expired") {
        const status = expired(`too old resource version: ${asked} (${store.oldestResourceVersion})`)
        return Stream.make(`{"type":"ERROR","object":${encodeStatus(status)}}\n`)
      }
      yield* Effect.addFinalizer(() =>
        Effect.sync(() => {
          registration.unsubscribe()
          watches.delete(handle)
        }).pipe(Effect.zipRight(SubscriptionRef.update(openWatchCount, (n) => n - 1)))
      )
      // kube-apiserver's watch cache passes a watcher only what is newer than where it
      // started (its resourceVersion, or the last event it replayed), bookmarks included:
      // until something newer happened to any object of the resource, a watch hears no
      // bookmark at all, even at its timeout.
      const bookmarkNow = () => {
        if (store.resourceVersion > registration.fromRv) {
          offer(handle, { _tag: "Line", text: bookmarkLine(server, store.resourceVersion) })
        }
      }
      if (allowBookmarks) {
        yield* Effect.sleep(bookmarkInterval).pipe(
          Effect.zipRight(Effect.sync(bookmarkNow)),
          Effect.forever,
          Effect.forkScoped
        )
      }
      yield* Effect.sleep(Duration.seconds(timeoutSeconds)).pipe(
        Effect.zipRight(
          Effect.sync(() => {
            // The apiserver sends one last bookmark just before it ends a watch at its timeout.
            if (allowBookmarks) bookmarkNow()
            offer(handle, { _tag: "End" })
          })
        ),
        Effect.forkScoped
      )
      // The apiserver flushes the headers as a watch starts, so a quiet watch is still "open".
      nodeResponse.flushHeaders()
      // A client that hangs up ends its watch at once, as the apiserver notices a closed
      // connection; otherwise it would count as open until the next write to it.
      nodeResponse.once("close", () => Deferred.unsafeDone(handle.closed, Exit.void))
      yield* SubscriptionRef.update(openWatchCount, (n) => n + 1)
      return Stream.fromQueue(handle.queue).pipe(
        Stream.takeWhile((item) => item._tag !== "End"),
        Stream.mapEffect((item) =>
          handle.gate.await.pipe(
            Effect.zipRight(
              item._tag === "Truncate"
                ? Effect.async<string>((resume) => {
                  // Half a line, then the socket dies: the client sees a body cut mid-event.
                  nodeResponse.write(item.text, () => {
                    nodeResponse.socket?.destroy()
                    resume(Effect.succeed(""))
                  })
                })
                : Effect.succeed(item._tag === "Line" ? item.text : "")
            )
          )
        ),
        Stream.filter((text) => text !== ""),
        Stream.interruptWhen(Deferred.await(handle.closed))
      )
    })
  )
}
