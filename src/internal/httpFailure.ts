/**
 * What a failed Kubernetes request becomes: a non-2xx answer turned into a `KubeStatusError`
 * (whether the body is a `Status`, an HTML page from a proxy or a plain-text 429), and a request
 * that got no (whole) answer turned into a `KubeTransportError` naming the server and the cause.
 * Nothing here sees a request header, and every message passes through `scrub` besides.
 *
 * @internal
 */
import { Option } from "effect"
import { KubeStatusError, KubeTransportError } from "../KubeError.ts"
import type { Status, StatusCause, StatusDetails } from "../KubeStatus.ts"
import { isRecord } from "./isRecord.ts"
import { excerpt } from "./ndjsonLines.ts"

type Mutable<T> = { -readonly [K in keyof T]: T[K] }

const string = (u: unknown): string | undefined => (typeof u === "string" ? u : undefined)
const number = (u: unknown): number | undefined => (typeof u === "number" && Number.isFinite(u) ? u : undefined)

const toCause = (u: unknown): StatusCause | undefined => {
  if (!isRecord(u)) return undefined
  const cause: Mutable<StatusCause> = {}
  const reason = string(u.reason)
  const message = string(u.message)
  const field = string(u.field)
  if (reason !== undefined) cause.reason = reason
  if (message !== undefined) cause.message = message
  if (field !== undefined) cause.field = field
  return cause
}

const toDetails = (u: unknown): StatusDetails | undefined => {
  if (!isRecord(u)) return undefined
  const details: Mutable<StatusDetails> = {}
  for (const key of ["name", "group", "kind", "uid"] as const) {
    const value = string(u[key])
    if (value !== undefined) details[key] = value
  }
  if (Array.isArray(u.causes)) {
    const causes: Array<StatusCause> = []
    for (const item of u.causes) {
      const cause = toCause(item)
      if (cause !== undefined) causes.push(cause)
    }
    details.causes = causes
  }
  const retryAfterSeconds = number(u.retryAfterSeconds)
  if (retryAfterSeconds !== undefined) details.retryAfterSeconds = retryAfterSeconds
  return details
}

/**
 * A `Status` from whatever JSON arrived, keeping every field of the right type and dropping the
 * rest: a failure must never fail to be understood because one field was odd.
 */
export const toStatus = (u: unknown): Status => {
  if (!isRecord(u)) return {}
  const status: Mutable<Status> = {}
  for (const key of ["kind", "apiVersion", "status", "message", "reason"] as const) {
    const value = string(u[key])
    if (value !== undefined) status[key] = value
  }
  const details = toDetails(u.details)
  if (details !== undefined) status.details = details
  const code = number(u.code)
  if (code !== undefined) status.code = code
  return status
}

const isStatusLike = (u: unknown): u is Record<string, unknown> =>
  isRecord(u) &&
  (u.kind === "Status" || typeof u.reason === "string" ||
    (typeof u.status === "string" && typeof u.message === "string"))

/** `Retry-After` in seconds: either delta-seconds or an HTTP-date (RFC 9110 §10.2.3). */
export const parseRetryAfter = (value: string | undefined, nowMillis: number): Option.Option<number> => {
  if (value === undefined) return Option.none()
  const trimmed = value.trim()
  if (/^\d+$/.test(trimmed)) return Option.some(Number(trimmed))
  const date = Date.parse(trimmed)
  if (Number.isNaN(date)) return Option.none()
  return Option.some(Math.max(0, Math.ceil((date - nowMillis) / 1000)))
}

const entities: Record<string, string> = { amp: "&", lt: "<", gt: ">", quot: "\"", apos: "'", nbsp: " ", "#39": "'" }

