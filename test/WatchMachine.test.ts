/**
 * The watch's decisions, one row per rule of `src/internal/watchMachine.ts`: a state and what the
 * round ended with in, the next state, the pause and the restart reason out. No fibers, no clock.
 */
import { Duration } from "effect"
import { describe, expect, it } from "vitest"
import type { Pause, RoundEnd, WatchState } from "../src/internal/watchMachine.ts"
import * as WatchMachine from "../src/internal/watchMachine.ts"
import type { KubeClientError } from "../src/KubeError.ts"
import { KubeBodyTooLargeError, KubeLineTooLongError, KubeMalformedLineError } from "../src/KubeError.ts"
import type { Status } from "../src/KubeStatus.ts"
import { statusError, transportError } from "./support/ScriptedKubeClient.ts"

const { RoundEnd: End, WatchState: State } = WatchMachine

const settings: WatchMachine.MachineSettings = {
  namespace: "ns",
  timeoutSeconds: 240,
  floor: Duration.millis(500),
  cap: Duration.seconds(30)
}

const listing = (reason: WatchMachine.ListReason = "initial") => State.NeedsList({ reason, lists: "paged" })
const streaming = (
  reason: WatchMachine.ListReason = "initial",
  more: { readonly cleanCloses?: number; readonly streamTerm?: number } = {}
) => State.NeedsList({ reason, lists: "stream", ...more })
const watching = (resourceVersion: string, oversizedAt?: string) =>
  State.Watching({ resourceVersion, oversizedAt, lists: "paged" })
const watchingAfterStream = (resourceVersion: string) =>
  State.Watching({ resourceVersion, oversizedAt: undefined, lists: "stream" })

/** A row's expectation, short: the next state, the pause, the restart reason. */
const show = (state: WatchState) =>
  state._tag === "NeedsList"
    ? `${state.lists === "stream" ? "stream" : "list"}(${
      [
        state.reason,
        ...(state.cleanCloses === undefined ? [] : [`${state.cleanCloses} clean close(s)`]),
        ...(state.streamTerm === undefined ? [] : [`term ${state.streamTerm}s`])
      ].join(", ")
    })`
    : `watch(${state.resourceVersion}${state.oversizedAt === undefined ? "" : `, oversized at ${state.oversizedAt}`}${
      state.lists === "stream" ? ", lists streamed" : ""
    })`
const showPause = (pause: Pause) =>
  pause._tag === "RetryAfter" ? `retry-after ${Duration.toMillis(pause.delay)}ms` : pause._tag.toLowerCase()

const errorEvent = (code: number, reason: string, details?: Status["details"]): Status => ({
  kind: "Status",
  code,
  reason,
  message: `${code} ${reason}`,
  ...(details === undefined ? {} : { details })
})

const tooLarge: KubeClientError = statusError(504, "Timeout", "Too large resource version: 20, current: 19", {
  causes: [{ reason: "ResourceVersionTooLarge", message: "Too large resource version" }]
})
const lineTooLong = new KubeLineTooLongError({
  path: "/watch",
  message: "a watch line exceeded 16 bytes without a newline",
  limitBytes: 16
})

interface Row {
  readonly rule: string
  readonly from: WatchState
  readonly end: RoundEnd
  readonly next: string
  readonly pause: string
  readonly restart: string | undefined
}

