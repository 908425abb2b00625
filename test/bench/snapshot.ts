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
  readonly snapshot: {
    readonly meta: { readonly node_fields: ReadonlyArray<string>; readonly node_types: ReadonlyArray<unknown> }
  }
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
    ...rows.map(([name, g]) =>
      `| ${(g.bytes / 1048576).toFixed(2)} | ${g.count.toLocaleString("en")} | \`${name}\`${per(g.bytes)} |`
    )
  ].join("\n")
}

/** What grew between two snapshots of one process, by constructor: bytes and counts, biggest growth first. */
export const diffMarkdown = (before: string, after: string, top = 20, per?: number): string => {
  const a = new Map(byConstructor(before, Number.MAX_SAFE_INTEGER).rows)
  const b = byConstructor(after, Number.MAX_SAFE_INTEGER)
  const rows = b.rows
    .map(([name, g]) => {
      const was = a.get(name) ?? { bytes: 0, count: 0 }
      return { name, bytes: g.bytes - was.bytes, count: g.count - was.count }
    })
    .sort((x, y) => y.bytes - x.bytes)
    .slice(0, top)
  const perCol = (x: number) => (per === undefined ? "" : ` | ${(x / per).toFixed(1)}`)
  return [
    `| KB grown | count grown | kind${per === undefined ? "" : " | bytes each"} |`,
    `|---:|---:|---|${per === undefined ? "" : "---:|"}`,
    ...rows.map((r) =>
      `| ${(r.bytes / 1024).toFixed(1)} | ${r.count.toLocaleString("en")} | \`${r.name}\`${perCol(r.bytes)} |`
    )
  ].join("\n")
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === Path.resolve(process.argv[1])) {
  const [first, second, third] = process.argv.slice(2)
  if (first === undefined) {
    console.error("usage: tsx test/bench/snapshot.ts <file.heapsnapshot> [top] | diff <before> <after> [top]")
    process.exit(2)
  }
  if (first === "diff" && second !== undefined && third !== undefined) {
    const top = Number(process.argv[5])
    console.log(diffMarkdown(second, third, Number.isInteger(top) && top > 0 ? top : 20))
  } else {
    const top = Number(second)
    console.log(markdown(first, Number.isInteger(top) && top > 0 ? top : 20))
  }
}
