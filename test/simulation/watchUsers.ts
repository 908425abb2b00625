/**
 * The watch as its users use it, inside the simulation: the real `SandboxWatch` over the real client
 * (on the scripted server), readers of `changes(name)` and `allChanges`, and the `Orchestrator`'s
 * `awaitReady` on each awaited create; everything they hear goes to the invariants. Readers and
 * waits begin when the driver says (at the start, at a request, after a create): `begin` hands them
 * to the program's own fiber, which forks them with the run's clock, scheduler and yield budget.
 */
import { Cause, Duration, Effect, Exit, Logger, LogLevel, Option, Queue, Random, Stream } from "effect"
import { DefaultMaxLineBytes, DefaultMaxListBytes, KubeClient } from "../../src/KubeClient.ts"
import * as Orchestrator from "../../src/Orchestrator.ts"
import type { Sandbox } from "../../src/Sandbox.ts"
import * as SandboxWatch from "../../src/SandboxWatch.ts"
import type { Scenario } from "./generator.ts"
import type { Invariants, QuiescentView } from "./invariants.ts"
import type { ScriptedServer } from "./scriptedServer.ts"
import { makeSimClient } from "./simClient.ts"
import type { SimClock, SimScheduler } from "./simRuntime.ts"
import type { Trace } from "./trace.ts"
import { Names } from "./truth.ts"

/** The budget of pages per list the client is given (small, so an endless continue reaches it). */
export const MaxListPages = 12

/** A wait or a reader to begin. */
export type Start =
  | { readonly _tag: "Wait"; readonly name: string; readonly createdAt: number }
  | { readonly _tag: "Reader"; readonly name: number | undefined; readonly label: string; readonly work: number }

export interface WatchUsers {
  /** Runs the watch and its users until interrupted. */
  readonly program: Effect.Effect<never>
  readonly begin: (start: Start) => void
  /** What the checks read at a quiescent moment. */
  readonly view: () => QuiescentView
}

export const makeWatchUsers = (
  scenario: Scenario,
  context: {
    readonly server: ScriptedServer
    readonly clock: SimClock
    readonly scheduler: SimScheduler
    readonly trace: Trace
    readonly invariants: Invariants
    /** The hook for the `lists` branch's byte budget: handed to the client, which ignores it today. */
    readonly maxListBytes: number | undefined
  }
): WatchUsers => {
  const { clock, invariants, scheduler, server, trace } = context
  const early: Array<Start> = []
  let offer: ((start: Start) => void) | undefined
  let watch: SandboxWatch.SandboxWatchService | undefined
  const pendingWaits = new Map<number, { readonly name: string; readonly createdAt: number }>()
  let waitIds = 0

  const limits = {
    maxLineBytes: DefaultMaxLineBytes,
    headersTimeout: Duration.seconds(30),
    bodyTimeout: Duration.seconds(60),
    maxListPageBytes: 128 * 1024 * 1024,
    maxErrorBodyBytes: 64 * 1024,
    maxListPages: MaxListPages,
    maxListItems: scenario.maxListItems,
    maxListBytes: context.maxListBytes ?? DefaultMaxListBytes
  }

  // The watch's log lines, Info and up, are what it did: they go to the trace.
  const traceLogger = Logger.make(({ logLevel, message }) => {
    const text = Array.isArray(message) ? message.map(String).join(" ") : String(message)
    trace.add("watch", `${logLevel.label}: ${text}`)
  })

  const read = (service: SandboxWatch.SandboxWatchService, start: Extract<Start, { readonly _tag: "Reader" }>) =>
    Effect.suspend(() => {
      invariants.addReader(start.label, start.name === undefined ? undefined : Names[start.name])
      trace.add("reader", `${start.label} subscribes`)
      const work = Effect.repeatN(Effect.void, start.work)
      const heard = (name: string, value: Option.Option<Sandbox>) =>
        Effect.zipRight(work, Effect.sync(() => invariants.onHeard(start.label, name, value)))
      return start.name === undefined
        ? Stream.runForEach(service.allChanges, (change) => heard(change.name, change.sandbox))
        : Stream.runForEach(service.changes(Names[start.name]!), (value) => heard(Names[start.name!]!, value))
    })

  const wait = (
    orchestrator: Orchestrator.OrchestratorService,
    { createdAt, name }: Extract<Start, { readonly _tag: "Wait" }>
  ) =>
    Effect.suspend(() => {
      const id = ++waitIds
      pendingWaits.set(id, { name, createdAt })
      trace.add("wait", `awaitReady(${name}, createdAt ${createdAt}) begins`)
      return orchestrator.awaitReady(name, { timeout: "2 hours", createdAt: String(createdAt) }).pipe(
        Effect.exit,
        Effect.tap((exit) =>
          Effect.sync(() => {
            pendingWaits.delete(id)
            const failure = Exit.isFailure(exit) ? Cause.failureOption(exit.cause) : Option.none()
            const outcome = Exit.match(exit, {
              onSuccess: (sandbox) => `Ready @${sandbox.metadata.resourceVersion}`,
              onFailure: (cause) =>
                Option.match(failure, {
                  onNone: () => Cause.pretty(cause),
                  onSome: (error) => `${error._tag}: ${error.message}`
                })
            })
            const gone = Option.exists(failure, (error) => error._tag === "SandboxGone")
            invariants.onWaitEnded(name, createdAt, outcome, gone)
          })
        )
      )
    })

  const program: Effect.Effect<never> = Effect.gen(function*() {
    const client = yield* makeSimClient(server.dispatcher, clock, limits)
    const service = yield* SandboxWatch.make({
      namespace: "ns",
      listMode: scenario.listMode,
      pageSize: scenario.pageSize,
      jitter: true
    }).pipe(Effect.provideService(KubeClient, client))
    watch = service
    const orchestrator = Orchestrator.make(service)
    const starts = yield* Queue.unbounded<Start>()
    offer = (start) => Queue.unsafeOffer(starts, start)
    for (const start of early) offer(start)
    yield* Effect.forkScoped(Effect.forever(Effect.flatMap(
      Queue.take(starts),
      (start) => Effect.forkScoped(start._tag === "Wait" ? wait(orchestrator, start) : read(service, start))
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

  const view = (): QuiescentView => {
    const service = watch
    return {
      synced: service !== undefined && Effect.runSync(service.lookup(Names[0]!)).synced,
      cache: service === undefined ? new Map() : Effect.runSync(service.snapshot),
      unknown: (name) => service !== undefined && Effect.runSync(service.lookup(name)).unknown,
      pendingWaits: [...pendingWaits.values()],
      calmFrom: server.calmFrom
    }
  }

  return { program, begin: (start) => (offer === undefined ? early.push(start) : offer(start)), view }
}
