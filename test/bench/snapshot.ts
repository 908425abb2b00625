/**
 * What a V8 heap snapshot holds, by constructor: shallow bytes and counts, biggest first. For
 * reading where a cache's bytes per object go.
 *
 *   npx tsx test/bench/snapshot.ts <file.heapsnapshot> [top]
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"

interface Snapshot {
  readonly snapshot: { readonly meta: { readonly node_fields: ReadonlyArray<string>; readonly node_types: ReadonlyArray<unknown> } }
  readonly nodes: ReadonlyArray<number>
  readonly strings: ReadonlyArray<string>
}

export const byConstructor = (file: string, top = 20) => {
  const snap = JSON.parse(Fs.readFileSync(file, "utf8")) as Snapshot
  const fields = snap.snapshot.meta.node_fields
  const types = snap.snapshot.meta.node_types[0] as ReadonlyArray<string>
  const width = fields.length
  const typeAt = fields.indexOf("type")
  const nameAt = fields.indexOf("name")
  const sizeAt = fields.indexOf("self_size")
  const groups = new Map<string, { bytes: number; count: number }>()
  let total = 0
  for (let i = 0; i < snap.nodes.length; i += width) {
    const type = types[snap.nodes[i + typeAt]!] ?? "?"
    const raw = snap.strings[snap.nodes[i + nameAt]!] ?? ""
    // Strings and code by kind, not by content.
    const name = type === "object" || type === "closure" ? `${type}: ${raw.slice(0, 60)}` : type
    const size = snap.nodes[i + sizeAt]!
    total += size
    const g = groups.get(name) ?? { bytes: 0, count: 0 }
    g.bytes += size
    g.count++
    groups.set(name, g)
  }
  const rows = [...groups.entries()].sort((a, b) => b[1].bytes - a[1].bytes).slice(0, top)
  return { total, rows }
}

export const markdown = (file: string, top = 20, perObjects?: number): string => {
  const { total, rows } = byConstructor(file, top)
  const per = (bytes: number) => (perObjects === undefined ? "" : ` | ${(bytes / perObjects).toFixed(0)}`)
  return [
    `Heap snapshot: ${(total / 1048576).toFixed(1)} MB shallow in all.`,
    "",
    `| MB | count | kind${perObjects === undefined ? "" : " | bytes per cached object"} |`,
    `|---:|---:|---|${perObjects === undefined ? "" : "---:|"}`,
    ...rows.map(([name, g]) => `| ${(g.bytes / 1048576).toFixed(2)} | ${g.count.toLocaleString("en")} | \`${name}\`${per(g.bytes)} |`)
  ].join("\n")
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === Path.resolve(process.argv[1])) {
  const file = process.argv[2]
  if (file === undefined) {
    console.error("usage: tsx test/bench/snapshot.ts <file.heapsnapshot> [top]")
    process.exit(2)
  }
  const top = Number(process.argv[3])
  console.log(markdown(file, Number.isInteger(top) && top > 0 ? top : 20))
}
