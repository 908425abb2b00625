/**
 * What the first list of N benchmark Sandboxes costs to put in the cache at the start of a process,
 * when the cache's code runs for the first time: `SandboxCache.applyList` (its map an `OverlayMap`,
 * the list's entries in a plain `Map`), against the same entries put in one `HashMap` (as the cache
 * held them before) and in a bare `Map`. Each mode in a fresh process, so each runs cold.
 * Run: npx tsx scratchpad/overlayMapCost.ts [N]
 */
import { HashMap } from "effect"
import { spawnSync } from "node:child_process"
import * as SandboxCache from "../src/internal/sandboxCache.ts"
import type { Sandbox } from "../src/Sandbox.ts"
import { makeSandbox } from "../test/bench/data.ts"

const Modes = ["applyList", "HashMap", "Map"] as const
const mode = process.argv[2]
const N = Number(process.argv[3] ?? 10_000)

if (mode === undefined || !Modes.includes(mode as never)) {
  for (let round = 0; round < 3; round++) {
    const row = Modes.map((m) => {
      const run = spawnSync(process.execPath, [...process.execArgv, process.argv[1]!, m, String(N)], {
        encoding: "utf8"
      })
      return `${m} ${run.stdout.trim()} ms`
    })
    console.log(`N = ${N}, cold: ${row.join(", ")}`)
  }
} else {
  // Parsed from JSON, as a list page's items are.
  const items = Array.from({ length: N }, (_, i) => JSON.parse(JSON.stringify(makeSandbox(i, 0, N, "ns"))) as Sandbox)
  await new Promise((resolve) => setTimeout(resolve, 50))
  const t0 = performance.now()
  let size = 0
  if (mode === "applyList") {
    const list = { items, undecodable: [], resourceVersion: String(N), pages: 1, restarts: 0 }
    size = SandboxCache.applyList(SandboxCache.empty, list, [], () => undefined).cache.objects.size
  } else if (mode === "HashMap") {
    const map = HashMap.beginMutation(HashMap.empty<string, Sandbox>())
    for (const item of items) HashMap.set(map, item.metadata.name, item)
    size = HashMap.size(HashMap.endMutation(map))
  } else {
    const map = new Map<string, Sandbox>()
    for (const item of items) map.set(item.metadata.name, item)
    size = map.size
  }
  const ms = performance.now() - t0
  if (size !== N) throw new Error(`held ${size}, not ${N}`)
  console.log(ms.toFixed(1))
}
