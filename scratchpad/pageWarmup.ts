/**
 * A first list in a fresh process, page by page: N benchmark Sandboxes in pages of 500, each
 * gathered from 64 KiB parts as a response's body comes, decoded (with or without the managedFields
 * cut), parsed, decoded by the Schema's compiled path and put in a HashMap, with the time of each
 * step per page. The first pages show the JIT's warm-up, the spikes the young-generation
 * collections. `plain` decodes without the cut.
 * Run: npx tsx scratchpad/pageWarmup.ts [cut|plain] [N]
 *
 * Tried with a local edit (2026-12-04): gathering and joining every page of a list in the same two
 * buffers instead of fresh ones took 1.45–1.5 ms a page (median) against 1.55–1.75, 33–39 against
 * 39–43 ms for the list: ~1.5% of the benchmark's time to synced, inside its noise (A/B runs of
 * `--only sync`: 276–294 against 272–306 ms). Not worth threading buffers through the client. The schema+set column shows the compiled
 * decoder's warm-up (3–4 ms for the first page, 0.4–0.5 once optimized).
 */
import { HashMap } from "effect"
import { decodeWithoutManagedFields } from "../src/internal/managedFields.ts"
import { ownedDecoderFor } from "../src/internal/plainDecoder.ts"
import { Sandbox } from "../src/Sandbox.ts"
import { makeSandbox } from "../test/bench/data.ts"

const mode = process.argv[2] === "plain" ? "plain" : "cut"
const N = Number(process.argv[3] ?? 10_000)
const PageSize = 500

const pages: Array<Array<Buffer>> = []
const PartBytes = 64 * 1024
for (let first = 0; first < N; first += PageSize) {
  const items = []
  for (let i = first; i < Math.min(N, first + PageSize); i++) items.push(makeSandbox(i, 0, N, "ns"))
  const list = { kind: "SandboxList", apiVersion: "jr2.dev/v1alpha1", metadata: { resourceVersion: String(N) }, items }
  const bytes = Buffer.from(JSON.stringify(list))
  const parts: Array<Buffer> = []
  for (let at = 0; at < bytes.length; at += PartBytes) parts.push(Buffer.from(bytes.subarray(at, at + PartBytes)))
  pages.push(parts)
}

const decode = ownedDecoderFor(Sandbox)
const objects = HashMap.beginMutation(HashMap.empty<string, Sandbox>())
const steps: Array<string> = []
const gather = (parts: ReadonlyArray<Buffer>): Buffer => Buffer.concat(parts)
const t0 = performance.now()
for (const parts of pages) {
  const a = performance.now()
  const page = gather(parts)
  const text = mode === "plain" ? page.toString("utf8") : decodeWithoutManagedFields(page, 0, page.length)
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
    `(gather+decode/parse/schema+set): ${steps.join(" ")}`
)
