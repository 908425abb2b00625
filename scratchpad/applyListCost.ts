/**
 * What a first list of N Sandboxes costs to apply to the empty cache (`SandboxCache.applyList`),
 * by itself, in one process: the step the watch runs between the last page and `synced`.
 * Run: npx tsx scratchpad/applyListCost.ts [N]
 */
import { Option } from "effect"
import * as SandboxCache from "../src/internal/sandboxCache.ts"
import type { FullList } from "../src/KubeClient.ts"
import type { Sandbox } from "../src/Sandbox.ts"

const N = Number(process.argv[2] ?? 10_000)
const sandbox = (i: number): Sandbox =>
  ({
    apiVersion: "jr2.dev/v1alpha1",
    kind: "Sandbox",
    metadata: {
      name: `sandbox-${i.toString(36).padStart(6, "0")}-run`,
      namespace: "ns",
      resourceVersion: String(i + 1)
    },
    status: { phase: "Ready" }
  }) as unknown as Sandbox
const list: FullList<Sandbox> = {
  items: Array.from({ length: N }, (_, i) => sandbox(i)),
  undecodable: [],
  resourceVersion: String(N),
  pages: 1,
  restarts: 0
}
let tells = 0
const tell: SandboxCache.Tell = () => void tells++
for (let round = 0; round < 8; round++) {
  const t0 = performance.now()
  const applied = SandboxCache.applyList(SandboxCache.empty, list, [], tell)
  const ms = performance.now() - t0
  const t1 = performance.now()
  const relisted = SandboxCache.applyList(applied.cache, list, [], tell)
  const relistMs = performance.now() - t1
  console.log(
    `first list ${ms.toFixed(2)} ms (${((ms * 1000) / N).toFixed(2)} µs a name), re-list of the same ${
      relistMs.toFixed(2)
    } ms; cached ${relisted.cache.objects.size}${Option.isNone(Option.none()) ? "" : ""}`
  )
}
