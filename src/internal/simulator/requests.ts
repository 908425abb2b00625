/**
 * The simulated apiserver's reading of a list or watch request, as pure functions: the query in,
 * a typed request or the `Status` kube-apiserver v1.20 would answer out. The serving (snapshots,
 * paging, the watch's stream) is in `listAnswer.ts`, `watchBody.ts` and `reads.ts`; what is asked,
 * and whether it may be asked, is decided here, so it can be tested row by row.
 *
 * @internal
 */
import { Either } from "effect"
import type { FieldSelector, LabelSelector } from "../labelSelector.ts"
import { parseFieldSelector, parseLabelSelector } from "../labelSelector.ts"
import type { FailureStatus } from "./kubeJson.ts"

/** client-go's bool query conversion: absent is false; `0`, `f`, `false` (any case) are false; else true. */
export const queryBool = (query: URLSearchParams, name: string): boolean | undefined => {
  const value = query.get(name)
  if (value === null) return undefined
  return !(value === "0" || value.toLowerCase() === "f" || value.toLowerCase() === "false")
}

export const badRequest = (message: string): FailureStatus => ({ code: 400, reason: "BadRequest", message })

export const expired = (message: string, continueToken?: string): FailureStatus => ({
  code: 410,
  reason: "Expired",
  message,
  ...(continueToken === undefined ? {} : { continue: continueToken })
})

export const tooLarge = (requested: string, current: number): FailureStatus => ({
  code: 504,
  reason: "Timeout",
  message: `Timeout: Too large resource version: ${requested}, current: ${current}`,
  details: {
    causes: [{ reason: "ResourceVersionTooLarge", message: "Too large resource version" }],
    retryAfterSeconds: 1
  }
})

export const unauthorized: FailureStatus = { code: 401, reason: "Unauthorized", message: "Unauthorized" }

export const inconsistentContinue =
  "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list."

/** `ListOptions.meta.k8s.io "" is invalid: ...`, the apiserver's 422 for contradictory options. */
export const invalidListOptions = (
  errors: ReadonlyArray<
    { readonly field: string; readonly kind: "Forbidden" | "Unsupported value"; readonly detail: string }
  >
): FailureStatus => {
  const described = errors.map((e) => `${e.field}: ${e.kind}: ${e.detail}`)
  return {
    code: 422,
    reason: "Invalid",
    message: `ListOptions.meta.k8s.io "" is invalid: ${
      described.length === 1 ? described[0] : `[${described.join(", ")}]`
    }`,
    details: {
      group: "meta.k8s.io",
      kind: "ListOptions",
      causes: errors.map((e) => ({
        reason: e.kind === "Forbidden" ? "FieldValueForbidden" : "FieldValueNotSupported",
        message: `${e.kind}: ${e.detail}`,
        field: e.field
      }))
    }
  }
}

export interface ContinueToken {
  readonly rv: number
  readonly start: string
}

/** The apiserver's token: base64url (no padding) of `{"v":"meta.k8s.io/v1","rv":N,"start":"key\u0000"}`. */
export const encodeContinue = (rv: number, start: string): string =>
  Buffer.from(JSON.stringify({ v: "meta.k8s.io/v1", rv, start })).toString("base64url")

