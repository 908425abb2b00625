/**
 * A list page's continue token read before the page is parsed: from the text before its items when
 * the metadata comes first (a typed list), from its end when the metadata comes after the items (a
 * custom resource's list, keys sorted), and nothing guessed from bytes shaped otherwise.
 */
import { describe, expect, it } from "@effect/vitest"
import { peekContinue, peekHead, peekTail } from "../src/internal/continuePeek.ts"

// A string value holding the keys' text (its quotes escaped there) is not a key.
const item = (name: string) => ({
  metadata: { name, resourceVersion: "1" },
  spec: { note: "\"metadata\":{\"items\":[" }
})

/** A typed list: type, list metadata, then items. */
const typedPage = (metadata: Record<string, unknown>, names: Array<string> = ["a", "b"]) =>
  Buffer.from(JSON.stringify({ kind: "SandboxList", apiVersion: "jr2.dev/v1alpha1", metadata, items: names.map(item) }))

/** A custom resource's list as kube-apiserver 1.20.2 writes it: keys sorted, and a newline. */
const sortedPage = (metadata: Record<string, unknown>, names: Array<string> = ["a", "b"]) =>
  Buffer.from(
    JSON.stringify({ apiVersion: "jr2.dev/v1alpha1", items: names.map(item), kind: "SandboxList", metadata }) + "\n"
  )

const token = "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NDJ9"

describe("peekContinue", () => {
  it("reads the token before the items of a typed list, and after those of a sorted one", () => {
    const metadata = { continue: token, remainingItemCount: 8, resourceVersion: "42" }
    expect(peekContinue(typedPage({ selfLink: "/x?\"items\":[1]", ...metadata }), 0)).toBe(token)
    expect(peekContinue(sortedPage(metadata), 0)).toBe(token)
    expect(peekContinue(sortedPage(metadata, []), 0)).toBe(token)
    // Which end it came from.
    expect([peekHead(typedPage(metadata), 0), peekTail(typedPage(metadata), 0)]).toEqual([token, null])
    expect([peekHead(sortedPage(metadata), 0), peekTail(sortedPage(metadata), 0)]).toEqual([undefined, token])
  })

  it("says none on the last page, whether continue is empty or absent, at either end", () => {
    for (const metadata of [{ continue: "", resourceVersion: "42" }, { resourceVersion: "42" }]) {
      expect(peekContinue(typedPage(metadata), 0)).toBeNull()
      expect(peekContinue(sortedPage(metadata), 0)).toBeNull()
    }
  })

  it("starts where it is told (past a byte-order mark), and reads spaces between keys and values", () => {
    const bom = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), typedPage({ resourceVersion: "1", continue: "c" })])
    expect(peekContinue(bom, 3)).toBe("c")
    const typed = JSON.stringify({ metadata: { resourceVersion: "1", continue: "c2" }, items: [item("a")] }, null, 2)
    const sorted = JSON.stringify({ items: [item("a")], metadata: { resourceVersion: "1", continue: "c3" } }, null, 2)
    expect(typed).toContain("\"items\": [")
    expect([peekContinue(Buffer.from(typed), 0), peekContinue(Buffer.from(sorted), 0)]).toEqual(["c2", "c3"])
    expect(peekTail(Buffer.from(`"metadata":{"continue":"c2"}}`), 1)).toBeNull()
  })

  it("gives up, rather than guess, on pages not shaped as a server writes them", () => {
    const shapes: Array<unknown> = [
      { metadata: { items: 1, continue: "c2" }, items: [] }, // a key named items inside the metadata
      { metadata: "c2", items: [] }, // metadata that is not an object
      { metadata: { continue: 7 }, items: [] }, // a token that is not a string
      { items: [{ metadata: { continue: "c2" } }] }, // an item's metadata last, none of the list's
      { items: [], metadata: { resourceVersion: "1" }, x: { metadata: { continue: "c2" } } }, // nested deeper
      { items: [] },
      ["items", { metadata: { continue: "c2" } }]
    ]
    for (const shape of shapes) expect(peekContinue(Buffer.from(JSON.stringify(shape)), 0)).toBeNull()
    expect(peekContinue(Buffer.from("<html>\"items\": \"metadata\":</html>"), 0)).toBeNull()
    // A body cut short before its end.
    const whole = sortedPage({ continue: token, resourceVersion: "42" })
    expect(peekContinue(whole.subarray(0, whole.length - 3), 0)).toBeNull()
    // A typed list's metadata beyond 64 KiB before the items, or a sorted one's 64 KiB from the end.
    const farHead = { metadata: { continue: "c2", pad: "x".repeat(70_000) }, items: [] }
    const farTail = { items: [], metadata: { continue: "c2", pad: "x".repeat(70_000) } }
    expect(peekContinue(Buffer.from(JSON.stringify(farHead)), 0)).toBeNull()
    expect(peekContinue(Buffer.from(JSON.stringify(farTail)), 0)).toBeNull()
  })
})
