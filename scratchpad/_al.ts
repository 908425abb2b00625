import { HashMap } from "effect"
import * as SandboxCache from "../src/internal/sandboxCache.ts"
import type { Sandbox } from "../src/Sandbox.ts"
import { makeSandbox } from "../test/bench/data.ts"
const N = 10_000
const which = process.argv[2] ?? "apply"
const items = Array.from({ length: N }, (_, i) => JSON.parse(JSON.stringify(makeSandbox(i, 0, N, "ns"))) as Sandbox)
const list = { items, undecodable: [], resourceVersion: String(N), pages: 20, restarts: 0 }
await new Promise((r) => setTimeout(r, 50))
const w0 = process.hrtime.bigint() / 1000n
const t0 = performance.now()
let size = 0
if (which === "apply") size = HashMap.size(SandboxCache.applyList(SandboxCache.empty, list, [], () => {}).cache.objects)
else if (which === "set") { const m = HashMap.beginMutation(HashMap.empty<string, Sandbox>()); for (const it of items) HashMap.set(m, it.metadata.name, it); size = HashMap.size(m) }
else if (which === "map") { const m = new Map(); for (const it of items) m.set(it.metadata.name, it); size = m.size }
console.log(which, (performance.now() - t0).toFixed(2), "ms", size, "window", w0, process.hrtime.bigint() / 1000n)