const rows: ReadonlyArray<Row> = [
  {
    rule: "1. a list that landed: watch from its resourceVersion at once",
    from: listing(),
    end: End.Listed({ resourceVersion: "10" }),
    next: "watch(10)",
    pause: "none",
    restart: undefined
  },
  {
    rule: "1, 7. a list that got no answer: list again at the reconnect pace",
    from: listing("expired"),
    end: End.ListFailed({ error: transportError() }),
    next: "list(expired)",
    pause: "reconnect",
    restart: "transport"
  },
  {
    rule: "1, 7. a list the server answered with a 503: list again after the back-off",
    from: listing("expired"),
    end: End.ListFailed({ error: statusError(503, "ServiceUnavailable", "the apiserver is not ready yet") }),
    next: "list(expired)",
    pause: "backoff",
    restart: "503"
  },
  {
    rule: "3. the server closed a watch that spoke: resume at once from the newest, no re-list",
    from: watching("10"),
    end: End.Closed({ resourceVersion: "15", heard: true, ranMillis: 3_000 }),
    next: "watch(15)",
    pause: "none",
    restart: undefined
  },
  {
    rule: "3. a watch that spoke and closed within a floor of opening: a beat (one floor, counted nowhere)",
    from: watching("10"),
    end: End.Closed({ resourceVersion: "15", heard: true, ranMillis: 499 }),
    next: "watch(15)",
    pause: "beat",
    restart: "short-watch"
  },
  {
    rule: "3. a watch that spoke and closed a floor after opening: at once",
    from: watching("10"),
    end: End.Closed({ resourceVersion: "15", heard: true, ranMillis: 500 }),
    next: "watch(15)",
    pause: "none",
    restart: undefined
  },
  {
    rule:
      "7. a watch cut mid-stream after it spoke (its answer broke off): resume, at once the first time, then counted",
    from: watching("10"),
    end: End.WatchFailed({
      error: transportError("the answer broke off mid-body", "mid-answer"),
      resourceVersion: "12",
      heard: true
    }),
    next: "watch(12)",
    pause: "resume",
    restart: "transport"
  },
  {
    rule: "7. a list cut mid-body: the counted back-off (the server did the list's work)",
    from: listing("expired"),
    end: End.ListFailed({ error: transportError("the answer broke off mid-body", "mid-answer") }),
    next: "list(expired)",
    pause: "backoff",
    restart: "transport"
  },
  {
    rule: "7. a request not sent, its credentials unreadable (an exec plugin that failed): the counted back-off",
    from: watching("10"),
    end: End.WatchFailed({
      error: transportError("was not sent: its credentials could not be read", "not-sent"),
      resourceVersion: "10",
      heard: false
    }),
    next: "watch(10)",
    pause: "backoff",
    restart: "transport"
  },
  {
    rule: "4. silence past the idle limit: the connection is dead; resume at once",
    from: watching("10"),
    end: End.Idle({ resourceVersion: "12" }),
    next: "watch(12)",
    pause: "none",
    restart: "idle"
  },
  {
    rule: "5. an ERROR 410 after events: re-list at the re-list pace too (what came before it resets nothing)",
    from: watching("10"),
    end: End.ErrorEvent({ status: errorEvent(410, "Expired"), resourceVersion: "11" }),
    next: "list(expired)",
    pause: "relist",
    restart: "expired"
  },
  {
    rule: "5. a watch that said only an ERROR 410: re-list at the re-list pace (at once the first time)",
    from: watching("10"),
    end: End.ErrorEvent({ status: errorEvent(410, "Gone"), resourceVersion: "10" }),
    next: "list(expired)",
    pause: "relist",
    restart: "expired"
  },
  {
    rule: "5. an ERROR that is not a 410 (an etcd error) re-lists too",
    from: watching("10"),
    end: End.ErrorEvent({ status: errorEvent(500, "InternalError"), resourceVersion: "10" }),
    next: "list(error-event)",
    pause: "relist",
    restart: "error-event"
  },
  {
    rule: "5. a 410 on the watch request (the first answer after an outage): re-list at the re-list pace",
    from: watching("10"),
    end: End.WatchFailed({ error: statusError(410, "Gone", "too old"), resourceVersion: "10", heard: false }),
    next: "list(expired)",
    pause: "relist",
    restart: "expired"
  },
  {
    rule: "5. a list that itself fails with 410 (its continue token expired again): the back-off",
    from: listing("expired"),
    end: End.ListFailed({ error: statusError(410, "Expired", "the continue token expired") }),
    next: "list(expired)",
    pause: "backoff",
    restart: "expired"
  },
  {
    rule: "5. a too-large resourceVersion (504): re-list at the re-list pace",
    from: watching("20"),
    end: End.WatchFailed({ error: tooLarge, resourceVersion: "20", heard: false }),
    next: "list(too-large-resource-version)",
    pause: "relist",
    restart: "too-large-resource-version"
  },
  {
    rule: "6. a 429 with Retry-After: wait it and resume, no re-list",
    from: watching("10"),
    end: End.WatchFailed({
      error: statusError(429, "TooManyRequests", "slow down", { retryAfterSeconds: 3 }),
      resourceVersion: "10",
      heard: false
    }),
    next: "watch(10)",
    pause: "retry-after 3000ms",
    restart: "429"
  },
  {
    rule: "6. Retry-After: 0 waits one floor (never a hot loop)",
    from: watching("10"),
    end: End.WatchFailed({
      error: statusError(429, "TooManyRequests", "slow down", { retryAfterSeconds: 0 }),
      resourceVersion: "10",
      heard: false
    }),
    next: "watch(10)",
    pause: "retry-after 500ms",
    restart: "429"
  },
  {
    rule: "6. a Retry-After past the cap waits the cap",
    from: watching("10"),
    end: End.WatchFailed({
      error: statusError(429, "TooManyRequests", "slow down", { retryAfterSeconds: 600 }),
      resourceVersion: "10",
      heard: false
    }),
    next: "watch(10)",
    pause: "retry-after 30000ms",
    restart: "429"
  },
  {
    rule: "6. a 429 naming no delay: the back-off",
    from: watching("10"),
    end: End.WatchFailed({ error: statusError(429, "", "Too many requests"), resourceVersion: "10", heard: false }),
    next: "watch(10)",
    pause: "backoff",
    restart: "429"
  },
  {
    rule: "6. a 429 on a list: list again after Retry-After",
    from: listing(),
    end: End.ListFailed({ error: statusError(429, "TooManyRequests", "slow down", { retryAfterSeconds: 2 }) }),
    next: "list(initial)",
    pause: "retry-after 2000ms",
    restart: "429"
  },
  {
    rule: "6. an ERROR 429 inside the watch: wait its retryAfterSeconds and resume, no re-list",
    from: watching("10"),
    end: End.ErrorEvent({
      status: errorEvent(429, "TooManyRequests", { retryAfterSeconds: 5 }),
      resourceVersion: "12"
    }),
    next: "watch(12)",
    pause: "retry-after 5000ms",
    restart: "429"
  },
  {
    rule: "7. no answer (a transport failure): the reconnect pace, resume from the newest good resourceVersion",
    from: watching("10"),
    end: End.WatchFailed({ error: transportError(), resourceVersion: "14", heard: true }),
    next: "watch(14)",
    pause: "reconnect",
    restart: "transport"
  },
  {
    rule: "7. a 500: the back-off",
    from: watching("10"),
    end: End.WatchFailed({
      error: statusError(500, "InternalError", "etcdserver: request timed out"),
      resourceVersion: "10",
      heard: false
    }),
    next: "watch(10)",
    pause: "backoff",
    restart: "500"
  },
  {
    rule: "7. a malformed line: the back-off",
    from: watching("10"),
    end: End.WatchFailed({
      error: new KubeMalformedLineError({
        path: "/watch",
        message: "a watch line is not JSON: {oops",
        excerpt: "{oops"
      }),
      resourceVersion: "11",
      heard: true
    }),
    next: "watch(11)",
    pause: "backoff",
    restart: "malformed"
  },
  {
    rule: "8. a watch that closed early having said nothing: the counted back-off",
    from: watching("10"),
    end: End.Closed({ resourceVersion: "10", heard: false, ranMillis: 2_000 }),
    next: "watch(10)",
    pause: "backoff",
    restart: "silent-close"
  },
  {
    rule: "8. a watch that ran its term in silence (a quiet cluster): resume at once",
    from: watching("10"),
    end: End.Closed({ resourceVersion: "10", heard: false, ranMillis: 240_000 * WatchMachine.FullTermShare }),
    next: "watch(10)",
    pause: "none",
    restart: undefined
  },
  {
    rule: "9. 401: the back-off; resume",
    from: watching("10"),
    end: End.WatchFailed({ error: statusError(401, "Unauthorized", "no"), resourceVersion: "10", heard: false }),
    next: "watch(10)",
    pause: "backoff",
    restart: "401"
  },
  {
    rule: "9. 403 on a list: the back-off; list again",
    from: listing(),
    end: End.ListFailed({ error: statusError(403, "Forbidden", "no") }),
    next: "list(initial)",
    pause: "backoff",
    restart: "403"
  },
  {
    rule: "9. a list page over its byte budget: the back-off; list again",
    from: listing(),
    end: End.ListFailed({
      error: new KubeBodyTooLargeError({
        method: "GET",
        path: "/apis/x",
        limit: 1024,
        unit: "bytes",
        message: "GET /apis/x sent a body of more than 1024 bytes; reading stopped there"
      })
    }),
    next: "list(initial)",
    pause: "backoff",
    restart: "too-large"
  },
  {
    rule: "15. a line over the cap the first time: resume from the same resourceVersion after the back-off",
    from: watching("10"),
    end: End.WatchFailed({ error: lineTooLong, resourceVersion: "12", heard: true }),
    next: "watch(12, oversized at 12)",
    pause: "backoff",
    restart: "line-too-long"
  },
  {
    rule: "15. a line over the cap again at the same resourceVersion: re-list",
    from: watching("12", "12"),
    end: End.WatchFailed({ error: lineTooLong, resourceVersion: "12", heard: false }),
    next: "list(line-too-long)",
    pause: "backoff",
    restart: "line-too-long"
  },
  {
    rule: "15. a line over the cap at a newer resourceVersion is a first time again",
    from: watching("12", "12"),
    end: End.WatchFailed({ error: lineTooLong, resourceVersion: "13", heard: true }),
    next: "watch(13, oversized at 13)",
    pause: "backoff",
    restart: "line-too-long"
  },
  {
    rule: "a defect in the loop's own code: list again, after the cap, whatever the state",
    from: watching("12"),
    end: End.Defect(),
    next: "list(defect)",
    pause: "retry-after 30000ms",
    restart: "defect"
  },
  {
    rule: "15. any other end forgets the strike",
    from: watching("12", "12"),
    end: End.Closed({ resourceVersion: "12", heard: true, ranMillis: 1_000 }),
    next: "watch(12)",
    pause: "none",
    restart: undefined
  }
]

