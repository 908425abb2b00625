/**
 * The guard (issue 46, item 6): the real `SandboxWatch` and its loop, with the real client under
 * it, against an adversarial scripted server (`scriptedServer.ts`), on the simulation's clock and
 * scheduler, held to the invariants of `invariants.ts` at every step. Each property is a test of its
 * own, so a failure of one hides no other:
 *
 *   SIM_PROPERTIES=pacing,waits npx vitest run test/simulation/Simulation.test.ts   some properties
 *   SIM_SEEDS=500 SIM_SEED=7 npx vitest run test/simulation/Simulation.test.ts     more, or other, scenarios
 *   SIM_LIST_BYTES=262144 ...                                                      the byte budget's hook
 *
 * The fast suite draws `SIM_SEEDS` scenarios (default 100) per property, and `SIM_CROWDED_SEEDS`
 * (default 300) crowded starts for the two properties a lost wake-up breaks, from a fixed seed
 * (`SIM_SEED`, default 46), so it is deterministic; `npm run simulate` draws many more from a
 * random one. A failure's message is the shrunk scenario and its trace, and the command that
 * replays it.
 */
import { describe, expect, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import type { Scenario } from "./generator.ts"
import { scenario } from "./generator.ts"
import { PropertyNames } from "./invariants.ts"
import { checkSimulation, parseProperties } from "./property.ts"
import { runScenario } from "./simulate.ts"

const selected = parseProperties(process.env.SIM_PROPERTIES)
const seeds = Number(process.env.SIM_SEEDS ?? "100")
/** Crowded starts are short (about a fifth of a scenario's CPU) and where a lost wake-up shows. */
const crowdedSeeds = Number(process.env.SIM_CROWDED_SEEDS ?? "300")
const seed = Number(process.env.SIM_SEED ?? "46")
const maxListBytes = process.env.SIM_LIST_BYTES === undefined ? undefined : Number(process.env.SIM_LIST_BYTES)

/**
 * Runs spent shrinking a failure here (a long scenario's run is a few tenths of a second); a report
 * says when shrinking stopped there, and how to shrink further with `npm run simulate`.
 */
const ShrinkRuns = 40

/** A run is slow only in CPU it is given; this bounds a hang, not a speed. */
const Minutes = 60_000

describe("simulation: the watch against an adversarial server", () => {
  for (const property of PropertyNames) {
    it.runIf(selected.includes(property))(property, async () => {
      const outcome = await checkSimulation({
        properties: [property],
        numRuns: seeds,
        seed,
        maxShrinkRuns: ShrinkRuns,
        maxListBytes
      })
      expect(outcome.ok, outcome.report).toBe(true)
      expect(outcome.runs).toBe(seeds)
    }, 10 * Minutes)
  }
  for (const property of ["convergence", "waits"] as const) {
    it.runIf(selected.includes(property))(`${property}, at crowded starts`, async () => {
      const outcome = await checkSimulation({
        properties: [property],
        numRuns: crowdedSeeds,
        seed,
        maxShrinkRuns: ShrinkRuns,
        focus: "crowdedStart"
      })
      expect(outcome.ok, outcome.report).toBe(true)
      expect(outcome.runs).toBe(crowdedSeeds)
    }, 10 * Minutes)
  }
})

describe("simulation: the harness", () => {
  it("a run is a function of its scenario: the same scenario, the same trace", async () => {
    const scenarios = fc.sample(scenario({ largeObjects: false }), { seed: 7, numRuns: 4 })
    for (const drawn of scenarios) {
      const first = await runScenario(drawn, { properties: new Set(PropertyNames) })
      const second = await runScenario(drawn, { properties: new Set(PropertyNames) })
      expect(second.trace.format()).toBe(first.trace.format())
      expect(first.requests).toBeGreaterThan(0)
    }
  }, 5 * Minutes)

  it("an honest server: the watch lists, follows every change, and nothing is violated", async () => {
    const honest: Scenario = {
      listMode: "auto",
      pageSize: 2,
      maxOpsBeforeYield: 2048,
      maxListItems: 6,
      randomSeed: 1,
      initial: [0, 1].map((name) => ({
        gapMs: 0,
        name,
        kind: "touch" as const,
        phase: "Pending" as const,
        garbled: false,
        padBytes: 0,
        awaited: true
      })),
      steps: [
        { gapMs: 5_000, name: 0, kind: "touch", phase: "Ready", garbled: false, padBytes: 0, awaited: false },
        { gapMs: 5_000, name: 1, kind: "delete", phase: "Pending", garbled: false, padBytes: 0, awaited: false },
        { gapMs: 5_000, name: 2, kind: "touch", phase: "Ready", garbled: false, padBytes: 0, awaited: true }
      ],
      stretches: [],
      readers: [
        { name: 0, startsAtRequest: 0, work: 0 },
        { name: 1, startsAtRequest: 0, work: 0 },
        { name: undefined, startsAtRequest: 0, work: 0 }
      ],
      honestSpread: 0,
      waitHops: 0
    }
    const result = await runScenario(honest, { properties: new Set(PropertyNames) })
    expect(result.violations).toEqual([])
    const trace = result.trace.format()
    // What the watch was told, as the trace records it: each change reached its readers and waits.
    expect(trace).toContain("changes(sb-0)#1 ← sb-0 @103 Ready")
    expect(trace).toContain("changes(sb-1)#2 ← sb-1 gone")
    expect(trace).toContain("awaitReady(sb-0, createdAt 101) ended: Ready @103")
    // sb-1 was deleted while its wait ran: that SandboxGone is the truth's.
    expect(trace).toContain("awaitReady(sb-1, createdAt 102) ended: SandboxGone")
    expect(trace).toContain("awaitReady(sb-2, createdAt 105) ended: Ready @105")
  }, 5 * Minutes)
})
