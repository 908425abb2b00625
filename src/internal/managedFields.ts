/**
 * `metadata.managedFields` cut out of a JSON text before it is parsed. It is about a third of each
 * object the apiserver sends and by far its most object-dense part (dozens of tiny `{}`), nothing
 * downstream reads it, and `JSON.parse` of the rest allocates none of it: the parse is shorter and
 * leaves less for the garbage collector.
 *
 * The cut works on the bytes before they are decoded, so the field's bytes are never decoded either.
 * It is found, never guessed: `"managedFields":` is looked for with the native `Buffer.indexOf`; an
 * unescaped quote followed by that text can only open a key (JSON never puts a colon after a string
 * value), and the key is cut only when its value is an array (a label or an annotation of that name
 * has a string value) that a string-aware bracket scan closes, with one comma beside it. Whenever
 * anything is not as expected the bytes are decoded whole. (What is inside the array is not
 * checked: nothing reads it.)
 *
 * Done for speed, on bytes rather than decoded strings (where the cut cost as much as it saved):
 * `npx tsx scratchpad/managedFieldsCut.ts` measures both on the benchmark's Sandboxes.
 *
 * @internal
 */
import type { Schema, SchemaAST } from "effect"

const Key = "\"managedFields\":"
const Quote = 34
const Backslash = 92
const OpenBracket = 91
const CloseBracket = 93
const Comma = 44
const OpenBrace = 123

const isSpace = (code: number) => code === 32 || code === 10 || code === 13 || code === 9

const KeyBytes = Buffer.from(Key)

/**
 * The index just past the array that starts at `open` (a `[`), or -1 when it does not close: a
 * string-aware bracket scan over bytes (UTF-8 never puts a quote, backslash or bracket inside a
 * multi-byte character).
 */
const endOfArrayBytes = (bytes: Buffer, open: number, end: number): number => {
  let depth = 0
  let i = open
  for (; i < end; i++) {
    const code = bytes[i]!
    if (code === Quote) {
      for (i++; i < end; i++) {
        const c = bytes[i]!
        if (c === Backslash) i++
        else if (c === Quote) break
      }
    } else if (code === OpenBracket) {
      depth++
    } else if (code === CloseBracket) {
      depth--
      if (depth === 0) {
        scanned.bytes += i + 1 - open
        return i + 1
      }
    }
  }
  scanned.bytes += i - open
  return -1
}

/**
 * Bytes the bracket scan has read, for a test to see the work stay linear in the text (counted
 * once per scan, not per byte).
 */
export const scanned = { bytes: 0 }

/**
 * `bytes[start, end)` decoded as UTF-8 without its `"managedFields": [...]` members (every one: a
 * list page has one per item): the bytes of those fields are never decoded. Decoded whole when it
 * has none or anything is unexpected.
 */
export const decodeWithoutManagedFields = (bytes: Buffer, start: number, end: number): string =>
  decodeCutting(bytes, start, end, Number.POSITIVE_INFINITY)

/**
 * The same for the text of one object (a watch line): its first `"managedFields": [...]` member is
 * cut, and the rest is not searched. The object's own metadata comes before its spec and status (the
 * apiserver writes keys in order), so that is the one; a later one would only be parsed. Not
 * searching the rest of the line (and on into the chunk's next line) is faster
 * (`npx tsx scratchpad/managedFieldsCut.ts`).
 */
export const decodeObjectWithoutManagedFields = (bytes: Buffer, start: number, end: number): string =>
  decodeCutting(bytes, start, end, 1)

const decodeCutting = (bytes: Buffer, start: number, end: number, most: number): string => {
  let key = bytes.indexOf(KeyBytes, start)
  if (key === -1 || key >= end) return bytes.toString("utf8", start, end)
  // The spans kept, as [from, to) pairs. Every cut falls between ASCII bytes, so the kept bytes
  // joined decode to the same text as the kept texts joined.
  const kept: Array<number> = []
  let from = start
  let cuts = 0
  while (key !== -1 && key < end) {
    const cut = cutAtBytes(bytes, key, start, end)
    // Each byte is bracket-scanned at most once, so the work stays linear even on hostile text
    // (`"managedFields":[` over and over): an array that never closes ends the search with the
    // text whole, and the search resumes past any array scanned, cut or not.
    if (cut === Unclosed) return bytes.toString("utf8", start, end)
    if (typeof cut === "number") {
      key = bytes.indexOf(KeyBytes, cut)
      continue
    }
    if (cut !== undefined) {
      kept.push(from, cut.start)
      from = cut.end
      if (++cuts === most) break
    }
    key = bytes.indexOf(KeyBytes, cut === undefined ? key + KeyBytes.length : cut.end)
  }
  if (from === start) return bytes.toString("utf8", start, end)
  kept.push(from, end)
  // The bytes joined, then decoded once: decoding each span and joining the texts made a rope that
  // `JSON.parse` flattened into a third copy. Joined in one reused buffer: a fresh
  // `Buffer.allocUnsafe` per line cost more than the decoding (`scratchpad/managedFieldsCut.ts`).
  let size = 0
  for (let i = 0; i < kept.length; i += 2) size += kept[i + 1]! - kept[i]!
  const joined = size <= MaxReusedBytes ? reusedBuffer(size) : Buffer.allocUnsafe(size)
  let at = 0
  for (let i = 0; i < kept.length; i += 2) at += bytes.copy(joined, at, kept[i]!, kept[i + 1]!)
  return joined.toString("utf8", 0, size)
}