const auto: WatchMachine.MachineSettings = { ...settings, listMode: "auto" }
const streamOnly: WatchMachine.MachineSettings = { ...settings, listMode: "stream" }
const unprocessable = statusError(422, "Invalid", "resourceVersionMatch is forbidden for watch")

interface StreamRow extends Row {
  readonly settings: WatchMachine.MachineSettings
}

const streamRows: ReadonlyArray<StreamRow> = [
  {
    rule: "16. the first list streams in auto and stream modes, pages in paged mode",
    settings: auto,
    from: WatchMachine.initialFor("auto"),
    end: End.StreamListed({ resourceVersion: "30" }),
    next: "watch(30, lists streamed)",
    pause: "none",
    restart: undefined
  },
  {
    rule: "16. after the end bookmark a dropped watch resumes as a plain watch from the newest resourceVersion",
    settings: auto,
    from: watchingAfterStream("30"),
    end: End.WatchFailed({ error: transportError(), resourceVersion: "34", heard: true }),
    next: "watch(34, lists streamed)",
    pause: "reconnect",
    restart: "transport"
  },
  {
    rule: "16. a re-list after a 410 streams again",
    settings: auto,
    from: watchingAfterStream("30"),
    end: End.ErrorEvent({ status: errorEvent(410, "Expired"), resourceVersion: "30" }),
    next: "stream(expired)",
    pause: "relist",
    restart: "expired"
  },
  {
    rule: "17. an ERROR before the end bookmark drops the draft: stream again after the back-off",
    settings: auto,
    from: streaming(),
    end: End.ErrorEvent({ status: errorEvent(410, "Expired"), resourceVersion: "" }),
    next: "stream(initial)",
    pause: "backoff",
    restart: "stream-unfinished"
  },
  {
    rule: "17. a 504 too-large ERROR before the end bookmark: the same",
    settings: auto,
    from: streaming("expired"),
    end: End.ErrorEvent({ status: errorEvent(504, "Timeout"), resourceVersion: "" }),
    next: "stream(expired)",
    pause: "backoff",
    restart: "stream-unfinished"
  },
  {
    rule: "17. a connection that dies before the end bookmark: stream again at the reconnect pace, never resume",
    settings: auto,
    from: streaming(),
    end: End.WatchFailed({ error: transportError(), resourceVersion: "25", heard: true }),
    next: "stream(initial)",
    pause: "reconnect",
    restart: "transport"
  },
  {
    rule:
      "17/18. auto: a clean close before the end bookmark is no proof yet: stream again after the back-off, counted",
    settings: auto,
    from: streaming(),
    end: End.Closed({ resourceVersion: "25", heard: false, ranMillis: 1_000 }),
    next: "stream(initial, 1 clean close(s))",
    pause: "backoff",
    restart: "stream-unfinished"
  },
  {
    rule: "17/18. a close after changes (MODIFIED, DELETED) before the end bookmark counts as any clean close, no more",
    settings: auto,
    from: streaming("expired", { cleanCloses: 1 }),
    end: End.Closed({ resourceVersion: "25", heard: true, ranMillis: 1_000 }),
    next: "stream(expired, 2 clean close(s))",
    pause: "backoff",
    restart: "stream-unfinished"
  },
  {
    rule:
      "18. auto: the third clean close in a row before the end bookmark is proof the server cannot stream: pages, at once",
    settings: auto,
    from: streaming("expired", { cleanCloses: 2 }),
    end: End.Closed({ resourceVersion: "25", heard: false, ranMillis: 1_000 }),
    next: "list(expired)",
    pause: "none",
    restart: "stream-unsupported"
  },
  {
    rule: "18. anything else between the clean closes starts the count again: a cut",
    settings: auto,
    from: streaming("initial", { cleanCloses: 2 }),
    end: End.WatchFailed({ error: transportError(), resourceVersion: "", heard: false }),
    next: "stream(initial)",
    pause: "reconnect",
    restart: "transport"
  },
  {
    rule: "18. anything else between the clean closes starts the count again: an ERROR",
    settings: auto,
    from: streaming("initial", { cleanCloses: 2 }),
    end: End.ErrorEvent({ status: errorEvent(500, "InternalError"), resourceVersion: "" }),
    next: "stream(initial)",
    pause: "backoff",
    restart: "stream-unfinished"
  },
  {
    rule: "18. anything else between the clean closes starts the count again: a 429",
    settings: auto,
    from: streaming("initial", { cleanCloses: 2 }),
    end: End.WatchFailed({
      error: statusError(429, "TooManyRequests", "storage is (re)initializing", { retryAfterSeconds: 1 }),
      resourceVersion: "",
      heard: false
    }),
    next: "stream(initial)",
    pause: "retry-after 1000ms",
    restart: "429"
  },
  {
    rule: "18. stream mode counts the clean closes too, and never pages",
    settings: streamOnly,
    from: streaming("initial", { cleanCloses: 2 }),
    end: End.Closed({ resourceVersion: "25", heard: false, ranMillis: 1_000 }),
    next: "stream(initial, 3 clean close(s))",
    pause: "backoff",
    restart: "stream-unfinished"
  },
  {
    rule: "18. auto: a 404 to the streaming request (a CRD being re-registered) is no proof: back off, stream again",
    settings: auto,
    from: streaming(),
    end: End.WatchFailed({
      error: statusError(404, "NotFound", "the server could not find the requested resource"),
      resourceVersion: "",
      heard: false
    }),
    next: "stream(initial)",
    pause: "backoff",
    restart: "404"
  },
  {
    rule: "18. auto: a 503 to the streaming request is no proof: back off, stream again",
    settings: auto,
    from: streaming(),
    end: End.WatchFailed({
      error: statusError(503, "ServiceUnavailable", "the server is currently unable to handle the request"),
      resourceVersion: "",
      heard: false
    }),
    next: "stream(initial)",
    pause: "backoff",
    restart: "503"
  },
  {
    rule: "18. auto: a 504 deadline (not a too-large resourceVersion) to the streaming request is no proof",
    settings: auto,
    from: streaming(),
    end: End.WatchFailed({
      error: statusError(504, "Timeout", "context deadline exceeded"),
      resourceVersion: "",
      heard: false
    }),
    next: "stream(initial)",
    pause: "backoff",
    restart: "504"
  },
  ...([[400, "BadRequest"], [405, "MethodNotAllowed"], [415, "UnsupportedMediaType"]] as const).map(
    ([code, reason]): StreamRow => ({
      rule: `18. auto: a ${code} to the streaming request (the request's shape refused) moves every list to pages`,
      settings: auto,
      from: streaming(),
      end: End.WatchFailed({ error: statusError(code, reason, "refused"), resourceVersion: "", heard: false }),
      next: "list(initial)",
      pause: "none",
      restart: "stream-unsupported"
    })
  ),
  {
    rule: "16. a streaming list that lands forgets the clean closes and the longer term",
    settings: streamOnly,
    from: streaming("initial", { cleanCloses: 2, streamTerm: 480 }),
    end: End.StreamListed({ resourceVersion: "30" }),
    next: "watch(30, lists streamed)",
    pause: "none",
    restart: undefined
  },
  {
    rule: "17. silence before the end bookmark: stream again after the back-off",
    settings: auto,
    from: streaming(),
    end: End.Idle({ resourceVersion: "25" }),
    next: "stream(initial)",
    pause: "backoff",
    restart: "stream-unfinished"
  },
  {
    rule: "17. a 429 before the end bookmark waits the Retry-After, and streams again",
    settings: auto,
    from: streaming(),
    end: End.WatchFailed({
      error: statusError(429, "TooManyRequests", "storage is (re)initializing", { retryAfterSeconds: 1 }),
      resourceVersion: "",
      heard: false
    }),
    next: "stream(initial)",
    pause: "retry-after 1000ms",
    restart: "429"
  },
  {
    rule: "18. auto: a 422 to the streaming request moves every list to pages, at once",
    settings: auto,
    from: streaming(),
    end: End.WatchFailed({ error: unprocessable, resourceVersion: "", heard: false }),
    next: "list(initial)",
    pause: "none",
    restart: "stream-unsupported"
  },
  {
    rule: "18. auto: a bookmark without the end annotation (the server ignored sendInitialEvents): pages",
    settings: auto,
    from: streaming("expired"),
    end: End.StreamUnsupported({ why: "a bookmark came before the end of the initial events" }),
    next: "list(expired)",
    pause: "none",
    restart: "stream-unsupported"
  },
  {
    rule: "18. auto: a streaming list that ran its whole term without the end bookmark (the server ignored " +
      "sendInitialEvents and sent no bookmark): pages",
    settings: auto,
    from: streaming(),
    end: End.Closed({ resourceVersion: "25", heard: true, ranMillis: 240_000 }),
    next: "list(initial)",
    pause: "none",
    restart: "stream-unsupported"
  },
  {
    rule:
      "17. stream mode: a streaming list the server ended at its term (too large for it): the next asks twice the term",
    settings: streamOnly,
    from: streaming(),
    end: End.Closed({ resourceVersion: "25", heard: true, ranMillis: 240_000 }),
    next: "stream(initial, term 480s)",
    pause: "backoff",
    restart: "stream-unfinished"
  },
  {
    rule: "17, 18. auto: a streaming list abandoned at its term plus the idle margin, the server still sending: pages",
    settings: auto,
    from: streaming("expired", { cleanCloses: 1 }),
    end: End.StreamOverdue(),
    next: "list(expired)",
    pause: "none",
    restart: "stream-unsupported"
  },
  {
    rule: "17. stream mode: a streaming list abandoned at its term plus the idle margin: the next asks twice the term",
    settings: streamOnly,
    from: streaming("initial", { streamTerm: 480 }),
    end: End.StreamOverdue(),
    next: "stream(initial, term 960s)",
    pause: "backoff",
    restart: "stream-unfinished"
  },
  {
    rule: "a stray StreamOverdue outside a streaming list changes nothing",
    settings: auto,
    from: watchingAfterStream("25"),
    end: End.StreamOverdue(),
    next: "watch(25, lists streamed)",
    pause: "beat",
    restart: undefined
  },
  {
    rule: "17. stream mode: the term grows to an hour at most",
    settings: streamOnly,
    from: streaming("initial", { streamTerm: 1_920 }),
    end: End.Closed({ resourceVersion: "25", heard: true, ranMillis: 1_920_000 }),
    next: "stream(initial, term 3600s)",
    pause: "backoff",
    restart: "stream-unfinished"
  },
  {
    rule: "17. stream mode: a close is measured against the term asked: 300 s of 480 s is an early clean close",
    settings: streamOnly,
    from: streaming("initial", { streamTerm: 480 }),
    end: End.Closed({ resourceVersion: "25", heard: true, ranMillis: 300_000 }),
    next: "stream(initial, 1 clean close(s), term 480s)",
    pause: "backoff",
    restart: "stream-unfinished"
  },
  {
    rule: "17. a longer term outlives a cut: the next streaming list still gets to finish",
    settings: streamOnly,
    from: streaming("initial", { streamTerm: 480 }),
    end: End.WatchFailed({ error: transportError(), resourceVersion: "", heard: false }),
    next: "stream(initial, term 480s)",
    pause: "reconnect",
    restart: "transport"
  },
  {
    rule: "18. stream mode: a 422 is a failure like any other; stream again after the back-off",
    settings: streamOnly,
    from: streaming(),
    end: End.WatchFailed({ error: unprocessable, resourceVersion: "", heard: false }),
    next: "stream(initial)",
    pause: "backoff",
    restart: "422"
  },
  {
    rule: "18. a 403 to the streaming request is RBAC, not a refusal to stream: back off, stream again",
    settings: auto,
    from: streaming(),
    end: End.WatchFailed({ error: statusError(403, "Forbidden", "no"), resourceVersion: "", heard: false }),
    next: "stream(initial)",
    pause: "backoff",
    restart: "403"
  },
  {
    rule: "18. once paged, a re-list stays paged",
    settings: auto,
    from: watching("40"),
    end: End.ErrorEvent({ status: errorEvent(410, "Expired"), resourceVersion: "40" }),
    next: "list(expired)",
    pause: "relist",
    restart: "expired"
  }
]

