/**
 * The watch's decisions, in one pure place: its states, what a round can end with, and the one
 * function (`step`) from a state and a round's end to the next state and the pause before it.
 * `SandboxWatch` runs the rounds and waits; every choice it makes is made here, so each rule below
 * is a row of a table test (`test/WatchMachine.test.ts`), no fibers or clocks needed.
 *
 * The rules, numbered once (the README's behaviour table, the comments and the test names use
 * these numbers):
 *
 *  1. Start with a paged **quorum** list (no resourceVersion: a list from a cache may be stale and
 *     report a Sandbox created a moment ago as gone). The cache becomes the list in one step; then
 *     watch from the list's resourceVersion, with bookmarks and `timeoutSeconds`.
 *  2. Every event's and bookmark's resourceVersion is kept: a resume starts from the newest. An empty
 *     one is ignored (asking `resourceVersion=` means "from now", and deletions in between would be
 *     missed). A list at an empty one (a page's, a streaming list's end bookmark) is no list: it
 *     fails as malformed, an answered failure (rule 7).
 *  3. The server closes a watch that said something: resume at once from the newest
 *     resourceVersion, no re-list. One that closed within a back-off floor of opening waits the rest
 *     of a floor (a `Beat`): a server that closes every watch as soon as it spoke is asked at most
 *     twice a second, never in a hot loop.
 *  4. Silence longer than `timeoutSeconds` plus the idle margin: the connection is dead; resume at once.
 *     (A streaming list of a longer term, rule 17, has as much longer until its end bookmark.)
 *  5. An `ERROR` event (but a 429), a 410 or a too-large resourceVersion (504) on the watch request:
 *     re-list, after the counted back-off (`pacing.ts`): at once the first time since the back-off
 *     was last forgotten (after an outage, the 410 that ends it is the server's first answer), then
 *     1, 2, 4, ... s to the cap while they come again. What the watch said before the `ERROR` does
 *     not matter: a bookmark before every 410 is how a lagging server asks for a list in a loop.
 *     A list that itself fails so waits the back-off too.
 *  6. A 429, on the request or as an `ERROR` event: wait the server's `Retry-After` (no less than the
 *     back-off floor, no more than its cap), or the counted back-off if that is longer, and resume.
 *     No re-list: throttling says nothing about the resourceVersion, and a full list is what an
 *     overloaded server needs least.
 *  7. Anything else: resume from the newest good resourceVersion, at one of two paces, told apart
 *     by whether the server answered (`pacing.ts` has both).
 *     - No answer at all (refused, reset, a TLS or DNS failure, no headers in time: a transport
 *       error): the reconnect pace, from the floor doubling to `reconnectCap` (1 s by default) and
 *       staying there, spread upward only. A server that is down is asked about once a second, and
 *       once it is back the watch notices within about a second. A row of them is logged as it
 *       starts and at 2, 4, 8, ... in a row.
 *     - A watch that had spoken and whose connection then broke mid-stream: resumed at once the
 *       first time since the back-off was last forgotten (a healthy watch cut by a network fault),
 *       then at the counted back-off (a server that cuts every watch after a bookmark).
 *     - An answer that is a failure (a 5xx, an HTML page, a malformed line, a body too large, a
 *       list that broke off mid-body; 401 and 403, rule 9; credentials that could not be read,
 *       such as an `exec` plugin that failed): the counted back-off, from the floor doubling to the
 *       cap with ±20% jitter. A server that answers but fails is struggling, and is given room.
 *     The reconnect pace does not grow the back-off (an outage's refusals leave the next answer's
 *     pause as it was); an answer that is a failure ends a row of no answers. Both counts are
 *     forgotten only once the back-off reset time (2 minutes) passed with no paused retry: nothing
 *     a server sends resets them, so over any 10 minutes at most about 30 requests are answered
 *     with a failure, and at most about 30 full lists are asked for.
 *  8. A watch that closes early having said nothing, or whose answer breaks off before it said
 *     anything, waits the counted back-off before it is asked again (client-go's "very short
 *     watch"), growing while it repeats. One that ran (nearly) its
 *     whole term in silence is a quiet cluster: resume at once.
 *  9. 401 and 403 back off like rule 7's answered failures; the client reads credentials afresh,
 *     and a 403's log line names the permission missing (`watch` for a streaming list: RBAC sees a
 *     watch). Granting it heals the watch without a restart.
 * 10. The first list is the reconcile: every name waited on is told, present or gone.
 * 11. A later list tells exactly the names whose object changed or went.
 * 12. `DELETED` tells the name gone (also how a Sandbox that stops matching the selector leaves).
 * 13. Unknown is never loss: a dropped watch, an error, a back-off or an object that does not
 *     decode tells nobody anything. A cached Sandbox whose new state does not decode keeps its last
 *     value; a name whose only state does not decode is neither present nor gone.
 * 14. Per name, told resourceVersions never go backwards: an event older than the cached object, or
 *     a list older than it or than the name's deletion, is not told; nor is a list older than where
 *     an unknown name was heard, which leaves it unknown.
 * 15. A line over the size cap is retried from the same resourceVersion once, with the back-off;
 *     the second time at that resourceVersion the watch cannot get past it, so it re-lists.
 * 16. A list may be a **streaming list** (`listMode` `"stream"`, or `"auto"`, the default): one
 *     watch with `sendInitialEvents=true`, `resourceVersionMatch=NotOlderThan`, no resourceVersion
 *     (a consistent start) and bookmarks. Its events fill a draft, not the cache, by name
 *     (`listDraft.ts`): a name sent again replaces its entry, and a `DELETED` removes the name even
 *     when its object does not decode (a server may queue changes ahead of the end bookmark). The
 *     draft, like a paged list, holds at most `maxListItems` objects and `maxListBytes` of JSON; past
 *     either the list fails as a paged one does (too large, the back-off). The bookmark annotated
 *     `k8s.io/initial-events-end` is the list landing at its resourceVersion (rule 1's one step,
 *     rules 10, 11 and 13 as for a paged list), and the same connection goes on as the watch.
 *     Every later watch is a plain one from the newest resourceVersion: a resume never asks for
 *     the initial events again.
 * 17. A streaming list that does not reach its end bookmark is no list: the draft is dropped and
 *     the next list streams again after the back-off, whatever ended it (an `ERROR`, a failure,
 *     silence, a close); never a resume from a half-known state. One the server ended at its term
 *     (`timeoutSeconds`) was too large to stream in that time (a huge namespace, a slow link); one
 *     still sending without its end bookmark at its term plus the idle margin is abandoned there (the
 *     request aborted) and counts as ended at its term, else a server that ignores the term and is
 *     never silent would be waited on for ever (silence that long is rule 4's, as ever). In
 *     `"stream"` the next asks for twice the term, up to an hour, so that it can finish (client-go
 *     retries with the same term; its TODO for kubernetes#115478 asks for this). A list that lands
 *     forgets the longer term.
 * 18. In `"auto"`, a server that cannot stream a list says so in one of four ways: it refuses the
 *     request's shape with a 400, 405, 415 or 422 (1.20 forbids resourceVersionMatch on a watch, a
 *     newer server with the WatchList gate off rejects the parameters); it sends a bookmark without
 *     the end annotation (it ignored `sendInitialEvents`); it closes the streaming list cleanly
 *     (no `ERROR`, no failure) before its end bookmark three times in a row (it answers the request
 *     as a plain watch, as an aggregated server, a proxy or a test double may); or it ends one at
 *     its term, or one is abandoned at its term plus the idle margin (it ignored the parameters, or
 *     the list is too large to stream: either way pages sync). Then every list is paged for the
 *     life of the watch, at once, said once. Nothing transient is proof: a 404 (a CRD being
 *     registered again after an apiserver restart), a 5xx, a 429, a cut, silence or a request's
 *     headers deadline back off as in rules 6 and 7 and stream again, and anything but a clean
 *     close starts the count of clean closes again. `MODIFIED` and `DELETED` before the end
 *     bookmark prove nothing either (a server may queue changes ahead of it). In
 *     `"stream"` these are failures like rule 7. A 404 on the resource, in any mode, says once in
 *     words that the server does not serve it and the CRD may not be installed.
 *
 * Rules 10–14 are the cache's (`sandboxCache.ts`); the others are decided here.
 *
 * @internal
 */
