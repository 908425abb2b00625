/**
 * Decoding the benchmark's Sandboxes as a watch does (bytes → managedFields cut → `JSON.parse` →
 * decode), with the copying decoder (`decoderFor`) or in place (`ownedDecoderFor`): CPU per event
 * over 200,000 events, the last 10,000 kept as a cache would; and, with `heap`, the heap each
 * decoded Sandbox of a 10,000-item list holds after a collection.
 *
 *   npx tsx scratchpad/ownedDecode.ts
 *   node --expose-gc --import tsx scratchpad/ownedDecode.ts heap copying
 *   node --expose-gc --import tsx scratchpad/ownedDecode.ts heap owned
 */
import { decodeObjectWithoutManagedFields, decodeWithoutManagedFields } from "../src/internal/managedFields.ts"
import { decoderFor, ownedDecoderFor } from "../src/internal/plainDecoder.ts"
import { Sandbox } from "../src/Sandbox.ts"
import { makeSandbox } from "../test/bench/data.ts"

const copying = decoderFor(Sandbox)
const owned = ownedDecoderFor(Sandbox)

if (process.argv[2] === "heap") {
  const decode = process.argv[3] === "owned" ? owned : copying
  const pages = Array.from({ length: 20 }, (_, p) =>
    Buffer.from(
      JSON.stringify({
        items: Array.from({ length: 500 }, (_, i) => makeSandbox(p * 500 + i, 0, p * 500 + i + 1, "ns"))
      })
    ))
  const gc = (globalThis as { gc?: () => void }).gc
  if (gc === undefined) throw new Error("run with node --expose-gc")
  gc()
  gc()
  const before = process.memoryUsage().heapUsed
  const kept: Array<unknown> = []
  for (const page of pages) {
    const { items } = JSON.parse(decodeWithoutManagedFields(page, 0, page.length)) as { items: Array<unknown> }
    for (const item of items) {
      const result = decode(item)
      if (result._tag === "Right") kept.push(result.right)
    }
  }
  gc()
  gc()
  const perObject = (process.memoryUsage().heapUsed - before) / kept.length
  console.log(`${process.argv[3] ?? "copying"}: ${perObject.toFixed(0)} bytes per decoded Sandbox (${kept.length})`)
} else {
  const lines = Array.from(
    { length: 20_000 },
    (_, i) => Buffer.from(JSON.stringify(makeSandbox(i % 10_000, i, 10_000 + i, "ns")))
  )
  const cache: Array<unknown> = new Array(10_000)
  const cpuMs = (run: () => void) => {
    const c0 = process.cpuUsage()
    run()
    const c = process.cpuUsage(c0)
    return (c.user + c.system) / 1000
  }
  const events = (decode: (u: unknown) => unknown) => () => {
    for (let round = 0; round < 10; round++) {
      lines.forEach((bytes, i) => {
        cache[i % 10_000] = decode(JSON.parse(decodeObjectWithoutManagedFields(bytes, 0, bytes.length)))
      })
    }
  }
  for (let round = 0; round < 5; round++) {
    const parse = cpuMs(events((u) => u))
    const copied = cpuMs(events(copying))
    const inPlace = cpuMs(events(owned))
    console.log(
      `µs per event: parse ${(parse / 200).toFixed(2)}, then decode copying +${((copied - parse) / 200).toFixed(2)}, ` +
        `in place +${((inPlace - parse) / 200).toFixed(2)}`
    )
  }
}
