/**
 * What the managedFields cut costs and saves, on the benchmark's own Sandboxes: a list page of 500
 * and watch lines, parsed whole, parsed and the field dropped, and cut then parsed. CPU time,
 * several rounds in one process (compare the rows of one run, not runs).
 *
 *   npx tsx scratchpad/managedFieldsCut.ts
 */
import { withoutManagedFields } from "../src/internal/managedFields.ts"
import { makeSandbox } from "../test/bench/data.ts"

const items = Array.from({ length: 500 }, (_, i) => makeSandbox(i, 1, 10_000 + i, "ns"))
const page = JSON.stringify({ apiVersion: "jr2.dev/v1alpha1", kind: "SandboxList", metadata: { resourceVersion: "1" }, items })
const lines = Array.from({ length: 10_000 }, (_, i) => JSON.stringify({ type: "MODIFIED", object: makeSandbox(i, 1, 10_000 + i, "ns") }))

const cpu = (run: () => void, repeat: number) => {
  const c0 = process.cpuUsage()
  for (let i = 0; i < repeat; i++) run()
  const c = process.cpuUsage(c0)
  return (c.user + c.system) / 1000 / repeat
}
const drop = (o: any) => {
  for (const item of o.items ?? [o.object]) delete item.metadata.managedFields
  return o
}
let sink: unknown
for (let round = 0; round < 5; round++) {
  const whole = cpu(() => (sink = JSON.parse(page)), 20)
  const dropped = cpu(() => (sink = drop(JSON.parse(page))), 20)
  const cut = cpu(() => (sink = JSON.parse(withoutManagedFields(page))), 20)
  const cutOnly = cpu(() => (sink = withoutManagedFields(page)), 20)
  const linesWhole = cpu(() => lines.forEach((l) => (sink = JSON.parse(l))), 1)
  const linesCut = cpu(() => lines.forEach((l) => (sink = JSON.parse(withoutManagedFields(l)))), 1)
  console.log(
    `page of 500: parse ${whole.toFixed(2)} ms, parse+drop ${dropped.toFixed(2)}, cut+parse ${cut.toFixed(2)} (the cut alone ${cutOnly.toFixed(2)}); ` +
      `10,000 watch lines: parse ${linesWhole.toFixed(0)} ms, cut+parse ${linesCut.toFixed(0)} ms`
  )
}
void sink

// Watch lines as bytes, as the line splitter holds them: decode whole then parse, or cut the bytes.
const { decodeWithoutManagedFields } = await import("../src/internal/managedFields.ts")
const buffers = lines.map((l) => Buffer.from(l))
for (let round = 0; round < 5; round++) {
  const whole = cpu(() => buffers.forEach((b) => (sink = JSON.parse(b.toString("utf8", 0, b.length)))), 1)
  const cut = cpu(() => buffers.forEach((b) => (sink = JSON.parse(decodeWithoutManagedFields(b, 0, b.length)))), 1)
  console.log(`10,000 watch lines as bytes: decode+parse ${whole.toFixed(0)} ms, cut bytes+decode+parse ${cut.toFixed(0)} ms`)
}

const pageBytes = Buffer.from(page)
for (let round = 0; round < 5; round++) {
  const whole = cpu(() => (sink = JSON.parse(pageBytes.toString("utf8"))), 20)
  const cut = cpu(() => (sink = JSON.parse(decodeWithoutManagedFields(pageBytes, 0, pageBytes.length))), 20)
  console.log(`page of 500 as bytes: decode+parse ${whole.toFixed(2)} ms, cut bytes+decode+parse ${cut.toFixed(2)} ms`)
}