import { Data, Duration } from "effect"
import * as KubeError from "../KubeError.ts"
import { apiVersion } from "../KubeResource.ts"
import type { Status } from "../KubeStatus.ts"
import { SandboxResource } from "../Sandbox.ts"
import { Pause } from "./pacing.ts"

// ---------------------------------------------------------------------------------------------
// States
// ---------------------------------------------------------------------------------------------

/** How lists are taken: streamed (rule 16) or in pages. */
export type ListKind = "stream" | "paged"

/** The list mode asked for: stream, page, or stream until the server says it cannot (rule 18). */
export type ListMode = "auto" | "stream" | "paged"

/** Why a list is needed; also the `reason` label of the re-list metric. */
export type ListReason =
  | "initial"
  | "expired"
  | "error-event"
  | "too-large-resource-version"
  | "line-too-long"
  | "defect"

export type WatchState = Data.TaggedEnum<{
  /**
   * The cache cannot continue from any resourceVersion (the start, or the server said the one we
   * had is gone): the next round lists.
   */
  NeedsList: {
    readonly reason: ListReason
    readonly lists: ListKind
    /** Rule 18: streaming lists in a row the server closed cleanly before their end bookmark. */
    readonly cleanCloses?: number
    /** Rule 17: the `timeoutSeconds` the next streaming list asks for, when longer than the setting's. */
    readonly streamTerm?: number
    /** The 404's words were said (a later 404 in a row says less). */
    readonly notFoundSaid?: true
  }
  /**
   * The next round watches from `resourceVersion`, the newest heard. `oversizedAt` is the
   * resourceVersion a line over the cap was last met at (rule 15), if the last round ended so.
   */
  Watching: {
    readonly resourceVersion: string
    readonly oversizedAt: string | undefined
    readonly lists: ListKind
    /** The 404's words were said (a later 404 in a row says less). */
    readonly notFoundSaid?: true
  }
}>

