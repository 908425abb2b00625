/**
 * The simulation as fast-check properties: draw scenarios, run each, and on a failure shrink it
 * and say what happened: the seed and path that replay it, the shrunk scenario, the violation, and
 * the trace of what the server did and what the watch did. Used by the fast suite
 * (`test/simulation/Simulation.test.ts`) and on demand (`npm run simulate`).
 */
import { FastCheck as fc } from "effect"
import { scenario as scenarioArbitrary } from "./generator.ts"
import type { Focus, RequestPlan, Scenario } from "./generator.ts"
import type { PropertyName } from "./invariants.ts"
import { PropertyNames } from "./invariants.ts"
import { plansOf, type RunResult, runScenario, truthSteps } from "./simulate.ts"
import { Names } from "./truth.ts"

export interface SimulationCheck {
  readonly properties: ReadonlyArray<PropertyName>
  /** Scenarios drawn. */
  readonly numRuns: number
  /** fast-check's seed; none: a random one (printed on a failure). */
  readonly seed?: number | undefined
  /** With `seed`: replay the one scenario at this path (from a failure's report). */
  readonly path?: string | undefined
  /** Runs spent shrinking a failure at most; past it the smallest failure found so far is reported. */
  readonly maxShrinkRuns: number
  /** The byte budget to hold lists to (the `lists` branch's hook); none: unchecked, small objects. */
  readonly maxListBytes?: number | undefined
  /**
   * Only violations whose words match count (a run with others passes): to hunt one kind of
   * failure, and shrink toward it rather than toward another the same property also catches.
   */
  readonly match?: RegExp | undefined
  /** Which scenarios to draw (`generator.ts`); default any. */
  readonly focus?: Focus | undefined
}

export interface SimulationOutcome {
  readonly ok: boolean
  readonly runs: number
  readonly seed: number
  readonly path: string | undefined
  readonly shrinks: number
  readonly counterexample: Scenario | undefined
  readonly result: RunResult | undefined
  /** What a person reads about a failure. */
  readonly report: string | undefined
}

/** Parses `SIM_PROPERTIES` / `--property`: a comma-separated subset of the property names. */
export const parseProperties = (text: string | undefined): ReadonlyArray<PropertyName> => {
  if (text === undefined || text.trim() === "" || text === "all") return PropertyNames
  const names = text.split(",").map((name) => name.trim())
  for (const name of names) {
    if (!(PropertyNames as ReadonlyArray<string>).includes(name)) {
      throw new Error(`unknown property "${name}": choose from ${PropertyNames.join(", ")}`)
    }
  }
  return names as ReadonlyArray<PropertyName>
}

export const checkSimulation = async (check: SimulationCheck): Promise<SimulationOutcome> => {
  const properties = new Set(check.properties)
  const options = { properties, maxListBytes: check.maxListBytes }
  let failures = 0
  let shrinkRuns = 0
  let cutShort = false
  const property = fc.asyncProperty(
    scenarioArbitrary({ largeObjects: check.maxListBytes !== undefined }, check.focus),
    async (scenario) => {
      // Once the shrink budget is spent, no more candidates are run: fast-check keeps the smallest
      // failure found so far (a candidate skipped by `pre` is not a counterexample).
      if (failures > 0) {
        cutShort = shrinkRuns >= check.maxShrinkRuns
        fc.pre(shrinkRuns++ < check.maxShrinkRuns)
      }
      const result = await runScenario(scenario, options)
      if (result.violations.some((violation) => check.match === undefined || check.match.test(violation.message))) {
        failures++
        return false
      }
      return true
    }
  )
  const details = await fc.check(property, {
    numRuns: check.path === undefined ? check.numRuns : 1,
    ...(check.seed === undefined ? {} : { seed: check.seed }),
    ...(check.path === undefined ? {} : { path: check.path, endOnFailure: true })
  })
  if (!details.failed || details.counterexample === null) {
    if (details.failed) throw new Error(`the simulation's property failed without a counterexample: ${details.error}`)
    return {
      ok: true,
      runs: details.numRuns,
      seed: details.seed,
      path: undefined,
      shrinks: 0,
      counterexample: undefined,
      result: undefined,
      report: undefined
    }
  }
  const counterexample = details.counterexample[0]
  const result = await runScenario(counterexample, options)
  const path = details.counterexamplePath ?? undefined
  return {
    ok: false,
    runs: details.numRuns,
    seed: details.seed,
    path,
    shrinks: details.numShrinks,
    counterexample,
    result,
    report: formatReport(check, details.seed, path, details.numShrinks, cutShort, counterexample, result)
  }
}

