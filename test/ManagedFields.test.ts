/**
 * The managedFields cut (`src/internal/managedFields.ts`) on hostile inputs: whatever the text, its
 * parse after the cut is exactly the whole parse minus `metadata.managedFields`, or the text is left
 * whole.
 */
import { FastCheck, Schema } from "effect"
import { describe, expect, it } from "vitest"
import {
  cutsFor,
  decodeObjectWithoutManagedFields,
  decodeWithoutManagedFields,
  scanned,
  schemaReads
} from "../src/internal/managedFields.ts"
import { ObjectMeta } from "../src/ObjectMeta.ts"
import { Sandbox } from "../src/Sandbox.ts"

const managed = [
  { manager: "kubectl", operation: "Update", fieldsV1: { "f:metadata": { "f:labels": { ".": {}, "f:a": {} } } } },
  {
    manager: "op\"erator",
    fieldsV1: { "f:status": { "f:conditions": { "k:{\"type\":\"Ready\"}": {} } } },
    note: "]}[{,\\"
  }
]

/** What the cut must give: the whole parse with every object's metadata.managedFields deleted. */
const expected = (text: string): unknown =>
  JSON.parse(text, function(key, value) {
    if (key === "metadata" && value !== null && typeof value === "object" && !Array.isArray(value)) {
      const { managedFields: _dropped, ...rest } = value as Record<string, unknown>
      return rest
    }
    return value
  })

/** The text as the cut decodes its bytes; the bytes sit inside a larger buffer, as a line in a chunk does. */
const cut = (text: string): string => {
  const bytes = Buffer.from(`xx\n${text}\nyy`)
  return decodeWithoutManagedFields(bytes, 3, bytes.length - 3)
}

const cutParse = (text: string): unknown => JSON.parse(cut(text))

/** Any object with a metadata (managedFields or not, labels of any text) and JSON spec and status. */
const anyObject = (() => {
  const json = FastCheck.jsonValue({ maxDepth: 3 })
  const metadata = FastCheck.record({
    name: FastCheck.string({ unit: "grapheme" }),
    managedFields: FastCheck.array(json, { maxLength: 4 }),
    labels: FastCheck.dictionary(FastCheck.string(), FastCheck.string({ unit: "grapheme" }), { maxKeys: 3 })
  }, { requiredKeys: ["name"] })
  return FastCheck.record({ metadata, spec: json, status: json }, { requiredKeys: ["metadata"] })
})()

const rows: ReadonlyArray<{ readonly what: string; readonly object: unknown }> = [
  {
    what: "in the middle of metadata",
    object: { metadata: { name: "a", managedFields: managed, resourceVersion: "5" } }
  },
  { what: "first in metadata", object: { metadata: { managedFields: managed, name: "a" } } },
  {
    what: "last in metadata",
    object: { kind: "Sandbox", metadata: { name: "a", managedFields: managed }, status: {} }
  },
  { what: "alone in metadata", object: { metadata: { managedFields: managed } } },
  { what: "an empty array", object: { metadata: { name: "a", managedFields: [] } } },
  {
    what: "a label and an annotation named managedFields (string values, kept)",
    object: {
      metadata: {
        labels: { managedFields: "[not, an, array]" },
        annotations: { managedFields: "[1,2]", "x": "\"managedFields\":[1]" },
        managedFields: managed
      }
    }
  },
  {
    what: "multi-byte characters around it",
    object: { metadata: { name: "é🙂", managedFields: [{ manager: "naïve—✓" }], annotations: { note: "日本語" } } }
  },
  {
    what: "a watch line",
    object: {
      type: "MODIFIED",
      object: { apiVersion: "jr2.dev/v1alpha1", metadata: { name: "a", managedFields: managed } }
    }
  },
  {
    what: "a list body, every item",
    object: {
      kind: "SandboxList",
      metadata: { resourceVersion: "9" },
      items: [1, 2, 3].map((i) => ({ metadata: { name: `s${i}`, managedFields: managed }, status: { phase: "Ready" } }))
    }
  },
  { what: "absent", object: { metadata: { name: "a" }, spec: { repos: [] } } }
]