export const WatchState = Data.taggedEnum<WatchState>()

/** The first state: a list, of the kind the mode starts with. */
export const initialFor = (mode: ListMode): WatchState =>
  WatchState.NeedsList({ reason: "initial", lists: mode === "paged" ? "paged" : "stream" })

/** The first state of a watch that lists in pages. */
export const initial: WatchState = initialFor("paged")

// ---------------------------------------------------------------------------------------------
// Pauses: the kind is the machine's; how long each is, is `pacing.ts`'s.
// ---------------------------------------------------------------------------------------------

export { Pause } from "./pacing.ts"

const none: Pause = Pause.None()
const beat: Pause = Pause.Beat()
const backoff: Pause = Pause.Backoff()
const reconnect: Pause = Pause.Reconnect()
const resume: Pause = Pause.Resume()
const relistPause: Pause = Pause.Relist()

// ---------------------------------------------------------------------------------------------
// How a round ends
// ---------------------------------------------------------------------------------------------

/** What one round (a list, or one watch) ended with. */
export type RoundEnd = Data.TaggedEnum<{
  /** A list landed at `resourceVersion`. */
  Listed: { readonly resourceVersion: string }
  /** A list failed. */
  ListFailed: { readonly error: KubeError.KubeClientError }
  /** The watch request or its stream failed, after the watch had reached `resourceVersion`. */
  WatchFailed: {
    readonly error: KubeError.KubeClientError
    readonly resourceVersion: string
    readonly heard: boolean
  }
  /** The watch sent an `ERROR` event (what it said before it changes nothing: rule 5). */
  ErrorEvent: { readonly status: Status; readonly resourceVersion: string }
  /** The watch was silent past the idle limit. */
  Idle: { readonly resourceVersion: string }
  /** The server closed the watch after `ranMillis`. */
  Closed: { readonly resourceVersion: string; readonly heard: boolean; readonly ranMillis: number }
  /**
   * A streaming list reached its end bookmark at `resourceVersion`: the draft became the cache, and
   * the same connection goes on as the watch (rule 16).
   */
  StreamListed: { readonly resourceVersion: string }
  /** A streaming list's server showed it does not stream (rule 18): `why`, in words. */
  StreamUnsupported: { readonly why: string }
  /**
   * A streaming list had not reached its end bookmark by the end of its term plus the idle margin,
   * though the server kept talking: the loop abandoned it (rules 17 and 18).
   */
  StreamOverdue: {}
  /** A defect in the loop's own code stopped it: nothing the cluster said. */
  Defect: {}
}>

