/** The client's lists: one page, or all of them with the next page asked for ahead. */
import { Effect, Either, Fiber, Option, type Schema } from "effect"
import type { KubeClientError } from "../KubeError.ts"
import { isExpired, KubeBodyTooLargeError, type KubeMalformedBodyError, KubeTransportError } from "../KubeError.ts"
import type { KubeResource } from "../KubeResource.ts"
import { collectionPath } from "../KubeResource.ts"
import type { HasMetadata } from "../ObjectMeta.ts"
import { bodyLabels, type Decode, decodeBody, textStart, toListPage } from "./bodyDecoding.ts"
import { peekContinue } from "./continuePeek.ts"
import type { FullList, ListAllOptions, ListOptions, ListPage } from "./kubeClientTypes.ts"
import { ListDraft } from "./listDraft.ts"
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
    options?: ListAllOptions
  ) => Effect.Effect<FullList<A>, KubeClientError>
}

/**
 * A later page that got no answer fails a list whose answer had begun: the server answered its
 * first pages. Paced as a list cut mid-body (rule 7), not as a server that does not answer: else a
 * server that answers page 1 and resets the next is asked for page 1 once a second.
 */
const answerBrokeOff = (error: KubeClientError): KubeClientError =>
  error._tag === "KubeTransportError" && (error.reached === undefined || error.reached === "no-answer")
    ? new KubeTransportError({ method: error.method, path: error.path, message: error.message, reached: "mid-answer" })
    : error

export const makeListing = (
  { readBody, send }: Requests,
  { maxListBytes, maxListItems, maxListPages }: Pick<Limits, "maxListBytes" | "maxListItems" | "maxListPages">
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

  /**
   * A page, and the JSON length each of its objects is counted as against `maxListBytes`: the
   * page's text (managedFields cut) shared among its objects, since one `JSON.parse` of the whole
   * page does not say where each object began.
   */
  const measuredPageOf = <A extends HasMetadata>(
    fetched: FetchedPage,
    decode: Decode<A>,
    cuts: boolean
  ): Either.Either<{ readonly page: ListPage<A>; readonly share: number }, KubeMalformedBodyError> => {
    const text = decodeBody(fetched.bytes, cuts)
    return Either.map(
      toListPage(text, decode, fetched.path, fetched.secret, fetched.labels),
      (page) => ({ page, share: Math.ceil(text.length / Math.max(1, page.items.length + page.undecodable.length)) })
    )
  }

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
    { onPage, ...options }: ListAllOptions = {}
  ): Effect.Effect<FullList<A>, KubeClientError> => {
    // Made once the first page is asked for: the first time (a process's first list), its compile
    // then runs while the server answers rather than before the request.
    let decode: Decode<A> | undefined
    const cuts = cutsFor(schema)
    /**
     * One try at the whole list. `restarts`: how many times an expired continue token made it start
     * over; `pagesBefore`: the pages those tries read, which count against `maxListPages` too.
     */
    const attempt = (
      first: Omit<ListOptions, "continue">,
      restarts: number,
      pagesBefore: number
    ): Effect.Effect<FullList<A>, KubeClientError> =>
      Effect.scoped(Effect.gen(function*() {
        // By name: a page that repeats names (a continue token that never ends on the same page)
        // replaces entries rather than adding them, and the budget counts what is held.
        const draft = new ListDraft<A>(maxListItems, maxListBytes)
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
            // does, list again once, in one piece (no limit, so no token that could expire again).
            // A second expiry, or a token in that answer that expires too, is the server's
            // problem: the list fails into the back-off rather than starting over in a hot loop.
            if (token !== undefined && isExpired(fetched.left) && restarts === 0) {
              const { limit: _limit, ...whole } = first
              return yield* attempt(whole, restarts + 1, pagesBefore + pages)
            }
            return yield* Effect.fail(pagesBefore + pages > 0 ? answerBrokeOff(fetched.left) : fetched.left)
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
          const measured: { readonly page: ListPage<A>; readonly share: number } = yield* measuredPageOf(
            fetched.right,
            decode,
            cuts
          )
          const { page, share } = measured
          pages += 1
          for (const item of page.items) draft.put(item, share)
          for (const item of page.undecodable) draft.putUndecodable(item, share)
          if (onPage !== undefined) yield* onPage
          const past = pagesBefore + pages > maxListPages
            ? new KubeBodyTooLargeError({
              method: "GET",
              path: fetched.right.path,
              limit: maxListPages,
              unit: "pages",
              message: `the list of ${fetched.right.path} went past ${maxListPages} pages without an end (a ` +
                `continue token that never ends); it was abandoned and is retried after the back-off (a namespace ` +
                `that really needs that many pages needs KubeClientOptions.maxListPages raised)`
            })
            : draft.overBudget("GET", fetched.right.path, "list")
          if (past !== undefined) {
            yield* dropAhead
            return yield* Effect.fail(past)
          }
          resourceVersion ??= page.resourceVersion
          token = Option.getOrUndefined(page.continue)
          // The page as parsed is the truth: a peek that read it otherwise costs its request only.
          if (token !== next) yield* dropAhead
          if (token === undefined) return draft.toList(resourceVersion, pagesBefore + pages, restarts)
        }
      }))
    return Effect.withSpan(attempt(options, 0, 0), "KubeClient.listAll", {
      attributes: spanAttributes(resource, options.namespace, options.resourceVersion, options.labelSelector)
    })
  }

  return { list, listAll }
}
