/**
 * The questions asked of a failure, one server format at a time: each way a server has said a
 * thing is recognised on its own, not only when it comes with the others.
 */
import { Option } from "effect"
import { describe, expect, it } from "vitest"
import * as KubeError from "../src/KubeError.ts"

const status = (
  fields: {
    code: number
    reason: string
    message: string
    causes?: ReadonlyArray<{ reason?: string; message?: string }>
  }
) =>
  new KubeError.KubeStatusError({
    method: "GET",
    path: "/apis/jr2.dev/v1alpha1/namespaces/ns/sandboxes?resourceVersion=999",
    code: fields.code,
    reason: fields.reason,
    message: fields.message,
    causes: fields.causes ?? [],
    retryAfterSeconds: Option.none(),
    group: Option.none(),
    kind: Option.none(),
    bodyExcerpt: Option.none()
  })

describe("KubeError.isTooLargeResourceVersion", () => {
  it.each([
    {
      format: "the cause alone (a message that says something else)",
      error: status({
        code: 504,
        reason: "Timeout",
        message: "Timeout: request did not complete",
        causes: [{ reason: "ResourceVersionTooLarge" }]
      }),
      expected: true
    },
    {
      format: "the message alone (no cause)",
      error: status({
        code: 504,
        reason: "Timeout",
        message: "Timeout: Too large resource version: 999, current: 186"
      }),
      expected: true
    },
    {
      format: "the message alone, in other case, on another code",
      error: status({ code: 500, reason: "InternalError", message: "too large resource version" }),
      expected: true
    },
    {
      format: "both together",
      error: status({
        code: 504,
        reason: "Timeout",
        message: "Timeout: Too large resource version: 999, current: 186",
        causes: [{ reason: "ResourceVersionTooLarge", message: "Too large resource version" }]
      }),
      expected: true
    },
    {
      format: "a plain 504 timeout is not one",
      error: status({ code: 504, reason: "Timeout", message: "Timeout: request did not complete within 60s" }),
      expected: false
    },
    {
      format: "another cause is not one",
      error: status({ code: 504, reason: "Timeout", message: "Timeout", causes: [{ reason: "FieldValueInvalid" }] }),
      expected: false
    }
  ])("$format", ({ error, expected }) => {
    expect(KubeError.isTooLargeResourceVersion(error)).toBe(expected)
  })

  it("a transport failure is never one", () => {
    const error = new KubeError.KubeTransportError({ method: "GET", path: "/", message: "Too large resource version" })
    expect(KubeError.isTooLargeResourceVersion(error)).toBe(false)
  })
})

describe("KubeError.isExpiredStatus", () => {
  it.each([
    { said: "code 410 alone", status: { code: 410 }, expected: true },
    { said: "reason Expired alone", status: { reason: "Expired" }, expected: true },
    { said: "reason Gone alone", status: { reason: "Gone" }, expected: true },
    { said: "a 500", status: { code: 500, reason: "InternalError" }, expected: false },
    { said: "nothing", status: {}, expected: false }
  ])("$said", ({ expected, status }) => {
    expect(KubeError.isExpiredStatus(status)).toBe(expected)
  })
})
