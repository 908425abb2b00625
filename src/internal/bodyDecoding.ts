/** What the server sent, decoded: list bodies to pages, objects that misfit the schema to `UNDECODABLE`. */
import { Either, Option, type ParseResult } from "effect"
import { KubeMalformedBodyError } from "../KubeError.ts"
import type { HasMetadata } from "../ObjectMeta.ts"
import type { BookmarkEvent, UndecodableEvent } from "../WatchEvent.ts"
import { boundedIssues } from "./boundedIssues.ts"
import { continueOf } from "./continuePeek.ts"
import { scrub } from "./httpFailure.ts"
import { isRecord } from "./isRecord.ts"
import type { ListPage } from "./kubeClientTypes.ts"
import { decodeWithoutManagedFields } from "./managedFields.ts"
import { excerpt } from "./ndjsonLines.ts"
import { type Answer, headerValue } from "./undiciExchange.ts"

const ProblemChars = 1_000

/**
 * Decodes what this client just parsed and holds alone (`ownedDecoderFor`): a Sandbox with nothing
 * the Schema would drop is validated in place, not copied, which is faster per event and leaves a
 * smaller cached Sandbox (`npx tsx scratchpad/ownedDecode.ts`, and its `heap` runs).
 */
export type Decode<A> = (u: unknown) => Either.Either<A, ParseResult.ParseError>

/** An object that did not fit the schema, with what could still be read of it. */
export const undecodable = (
  eventType: UndecodableEvent["eventType"],
  object: unknown,
  error: ParseResult.ParseError
): UndecodableEvent => {
  const metadata = isRecord(object) && isRecord(object.metadata) ? object.metadata : undefined
  const name = metadata?.name
  const resourceVersion = metadata?.resourceVersion
  // The array form names the path (`status.phase: Expected string, actual 5`); the tree form
  // spends its first kilobyte restating the schema's type.
  // Effect's formatters walk the actual value recursively and overflow the stack on deep nesting.
  const issues = boundedIssues(error.issue)
  // An optional field is `T | undefined`: each miss also reports "Expected undefined", noise.
  const real = issues.filter((issue) => !issue.message.startsWith("Expected undefined,"))
  const problem = (real.length > 0 ? real : issues)
    .map((issue) => (issue.path.length === 0 ? issue.message : `${issue.path.map(String).join(".")}: ${issue.message}`))
    .join("; ")
  return {
    type: "UNDECODABLE",
    eventType,
    name: typeof name === "string" ? name : undefined,
    resourceVersion: typeof resourceVersion === "string" ? resourceVersion : undefined,
    problem: problem.length > ProblemChars ? `${problem.slice(0, ProblemChars - 1)}…` : problem
  }
}

export const NoAnnotations: Readonly<Record<string, string>> = Object.freeze({})

/** A bookmark promises only `metadata.resourceVersion` (and annotations): nothing else is read. */
export const toBookmark = (object: unknown): BookmarkEvent | undefined => {
  const metadata = isRecord(object) ? object.metadata : undefined
  if (!isRecord(metadata) || typeof metadata.resourceVersion !== "string") return undefined
  let annotations = NoAnnotations
  if (isRecord(metadata.annotations)) {
    const kept: Record<string, string> = {}
    for (const [key, value] of Object.entries(metadata.annotations)) if (typeof value === "string") kept[key] = value
    annotations = kept
  }
  return { type: "BOOKMARK", resourceVersion: metadata.resourceVersion, annotations }
}

/** An excerpt of what arrived, the credential scrubbed before the cut so no prefix of it shows. */
export const safeExcerpt = (text: string, secret: string | undefined): string =>
  excerpt(scrub(text.slice(0, 2_000), secret))

/** Where a body's text starts: past a leading byte-order mark, as a decoder skips it. */
export const textStart = (bytes: Buffer): number =>
  bytes.length >= 3 && bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf ? 3 : 0

/** A body's text, without its managedFields when `cuts`; a leading byte-order mark skipped, as a decoder does. */
export const decodeBody = (bytes: Buffer, cuts: boolean): string => {
  const start = textStart(bytes)
  return cuts ? decodeWithoutManagedFields(bytes, start, bytes.length) : bytes.toString("utf8", start, bytes.length)
}

/**
 * What an answer said it was, for a body that is not JSON: an HTML page or a gzip body nobody asked
 * for points at a proxy or load balancer in front of the apiserver, not at the apiserver.
 */
export const bodyLabels = (answer: Answer): string => {
  const type = headerValue(answer, "content-type")
  const encoding = headerValue(answer, "content-encoding")
  const said = [
    `content-type ${type ?? "(none)"}`,
    ...(encoding === undefined || encoding === "identity" ? [] : [`content-encoding ${encoding}`])
  ].join(", ")
  const proxyLike = (type !== undefined && !type.includes("json")) ||
    (encoding !== undefined && encoding !== "identity")
  return proxyLike ? `${said}: likely a proxy or load balancer between us and the apiserver` : said
}

/** A list answer to a `ListPage`, each item through the caller's schema. */
export const toListPage = <A extends HasMetadata>(
  text: string,
  decode: Decode<A>,
  path: string,
  secret: string | undefined,
  labels: string
): Either.Either<ListPage<A>, KubeMalformedBodyError> => {
  const malformed = (what: string) =>
    Either.left(
      new KubeMalformedBodyError({
        method: "GET",
        path,
        message: `GET ${path} answered 2xx with ${what}`,
        excerpt: safeExcerpt(text, secret)
      })
    )
  let body: unknown
  try {
    body = JSON.parse(text)
  } catch {
    return malformed(`a body that is not JSON (${labels})`)
  }
  if (!isRecord(body)) return malformed("a body that is not a JSON object")
  const rawItems = body.items
  if (rawItems !== null && !Array.isArray(rawItems)) return malformed("a body that is not a list (no items)")
  const metadata = isRecord(body.metadata) ? body.metadata : undefined
  const resourceVersion = metadata?.resourceVersion
  if (typeof resourceVersion !== "string") return malformed("a list without metadata.resourceVersion")
  // Rule 2: a watch from `resourceVersion=` starts "from now", and whatever went in between (a
  // deletion) would never be told. Only a server that breaks the API contract sends it.
  if (resourceVersion === "") {
    return malformed(
      "a list with an empty metadata.resourceVersion: there is no point to watch from (resourceVersion= means " +
        "\"from now\", and deletions in between would never be told), so the list is abandoned and retried after " +
        "the back-off; the server breaks the API contract (a proxy or an aggregated API in front of the apiserver?)"
    )
  }
  const items: Array<A> = []
  const bad: Array<UndecodableEvent> = []
  for (const item of rawItems ?? []) {
    const result = decode(item)
    if (result._tag === "Right") items.push(result.right)
    else bad.push(undecodable("ADDED", item, result.left))
  }
  const next = continueOf(body)
  const remaining = metadata?.remainingItemCount
  return Either.right({
    items,
    undecodable: bad,
    resourceVersion,
    continue: Option.fromNullable(next),
    remainingItemCount: typeof remaining === "number" ? Option.some(remaining) : Option.none()
  })
}
