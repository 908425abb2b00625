/**
 * A list page's continue token, read from the page's bytes before the page is parsed, so the next
 * page can be asked for while this one is parsed and decoded.
 *
 * Where the token is depends on the server's encoder. A typed list (a built-in kind's) is a Go
 * struct, written in field order: `{"kind":…,"apiVersion":…,"metadata":{…,"continue":"…"},"items":[…]}`.
 * A custom resource's list (a Sandbox's) is a map, written with its keys sorted:
 * `{"apiVersion":…,"items":[…],"kind":…,"metadata":{…}}` (kube-apiserver 1.20.2, as captured here).
 *
 * - The head: the text before the first `"items":` is an object that lacks only its items; closed
 *   with `"items":null}` it parses alone. `"items":` cannot start inside a string value (a quote
 *   there is escaped), and a key of that name nested in the metadata leaves text that does not parse.
 * - The tail, when the head has no metadata: the text from the last `"metadata":` is, after a `{`,
 *   the list's metadata closed by the list's own brace. It parses only when that key is the list's
 *   (an item's, or one nested deeper, leaves brackets or braces over).
 *
 * Anything unexpected gives none: the next page is asked for once this one is parsed, as before. The
 * caller also checks a token read here against the parsed page's, so a peek can cost a request,
 * never a wrong page.
 *
 * @internal
 */

import { isRecord } from "./isRecord.ts"

const itemsKey = Buffer.from("\"items\":")
const metadataKey = Buffer.from("\"metadata\":")

/** Past this the head or tail is not shaped as the apiserver writes it: not worth a look. */
const longestText = 64 * 1024

/** The continue token of a whole page (from `start`), from its head or else its tail; none when neither names one. */
export const peekContinue = (bytes: Buffer, start: number): string | null => {
  const fromHead = peekHead(bytes, start)
  return fromHead === undefined ? peekTail(bytes, start) : fromHead
}

/** The token in the text before the items; `null` when it names none; `undefined` when it holds no metadata. */
export const peekHead = (bytes: Buffer, start: number): string | null | undefined => {
  const at = bytes.indexOf(itemsKey, start)
  if (at < 0 || at - start > longestText) return undefined
  const head = parsed(bytes.toString("utf8", start, at) + "\"items\":null}")
  if (head === undefined) return null
  return "metadata" in head ? continueOf(head) : undefined
}

/** The token in the text from the list's metadata, when that comes last; `null` otherwise. */
export const peekTail = (bytes: Buffer, start: number): string | null => {
  const at = bytes.lastIndexOf(metadataKey)
  if (at < start || bytes.length - at > longestText) return null
  const tail = parsed("{" + bytes.toString("utf8", at))
  return tail === undefined ? null : continueOf(tail)
}

const parsed = (text: string): Record<string, unknown> | undefined => {
  try {
    const value: unknown = JSON.parse(text)
    return isRecord(value) ? value : undefined
  } catch {
    return undefined
  }
}

/**
 * A parsed list's continue token; none when it names none (absent or empty). The one rule, for the
 * peek and the parse alike: the list drops an early ask when the two disagree.
 */
export const continueOf = (list: Record<string, unknown>): string | null => {
  const metadata = list.metadata
  const token = isRecord(metadata) ? metadata.continue : undefined
  return typeof token === "string" && token !== "" ? token : null
}
