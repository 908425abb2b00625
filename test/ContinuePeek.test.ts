/**
 * A list page's continue token read from its first bytes: found as soon as the bytes hold it, and
 * nothing guessed from bytes shaped otherwise.
 */
import { describe, expect, it } from "@effect/vitest"
import { peekContinue } from "../src/internal/continuePeek.ts"

const item = (name: string) => ({ metadata: { name } })

/** A page as the apiserver writes it: type, list metadata, then items. */
const page = (metadata: Record<string, unknown>, names: Array<string> = ["a", "b"]) =>
  Buffer.from(JSON.stringify({ kind: "SandboxList", apiVersion: "jr2.dev/v1alpha1", metadata, items: names.map(item) }))

describe("peekContinue", () => {
  it("reads the token once the bytes reach the items, and asks for more before", () => {
    // The key's text inside a string value before it (its quotes escaped there) is not the key.
    const bytes = page({
      selfLink: "/x?\"items\":[1]",
      resourceVersion: "42",
      continue: "eyJydiI6NDJ9",
      remainingItemCount: 7
    })
    const itemsAt = bytes.indexOf("\"items\":")
    for (let length = 0; length < itemsAt + 8; length++) {
      expect(peekContinue(bytes.subarray(0, length), 0)).toBeUndefined()
    }
    for (const length of [itemsAt + 8, itemsAt + 20, bytes.length]) {
      expect(peekContinue(bytes.subarray(0, length), 0)).toBe("eyJydiI6NDJ9")
    }
  })

  it("says there is none on the last page, whether continue is empty or absent", () => {
    expect(peekContinue(page({ resourceVersion: "42", continue: "" }), 0)).toBeNull()
    expect(peekContinue(page({ resourceVersion: "42" }), 0)).toBeNull()
  })

  it("starts where it is told: past a byte-order mark", () => {
    const bytes = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), page({ resourceVersion: "1", continue: "c" })])
    expect(peekContinue(bytes, 3)).toBe("c")
  })

  it("reads a page with spaces between keys and values", () => {
    const text = JSON.stringify({ metadata: { resourceVersion: "1", continue: "c2" }, items: [item("a")] }, null, 2)
    expect(text).toContain("\"items\": [")
    expect(peekContinue(Buffer.from(text), 0)).toBe("c2")
  })

  it("gives up, rather than guess, on pages not shaped as the apiserver writes them", () => {
    const shapes = [
      // items before the metadata: the metadata has not come yet
      { items: [item("a")], metadata: { continue: "c2" } },
      // a key named items inside the metadata
      { metadata: { items: 1, continue: "c2" }, items: [] },
      // metadata that is not an object, or no metadata
      { metadata: "c2", items: [] },
      { kind: "SandboxList", items: [] },
      // a token that is not a string
      { metadata: { continue: 7 }, items: [] }
    ]
    for (const shape of shapes) expect(peekContinue(Buffer.from(JSON.stringify(shape)), 0)).toBeNull()
    expect(peekContinue(Buffer.from("[\"items\":1]"), 0)).toBeNull()
    expect(peekContinue(Buffer.from("<html>\"items\":</html>"), 0)).toBeNull()
  })

  it("stops looking after 64 KiB without the items", () => {
    const long = Buffer.from(JSON.stringify({ metadata: { continue: "c2", padding: "x".repeat(70_000) }, items: [] }))
    expect(peekContinue(long.subarray(0, 60_000), 0)).toBeUndefined()
    expect(peekContinue(long.subarray(0, 66_000), 0)).toBeNull()
    expect(peekContinue(long, 0)).toBeNull()
  })
})
