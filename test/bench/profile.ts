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
export const hottest = (
  file: string,
  top = 15
): {
  readonly totalMs: number
  readonly idleMs: number
  readonly rows: ReadonlyArray<HotFunction>
  /** Self time by file or package (`effect/ParseResult.js`, `src/KubeClient.ts`, `(gc)`), hottest first. */
  readonly modules: ReadonlyArray<{ readonly module: string; readonly selfPercent: number }>
} => {
  const profile = JSON.parse(Fs.readFileSync(file, "utf8")) as Profile
  const byId = new Map(profile.nodes.map((node) => [node.id, node]))
  const self = new Map<string, { name: string; where: string; us: number }>()
  let total = 0
  let idle = 0
  const byModule = new Map<string, number>()
  for (let i = 0; i < profile.samples.length; i++) {
    const node = byId.get(profile.samples[i]!)
    const delta = profile.timeDeltas[i] ?? 0
    if (node === undefined) continue
    total += delta
    const { functionName, url, lineNumber } = node.callFrame
    const name = functionName === "" ? "(anonymous)" : functionName
    if (name === "(idle)") {
      idle += delta
      continue
    }
    const where = url === "" ? "" : `${shorten(url)}:${lineNumber + 1}`
    const module = url === ""
      ? (name.startsWith("(") ? name : "(native)")
      : shorten(url).replace(/^effect\/dist\/esm\//, "effect/")
    byModule.set(module, (byModule.get(module) ?? 0) + delta)
    const key = `${name} ${where}`
    const entry = self.get(key) ?? { name, where, us: 0 }
    entry.us += delta
    self.set(key, entry)
  }
  const rows = [...self.values()]
    .sort((a, b) => b.us - a.us)
    .slice(0, top)
    .map((e) => ({
      name: e.name,
      where: e.where,
      selfMs: e.us / 1000,
      selfPercent: (100 * e.us) / Math.max(1, total - idle)
    }))
  const modules = [...byModule.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, top)
    .map(([module, us]) => ({ module, selfPercent: (100 * us) / Math.max(1, total - idle) }))
  return { totalMs: (total - idle) / 1000, idleMs: idle / 1000, rows, modules }
}

interface AllocationNode {
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number }
  readonly selfSize: number
  readonly children: ReadonlyArray<AllocationNode>
}

/** Bytes allocated by function (self), from a sampling heap profile (`.heapprofile`). */
export const allocationsMarkdown = (file: string, top = 15): string => {
  const root = (JSON.parse(Fs.readFileSync(file, "utf8")) as { head: AllocationNode }).head
  const byFunction = new Map<string, number>()
  const byModule = new Map<string, number>()
  let total = 0
  const visit = (node: AllocationNode) => {
    const { functionName, url, lineNumber } = node.callFrame
    const name = functionName === "" ? "(anonymous)" : functionName
    const key = `\`${name}\` | ${url === "" ? "" : `${shorten(url)}:${lineNumber + 1}`}`
    byFunction.set(key, (byFunction.get(key) ?? 0) + node.selfSize)
    const module = url === "" ? "(native)" : shorten(url).replace(/^effect\/dist\/esm\//, "effect/")
    byModule.set(module, (byModule.get(module) ?? 0) + node.selfSize)
    total += node.selfSize
    for (const child of node.children) visit(child)
  }
  visit(root)
  const rows = [...byFunction.entries()].sort((a, b) => b[1] - a[1]).slice(0, top)
  return [
    `Allocation profile \`${shorten(file)}\`: ${
      (total / 1048576).toFixed(1)
    } MB sampled; top ${rows.length} functions by bytes allocated (self).`,
    "",
    "| % | MB | function | where |",
    "|---:|---:|---|---|",
    ...rows.map(([key, bytes]) =>
      `| ${((100 * bytes) / Math.max(1, total)).toFixed(1)} | ${(bytes / 1048576).toFixed(1)} | ${key} |`
    ),
    "",
    "By file or package: " +
    [...byModule.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([m, bytes]) => `${m} ${((100 * bytes) / Math.max(1, total)).toFixed(1)}%`)
      .join(", ")
  ].join("\n")
}

export const markdown = (file: string, top = 15): string => {
  if (file.endsWith(".heapprofile")) return allocationsMarkdown(file, top)
  const { totalMs, idleMs, rows, modules } = hottest(file, top)
  const lines = [
    `Profile \`${shorten(file)}\`: ${totalMs.toFixed(0)} ms busy (${
      idleMs.toFixed(0)
    } ms idle, not counted); top ${rows.length} by self time, % of busy time.`,
    "",
    "| self % | self ms | function | where |",
    "|---:|---:|---|---|",
    ...rows.map((r) => `| ${r.selfPercent.toFixed(1)} | ${r.selfMs.toFixed(1)} | \`${r.name}\` | ${r.where} |`),
    "",
    "By file or package: " + modules.map((m) => `${m.module} ${m.selfPercent.toFixed(1)}%`).join(", ")
  ]
  return lines.join("\n")
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === Path.resolve(process.argv[1])) {
  const file = process.argv[2]
  if (file === undefined) {
    console.error("usage: tsx test/bench/profile.ts <file.cpuprofile> [top]")
    process.exit(2)
  }
  const top = Number(process.argv[3])
  console.log(markdown(file, Number.isInteger(top) && top > 0 ? top : 15))
}
