/**
 * Every way a Kubernetes request can fail, as distinct typed errors, and the questions a caller
 * asks of them ("is this resourceVersion gone?", "how long did the server ask us to wait?").
 * No error carries a token, a key or a request header: only method, path and what the server said.
 */
import { Data, Duration, Option } from "effect"
import type { StatusCause } from "./KubeStatus.ts"

/**
 * The apiserver (or a proxy in front of it) answered with a failure. `code` is the HTTP status (or
 * the `code` of a watch `ERROR` event's Status); `reason` is the Status reason (`Expired`, `Gone`,
 * `Forbidden`, ...), empty when the body was not a Status (an HTML page, a plain-text 429).
 */
export class KubeStatusError extends Data.TaggedError("KubeStatusError")<{
  readonly method: string
  /** Path and query of the request; never credentials. */
  readonly path: string
  readonly code: number
  readonly reason: string
  readonly message: string
  readonly causes: ReadonlyArray<StatusCause>
  /** From `details.retryAfterSeconds`, else the `Retry-After` header. */
  readonly retryAfterSeconds: Option.Option<number>
  /** Group and kind from `details`, when the server named them (403 does). */
  readonly group: Option.Option<string>
  readonly kind: Option.Option<string>
  /** When the body was not a Status: a short excerpt of what it was instead. */
  readonly bodyExcerpt: Option.Option<string>
}> {}

/** The request never got an answer: refused, reset, TLS, DNS, or the connection died mid-body. */
export class KubeTransportError extends Data.TaggedError("KubeTransportError")<{
  readonly method: string
  readonly path: string
  readonly message: string
  /**
   * How far the request got: `"not-sent"` (its credentials could not be read), `"no-answer"` (the
   * default: refused, reset, TLS, DNS, no headers in time) or `"mid-answer"` (the answer started and
   * broke off). The watch paces each differently (rule 7).
   */
  readonly reached?: "not-sent" | "no-answer" | "mid-answer" | undefined
}> {}

/**
 * Whether the server's answer had begun: any failure but a transport error before the answer
 * started. Health's "answered" and the watch's pacing (rule 7) both start from this.
 */
export const answerBegan = (error: KubeClientError): boolean =>
  error._tag !== "KubeTransportError" || error.reached === "mid-answer"

/**
 * A line of a watch body that is not a watch event (bad JSON, a truncated last line, no `type`), or
 * one no watch can go on from: a streaming list's end bookmark with an empty resourceVersion.
 */
export class KubeMalformedLineError extends Data.TaggedError("KubeMalformedLineError")<{
  readonly path: string
  readonly message: string
  /** The first bytes of the line, capped, for a person to recognise what arrived. */
  readonly excerpt: string
}> {}

/** A watch line grew past the configured cap without a newline: refused rather than buffered. */
export class KubeLineTooLongError extends Data.TaggedError("KubeLineTooLongError")<{
  readonly path: string
  readonly message: string
  readonly limitBytes: number
}> {}

/**
 * A watch sent nothing at all (not even a bookmark) for longer than the caller's `idleTimeout`:
 * the connection is taken for dead and closed.
 */
export class KubeWatchIdleError extends Data.TaggedError("KubeWatchIdleError")<{
  readonly path: string
  readonly message: string
  readonly idleMillis: number
}> {}

/**
 * An answer bigger than the client lets one be (`maxListPageBytes` for a list page or a get, or a
 * list of more pages, items or bytes of JSON held than `maxListPages` / `maxListItems` /
 * `maxListBytes`): reading stopped there, rather than growing memory until the process is killed.
 */
export class KubeBodyTooLargeError extends Data.TaggedError("KubeBodyTooLargeError")<{
  readonly method: string
  readonly path: string
  readonly message: string
  /** What was passed: bytes of one body or held by one list, or pages or items of one list. */
  readonly limit: number
  readonly unit: "bytes" | "pages" | "items"
}> {}

/** A list answer that is not a list (not JSON, no `items`), or one at an empty resourceVersion. */
export class KubeMalformedBodyError extends Data.TaggedError("KubeMalformedBodyError")<{
  readonly method: string
  readonly path: string
  readonly message: string
  readonly excerpt: string
}> {}

export type KubeClientError =
  | KubeStatusError
  | KubeTransportError
  | KubeMalformedLineError
  | KubeLineTooLongError
  | KubeMalformedBodyError
  | KubeWatchIdleError
  | KubeBodyTooLargeError

const hasCause = (error: KubeStatusError, reason: string) => error.causes.some((cause) => cause.reason === reason)

/**
 * A Status that says the resourceVersion (or continue token) asked for is older than the server
 * keeps, as a failed request or as a watch's `ERROR` event says it.
 */
export const isExpiredStatus = (
  status: { readonly code?: number | undefined; readonly reason?: string | undefined }
): boolean => status.code === 410 || status.reason === "Expired" || status.reason === "Gone"

/** The resourceVersion (or continue token) asked for is older than the server keeps: start over. */
export const isExpired = (error: KubeClientError): boolean => error._tag === "KubeStatusError" && isExpiredStatus(error)

/**
 * The resourceVersion asked for is newer than the server has seen (an apiserver behind its peers).
 * Servers have said it three ways over the releases: a cause, the message, or both.
 */
export const isTooLargeResourceVersion = (error: KubeClientError): boolean =>
  error._tag === "KubeStatusError" &&
  (hasCause(error, "ResourceVersionTooLarge") || /too large resource version/i.test(error.message))

export const isTooManyRequests = (error: KubeClientError): boolean =>
  error._tag === "KubeStatusError" && error.code === 429

export const isUnauthorized = (error: KubeClientError): boolean =>
  error._tag === "KubeStatusError" && error.code === 401

export const isForbidden = (error: KubeClientError): boolean => error._tag === "KubeStatusError" && error.code === 403

/** How long the server asked the caller to wait before asking again, if it said. */
export const retryAfter = (error: KubeClientError): Option.Option<Duration.Duration> =>
  error._tag === "KubeStatusError" ? Option.map(error.retryAfterSeconds, Duration.seconds) : Option.none()
