/**
 * One benchmark child: loads one client, runs one scenario against the replay server, prints one
 * JSON line (`ChildResult`) and exits. A fresh process per round, so heaps and JIT state never mix.
 *
 *   node --expose-gc --import tsx test/bench/child.ts '<ChildParams as JSON>'
 */
import type { ChildParams, ChildResult } from "./protocol.ts"

const params = JSON.parse(process.argv[2] ?? "{}") as ChildParams
const clients: Record<string, () => Promise<{ run: (p: ChildParams) => Promise<ChildResult> }>> = {
  floor: () => import("./clients/floor.ts"),
  clientNode: () => import("./clients/clientNode.ts"),
  sandboxWatch: () => import("./clients/sandboxWatch.ts")
}
const load = clients[params.client]
if (load === undefined) {
  console.error(`unknown client ${params.client}; one of ${Object.keys(clients).join(", ")}`)
  process.exit(2)
}
try {
  const { run } = await load()
  const result = await run(params)
  process.stdout.write(JSON.stringify(result) + "\n", () => process.exit(0))
} catch (error) {
  console.error(error instanceof Error ? (error.stack ?? error.message) : String(error))
  process.exit(1)
}