/**
 * Watch lines (a few KB) are joined in one buffer kept for the purpose; a list page (megabytes) in
 * its own, once per page, so the process does not keep megabytes for it.
 */
const MaxReusedBytes = 256 * 1024
let reused = Buffer.alloc(0)
/** The kept buffer, at least `size` bytes. Safe to reuse: its bytes are decoded into a new string at once. */
const reusedBuffer = (size: number): Buffer => {
  if (reused.length < size) {
    reused = Buffer.allocUnsafe(Math.min(MaxReusedBytes, Math.max(size, 2 * reused.length, 64 * 1024)))
  }
  return reused
}

const Unclosed = -1

/**
 * The span to cut for the key at `key` (with one comma beside it); none when it is not a
 * managedFields array member; `Unclosed` when its array does not close; or where to search on
 * when its array closed but is not a member to cut.
 */
const cutAtBytes = (
  bytes: Buffer,
  key: number,
  start: number,
  end: number
): { readonly start: number; readonly end: number } | number | undefined => {
  let escapes = 0
  for (let i = key - 1; i >= start && bytes[i] === Backslash; i--) escapes++
  if (escapes % 2 === 1) return undefined
  let open = key + KeyBytes.length
  while (open < end && isSpace(bytes[open]!)) open++
  if (bytes[open] !== OpenBracket) return undefined
  const close = endOfArrayBytes(bytes, open, end)
  if (close === -1) return Unclosed
  let before = key - 1
  while (before >= start && isSpace(bytes[before]!)) before--
  if (bytes[before] === Comma) return { start: before, end: close }
  if (bytes[before] !== OpenBrace) return close
  let after = close
  while (after < end && isSpace(bytes[after]!)) after++
  return bytes[after] === Comma ? { start: key, end: after + 1 } : { start: key, end: close }
}

/**
 * Whether a schema reads a property named `name` anywhere: a schema that reads `managedFields`
 * must get it, so its texts are not cut. One that keeps any part as it came (`Unknown`, `Any`,
 * `object`, a record of those) may hold a field of that name anywhere in that part (an embedded
 * object's metadata, a custom resource's own field), so it counts as reading it.
 */
export const schemaReads = (ast: SchemaAST.AST, name: string): boolean => {
  const seen = new Set<SchemaAST.AST>()
  const visit = (node: SchemaAST.AST): boolean => {
    if (seen.has(node)) return false
    seen.add(node)
    switch (node._tag) {
      case "TypeLiteral":
        return node.propertySignatures.some((p) => p.name === name || visit(p.type)) ||
          node.indexSignatures.some((s) => visit(s.type))
      case "Union":
        return node.types.some(visit)
      case "TupleType":
        return node.elements.some((e) => visit(e.type)) || node.rest.some((r) => visit(r.type))
      case "Refinement":
        return visit(node.from)
      case "Transformation":
        return visit(node.from) || visit(node.to)
      case "Suspend":
        return visit(node.f())
      case "Declaration":
        return node.typeParameters.some(visit)
      case "UnknownKeyword":
      case "AnyKeyword":
      case "ObjectKeyword":
        return true
      default:
        return false
    }
  }
  return visit(ast)
}

const cutting = new WeakMap<SchemaAST.AST, boolean>()

/** Whether texts decoded by `schema` may lose their managedFields: unless the schema reads them. */
export const cutsFor = (schema: Schema.Schema.Any): boolean => {
  let cuts = cutting.get(schema.ast)
  if (cuts === undefined) {
    cuts = !schemaReads(schema.ast, "managedFields")
    cutting.set(schema.ast, cuts)
  }
  return cuts
}
