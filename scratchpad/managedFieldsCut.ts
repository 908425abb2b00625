/**
 * What the managedFields cut costs and saves, on the benchmark's own Sandboxes: watch lines and a
 * list page of 500, as bytes, decoded whole and parsed, or decoded without managedFields and parsed.
 * The lines sit in 64 KiB chunks, as a watch reads them, and are cut either of every managedFields
 * (searching each line to its end) or of the object's first (`decodeObjectWithoutManagedFields`).
 * CPU time, several rounds in one process (compare the rows of one run, not runs).
 *
 *   npx tsx scratchpad/managedFieldsCut.ts
 */
import { decodeObjectWithoutManagedFields, decodeWithoutManagedFields } from "../src/internal/managedFields.ts"
import { makeSandbox } from "../test/bench/data.ts"

const items = Array.from({ length: 500 }, (_, i) => makeSandbox(i, 1, 10_000 + i, "ns"))
const page = Buffer.from(
  JSON.stringify({ apiVersion: "jr2.dev/v1alpha1", kind: "SandboxList", metadata: { resourceVersion: "1" }, items })
)
const lines = Array.from(
  { length: 10_000 },
  (_, i) => Buffer.from(JSON.stringify({ type: "MODIFIED", object: makeSandbox(i, 1, 10_000 + i, "ns") }))
)

// The same lines, back to back in 64 KiB chunks, each with its [start, end) in its chunk.
const inChunks: Array<{ readonly chunk: Buffer; readonly start: number; readonly end: number }> = []
{
  let parts: Array<Buffer> = []
  let size = 0
  let pending: Array<{ readonly start: number; readonly end: number }> = []
  const flush = () => {
    const chunk = Buffer.concat(parts)
    for (const line of pending) inChunks.push({ chunk, ...line })
    parts = []
    size = 0
    pending = []
  }
  for (const line of lines) {
    if (size + line.length + 1 > 65_536) flush()
    pending.push({ start: size, end: size + line.length })
    parts.push(line, Buffer.from("\n"))
    size += line.length + 1
  }
  flush()
}

const cpu = (run: () => void, repeat: number) => {
  const c0 = process.cpuUsage()
  for (let i = 0; i < repeat; i++) run()
  const c = process.cpuUsage(c0)
  return (c.user + c.system) / 1000 / repeat
}

let sink: unknown
for (let round = 0; round < 5; round++) {
  const linesWhole = cpu(() => lines.forEach((b) => (sink = JSON.parse(b.toString("utf8", 0, b.length)))), 1)
  const linesCut = cpu(() => lines.forEach((b) => (sink = JSON.parse(decodeWithoutManagedFields(b, 0, b.length)))), 1)
  const chunkedAll = cpu(() => inChunks.forEach((l) => (sink = decodeWithoutManagedFields(l.chunk, l.start, l.end))), 5)
  const chunkedFirst = cpu(
    () => inChunks.forEach((l) => (sink = decodeObjectWithoutManagedFields(l.chunk, l.start, l.end))),
    5
  )
  const chunkedWhole = cpu(() => inChunks.forEach((l) => (sink = l.chunk.toString("utf8", l.start, l.end))), 5)
  const pageWhole = cpu(() => (sink = JSON.parse(page.toString("utf8"))), 20)
  const pageCut = cpu(() => (sink = JSON.parse(decodeWithoutManagedFields(page, 0, page.length))), 20)
  console.log(
    `10,000 watch lines: whole ${linesWhole.toFixed(0)} ms, cut ${linesCut.toFixed(0)} ms; ` +
      `a page of 500: whole ${pageWhole.toFixed(2)} ms, cut ${pageCut.toFixed(2)} ms; ` +
      `decoding alone, lines in chunks: whole ${chunkedWhole.toFixed(1)} ms, cut of every one ${
        chunkedAll.toFixed(1)
      } ms, of the first ${chunkedFirst.toFixed(1)} ms`
  )
}
void sink