export const RoundEnd = Data.taggedEnum<RoundEnd>()

// ---------------------------------------------------------------------------------------------
// Transitions
// ---------------------------------------------------------------------------------------------

export interface MachineSettings {
  readonly namespace: string
  readonly timeoutSeconds: number
  readonly floor: Duration.Duration
  readonly cap: Duration.Duration
  /** Rule 18: whether a server that cannot stream a list moves the watch to pages. Default `"paged"`. */
  readonly listMode?: ListMode | undefined
}

/** Where the loop goes next, after which pause, and what it tells a person and the metrics. */
export interface Transition {
  readonly next: WatchState
  readonly pause: Pause
  /**
   * The `reason` label of the restart metric, for a round that did not end as it should; none for
   * a list that landed, a watch the server closed after it spoke, or a quiet term.
   */
  readonly restart: string | undefined
  /** What happened, in words a person can act on (the loop adds what comes next and when). */
  readonly message: string | undefined
}

/**
 * A watch that lasted at least this share of `timeoutSeconds` ran its term (rule 8): the server's
 * timer starts a little after ours, and a proxy or load balancer may close the stream a little
 * before the server would.
 */
export const FullTermShare = 0.9

/** The one step: every arm returns the next state. */
export const step = (state: WatchState, end: RoundEnd, settings: MachineSettings): Transition => {
  const lists = state.lists
  // Rules 17 and 18: a streaming list's round that ended before its end bookmark.
  if (state._tag === "NeedsList" && state.lists === "stream" && end._tag !== "StreamListed" && end._tag !== "Defect") {
    return ofUnfinishedStream(state, end, settings)
  }
  switch (end._tag) {
    case "Listed":
    case "StreamListed":
      return { next: watching(end.resourceVersion, lists), pause: none, restart: undefined, message: undefined }
    case "StreamUnsupported":
      // Only a streaming list's round ends so (handled above); a stray one changes nothing.
      return { next: state, pause: beat, restart: undefined, message: end.why }
    case "StreamOverdue":
      return { next: state, pause: beat, restart: undefined, message: undefined }
    case "ListFailed":
      return ofClientError(end.error, resumePoint(state), "list", settings, notFoundSaid(state))
    case "WatchFailed":
      if (end.error._tag === "KubeLineTooLongError") return ofLineTooLong(state, end.resourceVersion, end.error)
      return ofClientError(
        end.error,
        watching(end.resourceVersion, lists),
        "watch",
        settings,
        notFoundSaid(state),
        end.heard
      )
    case "ErrorEvent":
      return ofErrorEvent(end, lists, settings)
    case "Idle":
      return {
        next: watching(end.resourceVersion, lists),
        pause: none,
        restart: "idle",
        message: `the watch was silent for longer than ${settings.timeoutSeconds}s plus the idle margin; ` +
          `the connection is taken for dead`
      }
    case "Closed":
      return ofClose(end, lists, settings)
    case "Defect":
      // Whatever the loop was doing is not to be trusted: start again from a list, after the
      // longest pause (a defect that comes back at once must not spin).
      return {
        next: relist("defect", lists),
        pause: Pause.RetryAfter({ delay: settings.cap }),
        restart: "defect",
        message: "a defect in sandbox-watch's own code stopped the watch loop (a bug: please report it with " +
          "this log line); the cache is kept as it was"
      }
  }
}

/** Describes the next state for a log line: "re-listing", "resuming from resourceVersion 42". */
export const describeNext = (next: WatchState): string =>
  next._tag === "NeedsList"
    ? next.lists === "stream" ? "re-listing (streaming)" : "re-listing"
    : `resuming from resourceVersion ${next.resourceVersion}`

// -- the arms ----------------------------------------------------------------------------------

const watching = (resourceVersion: string, lists: ListKind): WatchState =>
  WatchState.Watching({ resourceVersion, oversizedAt: undefined, lists })

/** A failed list changes nothing the loop knew: it lists again (or watches, if it could). */
const resumePoint = (state: WatchState): WatchState =>
  state._tag === "Watching" ? watching(state.resourceVersion, state.lists) : state