export const decodeContinue = (token: string): Either.Either<ContinueToken, string> => {
  try {
    const decoded: unknown = JSON.parse(Buffer.from(token, "base64url").toString("utf8"))
    if (typeof decoded !== "object" || decoded === null) {
      return Either.left("continue key is not valid: not a JSON object")
    }
    const { v, rv, start } = decoded as Record<string, unknown>
    if (v !== "meta.k8s.io/v1") return Either.left("continue key is not valid: server does not recognize this encoding")
    if (typeof rv !== "number" || !Number.isInteger(rv) || (rv < 0 && rv !== -1)) {
      return Either.left("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
    }
    if (typeof start !== "string" || start === "") {
      return Either.left("continue key is not valid: encoded start key empty")
    }
    return Either.right({ rv, start })
  } catch {
    return Either.left("continue key is not valid: illegal base64 data or JSON")
  }
}

export const parseResourceVersion = (
  value: string
): number | undefined => (/^[0-9]+$/.test(value) ? Number(value) : undefined)

export const parseInteger = (value: string | null, name: string): Either.Either<number | undefined, FailureStatus> => {
  if (value === null || value === "") return Either.right(undefined)
  return /^-?[0-9]+$/.test(value)
    ? Either.right(Number(value))
    : Either.left(badRequest(`${name}: Invalid value: "${value}": must be an integer`))
}

/** The label and field selectors of a request. */
export interface Selectors {
  readonly labels: LabelSelector
  readonly fields: FieldSelector
}

export const parseSelectors = (query: URLSearchParams): Either.Either<Selectors, FailureStatus> => {
  const labels = parseLabelSelector(query.get("labelSelector") ?? "")
  if (Either.isLeft(labels)) return Either.left(badRequest(labels.left.message))
  const fields = parseFieldSelector(query.get("fieldSelector") ?? "")
  if (Either.isLeft(fields)) return Either.left(badRequest(fields.left.message))
  return Either.right({ labels: labels.right, fields: fields.right })
}

type OptionProblem = { field: string; kind: "Forbidden" | "Unsupported value"; detail: string }

/** What a list asks for, once its options are known to be allowed together. */
export interface ListRequest {
  /** `resourceVersion` as given (`""` when absent). */
  readonly resourceVersion: string
  /** `resourceVersionMatch` as given (`""` when absent). */
  readonly match: string
  /** `continue` as given (`""` when absent). */
  readonly continueToken: string
  /** A positive page size; none for the whole list. */
  readonly limit: number | undefined
  readonly selectors: Selectors
}

/** A list's query, validated as kube-apiserver validates it (422 for contradictions, 400 for nonsense). */
export const listRequestOf = (q: URLSearchParams): Either.Either<ListRequest, FailureStatus> => {
  const resourceVersion = q.get("resourceVersion") ?? ""
  const match = q.get("resourceVersionMatch") ?? ""
  const continueToken = q.get("continue") ?? ""
  const problems: Array<OptionProblem> = []
  if (match !== "") {
    if (resourceVersion === "") {
      problems.push({
        field: "resourceVersionMatch",
        kind: "Forbidden",
        detail: "resourceVersionMatch is forbidden unless resourceVersion is provided"
      })
    }
    if (continueToken !== "") {
      problems.push({
        field: "resourceVersionMatch",
        kind: "Forbidden",
        detail: "resourceVersionMatch is forbidden when continue is provided"
      })
    }
    if (match === "Exact" && resourceVersion === "0") {
      problems.push({
        field: "resourceVersionMatch",
        kind: "Forbidden",
        detail: "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""
      })
    } else if (match !== "Exact" && match !== "NotOlderThan") {
      problems.push({
        field: "resourceVersionMatch",
        kind: "Unsupported value",
        detail: `"${match}": supported values: "Exact", "NotOlderThan", ""`
      })
    }
  }
  if (q.get("sendInitialEvents") !== null) {
    problems.push({ field: "sendInitialEvents", kind: "Forbidden", detail: "sendInitialEvents is forbidden for list" })
  }
  if (problems.length > 0) return Either.left(invalidListOptions(problems))
  const selectors = parseSelectors(q)
  if (Either.isLeft(selectors)) return Either.left(selectors.left)
  const limit = parseInteger(q.get("limit"), "limit")
  if (Either.isLeft(limit)) return Either.left(limit.left)
  return Either.right({
    resourceVersion,
    match,
    continueToken,
    limit: limit.right !== undefined && limit.right > 0 ? limit.right : undefined,
    selectors: selectors.right
  })
}

/** What a watch asks for, once its options are known to be allowed together. */
export interface WatchRequest {
  /** The resourceVersion to start after; 0 when none was given. */
  readonly asked: number
  /** `initial`: ADDED for every object now, then what follows; with a bookmark at the end of them; `from`: what follows `asked`. */
  readonly mode: "initial" | "initialWithBookmark" | "from"
  readonly allowBookmarks: boolean
  /** A positive `timeoutSeconds`; none when not given (the server picks one). */
  readonly timeoutSeconds: number | undefined
  readonly selectors: Selectors
}

/** A watch's query, validated as kube-apiserver validates it. */
export const watchRequestOf = (
  q: URLSearchParams,
  watchListEnabled = true
): Either.Either<WatchRequest, FailureStatus> => {
  const resourceVersion = q.get("resourceVersion") ?? ""
  const match = q.get("resourceVersionMatch") ?? ""
  const sendInitialEvents = queryBool(q, "sendInitialEvents")
  const allowBookmarks = queryBool(q, "allowWatchBookmarks") === true
  const problems: Array<OptionProblem> = []
  if (sendInitialEvents !== undefined) {
    if (match !== "NotOlderThan") {
      problems.push({
        field: "resourceVersionMatch",
        kind: "Forbidden",
        detail: "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
      })
    }
    if (!watchListEnabled) {
      problems.push({
        field: "sendInitialEvents",
        kind: "Forbidden",
        detail: "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"
      })
    }
    if (!allowBookmarks) {
      problems.push({
        field: "allowWatchBookmarks",
        kind: "Forbidden",
        detail: "sendInitialEvents requires setting allowWatchBookmarks to true"
      })
    }
  }
  if (match !== "") {
    if (sendInitialEvents === undefined) {
      problems.push({
        field: "resourceVersionMatch",
        kind: "Forbidden",
        detail: "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"
      })
    }
    if (match !== "NotOlderThan") {
      problems.push({
        field: "resourceVersionMatch",
        kind: "Unsupported value",
        detail: `"${match}": supported values: "NotOlderThan"`
      })
    }
  }
  if (problems.length > 0) return Either.left(invalidListOptions(problems))
  const selectors = parseSelectors(q)
  if (Either.isLeft(selectors)) return Either.left(selectors.left)
  const timeout = parseInteger(q.get("timeoutSeconds"), "timeoutSeconds")
  if (Either.isLeft(timeout)) return Either.left(timeout.left)
  const asked = resourceVersion === "" ? 0 : parseResourceVersion(resourceVersion)
  if (asked === undefined) return Either.left(badRequest(`invalid resource version: "${resourceVersion}"`))
  return Either.right({
    asked,
    mode: sendInitialEvents === true
      ? "initialWithBookmark"
      : sendInitialEvents === false || asked !== 0
      ? "from"
      : "initial",
    allowBookmarks,
    timeoutSeconds: timeout.right !== undefined && timeout.right > 0 ? timeout.right : undefined,
    selectors: selectors.right
  })
}
