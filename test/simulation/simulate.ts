/**
 * One simulation run: the real `SandboxWatch` (and the `Orchestrator`'s `awaitReady` on it) against
 * the scripted server, with readers on a few names and on every name, driven to quiescence at every
 * instant something happens, the invariants checked each time. Deterministic: the scenario fixes the
 * truth, the plans, the yield budget and the jitter's seed; time is the simulation's clock and every
 * fiber task runs on the simulation's scheduler.
 */
import { Effect, Fiber } from "effect"
import { recordDraftsWith } from "./draftSpy.ts"
import type { GeneratedStep, RequestPlan, Scenario } from "./generator.ts"
import type { PropertyName, Violation } from "./invariants.ts"
import { Ceilings, Invariants } from "./invariants.ts"
import { ScriptedServer } from "./scriptedServer.ts"
import { hops, settle, SimClock, SimScheduler } from "./simRuntime.ts"
import { Trace } from "./trace.ts"
import type { TruthStep } from "./truth.ts"
import { Names, Truth } from "./truth.ts"
import { makeWatchUsers, MaxListPages, type Start } from "./watchUsers.ts"

export interface RunOptions {
  readonly properties: ReadonlySet<PropertyName>
  /** The byte budget of a list's draft to hold the watch to (the `lists` branch's hook); none: unchecked. */
  readonly maxListBytes?: number | undefined
}

export interface RunResult {
  readonly violations: ReadonlyArray<Violation>
  readonly trace: Trace
  readonly requests: number
  readonly simulatedMs: number
}

/** How long the server may misbehave before the plans left are dropped. */
export const MaxMisbehaviourMs = 20 * 60_000
/** A run that goes on this long after its misbehaviour without the server calming is stopped. */
const HardStopMs = MaxMisbehaviourMs + 30 * 60_000

/** The truth steps at their instants: the initial ones at 0, the others each `gapMs` after the last. */
export const truthSteps = (scenario: Scenario): Array<TruthStep> => {
  const at = (step: GeneratedStep, time: number): TruthStep => ({
    at: time,
    name: step.name,
    kind: step.kind,
    phase: step.phase,
    garbled: step.garbled,
    padBytes: step.padBytes,
    awaited: step.awaited
  })
  let time = 0
  return [
    ...scenario.initial.map((step) => at({ ...step, kind: "touch" }, 0)),
    ...scenario.steps.map((step) => at(step, time += step.gapMs))
  ]
}

export const plansOf = (scenario: Scenario): Array<RequestPlan> =>
  scenario.stretches.flatMap((stretch) => Array.from({ length: stretch.times }, () => stretch.cycle).flat())

export const runScenario = async (scenario: Scenario, options: RunOptions): Promise<RunResult> => {
  const clock = new SimClock()
  const scheduler = new SimScheduler()
  const trace = new Trace(() => clock.unsafeCurrentTimeMillis())
  const truth = new Truth(truthSteps(scenario))
  const invariants = new Invariants(
    truth,
    { maxListItems: scenario.maxListItems, maxListPages: MaxListPages, maxListBytes: options.maxListBytes },
    trace,
    () => clock.unsafeCurrentTimeMillis(),
    options.properties
  )
  const readersAt = new Map<number, Array<Extract<Start, { readonly _tag: "Reader" }>>>()
  scenario.readers.forEach((reader, index) => {
    const label = `${reader.name === undefined ? "allChanges" : `changes(${Names[reader.name]})`}#${index + 1}`
    const start = { _tag: "Reader" as const, name: reader.name, label, work: reader.work }
    readersAt.set(reader.startsAtRequest, [...(readersAt.get(reader.startsAtRequest) ?? []), start])
  })
  let begin: (start: Start) => void = () => undefined
  const server = new ScriptedServer(truth, plansOf(scenario), clock, trace, {
    onRequest: (record) => {
      invariants.onRequest(record)
      for (const start of readersAt.get(record.index) ?? []) begin(start)
    },
    onChange: (change) => {
      if (!change.awaited) return
      const start: Start = { _tag: "Wait", name: change.name, createdAt: change.resourceVersion }
      // The orchestrator waits right after its create answered: a few microtasks after the change.
      if (scenario.waitHops === 0) begin(start)
      else void hops(scenario.waitHops).then(() => begin(start))
    }
  }, {
    maxMisbehaviourMs: MaxMisbehaviourMs,
    maxRequestsAtOneInstant: 200,
    honestSpread: scenario.honestSpread
  })
  const users = makeWatchUsers(scenario, {
    server,
    clock,
    scheduler,
    trace,
    invariants,
    maxListBytes: options.maxListBytes
  })
  begin = users.begin
  for (const start of readersAt.get(0) ?? []) begin(start)
  const { program, view } = users

  recordDraftsWith(invariants)
  // The cluster as it is before the watch starts.
  server.fireDue()
  const fiber = Effect.runFork(program, { scheduler })
  const stillBusy = () =>
    invariants.violate(
      "pacing",
      "the fibers never all stopped at a standing clock (a loop that asks nothing of the server)"
    )
  try {
    if (!(await settle(scheduler))) stillBusy()
    invariants.atQuiescence(view())
    while (invariants.violations.length === 0 && server.halted === undefined) {
      const now = clock.unsafeCurrentTimeMillis()
      const calmFrom = server.calmFrom
      const lastChange = truth.changes.at(-1)?.at ?? 0
      const end = calmFrom === undefined
        ? HardStopMs
        : Math.max(calmFrom + Ceilings.convergeAfterMs, lastChange + 1_000)
      const checkpoint = calmFrom !== undefined && now < calmFrom + Ceilings.convergeAfterMs
        ? calmFrom + Ceilings.convergeAfterMs
        : Number.POSITIVE_INFINITY
      const next = Math.min(clock.nextWake(), server.nextEventAt(), checkpoint, end)
      if (next > end || now >= end) break
      clock.setTime(next)
      server.fireDue()
      if (!(await settle(scheduler))) {
        stillBusy()
        break
      }
      clock.wakeDue()
      if (!(await settle(scheduler))) {
        stillBusy()
        break
      }
      invariants.atQuiescence(view())
    }
    if (invariants.violations.length === 0 && server.halted === undefined && server.calmFrom === undefined) {
      invariants.violate(
        "convergence",
        "the server never got to behave: a scripted answer stayed open (the watch never let go of it)"
      )
    }
  } finally {
    Effect.runFork(Fiber.interrupt(fiber), { scheduler })
    await settle(scheduler)
    recordDraftsWith(undefined)
  }
  return {
    violations: invariants.violations,
    trace,
    requests: server.requestCount,
    simulatedMs: clock.unsafeCurrentTimeMillis()
  }
}