const relist = (reason: ListReason, lists: ListKind): WatchState => WatchState.NeedsList({ reason, lists })

/**
 * Rule 18: the answers that show the server cannot serve a streaming list, whenever it is asked:
 * it refused the request's shape. 422 (the parameters fail its validation: 1.20's
 * "resourceVersionMatch is forbidden for watch", a gate-off server's "sendInitialEvents is
 * forbidden"), 400 (it cannot read them), 405 (it does not watch this way) and 415 (it cannot answer
 * in the form asked) come again for the same request on any day. Not proof, because they pass or say
 * nothing of streaming: 404 (a CRD being registered again after an apiserver restart, or not yet
 * installed: a paged list gets the same 404), 401 and 403 (who we are), 409 and 410 (the
 * resourceVersion), 429 and 5xx (load), and any failure without an answer.
 */
const refusesStreaming = (error: KubeError.KubeClientError): boolean =>
  error._tag === "KubeStatusError" && [400, 405, 415, 422].includes(error.code)

/** Rule 18: this many clean closes before the end bookmark in a row show the server does not stream. */
export const CleanClosesProof = 3

/**
 * Rule 17: the longest term a streaming list asks for after ones ended at their term: an hour,
 * the most kube-apiserver picks for a watch that names none (twice `--min-request-timeout`).
 */
export const LongestStreamTerm = 3_600

/** Rule 17: the `timeoutSeconds` the next streaming list asks for in this state. */
export const streamTerm = (state: WatchState, settings: Pick<MachineSettings, "timeoutSeconds">): number =>
  state._tag === "NeedsList" && state.streamTerm !== undefined ? state.streamTerm : settings.timeoutSeconds

/**
 * A watch that lasted (nearly) its whole `timeoutSeconds`, or the `term` asked. For a streaming
 * list, that is rule 17's size problem: a server that streams sends its end bookmark as soon as the
 * initial events are out.
 */
const ranItsTerm = (ranMillis: number, settings: MachineSettings, term = settings.timeoutSeconds): boolean =>
  ranMillis >= term * 1000 * FullTermShare

/** Rule 18: every list is paged from now on, at once, said once. */
const toPages = (state: Extract<WatchState, { readonly _tag: "NeedsList" }>, why: string): Transition => ({
  next: relist(state.reason, "paged"),
  pause: none,
  restart: "stream-unsupported",
  message: `${why}; every list is paged from now on`
})

/**
 * The next streaming list after one that did not finish: a longer term is kept, so a list cut on
 * its way can still finish next time; the count of clean closes is `cleanCloses`, else it starts
 * again.
 */
const streamAgain = (
  state: Extract<WatchState, { readonly _tag: "NeedsList" }>,
  cleanCloses?: number
): WatchState =>
  WatchState.NeedsList({
    reason: state.reason,
    lists: "stream",
    ...(cleanCloses === undefined ? {} : { cleanCloses }),
    ...(state.streamTerm === undefined ? {} : { streamTerm: state.streamTerm })
  })

/** Rules 17 and 18: a streaming list's round ended before its end bookmark. */
const ofUnfinishedStream = (
  state: Extract<WatchState, { readonly _tag: "NeedsList" }>,
  end: RoundEnd,
  settings: MachineSettings
): Transition => {
  const auto = settings.listMode === "auto"
  const term = streamTerm(state, settings)
  const again = streamAgain(state)
  const refused = end._tag === "StreamUnsupported"
    ? end.why
    : end._tag === "WatchFailed" && refusesStreaming(end.error)
    ? `the server refused a streaming list (${end.error.message})`
    : undefined
  if (refused !== undefined && auto) return toPages(state, refused)
  if (end._tag === "Closed") return ofUnfinishedClose(state, end, term, settings)
  if (end._tag === "StreamOverdue") {
    // The server ignored its term (and, likely, sendInitialEvents): as one ended at its term.
    return ofStreamAtTerm(
      state,
      term,
      `a streaming list had no end bookmark by the end of its term (${term}s plus the idle margin) though the ` +
        `server kept sending (it ignored timeoutSeconds and sendInitialEvents, or the list is too large to ` +
        `stream in that time); the request was abandoned`,
      settings
    )
  }
  if (end._tag === "WatchFailed") {
    // Rules 6, 7 and 9 hold as for a list: the draft is dropped, and the next list streams again.
    // RBAC sees a streaming list as a watch: a 403 here is a missing `watch`, not `list`.
    return ofClientError(end.error, again, "streaming list", settings, notFoundSaid(state))
  }
  const said = refused ??
    (end._tag === "ErrorEvent"
      ? `the streaming list sent an ERROR before its end bookmark (${end.status.code ?? "no code"} ${
        end.status.reason ?? ""
      }: ${end.status.message ?? "no message"})`
      : end._tag === "Idle"
      ? `the streaming list was silent for longer than ${term}s plus the idle margin before its end bookmark`
      : "the streaming list ended before its end bookmark")
  // A 429 inside the stream waits what the server asked, as rule 6 has it.
  const seconds = end._tag === "ErrorEvent" && end.status.code === 429
    ? end.status.details?.retryAfterSeconds
    : undefined
  return {
    next: again,
    pause: seconds === undefined ? backoff : retryAfter(Duration.seconds(seconds), settings),
    restart: "stream-unfinished",
    message: `${said}; what it sent so far is dropped`
  }
}

