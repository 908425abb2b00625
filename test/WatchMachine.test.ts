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
const streaming = (reason: WatchMachine.ListReason = "initial") => State.NeedsList({ reason, lists: "stream" })
const watching = (resourceVersion: string, oversizedAt?: string) =>
  State.Watching({ resourceVersion, oversizedAt, lists: "paged" })
const watchingAfterStream = (resourceVersion: string) =>
  State.Watching({ resourceVersion, oversizedAt: undefined, lists: "stream" })

/** A row's expectation, short: the next state, the pause, the restart reason. */
const show = (state: WatchState) =>
  state._tag === "NeedsList"
    ? `${state.lists === "stream" ? "stream" : "list"}(${state.reason})`
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
    rule: "1. a list that failed: list again after the back-off",
    from: listing("expired"),
    end: End.ListFailed({ error: transportError() }),
    next: "list(expired)",
    pause: "backoff",
    restart: "transport"
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
    rule: "4. silence past the idle limit: the connection is dead; resume at once",
    from: watching("10"),
    end: End.Idle({ resourceVersion: "12" }),
    next: "watch(12)",
    pause: "none",
    restart: "idle"
  },
  {
    rule: "5. an ERROR 410 after events: re-list at once",
    from: watching("10"),
    end: End.ErrorEvent({ status: errorEvent(410, "Expired"), resourceVersion: "11", heard: true }),
    next: "list(expired)",
    pause: "none",
    restart: "expired"
  },
  {
    rule: "5. a watch that said only an ERROR 410: re-list after the back-off",
    from: watching("10"),
    end: End.ErrorEvent({ status: errorEvent(410, "Gone"), resourceVersion: "10", heard: false }),
    next: "list(expired)",
    pause: "backoff",
    restart: "expired"
  },
  {
    rule: "5. an ERROR that is not a 410 (an etcd error) re-lists too",
    from: watching("10"),
    end: End.ErrorEvent({ status: errorEvent(500, "InternalError"), resourceVersion: "10", heard: true }),
    next: "list(error-event)",
    pause: "none",
    restart: "error-event"
  },
  {
    rule: "5. a 410 on the watch request: re-list after the back-off",
    from: watching("10"),
    end: End.WatchFailed({ error: statusError(410, "Gone", "too old"), resourceVersion: "10", heard: false }),
    next: "list(expired)",
    pause: "backoff",
    restart: "expired"
  },
  {
    rule: "5. a too-large resourceVersion (504): re-list after the back-off",
    from: watching("20"),
    end: End.WatchFailed({ error: tooLarge, resourceVersion: "20", heard: false }),
    next: "list(too-large-resource-version)",
    pause: "backoff",
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
      resourceVersion: "12",
      heard: true
    }),
    next: "watch(12)",
    pause: "retry-after 5000ms",
    restart: "429"
  },
  {
    rule: "7. a transport failure: the back-off, resume from the newest good resourceVersion",
    from: watching("10"),
    end: End.WatchFailed({ error: transportError(), resourceVersion: "14", heard: true }),
    next: "watch(14)",
    pause: "backoff",
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
    rule: "8. a watch that closed early having said nothing: one floor",
    from: watching("10"),
    end: End.Closed({ resourceVersion: "10", heard: false, ranMillis: 2_000 }),
    next: "watch(10)",
    pause: "floor",
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
    pause: "backoff",
    restart: "transport"
  },
  {
    rule: "16. a re-list after a 410 streams again",
    settings: auto,
    from: watchingAfterStream("30"),
    end: End.ErrorEvent({ status: errorEvent(410, "Expired"), resourceVersion: "30", heard: true }),
    next: "stream(expired)",
    pause: "none",
    restart: "expired"
  },
  {
    rule: "17. an ERROR before the end bookmark drops the draft: stream again after the back-off",
    settings: auto,
    from: streaming(),
    end: End.ErrorEvent({ status: errorEvent(410, "Expired"), resourceVersion: "", heard: true }),
    next: "stream(initial)",
    pause: "backoff",
    restart: "stream-unfinished"
  },
  {
    rule: "17. a 504 too-large ERROR before the end bookmark: the same",
    settings: auto,
    from: streaming("expired"),
    end: End.ErrorEvent({ status: errorEvent(504, "Timeout"), resourceVersion: "", heard: true }),
    next: "stream(expired)",
    pause: "backoff",
    restart: "stream-unfinished"
  },
  {
    rule: "17. a connection that dies before the end bookmark: stream again after the back-off, never resume",
    settings: auto,
    from: streaming(),
    end: End.WatchFailed({ error: transportError(), resourceVersion: "25", heard: true }),
    next: "stream(initial)",
    pause: "backoff",
    restart: "transport"
  },
  {
    rule: "17. a close before the end bookmark: stream again after the back-off",
    settings: auto,
    from: streaming(),
    end: End.Closed({ resourceVersion: "25", heard: true, ranMillis: 1_000 }),
    next: "stream(initial)",
    pause: "backoff",
    restart: "stream-unfinished"
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
    rule: "18. stream mode: a whole term without the end bookmark is unfinished: stream again after the back-off",
    settings: streamOnly,
    from: streaming(),
    end: End.Closed({ resourceVersion: "25", heard: true, ranMillis: 240_000 }),
    next: "stream(initial)",
    pause: "backoff",
    restart: "stream-unfinished"
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
    end: End.ErrorEvent({ status: errorEvent(410, "Expired"), resourceVersion: "40", heard: true }),
    next: "list(expired)",
    pause: "none",
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
