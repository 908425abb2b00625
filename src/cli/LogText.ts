/**
 * The program's log line for a person (`--log-format text`): one line that fits a terminal where
 * it can. The watch's warnings name the whole request and the server (`GET /apis/...?watch=1&...
 * to https://host:6443 got no answer: ...`), which is over 300 characters; here the request is
 * named in a word and the annotations the start line or the message already say are left out.
 * The JSON and logfmt formats keep everything: the whole message and every annotation.
 */
import { Cause, type Logger } from "effect"

/** A log's message as text. */
export const messageText = (options: Logger.Logger.Options<unknown>): string =>
  (Array.isArray(options.message) ? options.message : [options.message])
    .map((m) => (typeof m === "string" ? m : Cause.isCause(m) ? Cause.pretty(m) : JSON.stringify(m)))
    .join(" ")

/**
 * Annotations of every watch line that a person reads elsewhere: the namespace and selector in the
 * program's first line, the resourceVersion and the reason in the message's own words.
 */
const SaidElsewhere = new Set(["namespace", "labelSelector", "resourceVersion", "reason"])

/**
 * A request as a message names it (`GET /apis/...?watch=1&... to https://host:6443`, or `the
 * watch GET ...`, or `... from <server>` of an answer), with the path, query and server.
 */
const RequestNamed =
  /(?:the watch )?\b(GET|POST|PUT|PATCH|DELETE) (\/[^\s?]*)(\?\S*)?(?: (?:to|from) [a-z][a-z0-9+.-]*:\/\/\S+)?/g

/** The request in a word: the watch or the list, else its method and path. */
const requestName = (method: string, path: string, query: string | undefined): string =>
  /[?&]watch=(1|true)(&|$)/.test(query ?? "")
    ? "the watch"
    : method === "GET" && /[?&]limit=/.test(query ?? "")
    ? "the list"
    : `${method} ${path}`

/** A message as a person reads it in one line: the request in a word, a row of no answers counted shortly. */
export const shortMessage = (message: string): string =>
  message
    .replace(RequestNamed, (_, method: string, path: string, query: string | undefined) =>
      requestName(method, path, query))
    .replace(/ \(no answer (\d+) times in a row\)/, " ($1 in a row)")
    .replace("re-listing (streaming)", "re-listing")
    .replace(/\s*\n\s*/g, " ")

const clock = (date: Date) => date.toISOString().slice(11, 23)

/** One line a log: time, level, message, the annotations not said elsewhere, and the first line of a cause. */
export const formatLog = (options: Logger.Logger.Options<unknown>): string => {
  const annotations = [...options.annotations]
    .filter(([key, value]) => !SaidElsewhere.has(key) && value !== "")
    .map(([key, value]) => ` ${key}=${typeof value === "string" ? value : JSON.stringify(value)}`)
    .join("")
  const cause = Cause.isEmpty(options.cause) ? "" : ` (${Cause.pretty(options.cause).split("\n")[0]})`
  return `${clock(options.date)} ${options.logLevel.label.padEnd(5)} ${
    shortMessage(messageText(options))
  }${annotations}${cause}`
}
