/**
 * The real `KubeClient` over the scripted server: the very wiring `KubeClient.make` uses
 * (`makeClientService`), given the scripted `Dispatcher` instead of an undici Agent, and the
 * simulation's clock for every deadline. Only the socket is missing; every byte the server sends
 * goes through the client's own parsing, deadlines and budgets.
 */
import type { Dispatcher } from "@effect/platform-node/Undici"
import { Effect, Option, type Scope } from "effect"
import { makeClientService } from "../../src/internal/clientService.ts"
import { DeadlineTimer } from "../../src/internal/deadlineTimer.ts"
import type { Limits } from "../../src/internal/requestSender.ts"
import type { KubeClientService } from "../../src/KubeClient.ts"
import { type ClusterConnection, defaultTls } from "../../src/KubeConfig.ts"
import type { SimClock } from "./simRuntime.ts"

const connection: ClusterConnection = {
  server: "https://sim.invalid",
  namespace: Option.some("ns"),
  tls: defaultTls,
  authorization: Effect.succeed(Option.none()),
  invalidate: Effect.void,
  source: "the simulation"
}

export const makeSimClient = (
  dispatcher: Dispatcher,
  clock: SimClock,
  limits: Limits
): Effect.Effect<KubeClientService, never, Scope.Scope> =>
  Effect.gen(function*() {
    const timer = new DeadlineTimer(clock)
    yield* Effect.forkScoped(timer.run)
    return makeClientService(connection, dispatcher, timer, yield* Effect.scope, limits)
  })