/** The title of an HTML page, or its visible text when it has none. */
const htmlText = (html: string): string => {
  const head = html.slice(0, 64 * 1024)
  const title = /<title[^>]*>([\s\S]*?)<\/title>/i.exec(head)?.[1]
  const text = (title !== undefined && title.trim() !== "" ? title : head)
    .replace(/<(script|style)[^>]*>[\s\S]*?<\/\1>/gi, " ")
    .replace(/<[^>]*>/g, " ")
  return text.replace(/&(amp|lt|gt|quot|apos|nbsp|#39);/g, (_, name: string) => entities[name] ?? "")
}

/** Removes the credential from a text bound for an error, in case a server or library echoed it. */
export const scrub = (text: string, secret: string | undefined): string =>
  // A very short "secret" (a test's "t") would shred the message and hides nothing.
  secret !== undefined && secret.length >= 8 && text.includes(secret) ? text.split(secret).join("[redacted]") : text

/** The answer to a request that was not 2xx, as a typed error. */
export const statusError = (options: {
  readonly method: string
  readonly path: string
  readonly code: number
  readonly contentType: string | undefined
  readonly retryAfter: string | undefined
  readonly body: string
  readonly nowMillis: number
  readonly secret: string | undefined
}): KubeStatusError => {
  const { body, code, method, path, secret } = options
  let parsed: unknown = undefined
  if (body.length > 0) {
    try {
      parsed = JSON.parse(body)
    } catch {
      // Not JSON: described below.
    }
  }
  const headerRetry = parseRetryAfter(options.retryAfter, options.nowMillis)
  if (isStatusLike(parsed)) {
    const status = toStatus(parsed)
    const reason = status.reason ?? ""
    const details = status.details
    const message = `${method} ${path} answered ${code}${reason === "" ? "" : ` ${reason}`}: ${
      status.message ?? "the Status had no message"
    }`
    return new KubeStatusError({
      method,
      path,
      code,
      reason,
      message: scrub(message, secret),
      causes: details?.causes ?? [],
      retryAfterSeconds: Option.orElse(Option.fromNullable(details?.retryAfterSeconds), () => headerRetry),
      group: Option.fromNullable(details?.group),
      kind: Option.fromNullable(details?.kind),
      bodyExcerpt: Option.none()
    })
  }
  const contentType = options.contentType?.toLowerCase() ?? ""
  let what: string
  let shown: string
  if (body.trim() === "") {
    what = "an empty body"
    shown = ""
  } else if (parsed !== undefined) {
    what = "a JSON body"
    shown = excerpt(scrub(body.slice(0, 2_000), secret))
  } else if (contentType.includes("html") || /^\s*<(!doctype|html|head|body|title|center|h1)\b/i.test(body)) {
    what = "an HTML page"
    shown = excerpt(scrub(htmlText(body), secret))
  } else if (contentType.includes("json")) {
    // JSON by its label, not by its bytes: cut short (an error body is read only so far) or broken.
    what = "a body labelled JSON that does not parse"
    shown = excerpt(scrub(body.slice(0, 2_000), secret))
  } else {
    what = "a plain-text body"
    shown = excerpt(scrub(body.slice(0, 2_000), secret))
  }
  // Scrubbed before the cut as well as after, so not even a prefix of the credential shows.
  shown = scrub(shown, secret)
  const message = `${method} ${path} answered ${code} with ${what}, not a Kubernetes Status` +
    (shown === "" ? "" : `: "${shown}"`)
  return new KubeStatusError({
    method,
    path,
    code,
    reason: "",
    message: scrub(message, secret),
    causes: [],
    retryAfterSeconds: headerRetry,
    group: Option.none(),
    kind: Option.none(),
    bodyExcerpt: shown === "" ? Option.none() : Option.some(shown)
  })
}

const describeOne = (u: unknown): string => {
  if (u instanceof AggregateError && u.errors.length > 0) {
    // Node's happy-eyeballs connect: one error per address tried.
    return [...new Set(u.errors.map(describeOne))].filter((s) => s !== "").join("; ")
  }
  if (u instanceof Error) {
    const code = (u as { readonly code?: unknown }).code
    if (typeof code === "string" && !u.message.includes(code)) return u.message === "" ? code : `${u.message} (${code})`
    return u.message
  }
  return typeof u === "string" ? u : ""
}

/** The messages of an error and its causes, outermost first, without repeats. */
export const describeCause = (cause: unknown): string => {
  const parts: Array<string> = []
  const seen = new Set<unknown>()
  let current = cause
  for (let depth = 0; depth < 5 && current !== undefined && current !== null && !seen.has(current); depth++) {
    seen.add(current)
    const text = describeOne(current)
    if (text !== "" && !parts.some((part) => part.includes(text))) parts.push(text)
    current = typeof current === "object" ? (current as { readonly cause?: unknown }).cause : undefined
  }
  return parts.length === 0 ? "an unknown failure" : parts.join(": ")
}

interface TransportFailure {
  readonly method: string
  readonly path: string
  readonly server: string
  readonly cause: unknown
  readonly secret: string | undefined
}

/** What the client trusts the server's certificate by: for a message that blames the right thing. */
export interface Trust {
  /** The configuration gave a CA (else the system's roots are used). */
  readonly caGiven: boolean
  /** Where the configuration came from (`ClusterConnection.source`). */
  readonly source: string
}

/**
 * Node's codes for a certificate chain the trusted CAs do not vouch for: the CA is wrong or
 * missing. (Not a wrong name or a date: those say so themselves.)
 */
const UntrustedChain = new Set([
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "CERT_SIGNATURE_FAILURE",
  "CERT_UNTRUSTED"
])

/** Whether an error, or one of its causes, is a certificate chain no trusted CA vouches for. */
const isUntrustedChain = (cause: unknown, depth = 0): boolean => {
  if (depth > 5 || cause === null || typeof cause !== "object") return false
  if (cause instanceof AggregateError && cause.errors.some((e) => isUntrustedChain(e, depth + 1))) return true
  const code = (cause as { readonly code?: unknown }).code
  return (typeof code === "string" && UntrustedChain.has(code)) ||
    isUntrustedChain((cause as { readonly cause?: unknown }).cause, depth + 1)
}

const transportError = (
  options: TransportFailure,
  what: string,
  reached: "no-answer" | "mid-answer"
): KubeTransportError =>
  new KubeTransportError({
    method: options.method,
    path: options.path,
    message: scrub(`${what}: ${describeCause(options.cause)}`, options.secret),
    reached
  })

/**
 * The request got no answer: refused, reset, TLS, DNS. A certificate no trusted CA vouches for is
 * said to be about the CA, with where that CA came from: the error alone ("self-signed certificate
 * in certificate chain") does not tell a person which file to fix.
 */
export const requestFailed = (options: TransportFailure & { readonly trust: Trust }): KubeTransportError => {
  const what = `${options.method} ${options.path} to ${options.server} got no answer`
  if (!isUntrustedChain(options.cause)) return transportError(options, what, "no-answer")
  const blame = options.trust.caGiven
    ? `the CA of ${options.trust.source}; is it this cluster's CA?`
    : `the system's CA roots (${options.trust.source} names no CA); give the cluster's CA`
  return new KubeTransportError({
    method: options.method,
    path: options.path,
    message: scrub(
      `${what}: the server's certificate is not signed by ${blame} (${describeCause(options.cause)})`,
      options.secret
    ),
    reached: "no-answer"
  })
}

/** The answer started but its body broke off: the connection was reset or closed mid-body. */
export const bodyBroke = (options: TransportFailure): KubeTransportError =>
  transportError(
    options,
    `the answer to ${options.method} ${options.path} from ${options.server} broke off mid-body`,
    "mid-answer"
  )

/**
 * A deadline passed: the server took longer than `limit` to answer (`part` "headers") or to send
 * the whole body (`part` "body"). The request is aborted; what follows is the caller's retry.
 */
export const deadlinePassed = (
  options: Omit<TransportFailure, "cause">,
  part: "headers" | "body",
  limit: string
): KubeTransportError =>
  new KubeTransportError({
    method: options.method,
    path: options.path,
    message: scrub(
      part === "headers"
        ? `${options.method} ${options.path} to ${options.server} got no answer within ${limit}; the request was ` +
          `abandoned (a stalled apiserver or proxy; if it is only slow, raise KubeClientOptions.headersTimeout, the program's --headers-timeout)`
        : `the answer to ${options.method} ${options.path} from ${options.server} did not arrive whole within ${limit}; ` +
          `the request was abandoned (a stalled body; if it is only slow, raise KubeClientOptions.bodyTimeout, the program's --body-timeout)`,
      options.secret
    ),
    reached: part === "headers" ? "no-answer" : "mid-answer"
  })
