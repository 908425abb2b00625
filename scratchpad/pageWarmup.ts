/**
 * A first list in a fresh process, page by page: N benchmark Sandboxes in pages of 500, each
 * decoded (with or without the managedFields cut), parsed, decoded by the Schema's compiled path and
 * put in a HashMap, with the time of each step per page. The first pages show the JIT's warm-up,
 * the spikes the young-generation collections.
 * Run: npx tsx scratchpad/pageWarmup.ts [cut|plain] [N]
 */
import { HashMap } from "effect"
import { decodeWithoutManagedFields } from "../src/internal/managedFields.ts"
import { ownedDecoderFor } from "../src/internal/plainDecoder.ts"
import { Sandbox } from "../src/Sandbox.ts"
import { makeSandbox } from "../test/bench/data.ts"

const mode = process.argv[2] === "plain" ? "plain" : "cut"
const N = Number(process.argv[3] ?? 10_000)
const PageSize = 500

const pages: Array<Buffer> = []
for (let first = 0; first < N; first += PageSize) {
  const items = []
  for (let i = first; i < Math.min(N, first + PageSize); i++) items.push(makeSandbox(i, 0, N, "ns"))
  const list = { kind: "SandboxList", apiVersion: "jr2.dev/v1alpha1", metadata: { resourceVersion: String(N) }, items }
  pages.push(Buffer.from(JSON.stringify(list)))
}

const decode = ownedDecoderFor(Sandbox)
const objects = HashMap.beginMutation(HashMap.empty<string, Sandbox>())
const steps: Array<string> = []
const t0 = performance.now()
for (const page of pages) {
  const a = performance.now()
  const text = mode === "cut" ? decodeWithoutManagedFields(page, 0, page.length) : page.toString("utf8")
  const b = performance.now()
  const body = JSON.parse(text) as { readonly items: ReadonlyArray<unknown> }
  const c = performance.now()
  for (const item of body.items) {
    const result = decode(item)
    if (result._tag === "Right") HashMap.set(objects, result.right.metadata.name, result.right)
  }
  const d = performance.now()
  steps.push(`${(b - a).toFixed(1)}/${(c - b).toFixed(1)}/${(d - c).toFixed(1)}`)
}
console.log(
  `${mode}: ${(performance.now() - t0).toFixed(1)} ms for ${HashMap.size(objects)}; ms per page ` +
    `(decode/parse/schema+set): ${steps.join(" ")}`
)
