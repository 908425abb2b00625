/**
 * One simulation run: the real `SandboxWatch` (and the `Orchestrator`'s `awaitReady` on it) against
 * the scripted server, with readers on a few names and on every name, driven to quiescence at every
 * instant something happens, the invariants checked each time. Deterministic: the scenario fixes the
 * truth, the plans, the yield budget and the jitter's seed; time is the simulation's clock and every
 * fiber task runs on the simulation's scheduler.
 */
import { Cause, Duration, Effect, Exit, Fiber, Logger, LogLevel, Option, Queue, Random, Stream } from "effect"
import { DefaultMaxLineBytes } from "../../src/KubeClient.ts"
import { KubeClient } from "../../src/KubeClient.ts"
import * as Orchestrator from "../../src/Orchestrator.ts"
import * as SandboxWatch from "../../src/SandboxWatch.ts"
import { recordDraftsWith } from "./draftSpy.ts"
import type { GeneratedStep, RequestPlan, Scenario } from "./generator.ts"
import type { PropertyName, Violation } from "./invariants.ts"
import { Ceilings, Invariants } from "./invariants.ts"
import { ScriptedServer } from "./scriptedServer.ts"
import { makeSimClient } from "./simClient.ts"
import { hops, settle, SimClock, SimScheduler } from "./simRuntime.ts"
import { Trace } from "./trace.ts"
import type { TruthStep } from "./truth.ts"
import { Names, Truth } from "./truth.ts"

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
/** The budget of pages per list the client is given (small, so an endless continue reaches it). */
export const MaxListPages = 12
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

/** A wait or a reader to begin. */
type Start =
  | { readonly _tag: "Wait"; readonly name: string; readonly createdAt: number }
  | { readonly _tag: "Reader"; readonly name: number | undefined; readonly label: string; readonly work: number }

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
  // Waits and readers that begin at a change of the truth, handed to the program's fiber as it happens.
  const starts: Array<Start> = []
  let offerStart: ((start: Start) => void) | undefined
  const begin = (start: Start) => (offerStart === undefined ? starts.push(start) : offerStart(start))
  const readers = scenario.readers.map((reader, index) => ({
    ...reader,
    label: `${reader.name === undefined ? "allChanges" : `changes(${Names[reader.name]})`}#${index + 1}`
  }))
  const readersAt = new Map<number, Array<typeof readers[number]>>()
  for (const reader of readers) {
    readersAt.set(reader.startsAtRequest, [...(readersAt.get(reader.startsAtRequest) ?? []), reader])
  }
  const server = new ScriptedServer(truth, plansOf(scenario), clock, trace, {
    onRequest: (record) => {
      invariants.onRequest(record)
      for (const reader of readersAt.get(record.index) ?? []) begin({ _tag: "Reader", ...reader })
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
  for (const reader of readersAt.get(0) ?? []) begin({ _tag: "Reader", ...reader })

  let watch: SandboxWatch.SandboxWatchService | undefined
  const pendingWaits = new Map<number, string>()
  let waitIds = 0

  const limits = {
    maxLineBytes: DefaultMaxLineBytes,
    headersTimeout: Duration.seconds(30),
    bodyTimeout: Duration.seconds(60),
    maxListPageBytes: 128 * 1024 * 1024,
    maxErrorBodyBytes: 64 * 1024,
    maxListPages: MaxListPages,
    maxListItems: scenario.maxListItems,
    // The hook for the `lists` branch's byte budget: ignored by a client that has none.
    ...(options.maxListBytes === undefined ? {} : { maxListBytes: options.maxListBytes })
  }

  const traceLogger = Logger.make(({ logLevel, message }) => {
    const text = Array.isArray(message) ? message.map(String).join(" ") : String(message)
    trace.add("watch", `${logLevel.label}: ${text}`)
  })

  const program = Effect.gen(function*() {
    const client = yield* makeSimClient(server.dispatcher, clock, limits)
    const service = yield* SandboxWatch.make({
      namespace: "ns",
      listMode: scenario.listMode,
      pageSize: scenario.pageSize,
      jitter: true
    }).pipe(Effect.provideService(KubeClient, client))
    watch = service
    const orchestrator = Orchestrator.make(service)
    const read = (start: Extract<Start, { readonly _tag: "Reader" }>) =>
      Effect.suspend(() => {
        invariants.addReader(start.label, start.name === undefined ? undefined : Names[start.name])
        trace.add("reader", `${start.label} subscribes`)
        const work = Effect.repeatN(Effect.void, start.work)
        return start.name === undefined
          ? Stream.runForEach(
            service.allChanges,
            (change) =>
              Effect.zipRight(work, Effect.sync(() => invariants.onHeard(start.label, change.name, change.sandbox)))
          )
          : Stream.runForEach(
            service.changes(Names[start.name]!),
            (value) =>
              Effect.zipRight(work, Effect.sync(() => invariants.onHeard(start.label, Names[start.name!]!, value)))
          )
      })
    const wait = ({ createdAt, name }: Extract<Start, { readonly _tag: "Wait" }>) =>
      Effect.suspend(() => {
        const id = ++waitIds
        pendingWaits.set(id, name)
        trace.add("wait", `awaitReady(${name}, createdAt ${createdAt}) begins`)
        return orchestrator.awaitReady(name, { timeout: "2 hours", createdAt: String(createdAt) }).pipe(
          Effect.exit,
          Effect.tap((exit) =>
            Effect.sync(() => {
              pendingWaits.delete(id)
              const outcome = Exit.match(exit, {
                onSuccess: (sandbox) => `Ready @${sandbox.metadata.resourceVersion}`,
                onFailure: (cause) =>
                  Option.match(Cause.failureOption(cause), {
                    onNone: () => Cause.pretty(cause),
                    onSome: (error) => `${error._tag}: ${error.message}`
                  })
              })
              const gone = Exit.isFailure(exit) &&
                Option.exists(Cause.failureOption(exit.cause), (error) => error._tag === "SandboxGone")
              invariants.onWaitEnded(name, createdAt, outcome, gone)
            })
          )
        )
      })
    const queue = yield* Queue.unbounded<Start>()
    offerStart = (start) => Queue.unsafeOffer(queue, start)
    for (const start of starts) Queue.unsafeOffer(queue, start)
    yield* Effect.forkScoped(Effect.forever(Effect.flatMap(
      Queue.take(queue),
      (start) => Effect.forkScoped(start._tag === "Wait" ? wait(start) : read(start))
    )))
    return yield* Effect.never
  }).pipe(
    Effect.scoped,
    Effect.withMaxOpsBeforeYield(scenario.maxOpsBeforeYield),
    Effect.withRandom(Random.make(scenario.randomSeed)),
    Effect.withClock(clock),
    Effect.withScheduler(scheduler),
    Effect.provide(Logger.replace(Logger.defaultLogger, traceLogger)),
    Logger.withMinimumLogLevel(LogLevel.Info)
  )

  const view = () => {
    const service = watch
    const cache = service === undefined ? new Map() : Effect.runSync(service.snapshot)
    const synced = service === undefined ? false : Effect.runSync(service.lookup(Names[0]!)).synced
    return {
      synced,
      cache,
      unknown: (name: string) => service !== undefined && Effect.runSync(service.lookup(name)).unknown,
      pendingWaits: [...pendingWaits.values()],
      calmFrom: server.calmFrom
    }
  }

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