/**
 * Rules 17 and 18: the server closed a streaming list cleanly before its end bookmark: at its term
 * (too large to stream in it, or the parameters ignored), or early (a plain watch's answer, once
 * is chance, three times in a row is the server's way).
 */
const ofUnfinishedClose = (
  state: Extract<WatchState, { readonly _tag: "NeedsList" }>,
  end: Extract<RoundEnd, { readonly _tag: "Closed" }>,
  term: number,
  settings: MachineSettings
): Transition => {
  const auto = settings.listMode === "auto"
  if (ranItsTerm(end.ranMillis, settings, term)) {
    return ofStreamAtTerm(
      state,
      term,
      `the server ended a streaming list at its timeoutSeconds (${term}s) before its end bookmark ` +
        `(the list is too large to stream in that time over this link, or the server ignored sendInitialEvents)`,
      settings
    )
  }
  const cleanCloses = (state.cleanCloses ?? 0) + 1
  const closed = `the server closed ${
    cleanCloses === 1 ? "a streaming list" : `${cleanCloses} streaming lists in a row`
  } before the end bookmark, without an error`
  if (auto && cleanCloses >= CleanClosesProof) {
    return toPages(state, `${closed}: it answers sendInitialEvents as a plain watch (it does not stream lists)`)
  }
  return {
    next: streamAgain(state, cleanCloses),
    pause: backoff,
    restart: "stream-unfinished",
    message: `${closed}; what it sent is dropped` + (auto
      ? `; at ${CleanClosesProof} in a row every list is paged`
      : cleanCloses >= CleanClosesProof
      ? `; the server seems not to stream lists (listMode "auto" would page)`
      : "")
  }
}

/**
 * Rules 17 and 18: a streaming list that ran its whole term without its end bookmark (the server
 * ended it there, or the loop abandoned it just after): in `"auto"` every list is paged; in
 * `"stream"` the next asks for twice the term, up to an hour, after the back-off.
 */
const ofStreamAtTerm = (
  state: Extract<WatchState, { readonly _tag: "NeedsList" }>,
  term: number,
  why: string,
  settings: MachineSettings
): Transition => {
  if (settings.listMode === "auto") return toPages(state, why)
  const longer = Math.min(term * 2, Math.max(LongestStreamTerm, term))
  return {
    next: WatchState.NeedsList({ reason: state.reason, lists: "stream", streamTerm: longer }),
    pause: backoff,
    restart: "stream-unfinished",
    message: `${why}; what it sent is dropped, and the next streaming list asks for ${longer}s`
  }
}

/** The resource as a person names it: `sandboxes.jr2.dev/v1alpha1`. */
const servedName = `${SandboxResource.plural}.${apiVersion(SandboxResource)}`

/** The 404's words were said for the state the loop is in (a 404 in a row says less). */
const notFoundSaid = (state: WatchState): boolean => state.notFoundSaid === true

/** The delay a server asked for, kept between the floor (rule 6: never a hot loop) and the cap. */
const retryAfter = (delay: Duration.Duration, settings: MachineSettings): Pause =>
  Pause.RetryAfter({ delay: Duration.clamp(delay, { minimum: settings.floor, maximum: settings.cap }) })

