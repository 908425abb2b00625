/**
 * A list page's continue token, read from the page's first bytes as they come, so the next page can
 * be asked for while the rest of this one is read, parsed and decoded.
 *
 * The apiserver writes a list as `{"kind":…,"apiVersion":…,"metadata":{…,"continue":"…"},"items":[…]}`
 * (Go writes struct fields in order: type, list metadata, items). The text before the first
 * `"items":` is then an object that only lacks its items: closed with `"items":null}` it parses on
 * its own, and costs a few hundred bytes rather than the page's megabyte. `"items":` cannot start
 * inside a string value there (a quote inside a string is escaped), and a key of that name nested in
 * the metadata leaves a prefix that does not parse. Anything unexpected gives `undefined`, and the
 * caller reads the token from the whole page as before; the caller also checks the peeked token
 * against the parsed one, so a peek can cost a request, never a wrong page.
 */

const itemsKey = Buffer.from("\"items\":")

/** Past this the page is not shaped as the apiserver writes it: not worth a look. */
const longestPrefix = 64 * 1024

/**
 * The token when the bytes so far show one; `null` when they show there is none to be had early (the
 * last page, or a page not shaped as expected); `undefined` while they are too few to say.
 */
export const peekContinue = (bytes: Buffer, start: number): string | null | undefined => {
  const at = bytes.indexOf(itemsKey, start)
  if (at < 0) return bytes.length - start > longestPrefix ? null : undefined
  if (at - start > longestPrefix) return null
  let head: unknown
  try {
    head = JSON.parse(bytes.toString("utf8", start, at) + "\"items\":null}")
  } catch {
    return null
  }
  if (typeof head !== "object" || head === null) return null
  const metadata = (head as { readonly metadata?: unknown }).metadata
  if (typeof metadata !== "object" || metadata === null) return null
  const token = (metadata as { readonly continue?: unknown }).continue
  return typeof token === "string" && token !== "" ? token : null
}