describe("decodeWithoutManagedFields", () => {
  it.each(rows)("$what: exactly the parse without metadata.managedFields", ({ object }) => {
    const compact = JSON.stringify(object)
    expect(cutParse(compact)).toEqual(expected(compact))
    const pretty = JSON.stringify(object, null, 2)
    expect(cutParse(pretty)).toEqual(expected(pretty))
  })

  it("leaves a text without the key, or with only a string value of that name, untouched (the same string)", () => {
    const none = JSON.stringify({ metadata: { name: "é🙂" } })
    expect(cut(none)).toBe(none)
    const labelOnly = JSON.stringify({ metadata: { labels: { managedFields: "x" } } })
    expect(cut(labelOnly)).toBe(labelOnly)
  })

  it("leaves the text whole when the array does not close (a truncated line)", () => {
    const truncated = `{"metadata":{"name":"a","managedFields":[{"manager":"x"`
    expect(cut(truncated)).toBe(truncated)
  })

  it("stays linear on hostile text: an array that never closes leaves the text whole at once, and no byte is bracket-scanned twice", () => {
    const key = "\"managedFields\":["
    const hostile = `{"metadata":{${key.repeat(Math.ceil((256 * 1024) / key.length))}`
    for (const decode of [decodeWithoutManagedFields, decodeObjectWithoutManagedFields]) {
      const bytes = Buffer.from(hostile)
      const before = scanned.bytes
      expect(decode(bytes, 0, bytes.length)).toBe(hostile)
      // Once per key would be ~14,000 scans of up to 256 KiB each.
      expect(scanned.bytes - before).toBeLessThanOrEqual(bytes.length)
    }
    // Closed but not a member (each key's array holds the next, inside another array): each
    // byte is still scanned once, not once per key.
    const depth = 5_000
    const nested = `{"metadata":{"x":[${key.repeat(depth)}${"]".repeat(depth + 1)}}}`
    const bytes = Buffer.from(nested)
    const before = scanned.bytes
    expect(decodeWithoutManagedFields(bytes, 0, bytes.length)).toBe(nested)
    expect(scanned.bytes - before).toBeLessThanOrEqual(bytes.length)
  })

  it("does not cut an escaped key inside a string", () => {
    const text = `{"metadata":{"annotations":{"a":"\\"managedFields\\":[1]"}}}`
    expect(cut(text)).toBe(text)
  })

  it("cuts share one reused buffer: a page of many cuts, a text past the buffer's size, and an earlier text cut again all come out right", () => {
    const item = (i: number, pad: number) => ({
      metadata: { name: `s-${i}-é`, managedFields: managed },
      spec: { note: "🙂".repeat(pad) }
    })
    const small = JSON.stringify({ items: [item(1, 2)] })
    const first = cut(small)
    // A page of many items (a cut per item), then one past the reused buffer's size.
    const page = JSON.stringify({ items: Array.from({ length: 2_000 }, (_, i) => item(i, 10)) })
    const huge = JSON.stringify({ items: Array.from({ length: 100 }, (_, i) => item(i, 1_000)) })
    expect(Buffer.byteLength(huge) - 100 * Buffer.byteLength(JSON.stringify(managed))).toBeGreaterThan(256 * 1024)
    expect(cutParse(page)).toEqual(expected(page))
    expect(cutParse(huge)).toEqual(expected(huge))
    // The buffer now holds the larger texts' bytes: the small text cut again reads only its own.
    expect(cut(small)).toBe(first)
    expect(JSON.parse(first)).toEqual(expected(small))
  })

  it("property: any JSON, with or without managedFields anywhere in metadata, parses the same as the whole minus managedFields", () => {
    FastCheck.assert(
      FastCheck.property(anyObject, FastCheck.boolean(), (o, pretty) => {
        const text = pretty ? JSON.stringify(o, null, 1) : JSON.stringify(o)
        expect(cutParse(text)).toEqual(expected(text))
      }),
      { numRuns: 500 }
    )
  })
})