describe("watchMachine.step", () => {
  it.each(streamRows)("$rule", (row) => {
    const transition = WatchMachine.step(row.from, row.end, row.settings)
    expect({
      next: show(transition.next),
      pause: showPause(transition.pause),
      restart: transition.restart
    }).toEqual({ next: row.next, pause: row.pause, restart: row.restart })
    if (transition.restart !== undefined) expect(transition.message?.length ?? 0).toBeGreaterThan(10)
  })

  it("16. the first state follows the list mode", () => {
    expect(show(WatchMachine.initialFor("auto"))).toBe("stream(initial)")
    expect(show(WatchMachine.initialFor("stream"))).toBe("stream(initial)")
    expect(show(WatchMachine.initialFor("paged"))).toBe("list(initial)")
  })

  it.each(rows)("$rule", (row) => {
    const transition = WatchMachine.step(row.from, row.end, settings)
    expect({
      next: show(transition.next),
      pause: showPause(transition.pause),
      restart: transition.restart
    }).toEqual({ next: row.next, pause: row.pause, restart: row.restart })
    // Every restart says what happened, in words.
    if (transition.restart !== undefined) expect(transition.message?.length ?? 0).toBeGreaterThan(10)
  })

  it("9. a 403's words name the permission to grant and the namespace", () => {
    const transition = WatchMachine.step(
      watching("10"),
      End.WatchFailed({ error: statusError(403, "Forbidden", "no"), resourceVersion: "10", heard: false }),
      settings
    )
    expect(transition.message).toContain("grant get, list and watch on sandboxes.jr2.dev")
    expect(transition.message).toContain(`namespace "ns"`)
  })

  it("17. the streaming list asks for the state's term: the setting's, or the longer one after a list cut at its term", () => {
    expect(WatchMachine.streamTerm(streaming(), settings)).toBe(240)
    expect(WatchMachine.streamTerm(streaming("initial", { streamTerm: 480 }), settings)).toBe(480)
    expect(WatchMachine.streamTerm(watching("10"), settings)).toBe(240)
  })

  it("18. the proof by clean closes is said once, with what the server did and what comes next", () => {
    const third = WatchMachine.step(
      streaming("initial", { cleanCloses: 2 }),
      End.Closed({ resourceVersion: "", heard: false, ranMillis: 1_000 }),
      auto
    )
    expect(third.message).toContain("3 streaming lists in a row")
    expect(third.message).toContain("every list is paged from now on")
    const first = WatchMachine.step(
      streaming(),
      End.Closed({ resourceVersion: "", heard: false, ranMillis: 1_000 }),
      auto
    )
    expect(first.message).not.toContain("paged from now on")
  })

  it("17, 18. a streaming list abandoned at its term says the client gave it up, not that the server ended it", () => {
    const transition = WatchMachine.step(streaming("initial", { streamTerm: 480 }), End.StreamOverdue(), auto)
    expect(transition.message).toContain("no end bookmark by the end of its term (480s plus the idle margin)")
    expect(transition.message).toContain("abandoned")
    expect(transition.message).not.toContain("the server ended")
  })

  it("18. auto: a streaming list ended at its term is paged, and the words say it may be too large to stream", () => {
    const transition = WatchMachine.step(
      streaming(),
      End.Closed({ resourceVersion: "", heard: true, ranMillis: 240_000 }),
      auto
    )
    expect(show(transition.next)).toBe("list(initial)")
    expect(transition.message).toContain("timeoutSeconds (240s)")
    expect(transition.message).toContain("too large")
  })

  it.each(
    [
      ["a streaming list", streaming(), auto, "list"],
      ["a paged list", listing(), settings, "list"],
      ["a watch", watching("10"), settings, "watch"]
    ] as const
  )(
    "a 404 during %s says in words that the server does not serve sandboxes.jr2.dev/v1alpha1 there and the CRD may be missing; once",
    (_what, from, machineSettings, during) => {
      const notFound = statusError(404, "NotFound", "the server could not find the requested resource")
      const end = during === "watch"
        ? End.WatchFailed({ error: notFound, resourceVersion: "10", heard: false })
        : from.lists === "stream"
        ? End.WatchFailed({ error: notFound, resourceVersion: "", heard: false })
        : End.ListFailed({ error: notFound })
      const first = WatchMachine.step(from, end, machineSettings)
      expect(first.restart).toBe("404")
      expect(first.message).toContain(`does not serve sandboxes.jr2.dev/v1alpha1 in namespace "ns"`)
      expect(first.message).toContain("CustomResourceDefinition sandboxes.jr2.dev")
      expect(first.message).toContain("may not be installed")
      // The next 404 in a row is said in a few words, not explained again.
      const again = WatchMachine.step(first.next, end, machineSettings)
      expect(again.restart).toBe("404")
      expect(again.message).toContain("still")
      expect(again.message).not.toContain("may not be installed")
      expect(show(again.next)).toBe(show(first.next))
    }
  )

  it("9. a 403 to a streaming list names watch, the verb that request needs (a streaming list is a watch)", () => {
    const transition = WatchMachine.step(
      streaming(),
      End.WatchFailed({ error: statusError(403, "Forbidden", "no"), resourceVersion: "", heard: false }),
      auto
    )
    expect(transition.message).toMatch(
      /^forbidden to watch sandboxes\.jr2\.dev in namespace "ns" \(a streaming list is a watch\)/
    )
    const paged = WatchMachine.step(
      listing("initial"),
      End.ListFailed({ error: statusError(403, "Forbidden", "no") }),
      settings
    )
    expect(paged.message).toMatch(/^forbidden to list sandboxes\.jr2\.dev in namespace "ns": grant/)
  })

  it("the next state is described for the log line", () => {
    expect(WatchMachine.describeNext(listing("expired"))).toBe("re-listing")
    expect(WatchMachine.describeNext(watching("42"))).toBe("resuming from resourceVersion 42")
  })
})
