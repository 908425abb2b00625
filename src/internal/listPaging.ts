/** The client's lists: one page, or all of them with the next page asked for ahead. */
import { Effect, Either, Fiber, Option, type Schema } from "effect"
import type { KubeClientError } from "../KubeError.ts"
import { isExpired, KubeBodyTooLargeError } from "../KubeError.ts"
import type { KubeResource } from "../KubeResource.ts"
import { collectionPath } from "../KubeResource.ts"
import type { HasMetadata } from "../ObjectMeta.ts"
import type { UndecodableEvent } from "../WatchEvent.ts"
import { bodyLabels, type Decode, decodeBody, textStart, toListPage } from "./bodyDecoding.ts"
import { peekContinue } from "./continuePeek.ts"
import type { FullList, ListOptions, ListPage } from "./kubeClientTypes.ts"
import { cutsFor } from "./managedFields.ts"
import { ownedDecoderFor } from "./plainDecoder.ts"
import { listQuery, spanAttributes } from "./requestParts.ts"
import type { Limits, Requests } from "./requestSender.ts"

/** Resumes in the event loop's check phase (`setImmediate`), after what the poll phase queued there. */
const untilCheckPhase: Effect.Effect<void> = Effect.async<void>((resume) => {
  setImmediate(() => resume(Effect.void))
})

/** A list page as it came: its bytes, and what an error about them may name. */
interface FetchedPage {
  readonly path: string
  readonly secret: string | undefined
  readonly bytes: Buffer
  /** The answer's content-type and content-encoding, for a page that is not JSON. */
  readonly labels: string
}

export interface Listing {
  readonly list: <A extends HasMetadata, I>(
    resource: KubeResource,
    schema: Schema.Schema<A, I>,
    options?: ListOptions
  ) => Effect.Effect<ListPage<A>, KubeClientError>
  readonly listAll: <A extends HasMetadata, I>(
    resource: KubeResource,
    schema: Schema.Schema<A, I>,
    options?: Omit<ListOptions, "continue">
  ) => Effect.Effect<FullList<A>, KubeClientError>
}