describe("decodeObjectWithoutManagedFields (one object: a watch line)", () => {
  /** Lines back to back in one chunk, as a watch reads them; each decoded by its own [start, end). */
  const inOneChunk = (...texts: ReadonlyArray<string>): ReadonlyArray<string> => {
    const chunk = Buffer.from(texts.join("\n") + "\n")
    let start = 0
    return texts.map((text) => {
      const end = start + Buffer.byteLength(text)
      const decoded = decodeObjectWithoutManagedFields(chunk, start, end)
      start = end + 1
      return decoded
    })
  }

  it.each(rows.filter((row) => row.what !== "a list body, every item"))(
    "$what: exactly the parse without metadata.managedFields",
    ({ object }) => {
      const compact = JSON.stringify(object)
      const [decoded] = inOneChunk(compact, JSON.stringify({ metadata: { managedFields: managed } }))
      expect(JSON.parse(decoded!)).toEqual(expected(compact))
    }
  )

  it("cuts only the first: a later array of that name is left in the text, which still parses", () => {
    const object = { metadata: { name: "a", managedFields: managed }, spec: { managedFields: [1, 2] } }
    const [decoded] = inOneChunk(JSON.stringify(object))
    expect(JSON.parse(decoded!)).toEqual({ metadata: { name: "a" }, spec: { managedFields: [1, 2] } })
  })

  it("stays within its line: a line without the key is decoded whole, though the next one has it", () => {
    const bookmark = JSON.stringify({ type: "BOOKMARK", object: { metadata: { resourceVersion: "9" } } })
    const next = JSON.stringify({ type: "MODIFIED", object: { metadata: { name: "b", managedFields: managed } } })
    const [first, second] = inOneChunk(bookmark, next)
    expect(first).toBe(bookmark)
    expect(JSON.parse(second!)).toEqual({ type: "MODIFIED", object: { metadata: { name: "b" } } })
  })

  it("property: any object, as a line among others, parses the same as the whole minus metadata.managedFields", () => {
    FastCheck.assert(
      FastCheck.property(anyObject, anyObject, (o, after) => {
        const line = JSON.stringify({ type: "MODIFIED", object: o })
        const [decoded] = inOneChunk(line, JSON.stringify({ type: "ADDED", object: after }))
        expect(JSON.parse(decoded!)).toEqual(expected(line))
      }),
      { numRuns: 300 }
    )
  })
})

describe("cutsFor", () => {
  it("cuts for a schema that does not read managedFields, and not for one that does", () => {
    expect(schemaReads(Sandbox.ast, "managedFields")).toBe(false)
    expect(cutsFor(Sandbox)).toBe(true)
    const Reads = Schema.Struct({
      metadata: Schema.Struct({ ...ObjectMeta.fields, managedFields: Schema.Array(Schema.Unknown) })
    })
    expect(schemaReads(Reads.ast, "managedFields")).toBe(true)
    expect(cutsFor(Reads)).toBe(false)
  })

  it("does not cut for a schema that keeps any part as it came: that part may hold the field", () => {
    const keeps = [
      Schema.Struct({ metadata: ObjectMeta, spec: Schema.Unknown }),
      Schema.Struct({ metadata: ObjectMeta, spec: Schema.Record({ key: Schema.String, value: Schema.Unknown }) }),
      Schema.Struct({ metadata: ObjectMeta, spec: Schema.optional(Schema.Object) }),
      Schema.Struct({ metadata: ObjectMeta, items: Schema.Array(Schema.Any) })
    ]
    for (const schema of keeps) expect(cutsFor(schema)).toBe(false)
    // The Sandbox keeps nothing as it came: its texts are still cut.
    expect(cutsFor(Sandbox)).toBe(true)
  })
})
