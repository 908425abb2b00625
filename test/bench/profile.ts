/**
 * The hottest functions of a V8 `.cpuprofile` by self time, as a markdown table.
 *
 *   npx tsx test/bench/profile.ts <file.cpuprofile> [top]
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"

interface ProfileNode {
  readonly id: number
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number }
}
interface Profile {
  readonly nodes: ReadonlyArray<ProfileNode>
  readonly samples: ReadonlyArray<number>
  readonly timeDeltas: ReadonlyArray<number>
}

export interface HotFunction {
  readonly name: string
  readonly where: string
  readonly selfMs: number
  readonly selfPercent: number
}

const shorten = (url: string) => {
  if (url === "") return "(native)"
  const path = url.startsWith("file://") ? fileURLToPath(url) : url
  const nm = path.lastIndexOf("node_modules/")
  if (nm >= 0) return path.slice(nm + "node_modules/".length)
  const root = process.cwd() + Path.sep
  return path.startsWith(root) ? path.slice(root.length) : path
}

/** Self time by function (name and place), hottest first; idle and GC kept as V8 names them. */
export const hottest = (file: string, top = 15): { readonly totalMs: number; readonly rows: ReadonlyArray<HotFunction> } => {
  const profile = JSON.parse(Fs.readFileSync(file, "utf8")) as Profile
  const byId = new Map(profile.nodes.map((node) => [node.id, node]))
  const self = new Map<string, { name: string; where: string; us: number }>()
  let total = 0
  for (let i = 0; i < profile.samples.length; i++) {
    const node = byId.get(profile.samples[i]!)
    const delta = profile.timeDeltas[i] ?? 0
    if (node === undefined) continue
    total += delta
    const { functionName, url, lineNumber } = node.callFrame
    const name = functionName === "" ? "(anonymous)" : functionName
    const where = url === "" ? "" : `${shorten(url)}:${lineNumber + 1}`
    const key = `${name} ${where}`
    const entry = self.get(key) ?? { name, where, us: 0 }
    entry.us += delta
    self.set(key, entry)
  }
  const rows = [...self.values()]
    .sort((a, b) => b.us - a.us)
    .slice(0, top)
    .map((e) => ({ name: e.name, where: e.where, selfMs: e.us / 1000, selfPercent: (100 * e.us) / Math.max(1, total) }))
  return { totalMs: total / 1000, rows }
}

export const markdown = (file: string, top = 15): string => {
  const { totalMs, rows } = hottest(file, top)
  const lines = [
    `Profile \`${shorten(file)}\`: ${totalMs.toFixed(0)} ms sampled; top ${rows.length} by self time.`,
    "",
    "| self % | self ms | function | where |",
    "|---:|---:|---|---|",
    ...rows.map((r) => `| ${r.selfPercent.toFixed(1)} | ${r.selfMs.toFixed(1)} | \`${r.name}\` | ${r.where} |`)
  ]
  return lines.join("\n")
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === Path.resolve(process.argv[1])) {
  const file = process.argv[2]
  if (file === undefined) {
    console.error("usage: tsx test/bench/profile.ts <file.cpuprofile> [top]")
    process.exit(2)
  }
  console.log(markdown(file, Number(process.argv[3] ?? "15")))
}
