/**
 * The real `KubeClient` over the scripted server: the same parts `KubeClient.make` wires
 * (`makeRequests`, `makeListing`, `makeOpenWatch`, one `DeadlineTimer`), given the scripted
 * `Dispatcher` instead of an undici Agent, and the simulation's clock for every deadline. Only the
 * socket is missing; every byte the server sends goes through the client's own parsing, deadlines
 * and budgets. (`KubeClient.ts`'s `makeService` is not exported; this mirrors it, and hands the
 * watch the whole `Limits`, so a budget added there reaches a streaming list's draft here too.)
 */
import type { Dispatcher } from "@effect/platform-node/Undici"
import { Effect, Option, type Scope, Stream } from "effect"
import { DeadlineTimer } from "../../src/internal/deadlineTimer.ts"
import { makeListing } from "../../src/internal/listPaging.ts"
import type { Limits } from "../../src/internal/requestSender.ts"
import { makeRequests } from "../../src/internal/requestSender.ts"
import { makeOpenWatch } from "../../src/internal/watchOpening.ts"
import type { KubeClientService } from "../../src/KubeClient.ts"
import type { ClusterConnection } from "../../src/KubeConfig.ts"
import type { SimClock } from "./simRuntime.ts"

const connection: ClusterConnection = {
  server: "https://sim.invalid",
  namespace: Option.some("ns"),
  tls: {
    ca: Option.none(),
    clientCertificate: Option.none(),
    clientKey: Option.none(),
    insecureSkipTlsVerify: false,
    serverName: Option.none()
  },
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
    const requests = makeRequests(connection, dispatcher, timer, limits)
    const { list, listAll } = makeListing(requests, limits)
    const openWatch = makeOpenWatch(requests, timer, limits.maxLineBytes)
    const unsupported = (what: string) => Effect.dieMessage(`the simulation's client does not ${what}`)
    return {
      limits,
      list,
      listAll,
      watch: (resource, schema, options) =>
        Stream.unwrapScoped(Effect.map(openWatch(resource, schema, options), Stream.repeatEffectChunkOption)),
      openWatch,
      get: () => unsupported("get"),
      create: () => unsupported("create"),
      replace: () => unsupported("replace"),
      mergePatch: () => unsupported("mergePatch"),
      delete: () => unsupported("delete")
    }
  })
