/**
 * A list page's continue token read before the page is parsed: from its first bytes when the
 * metadata comes first (a typed list), from its last when it comes after the items (a custom
 * resource's list, keys sorted), and nothing guessed from bytes shaped otherwise.
 */
import { describe, expect, it } from "@effect/vitest"
import { peekHead, peekTail } from "../src/internal/continuePeek.ts"

const item = (name: string) => ({ metadata: { name, resourceVersion: "1" }, spec: { note: "\"metadata\":{}" } })

/** A typed list: type, list metadata, then items. */
const typedPage = (metadata: Record<string, unknown>, names: Array<string> = ["a", "b"]) =>
  Buffer.from(JSON.stringify({ kind: "SandboxList", apiVersion: "jr2.dev/v1alpha1", metadata, items: names.map(item) }))

/** A custom resource's list as kube-apiserver 1.20.2 writes it: keys sorted. */
const sortedPage = (metadata: Record<string, unknown>, names: Array<string> = ["a", "b"]) =>
  Buffer.from(
    JSON.stringify({ apiVersion: "jr2.dev/v1alpha1", items: names.map(item), kind: "SandboxList", metadata }) + "\n"
  )

const token = "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NDJ9"

describe("peekHead", () => {
  it("reads the token once the bytes reach the items, and asks for more before", () => {
    // The key's text inside a string value before it (its quotes escaped there) is not the key.
    const bytes = typedPage({ selfLink: "/x?\"items\":[1]", resourceVersion: "42", continue: token })
    const itemsAt = bytes.indexOf("\"items\":")
    for (let length = 0; length < itemsAt + 8; length++) {
      expect(peekHead(bytes.subarray(0, length), 0)).toEqual({ _tag: "MoreBytes" })
    }
    for (const length of [itemsAt + 8, itemsAt + 20, bytes.length]) {
      expect(peekHead(bytes.subarray(0, length), 0)).toEqual({ _tag: "Token", token })
    }
  })

  it("says none on the last page, whether continue is empty or absent", () => {
    expect(peekHead(typedPage({ resourceVersion: "42", continue: "" }), 0)).toEqual({ _tag: "None" })
    expect(peekHead(typedPage({ resourceVersion: "42" }), 0)).toEqual({ _tag: "None" })
  })

  it("sends a page whose items come first to its tail", () => {
    expect(peekHead(sortedPage({ resourceVersion: "42", continue: token }), 0)).toEqual({ _tag: "InTheTail" })
    const long = Buffer.from(JSON.stringify({ padding: "x".repeat(70_000), items: [] }))
    expect(peekHead(long.subarray(0, 60_000), 0)).toEqual({ _tag: "MoreBytes" })
    expect(peekHead(long.subarray(0, 66_000), 0)).toEqual({ _tag: "InTheTail" })
  })

  it("starts where it is told (past a byte-order mark), and reads spaces between keys and values", () => {
    const bom = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), typedPage({ resourceVersion: "1", continue: "c" })])
    expect(peekHead(bom, 3)).toEqual({ _tag: "Token", token: "c" })
    const text = JSON.stringify({ metadata: { resourceVersion: "1", continue: "c2" }, items: [item("a")] }, null, 2)
    expect(text).toContain("\"items\": [")
    expect(peekHead(Buffer.from(text), 0)).toEqual({ _tag: "Token", token: "c2" })
  })

  it("gives up, rather than guess, on heads not shaped as a server writes them", () => {
    const shapes = [
      { metadata: { items: 1, continue: "c2" }, items: [] }, // a key named items inside the metadata
      { metadata: "c2", items: [] }, // metadata that is not an object
      { metadata: { continue: 7 }, items: [] } // a token that is not a string
    ]
    for (const shape of shapes) expect(peekHead(Buffer.from(JSON.stringify(shape)), 0)).toEqual({ _tag: "None" })
    expect(peekHead(Buffer.from("[\"items\":1]"), 0)).toEqual({ _tag: "None" })
    expect(peekHead(Buffer.from("<html>\"items\":</html>"), 0)).toEqual({ _tag: "None" })
    const far = Buffer.from(JSON.stringify({ metadata: { continue: "c2", pad: "x".repeat(70_000) }, items: [] }))
    expect(peekHead(far, 0)).toEqual({ _tag: "None" })
  })
})

describe("peekTail", () => {
  it("reads the token from a custom resource's list, whose metadata comes last", () => {
    expect(peekTail(sortedPage({ continue: token, remainingItemCount: 8, resourceVersion: "42" }), 0)).toBe(token)
    expect(peekTail(sortedPage({ continue: token, resourceVersion: "42" }, []), 0)).toBe(token)
  })

  it("says none on the last page", () => {
    expect(peekTail(sortedPage({ continue: "", resourceVersion: "42" }), 0)).toBeNull()
    expect(peekTail(sortedPage({ resourceVersion: "42" }), 0)).toBeNull()
  })

  it("gives up, rather than guess, when the last metadata is not the list's", () => {
    // The list's metadata first: the last "metadata": is an item's, followed by more of the list.
    expect(peekTail(typedPage({ continue: token, resourceVersion: "42" }), 0)).toBeNull()
    // A body cut short, an item's metadata last, or none at all.
    const whole = sortedPage({ continue: token, resourceVersion: "42" })
    expect(peekTail(whole.subarray(0, whole.length - 3), 0)).toBeNull()
    expect(peekTail(Buffer.from(JSON.stringify({ items: [{ metadata: { continue: "c2" } }] })), 0)).toBeNull()
    expect(peekTail(Buffer.from("{\"items\":[]}"), 0)).toBeNull()
    // Not before where it is told to start.
    expect(peekTail(Buffer.from(`"metadata":{"continue":"c2"}}`), 1)).toBeNull()
    // Past 64 KiB from the end.
    const far = Buffer.from(JSON.stringify({ items: [], metadata: { continue: "c2", pad: "x".repeat(70_000) } }))
    expect(peekTail(far, 0)).toBeNull()
  })
})