const describePlan = (plan: RequestPlan): string => {
  switch (plan._tag) {
    case "Status":
      return `status ${plan.code}${plan.retryAfter === undefined ? "" : ` (Retry-After ${plan.retryAfter})`}${
        plan.code === 504 && plan.tooLargeResourceVersion ? " too-large-rv" : ""
      }`
    case "NoAnswer":
      return plan.how === "reset" ? "reset" : "no headers"
    case "Answer":
      return [
        "answer",
        plan.upTo === undefined ? undefined : `upTo=${plan.upTo}`,
        plan.liveMs === Number.POSITIVE_INFINITY ? "live=term" : `live=${plan.liveMs / 1000}s`,
        plan.bookmarks ? "bookmarks" : undefined,
        plan.bookmarkBeforeEnd ? "bookmark-before-end" : undefined,
        `ending=${plan.ending}`,
        plan.endBookmark === "annotated" ? undefined : `end-bookmark=${plan.endBookmark}`,
        plan.lagBy === 0 ? undefined : `lag=${plan.lagBy}`,
        plan.emptyResourceVersion ? "empty-rv" : undefined,
        plan.repeatNames ? "repeat-names" : undefined,
        plan.spread === 0 ? undefined : `spread=${plan.spread}`
      ].filter((part) => part !== undefined).join(" ")
  }
}

/** The scenario in a few lines. */
export const describeScenario = (scenario: Scenario): string => {
  const truth = truthSteps(scenario).map((step) =>
    `t=${step.at / 1000}s ${step.kind} ${Names[step.name]} ${step.phase}${step.garbled ? " garbled" : ""}${
      step.padBytes > 0 ? ` +${step.padBytes / 1024}KiB` : ""
    }${step.awaited ? " (awaited)" : ""}`
  )
  const stretches = scenario.stretches.map((stretch) =>
    `${stretch.times}× [${stretch.cycle.map(describePlan).join(" | ")}]`
  )
  return [
    `listMode ${scenario.listMode}, pageSize ${scenario.pageSize}, maxOpsBeforeYield ${scenario.maxOpsBeforeYield}, ` +
    `maxListItems ${scenario.maxListItems}, randomSeed ${scenario.randomSeed}`,
    `readers: ${
      scenario.readers.map((reader) =>
        `${reader.name === undefined ? "allChanges" : `changes(${Names[reader.name]})`}${
          reader.startsAtRequest === 0 ? "" : ` from request ${reader.startsAtRequest}`
        }${reader.work === 0 ? "" : ` (work ${reader.work})`}`
      ).join(", ") || "none"
    }`,
    `truth: ${truth.join("; ") || "nothing"}`,
    `plans (${plansOf(scenario).length} requests, then honest): ${stretches.join(", ") || "none"}`
  ].join("\n")
}

/** A trace longer than this many lines shows its start and end. */
const TraceLines = 400

const formatReport = (
  check: SimulationCheck,
  seed: number,
  path: string | undefined,
  shrinks: number,
  cutShort: boolean,
  scenario: Scenario,
  result: RunResult
): string => {
  const lines = result.trace.format().split("\n")
  const trace = lines.length <= TraceLines
    ? lines
    : [...lines.slice(0, 150), `... (${lines.length - TraceLines} lines) ...`, ...lines.slice(-(TraceLines - 150))]
  const replay = `npm run simulate -- --property ${check.properties.join(",")} --seed ${seed}${
    path === undefined ? "" : ` --path ${path}`
  }${check.maxListBytes === undefined ? "" : ` --list-bytes ${check.maxListBytes}`}${
    check.match === undefined ? "" : ` --match '${check.match.source}'`
  }${check.focus === undefined || check.focus === "any" ? "" : ` --focus ${check.focus}`}`
  return [
    `The simulation found a violation (fast-check seed ${seed}${
      path === undefined ? "" : `, path ${path}`
    }, shrunk ${shrinks} times).`,
    `Replay: ${replay}`,
    ...(cutShort
      ? [
        `(Shrinking stopped at its budget of ${check.maxShrinkRuns} runs: --seed ${seed} --shrink 3000 shrinks further.)`
      ]
      : []),
    "",
    ...result.violations.map((v) => `VIOLATION (${v.property}) at ${(v.at / 1000).toFixed(3)}s: ${v.message}`),
    "",
    "Scenario:",
    describeScenario(scenario),
    "",
    `Trace (${result.requests} requests, ${(result.simulatedMs / 1000).toFixed(0)}s simulated):`,
    ...trace
  ].join("\n")
}