const ofClientError = (
  error: KubeError.KubeClientError,
  resume: WatchState,
  during: "list" | "streaming list" | "watch",
  settings: MachineSettings,
  /** A 404 just before this one was said in words. */
  alreadySaid = false,
  /** The watch said something before it failed (rule 7's cut mid-stream, not rule 8's silence). */
  heard = true
): Transition => {
  const at = resume._tag === "Watching" ? ` ${resume.resourceVersion}` : ""
  // Rule 5: the resourceVersion is gone; only a list can go on. At once the first time; the
  // re-list back-off while they repeat, because an apiserver that keeps answering so is lagging or
  // compacting, and a full list is its dearest request. A list that fails so waits the back-off.
  const relistAfter = during === "watch" ? relistPause : backoff
  if (KubeError.isExpired(error)) {
    return {
      next: relist("expired", resume.lists),
      pause: relistAfter,
      restart: "expired",
      message: `resourceVersion${at} expired (${error.message})`
    }
  }
  if (KubeError.isTooLargeResourceVersion(error)) {
    return {
      next: relist("too-large-resource-version", resume.lists),
      pause: relistAfter,
      restart: "too-large-resource-version",
      message: `the server has not reached resourceVersion${at} yet (${error.message})`
    }
  }
  // Rule 6.
  if (KubeError.isTooManyRequests(error)) {
    const asked = KubeError.retryAfter(error)
    return {
      next: resume,
      pause: asked._tag === "Some" ? retryAfter(asked.value, settings) : backoff,
      restart: "429",
      message: `the server is throttling us (429${
        asked._tag === "Some" ? `, Retry-After ${Duration.format(asked.value)}` : ""
      })`
    }
  }
  // Rule 9.
  if (KubeError.isUnauthorized(error)) {
    return {
      next: resume,
      pause: backoff,
      restart: "401",
      message: "the cluster rejected our credentials (401 Unauthorized); they will be read afresh"
    }
  }
  if (KubeError.isForbidden(error)) {
    const verb = during === "list" ? "list" : "watch"
    const aside = during === "streaming list" ? " (a streaming list is a watch)" : ""
    return {
      next: resume,
      pause: backoff,
      restart: "403",
      message:
        `forbidden to ${verb} sandboxes.jr2.dev in namespace "${settings.namespace}"${aside}: grant get, list and ` +
        `watch on sandboxes.jr2.dev (RBAC); the watch heals without a restart once it may (${error.message})`
    }
  }
  // A 404 on the resource, in any mode and round: rule 7's back-off (a CRD being registered again
  // after an apiserver restart comes back by itself), said in words the first time in a row.
  if (error._tag === "KubeStatusError" && error.code === 404) {
    return {
      next: resume._tag === "NeedsList"
        ? WatchState.NeedsList({ ...resume, notFoundSaid: true })
        : WatchState.Watching({ ...resume, notFoundSaid: true }),
      pause: backoff,
      restart: "404",
      message: alreadySaid
        ? `the server still does not serve ${servedName} in namespace "${settings.namespace}" (404)`
        : `the server does not serve ${servedName} in namespace "${settings.namespace}" (404: ${error.message}): ` +
          `the CustomResourceDefinition ${SandboxResource.plural}.${SandboxResource.group} may not be installed, or ` +
          `is being registered again (an apiserver restart); the cache is kept and the watch goes on asking`
    }
  }
  // Rule 7: no answer at all, or an answer that is a failure.
  return {
    next: resume,
    pause: transportPause(error, during, heard),
    restart: restartReason(error),
    message: error.message
  }
}

/**
 * Rule 7: the pace of a failure, by how far the server's answer got. Not health's question
 * (`answeredBy`: did the server say anything), though both start from `KubeError.answerBegan`.
 * - An answer that is a failure: the counted back-off. So is a request not sent because its
 *   credentials could not be read: an `exec` plugin spawned once a second is a storm of its own.
 * - A body that broke off mid-answer: for a list, the counted back-off (the server did the list's
 *   work; a list cut each time must not be asked for once a second). For a watch that had spoken,
 *   `Resume`: a watch's connection is cut by a network fault as often as by a server, so the first
 *   goes at once, and the ones after are counted (a server that resets every watch after a
 *   bookmark is not asked once a second). A watch cut before it said anything is rule 8's silent
 *   early end, cut rather than closed: the counted back-off.
 * - No answer at all: the reconnect pace.
 */