export const makeListing = (
  { readBody, send }: Requests,
  { maxListItems, maxListPages }: Pick<Limits, "maxListItems" | "maxListPages">
): Listing => {
  /** A list page asked for and its whole body read, each under its deadline. */
  const fetchPage = (resource: KubeResource, options: ListOptions): Effect.Effect<FetchedPage, KubeClientError> => {
    const path = collectionPath(resource, options.namespace) + listQuery(options)
    return send(
      "GET",
      path,
      undefined,
      undefined,
      (sent) =>
        Effect.map(
          readBody("GET", path, sent),
          (bytes): FetchedPage => ({ path, secret: sent.secret, bytes, labels: bodyLabels(sent.answer) })
        )
    )
  }

  const pageOf = <A extends HasMetadata>(fetched: FetchedPage, decode: Decode<A>, cuts: boolean) =>
    toListPage(decodeBody(fetched.bytes, cuts), decode, fetched.path, fetched.secret, fetched.labels)

  const listPage = <A extends HasMetadata>(
    resource: KubeResource,
    decode: Decode<A>,
    cuts: boolean,
    options: ListOptions
  ): Effect.Effect<ListPage<A>, KubeClientError> =>
    Effect.flatMap(fetchPage(resource, options), (fetched) => pageOf(fetched, decode, cuts))

  const list = <A extends HasMetadata, I>(
    resource: KubeResource,
    schema: Schema.Schema<A, I>,
    options: ListOptions = {}
  ): Effect.Effect<ListPage<A>, KubeClientError> =>
    Effect.withSpan(listPage(resource, ownedDecoderFor(schema), cutsFor(schema), options), "KubeClient.list", {
      attributes: spanAttributes(resource, options.namespace, options.resourceVersion, options.labelSelector)
    })

  const listAll = <A extends HasMetadata, I>(
    resource: KubeResource,
    schema: Schema.Schema<A, I>,
    options: Omit<ListOptions, "continue"> = {}
  ): Effect.Effect<FullList<A>, KubeClientError> => {
    // Made once the first page is asked for: the first time (a process's first list), its compile
    // then runs while the server answers rather than before the request.
    let decode: Decode<A> | undefined
    const cuts = cutsFor(schema)
    const attempt = (
      first: Omit<ListOptions, "continue">,
      restarts: number
    ): Effect.Effect<FullList<A>, KubeClientError> =>
      Effect.scoped(Effect.gen(function*() {
        const items: Array<A> = []
        const bad: Array<UndecodableEvent> = []
        let resourceVersion: string | undefined = undefined
        let pages = 0
        let token: string | undefined = undefined
        // The next page, asked for as soon as this one is here, before it is parsed and decoded:
        // the server makes it meanwhile. One page ahead at most, as client-go's pager buffers
        // pages for EachListItem (`npx tsx scratchpad/listAhead.ts 5`). (Asked for from a page's
        // first bytes while the rest still came, two bodies were read at once, and the
        // benchmark's sync took more CPU in A/B runs: not kept.)
        let ahead: Fiber.RuntimeFiber<FetchedPage, KubeClientError> | undefined
        // A page asked for and not wanted is interrupted, and its read hangs up (the list's scope
        // does the same for one still asked for when the list ends otherwise).
        const dropAhead = Effect.suspend(() => {
          const dropped = ahead
          ahead = undefined
          return dropped === undefined ? Effect.void : Fiber.interrupt(dropped)
        })
        /**
         * Asks for a page in a fiber of the list's scope, and returns once its request is out, so
         * the parse or compile that follows does not hold it back. A forked fiber starts when this
         * one yields, and undici writes on a keep-alive connection that was idle only in the event
         * loop's check phase (it looks first for bytes the server sent unasked; a new connection's
         * connect completes in the poll phase before it): so the fiber runs to its dispatch, then
         * this one waits for the check phase behind it.
         */
        const askAhead = (page: ListOptions) =>
          Effect.forkScoped(fetchPage(resource, page)).pipe(
            Effect.zipLeft(Effect.yieldNow()),
            Effect.zipLeft(untilCheckPhase)
          )
        if (decode === undefined) {
          ahead = yield* askAhead(first)
          decode = ownedDecoderFor(schema)
        }
        while (true) {
          const fetched: Either.Either<FetchedPage, KubeClientError> = yield* Effect.either(
            ahead !== undefined
              ? Fiber.join(ahead)
              : fetchPage(resource, token === undefined ? first : { ...first, continue: token })
          )
          ahead = undefined
          if (fetched._tag === "Left") {
            // The continue token outlived the server's compaction window. As client-go's pager
            // does, list again in one piece (no limit, so no token that could expire again).
            if (token !== undefined && isExpired(fetched.left)) {
              const { limit: _limit, ...whole } = first
              return yield* attempt(whole, restarts + 1)
            }
            return yield* Effect.fail(fetched.left)
          }
          const next = peekContinue(fetched.right.bytes, textStart(fetched.right.bytes))
          if (next !== null) {
            // The connection this page came on is free again only in the check phase (undici waits
            // a loop turn before reusing one): asked for before that, the next page opened a
            // second connection, whose connect completes in the loop's poll phase, after the
            // parse, so nothing overlapped on page 2 (seen with undici's diagnostics channels).
            yield* untilCheckPhase
            ahead = yield* askAhead({ ...first, continue: next })
          }
          const page: ListPage<A> = yield* pageOf(fetched.right, decode, cuts)
          pages += 1
          const past = pages > maxListPages
            ? { limit: maxListPages, unit: "pages" as const, option: "maxListPages" }
            : items.length + bad.length + page.items.length + page.undecodable.length > maxListItems
            ? { limit: maxListItems, unit: "items" as const, option: "maxListItems" }
            : undefined
          if (past !== undefined) {
            yield* dropAhead
            return yield* new KubeBodyTooLargeError({
              method: "GET",
              path: fetched.right.path,
              limit: past.limit,
              unit: past.unit,
              message: `the list of ${fetched.right.path} went past ${past.limit} ${past.unit} without an end ` +
                `(a continue token that never ends, or more objects than expected); it was abandoned ` +
                `(a namespace that really holds that many needs KubeClientOptions.${past.option} raised)`
            })
          }
          resourceVersion ??= page.resourceVersion
          for (const item of page.items) items.push(item)
          for (const item of page.undecodable) bad.push(item)
          token = Option.getOrUndefined(page.continue)
          // The page as parsed is the truth: a peek that read it otherwise costs its request only.
          if (token !== next) yield* dropAhead
          if (token === undefined) return { items, undecodable: bad, resourceVersion, pages, restarts }
        }
      }))
    return Effect.withSpan(attempt(options, 0), "KubeClient.listAll", {
      attributes: spanAttributes(resource, options.namespace, options.resourceVersion, options.labelSelector)
    })
  }

  return { list, listAll }
}
