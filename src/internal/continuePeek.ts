/**
 * A list page's continue token, read from the page's bytes before the page is parsed, so the next
 * page can be asked for while this one is parsed and decoded.
 *
 * Where the token is depends on the server's encoder. A typed list (built-in kinds) is a Go struct,
 * written in field order: `{"kind":…,"apiVersion":…,"metadata":{…,"continue":"…"},"items":[…]}`,
 * so the token is in the first network read. A custom resource's list (a Sandbox's) is a map,
 * written with its keys sorted: `{"apiVersion":…,"items":[…],"kind":…,"metadata":{…}}` (kube-apiserver
 * 1.20.2, as captured here), so it is in the last bytes.
 *
 * - The head: the text before the first `"items":` is an object that lacks only its items; closed
 *   with `"items":null}` it parses alone. `"items":` cannot start inside a string value (a quote
 *   there is escaped), and a key of that name nested in the metadata leaves text that does not parse.
 * - The tail: the text from the last `"metadata":` is, after a `{`, the list's metadata closed by the
 *   list's own brace. If anything follows the list's metadata but its end (or the last `"metadata":`
 *   is an item's), the text does not parse.
 *
 * Anything unexpected gives none: the next page is asked for once this one is parsed, as before. The
 * caller also checks a token read here against the parsed page's, so a peek can cost a request,
 * never a wrong page.
 *
 * @internal
 */

export type HeadPeek =
  /** The token, read from the head. */
  | { readonly _tag: "Token"; readonly token: string }
  /** No token to be had early: the last page, or a page not shaped as expected. */
  | { readonly _tag: "None" }
  /** The items come first: the metadata is in the tail (`peekTail` once the body is whole). */
  | { readonly _tag: "InTheTail" }
  /** Too few bytes yet to say. */
  | { readonly _tag: "MoreBytes" }

const itemsKey = Buffer.from("\"items\":")
const metadataKey = Buffer.from("\"metadata\":")

/** Past this the head or tail is not shaped as the apiserver writes it: not worth a look. */
const longestText = 64 * 1024

const none: HeadPeek = { _tag: "None" }
const inTheTail: HeadPeek = { _tag: "InTheTail" }
const moreBytes: HeadPeek = { _tag: "MoreBytes" }

/** What the first bytes of a page (from `start`) say about its continue token. */
export const peekHead = (bytes: Buffer, start: number): HeadPeek => {
  const at = bytes.indexOf(itemsKey, start)
  if (at < 0) return bytes.length - start > longestText ? inTheTail : moreBytes
  if (at - start > longestText) return none
  const head = parsed(bytes.toString("utf8", start, at) + "\"items\":null}")
  if (head === undefined) return none
  if (!("metadata" in head)) return inTheTail
  const token = tokenOf(head)
  return token === null ? none : { _tag: "Token", token }
}

/** The continue token in a whole page's last bytes, or none. */
export const peekTail = (bytes: Buffer, start: number): string | null => {
  const at = bytes.lastIndexOf(metadataKey)
  if (at < start || bytes.length - at > longestText) return null
  const tail = parsed("{" + bytes.toString("utf8", at))
  return tail === undefined ? null : tokenOf(tail)
}

const parsed = (text: string): object | undefined => {
  try {
    const value: unknown = JSON.parse(text)
    return typeof value === "object" && value !== null && !Array.isArray(value) ? value : undefined
  } catch {
    return undefined
  }
}

const tokenOf = (list: object): string | null => {
  const metadata = (list as { readonly metadata?: unknown }).metadata
  if (typeof metadata !== "object" || metadata === null) return null
  const token = (metadata as { readonly continue?: unknown }).continue
  return typeof token === "string" && token !== "" ? token : null
}