const transportPause = (
  error: KubeError.KubeClientError,
  during: "list" | "streaming list" | "watch",
  heard: boolean
): Pause => {
  if (error._tag !== "KubeTransportError") return backoff
  if (KubeError.answerBegan(error)) return during === "watch" && heard ? resume : backoff
  return error.reached === "not-sent" ? backoff : reconnect
}

const restartReason = (error: KubeError.KubeClientError): string => {
  switch (error._tag) {
    case "KubeStatusError":
      return String(error.code)
    case "KubeTransportError":
      return "transport"
    case "KubeLineTooLongError":
      return "line-too-long"
    case "KubeMalformedLineError":
    case "KubeMalformedBodyError":
      return "malformed"
    case "KubeBodyTooLargeError":
      return "too-large"
    case "KubeWatchIdleError":
      return "idle"
  }
}

/** Rule 15. */
const ofLineTooLong = (state: WatchState, resourceVersion: string, error: KubeError.KubeLineTooLongError): Transition =>
  state._tag === "Watching" && state.oversizedAt === resourceVersion
    ? {
      next: relist("line-too-long", state.lists),
      pause: backoff,
      restart: "line-too-long",
      message: `a line over the size cap again at resourceVersion ${resourceVersion}: the watch cannot get past it ` +
        `(${error.message})`
    }
    : {
      next: WatchState.Watching({ resourceVersion, oversizedAt: resourceVersion, lists: state.lists }),
      pause: backoff,
      restart: "line-too-long",
      message: error.message
    }

/** Rules 5 and 6, for an `ERROR` inside the watch's 200. */
const ofErrorEvent = (
  end: Extract<RoundEnd, { readonly _tag: "ErrorEvent" }>,
  lists: ListKind,
  settings: MachineSettings
): Transition => {
  const { resourceVersion, status } = end
  const said = `${status.code ?? "no code"} ${status.reason ?? ""}: ${status.message ?? "no message"}`
  if (status.code === 429) {
    const seconds = status.details?.retryAfterSeconds
    return {
      next: watching(resourceVersion, lists),
      pause: seconds === undefined ? backoff : retryAfter(Duration.seconds(seconds), settings),
      restart: "429",
      message: `the watch sent an ERROR: the server is throttling us (${said})`
    }
  }
  // Rule 5: the re-list back-off, whatever the watch said before the ERROR (a bookmark before
  // every ERROR is no healthy stream, and forgetting on it was a list storm).
  const pause = relistPause
  return KubeError.isExpiredStatus(status)
    ? {
      next: relist("expired", lists),
      pause,
      restart: "expired",
      message: `resourceVersion ${resourceVersion} expired (${status.message ?? "410 Gone"})`
    }
    : {
      next: relist("error-event", lists),
      pause,
      restart: "error-event",
      message: `the watch sent an ERROR (${said})`
    }
}

/** Rules 3 and 8. */
const ofClose = (
  end: Extract<RoundEnd, { readonly _tag: "Closed" }>,
  lists: ListKind,
  settings: MachineSettings
): Transition => {
  const next = watching(end.resourceVersion, lists)
  const ran = Duration.format(Duration.millis(end.ranMillis))
  if (end.heard) {
    if (end.ranMillis >= Duration.toMillis(settings.floor)) {
      return { next, pause: none, restart: undefined, message: undefined }
    }
    // Rule 3: a server that closes every watch as soon as it spoke is asked at most once a floor.
    return {
      next,
      pause: beat,
      restart: "short-watch",
      message: `the watch closed ${ran} after it opened`
    }
  }
  if (ranItsTerm(end.ranMillis, settings)) {
    return { next, pause: none, restart: undefined, message: "the watch ran its term without a change" }
  }
  // Rule 8: the back-off, growing while it repeats (client-go's "very short watch").
  return {
    next,
    pause: backoff,
    restart: "silent-close",
    message: `the watch closed after ${ran} without a word`
  }
}
