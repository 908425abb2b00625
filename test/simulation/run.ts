/**
 * The simulation on demand, for many more scenarios than the fast suite draws:
 *
 *   npm run simulate -- --seeds 2000                      every property, each on its own
 *   npm run simulate -- --property pacing --seeds 500     one property (or a comma-separated few)
 *   npm run simulate -- --property waits --seed 42 --path 3:0:1   replay a reported failure
 *   npm run simulate -- --list-bytes 262144               hold lists to a byte budget (large objects)
 *   npm run simulate -- --property convergence --match 'not woken'   hunt one kind of violation
 *   npm run simulate -- --property convergence --focus crowdedStart  only crowded starts (cheap, race-prone)
 *
 * Each property is checked on its own (its failures do not hide another's). A failure prints the
 * seed and path that replay it, the shrunk scenario, the violation and the trace; the exit code is
 * 1 when any property failed.
 */
import { parseArgs } from "node:util"
import { checkSimulation, parseProperties } from "./property.ts"

const { values } = parseArgs({
  options: {
    seeds: { type: "string", default: "200" },
    seed: { type: "string" },
    path: { type: "string" },
    property: { type: "string" },
    shrink: { type: "string", default: "1000" },
    "list-bytes": { type: "string" },
    match: { type: "string" },
    focus: { type: "string" }
  }
})

const whole = (name: string, text: string | undefined): number | undefined => {
  if (text === undefined) return undefined
  const value = Number(text)
  if (!Number.isSafeInteger(value) || value < 0) throw new Error(`--${name} takes a whole number, not "${text}"`)
  return value
}

const properties = parseProperties(values.property ?? process.env.SIM_PROPERTIES)
const seeds = whole("seeds", values.seeds)!
const maxShrinkRuns = whole("shrink", values.shrink)!
const maxListBytes = whole("list-bytes", values["list-bytes"] ?? process.env.SIM_LIST_BYTES)
const seed = whole("seed", values.seed) ?? Math.floor(Math.random() * 2 ** 31)
const focus = values.focus ?? "any"
if (focus !== "any" && focus !== "crowdedStart") throw new Error(`--focus is any or crowdedStart, not "${focus}"`)
if (values.path !== undefined && values.seed === undefined) {
  throw new Error("--path replays a failure: give its --seed too")
}

let failed = 0
for (const property of properties) {
  const started = process.cpuUsage()
  const outcome = await checkSimulation({
    properties: [property],
    numRuns: seeds,
    seed,
    path: values.path,
    maxShrinkRuns,
    maxListBytes,
    match: values.match === undefined ? undefined : new RegExp(values.match),
    focus
  })
  const cpu = process.cpuUsage(started)
  const cpuSeconds = ((cpu.user + cpu.system) / 1e6).toFixed(1)
  if (outcome.ok) {
    console.log(`${property}: held for ${outcome.runs} scenarios (seed ${outcome.seed}; ${cpuSeconds}s CPU)`)
  } else {
    failed++
    console.log(`${property}: FAILED after ${outcome.runs} scenarios (${cpuSeconds}s CPU)\n${outcome.report}\n`)
  }
}
process.exitCode = failed > 0 ? 1 : 0
