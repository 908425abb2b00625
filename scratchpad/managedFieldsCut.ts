/**
 * What the managedFields cut costs and saves, on the benchmark's own Sandboxes: watch lines and a
 * list page of 500, as bytes, decoded whole and parsed, or decoded without managedFields and parsed.
 * CPU time, several rounds in one process (compare the rows of one run, not runs).
 *
 *   npx tsx scratchpad/managedFieldsCut.ts
 */
import { decodeWithoutManagedFields } from "../src/internal/managedFields.ts"
import { makeSandbox } from "../test/bench/data.ts"

const items = Array.from({ length: 500 }, (_, i) => makeSandbox(i, 1, 10_000 + i, "ns"))
const page = Buffer.from(
  JSON.stringify({ apiVersion: "jr2.dev/v1alpha1", kind: "SandboxList", metadata: { resourceVersion: "1" }, items })
)
const lines = Array.from(
  { length: 10_000 },
  (_, i) => Buffer.from(JSON.stringify({ type: "MODIFIED", object: makeSandbox(i, 1, 10_000 + i, "ns") }))
)

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
  const pageWhole = cpu(() => (sink = JSON.parse(page.toString("utf8"))), 20)
  const pageCut = cpu(() => (sink = JSON.parse(decodeWithoutManagedFields(page, 0, page.length))), 20)
  console.log(
    `10,000 watch lines: whole ${linesWhole.toFixed(0)} ms, cut ${linesCut.toFixed(0)} ms; ` +
      `a page of 500: whole ${pageWhole.toFixed(2)} ms, cut ${pageCut.toFixed(2)} ms`
  )
}
void sink
