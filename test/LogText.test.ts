import { describe, expect, it } from "@effect/vitest"
import { Cause, FiberId, HashMap, List, Logger, LogLevel } from "effect"
import * as LogText from "../src/cli/LogText.ts"
import { bodyBroke, deadlinePassed, requestFailed, statusError } from "../src/internal/httpFailure.ts"

const Watch =
  "/apis/jr2.dev/v1alpha1/namespaces/ns/sandboxes?watch=1&labelSelector=jr2.dev%2Frun&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&sendInitialEvents=true&timeoutSeconds=240"
const List_ = "/apis/jr2.dev/v1alpha1/namespaces/ns/sandboxes?labelSelector=jr2.dev%2Frun&limit=500"
const server = "https://kube.example.internal:6443"
const refused = Object.assign(new Error("connect ECONNREFUSED 10.0.0.1:6443"), { code: "ECONNREFUSED" })
const trust = { caGiven: true, source: "kubeconfig /home/me/.kube/config, context prod" }

/** One log line as the text format writes it, at a fixed time. */
const line = (message: string, annotations: Record<string, unknown> = {}) =>
  LogText.formatLog(
    {
      fiberId: FiberId.none,
      logLevel: LogLevel.Warning,
      message,
      cause: Cause.empty,
      context: undefined as never,
      spans: List.empty(),
      annotations: HashMap.fromIterable(Object.entries(annotations)),
      date: new Date("2026-12-07T19:35:00.396Z")
    } satisfies Logger.Logger.Options<unknown>
  )

/** The annotations every warning of the watch loop carries. */
const loop = { reason: "transport", namespace: "ns", resourceVersion: "", labelSelector: "jr2.dev/run" }

describe("LogText.formatLog", () => {
  it("names the request in a word, without its query or server, and leaves out what the start line says", () => {
    const noAnswer = requestFailed({ method: "GET", path: Watch, server, cause: refused, secret: undefined, trust })
    expect(line(`${noAnswer.message} (no answer 2 times in a row); re-listing (streaming) in 1s 147ms`, loop))
      .toBe(
        "19:35:00.396 WARN  the watch got no answer: connect ECONNREFUSED 10.0.0.1:6443 (2 in a row); " +
          "re-listing in 1s 147ms"
      )
    const listAnswered = statusError({
      method: "GET",
      path: List_,
      code: 500,
      contentType: "application/json",
      retryAfter: undefined,
      body: JSON.stringify({ kind: "Status", reason: "InternalError", message: "etcd is down" }),
      nowMillis: 0,
      secret: undefined
    })
    expect(line(`${listAnswered.message}; re-listing in 500ms`, { ...loop, reason: "500" })).toBe(
      "19:35:00.396 WARN  the list answered 500 InternalError: etcd is down; re-listing in 500ms"
    )
    const broke = bodyBroke({ method: "GET", path: Watch, server, cause: new Error("aborted"), secret: undefined })
    expect(line(broke.message)).toBe("19:35:00.396 WARN  the answer to the watch broke off mid-body: aborted")
    const late = deadlinePassed({ method: "GET", path: List_, server, secret: undefined }, "headers", "30s")
    expect(line(late.message)).toMatch(
      /^19:35:00\.396 WARN {2}the list got no answer within 30s; the request was abandoned/
    )
  })

  it("keeps annotations it does not know, and every word of a message that names no request", () => {
    expect(line("demo: round 3 ends", { round: 3, namespace: "demo" })).toBe(
      "19:35:00.396 WARN  demo: round 3 ends round=3"
    )
  })

  it("fits the loop's no-answer warnings in 120 columns, where the JSON log keeps the whole message", () => {
    const noAnswer = requestFailed({
      method: "GET",
      path: Watch,
      server: "https://127.0.0.1:1",
      cause: new Error("connect ECONNREFUSED 127.0.0.1:1"),
      secret: undefined,
      trust
    })
    const message = `${noAnswer.message} (no answer 16 times in a row); re-listing (streaming) in 1s 234ms`
    expect(message.length).toBeGreaterThan(300)
    expect(line(message, loop).length).toBeLessThanOrEqual(120)
  })
})
