/**
 * The watch loop's rounds: a list when the state needs one, then one watch whose events go into
 * the cache chunk by chunk, until the round ends; `settle` then asks the machine for the next
 * state. The rounds run as a `Stream` under the retry `Schedule` (`pacing.ts`, where every pause's
 * length is decided) and start again after a defect.
 *
 * What a round reads is passed in as a `WatchLoop`; what it may change is that record's two
 * mutable parts, the `RoundState` (the machine's state, set only by `settle`) and the
 * `LoopCounts`, and the cache, through `CacheSteps`.
 *
 * @internal
 */
import {
  Cause,
  Chunk,
  Clock,
  Data,
  Deferred,
  Duration,
  Effect,
  Fiber,
  FiberRef,
  Metric,
  Option,
  type Scope,
  Stream
} from "effect"
import type { KubeClientError } from "../KubeError.ts"
import { collectionPath } from "../KubeResource.ts"
import { Sandbox, SandboxResource } from "../Sandbox.ts"
import type { UndecodableEvent, WatchEvent } from "../WatchEvent.ts"
import { isInitialEventsEnd } from "../WatchEvent.ts"
import type { CacheSteps } from "./cacheSteps.ts"
import type { FullList, WatchOptions } from "./kubeClientTypes.ts"
import { DefaultMaxListBytes, DefaultMaxListItems, emptyEndBookmark, ListDraft } from "./listDraft.ts"
import type { Listing } from "./listPaging.ts"
import * as Pacing from "./pacing.ts"
import * as WatchMachine from "./watchMachine.ts"
import {
  answeredBy,
  countEvents,
  eventLabelsFor,
  type LogAnnotations,
  type LoopCounts,
  metrics,
  reportUndecodable
} from "./watchMetrics.ts"
import type { OpenWatch } from "./watchOpening.ts"

export interface WatchSettings extends WatchMachine.MachineSettings, Pacing.PacingSettings {
  readonly labelSelector: string
  readonly idleLimit: Duration.Duration
  readonly pageSize: number
  readonly listMode: WatchMachine.ListMode
  readonly gzipStreamingLists: boolean
}

/** The client calls a round makes. */
export interface WatchClient {
  /** The list budgets a streaming list's draft keeps (`KubeClientService.limits`). */
  readonly limits?: { readonly maxListItems: number; readonly maxListBytes?: number | undefined } | undefined
  readonly listAll: Listing["listAll"]
  readonly openWatch: OpenWatch
}

/** The loop's own state: read and written by the loop's fiber only. */
export interface RoundState {
  /** What the next round does; set in one place, `settle`. */
  machine: WatchMachine.WatchState
  /** What the pauses before were (`pacing.ts`); kept here so that a restart of the rounds keeps it. */
  pacer: Pacing.Pacer
}

/**
 * A round that did not end as it should: the machine's transition, whose pause the retry
 * `Schedule` waits (the state was already set).
 */
export class RoundFailure extends Data.TaggedError("RoundFailure")<{
  readonly transition: WatchMachine.Transition
}> {}

/** What the loop says before a transition's pause, and the log line's annotations. */
const pauseRequest = (transition: WatchMachine.Transition): Pacing.PauseRequest => ({
  pause: transition.pause,
  message: `${transition.message}; ${WatchMachine.describeNext(transition.next)}`,
  annotations: {
    resourceVersion: resumeAnnotation(transition.next),
    reason: transition.restart ?? ""
  }
})

/** The resourceVersion a log line names for the next state: the one it resumes from, if any. */
const resumeAnnotation = (at: WatchMachine.WatchState): string => at._tag === "Watching" ? at.resourceVersion : ""

/** Everything the rounds read, and the records they may change. */
export interface WatchLoop {
  readonly client: WatchClient
  readonly settings: WatchSettings
  readonly annotations: LogAnnotations
  /** The only way a round changes the cache. */
  readonly cacheSteps: CacheSteps
  /** Done once the first list is in the cache. */
  readonly firstList: Deferred.Deferred<void>
  readonly state: RoundState
  readonly counts: LoopCounts
}

/** Ends a watch's applier from inside its stream: the round ended with `end`. */
class RoundOver extends Data.TaggedError("RoundOver")<{ readonly end: WatchMachine.RoundEnd }> {}

/**
 * Runs `apply` on every chunk of an opened watch until it ends, in a scope of its own. A pull
 * loop, on a watch opened as a pull, not a `Stream`: less per chunk and per watch
 * (`scratchpad/allocations.ts`; `scratchpad/watchLayers.ts` rows `toPull`, `openWatch`).
 * `apply` fails with a tagged error, never an `Option`: the pull's own failures are `Option`s.
 */
const applyEveryChunk =
  <A, E, E2 extends { readonly _tag: string }>(apply: (chunk: Chunk.Chunk<A>) => Effect.Effect<void, E2>) =>
  (open: Effect.Effect<Effect.Effect<Chunk.Chunk<A>, Option.Option<E>>, E, Scope.Scope>): Effect.Effect<void, E | E2> =>
    Effect.scoped(Effect.flatMap(open, (pull) => {
      // Not `Effect.forever`, which yields to the scheduler after every round: a chunk read from
      // the network already comes after a wait, and the runtime still yields after its op budget.
      const loop: Effect.Effect<never, Option.Option<E> | E2> = Effect.flatMap(
        Effect.flatMap(pull, apply),
        () => loop
      )
      // The pull fails with an `Option` (none at the end); `apply` fails with its own error, told
      // apart by being no `Option`, rather than wrapped in one per chunk.
      return Effect.catchAll(
        loop,
        (error: Option.Option<E> | E2): Effect.Effect<void, E | E2> =>
          Option.isOption(error)
            ? Option.match(error, { onNone: () => Effect.void, onSome: Effect.fail })
            : Effect.fail(error)
      )
    }))

// -- the one place the state changes -------------------------------------------------------

/**
 * The round ended with `end`: the machine decides the next state, which is set here and only
 * here. A round that did not end as it should fails with the transition, for the retry
 * `Schedule` to wait on.
 */
const settle = (loop: WatchLoop, end: WatchMachine.RoundEnd): Effect.Effect<void, RoundFailure> => {
  const { annotations, counts, state } = loop
  if (!counts.answered) counts.answered = answeredBy(end)
  const transition = WatchMachine.step(state.machine, end, loop.settings)
  state.machine = transition.next
  if (transition.restart === undefined) {
    return transition.message === undefined ? Effect.void : Effect.logDebug(`${transition.message}; resuming`).pipe(
      Effect.annotateLogs({ ...annotations, resourceVersion: resumeAnnotation(state.machine), reason: "quiet-term" })
    )
  }
  counts.watchRestarts++
  return Metric.increment(Metric.tagged(metrics.restarts, "reason", transition.restart)).pipe(
    Effect.zipRight(Effect.fail(new RoundFailure({ transition })))
  )
}

// -- one round: list if needed, then watch ---------------------------------------------------

/**
 * A whole list, paged or streamed (rule 16), becomes the cache in one step (rule 1), and the
 * round goes on to watch from its resourceVersion.
 */
const landList = (
  loop: WatchLoop,
  list: FullList<Sandbox>,
  reason: WatchMachine.ListReason,
  how: "listed" | "streamed"
): Effect.Effect<void, RoundFailure> =>
  Effect.gen(function*() {
    const { annotations, counts } = loop
    const applied = yield* loop.cacheSteps.applyList(list)
    if (reason !== "initial") counts.relists++
    counts.lastHeard = yield* Clock.currentTimeMillis
    yield* Metric.increment(Metric.tagged(metrics.relists, "reason", reason))
    counts.cachedReported = applied.cache.objects.size
    yield* Metric.set(metrics.cached, counts.cachedReported)
    yield* Effect.forEach(list.undecodable, reportUndecodable(annotations, "list"), { discard: true })
    yield* settle(
      loop,
      how === "listed"
        ? WatchMachine.RoundEnd.Listed({ resourceVersion: list.resourceVersion })
        : WatchMachine.RoundEnd.StreamListed({ resourceVersion: list.resourceVersion })
    )
    if (yield* Deferred.succeed(loop.firstList, undefined)) {
      // Who waits on `synced` hears it now, before this fiber writes its log line or opens
      // the watch (the bench's sync row).
      yield* Effect.yieldNow()
    }
    yield* Effect.logInfo(
      `${how} ${list.items.length} Sandboxes at resourceVersion ${list.resourceVersion} (${reason}); ` +
        `${applied.told} told; watching from there`
    ).pipe(Effect.annotateLogs({ ...annotations, resourceVersion: list.resourceVersion, reason }))
  })

/** A paged list (rule 1); its resourceVersion is where the watch starts. */
const relist = (loop: WatchLoop, reason: WatchMachine.ListReason): Effect.Effect<string, RoundFailure> =>
  loop.client.listAll(SandboxResource, Sandbox, {
    namespace: loop.settings.namespace,
    labelSelector: loop.settings.labelSelector,
    limit: loop.settings.pageSize,
    // No resourceVersion: a quorum read (rule 1).
    // A list whose pages are arriving is being heard (health, /readyz), though nothing is told yet;
    // and the server has answered (the program's "no answer since start" notice), as a streaming
    // list's chunks are.
    onPage: Effect.clockWith((clock) =>
      Effect.sync(() => {
        loop.counts.lastHeard = clock.unsafeCurrentTimeMillis()
        loop.counts.answered = true
      })
    )
  }).pipe(
    Effect.matchEffect({
      onFailure: (error) =>
        Effect.flatMap(
          settle(loop, WatchMachine.RoundEnd.ListFailed({ error })),
          () => Effect.dieMessage("a failed list must end the round")
        ),
      onSuccess: (list) => Effect.as(landList(loop, list, reason, "listed"), list.resourceVersion)
    }),
    Effect.withSpan("SandboxWatch.list", { attributes: { ...loop.annotations, reason } })
  )

/**
 * A streaming list's limit for `term` (rule 17): rule 4's idle limit, longer by as much as the term
 * is. Both its silence limit and the deadline of its end bookmark.
 */
const streamingLimit = (settings: WatchSettings, term: number): Duration.Duration =>
  Duration.sum(settings.idleLimit, Duration.seconds(term - settings.timeoutSeconds))

/**
 * A watch from `resourceVersion`, or (`streaming`) a streaming list's watch (rule 16), asking for
 * `term` seconds (rule 17: longer after one the server ended at its term; the idle limit grows
 * with it while the list arrives, and is rule 4's again once it has landed).
 */
const watchOptions = (
  settings: WatchSettings,
  resourceVersion: string,
  streaming: WatchMachine.ListReason | undefined,
  term: number
): WatchOptions =>
  streaming === undefined
    ? {
      namespace: settings.namespace,
      labelSelector: settings.labelSelector,
      resourceVersion,
      allowWatchBookmarks: true,
      timeoutSeconds: settings.timeoutSeconds,
      // Rule 4: silence past the server's own timeout (it sends bookmarks about every minute
      // meanwhile) means the connection is dead. The client keeps the limit on its timer, with no
      // fiber or race per watch.
      idleTimeout: settings.idleLimit
    }
    : {
      namespace: settings.namespace,
      labelSelector: settings.labelSelector,
      // No resourceVersion: the initial events are consistent with etcd (rule 16).
      sendInitialEvents: true,
      resourceVersionMatch: "NotOlderThan",
      allowWatchBookmarks: true,
      timeoutSeconds: term,
      idleTimeout: streamingLimit(settings, term),
      // Once the list has landed the connection is a watch: rule 4's limit, not the term's.
      idleTimeoutAfterInitialEvents: settings.idleLimit,
      acceptGzip: settings.gzipStreamingLists
    }

/**
 * One watch from `resourceVersion`, its events applied to the cache as they come, until it ends.
 * The clock read as it starts begins rule 8's term; the idle clock (rule 4) runs in the client,
 * from the answer's headers (the headers deadline covers the time before). Its span is the
 * client's `KubeClient.watch`: one of its own here said the same and cost every resume
 * (`scratchpad/effectOps.ts`).
 */
const watchFrom = (
  loop: WatchLoop,
  resourceVersion: string,
  streaming?: WatchMachine.ListReason
): Effect.Effect<WatchMachine.RoundEnd, RoundFailure> =>
  Effect.suspend(() => {
    const { annotations, cacheSteps, counts } = loop
    let heard = false
    let current = resourceVersion
    // When a streaming list's last chunk came (epoch ms; -1 for none), to tell its deadline from silence.
    let draftHeardAt = -1
    // The list's deadline passed while the connection was silent: the next chunk proves the server
    // alive and the list overdue (rule 17); silence until rule 4's limit is a dead connection.
    let overdue = false
    // Rule 16: until the end bookmark, a streaming list's objects fill this draft, not the cache.
    let draft: ListDraft<Sandbox> | undefined = streaming === undefined
      ? undefined
      : new ListDraft(
        loop.client.limits?.maxListItems ?? DefaultMaxListItems,
        loop.client.limits?.maxListBytes ?? DefaultMaxListBytes
      )
    // Taken once per watch rather than for every chunk (nested, not `Effect.zip`, which runs as a
    // `forEach`: more runtime instructions per resume, `scratchpad/effectOps.ts`).
    return Effect.clockWith((clock) =>
      Effect.flatMap(FiberRef.get(FiberRef.currentMetricLabels), (metricLabels) => {
        const openedAt = clock.unsafeCurrentTimeMillis()
        const labelsByType = eventLabelsFor(metricLabels)
        const reportEach = (events: ReadonlyArray<UndecodableEvent> | undefined): Effect.Effect<void> =>
          events === undefined
            ? Effect.void
            : Effect.forEach(events, reportUndecodable(annotations, "watch"), { discard: true })
        /**
         * One chunk of events into the cache; an `ERROR` among them ends the round. The common
         * case (events applied, nothing to report) is one step after the cache's: a watch may
         * read thousands of chunks a second.
         */
        const applyChunk = (chunk: Chunk.Chunk<WatchEvent<Sandbox>>) =>
          Effect.flatMap(cacheSteps.applyEvents(chunk, current), (applied) => {
            counts.lastHeard = clock.unsafeCurrentTimeMillis()
            current = applied.resourceVersion
            countEvents(chunk, labelsByType)
            const cached = applied.cache.objects.size
            if (cached !== counts.cachedReported) {
              counts.cachedReported = cached
              metrics.cached.unsafeUpdate(cached, metricLabels)
            }
            if (applied.heard) heard = true
            if (applied.error === undefined && applied.undecodable.length === 0 && applied.stale === 0) {
              return Effect.void
            }
            return Effect.gen(function*() {
              yield* reportEach(applied.undecodable)
              if (applied.stale > 0) {
                yield* Effect.logDebug(`ignored ${applied.stale} event(s) older than the cached object`)
              }
              if (applied.error !== undefined) {
                return yield* new RoundOver({
                  end: WatchMachine.RoundEnd.ErrorEvent({ status: applied.error, resourceVersion: current })
                })
              }
            })
          })
        /**
         * A chunk of a streaming list's initial events: into the draft, until the end bookmark
         * lands the draft as the list and the rest of the chunk goes on as the watch.
         */
        const fillDraft = (
          chunk: Chunk.Chunk<WatchEvent<Sandbox>>
        ): Effect.Effect<void, RoundOver | RoundFailure> => {
          const filling = draft!
          // A list that is arriving is being heard (health, /readyz), though nothing is told yet;
          // and the server has answered (the program's "no answer since start" notice).
          counts.lastHeard = draftHeardAt = clock.unsafeCurrentTimeMillis()
          counts.answered = true
          // Unless this chunk ends the list: a server that streamed it to its end bookmark honoured
          // sendInitialEvents, and a whole list is not thrown away to be asked for again.
          if (overdue && !Chunk.some(chunk, isInitialEventsEnd)) {
            return Effect.fail(new RoundOver({ end: WatchMachine.RoundEnd.StreamOverdue() }))
          }
          const path = collectionPath(SandboxResource, loop.settings.namespace)
          /** No list: the draft is dropped and the round fails into rule 7's back-off. */
          const failWith = (error: KubeClientError) =>
            Effect.fail(
              new RoundOver({ end: WatchMachine.RoundEnd.WatchFailed({ error, resourceVersion: current, heard }) })
            )
          let index = 0
          let deletedUnreadable: Array<UndecodableEvent> | undefined
          for (const event of chunk) {
            index++
            switch (event.type) {
              case "ADDED":
              case "MODIFIED":
                filling.put(event.object, event.bytes)
                break
              case "DELETED":
                // A change queued ahead of the end bookmark: the name is not in the list.
                filling.remove(event.name)
                break
              case "UNDECODABLE":
                filling.putUndecodable(event, undefined)
                // A deletion is applied, not held: reported now, as after the bookmark.
                if (event.eventType === "DELETED") (deletedUnreadable ??= []).push(event)
                break
              case "ERROR":
                return Effect.fail(
                  new RoundOver({
                    end: WatchMachine.RoundEnd.ErrorEvent({ status: event.status, resourceVersion: current })
                  })
                )
              case "BOOKMARK": {
                if (!isInitialEventsEnd(event)) {
                  // Rule 18: a server that streams sends no other bookmark before this one.
                  return Effect.fail(
                    new RoundOver({
                      end: WatchMachine.RoundEnd.StreamUnsupported({
                        why: "the server sent a bookmark before the end of a streaming list's initial events " +
                          "(it ignored sendInitialEvents)"
                      })
                    })
                  )
                }
                // Rule 2: a list at `resourceVersion=` would watch "from now" and never tell the
                // deletions in between: an answered failure (rule 7), as a list past its budget is.
                if (event.resourceVersion === "") return failWith(emptyEndBookmark(path, event.annotations))
                const pastAtEnd = filling.overBudget("GET", path, "streaming list")
                if (pastAtEnd !== undefined) return failWith(pastAtEnd)
                draft = undefined
                current = event.resourceVersion
                const rest = Chunk.drop(chunk, index)
                const landed = Effect.zipRight(
                  reportEach(deletedUnreadable),
                  landList(loop, filling.toList(event.resourceVersion, 1, 0), streaming!, "streamed")
                )
                return Chunk.isEmpty(rest) ? landed : Effect.zipRight(landed, applyChunk(rest))
              }
            }
          }
          // Past the budget: the same error, restart reason and back-off as a paged list's (rule 7).
          const past = filling.overBudget("GET", path, "streaming list")
          return past === undefined ? reportEach(deletedUnreadable) : failWith(past)
        }
        const term = WatchMachine.streamTerm(loop.state.machine, loop.settings)
        const applyAll: Effect.Effect<WatchMachine.RoundEnd, RoundFailure> = loop.client.openWatch(
          SandboxResource,
          Sandbox,
          watchOptions(loop.settings, resourceVersion, streaming, term)
        ).pipe(
          applyEveryChunk((chunk: Chunk.Chunk<WatchEvent<Sandbox>>) =>
            draft === undefined ? applyChunk(chunk) : fillDraft(chunk)
          ),
          Effect.matchEffect({
            onFailure: (error) =>
              error._tag === "RoundFailure" ? Effect.fail(error) : Effect.succeed(
                error._tag === "RoundOver"
                  ? error.end
                  : error._tag === "KubeWatchIdleError"
                  ? WatchMachine.RoundEnd.Idle({ resourceVersion: current })
                  : WatchMachine.RoundEnd.WatchFailed({ error, resourceVersion: current, heard })
              ),
            onSuccess: () =>
              Effect.sync(() =>
                WatchMachine.RoundEnd.Closed({
                  resourceVersion: current,
                  heard,
                  ranMillis: clock.unsafeCurrentTimeMillis() - openedAt
                })
              )
          })
        )
        if (streaming === undefined) return applyAll
        // Rules 17 and 18: a streaming list has until the end of its term plus the idle margin to
        // reach its end bookmark, else it is abandoned (the request aborted as its fiber ends). A
        // server that ignores sendInitialEvents and timeoutSeconds, but is never silent, is
        // otherwise waited on for ever. One sleep on the `Clock` per streaming list, nothing per
        // chunk; once the list has landed the deadline lets the watch run on.
        const idleMarginMillis = Duration.toMillis(loop.settings.idleLimit) - loop.settings.timeoutSeconds * 1000
        return Effect.raceWith(applyAll, Effect.sleep(streamingLimit(loop.settings, term)), {
          onSelfDone: (exit, deadline) => Effect.zipRight(Fiber.interrupt(deadline), exit),
          onOtherDone: (_, applying) => {
            if (draft === undefined) return Fiber.join(applying)
            // Nothing since the open is silence for the whole limit: rule 4's (the connection's
            // silence limit is this one), told so whichever of the two fired first.
            if (draftHeardAt <= openedAt) {
              return Effect.as(Fiber.interrupt(applying), WatchMachine.RoundEnd.Idle({ resourceVersion: current }))
            }
            // Heard within the idle margin: a live server that has not finished in its term.
            if (clock.unsafeCurrentTimeMillis() - draftHeardAt <= idleMarginMillis) {
              return Effect.as(Fiber.interrupt(applying), WatchMachine.RoundEnd.StreamOverdue())
            }
            // Silent longer than that: a dead connection looks the same so far, and is no proof the
            // server cannot stream. Rule 4's limit, from the last bytes, tells which: it fires
            // (silence, stream again), or a chunk comes first (overdue).
            overdue = true
            return Fiber.join(applying)
          }
        })
      })
    )
  })

/**
 * The loop's one pull: rounds (a list when the state needs one, then a watch) one after another,
 * for as long as they end as they should; it fails with the first transition that needs a pause.
 * It never yields a value: how long to pause is the pacer's alone (`pacing.ts`), and nothing about
 * the stream, such as `Stream.retry` resetting its schedule on a value, may reset it.
 */
const roundsUntilPause = (loop: WatchLoop): Effect.Effect<never, RoundFailure> => {
  const { state } = loop
  return Effect.gen(function*() {
    for (;;) {
      const machine = state.machine
      const end = machine._tag === "Watching"
        ? yield* watchFrom(loop, machine.resourceVersion)
        : machine.lists === "stream"
        ? yield* watchFrom(loop, "", machine.reason)
        : yield* watchFrom(loop, yield* relist(loop, machine.reason))
      yield* settle(loop, end)
    }
  })
}

/**
 * Nothing the cluster does ends the rounds; only a defect in our own code can. Then the machine
 * says what comes next (a list, after the longest pause) and the rounds start again: a loop that
 * stopped for good would leave every subscriber waiting for news that never comes, while the
 * cache still answered as if synced.
 */
const afterDefect = (loop: WatchLoop, cause: Cause.Cause<RoundFailure>): Effect.Effect<void> =>
  // The machine's `Defect` arm always restarts, so `settle` fails with its transition.
  Effect.catchAll(settle(loop, WatchMachine.RoundEnd.Defect()), ({ transition }) =>
    Effect.gen(function*() {
      yield* Effect.logError("the watch loop's defect", cause).pipe(Effect.annotateLogs({ reason: "defect" }))
      const now = yield* Clock.currentTimeMillis
      const delay = yield* Pacing.takePause(loop.state, pauseRequest(transition), loop.settings, loop.annotations, now)
      yield* Effect.sleep(delay)
    }))

/**
 * The watch loop, for ever: the rounds under the retry `Schedule`, started again after a defect.
 * (A loop of attempts, not a restart nested in the handler: each defect would keep a frame for
 * ever.)
 */
export const runWatchLoop = (loop: WatchLoop) => {
  const rounds = Stream.repeatEffect(roundsUntilPause(loop)).pipe(
    Stream.retry(
      Pacing.retryPolicy(
        loop.state,
        (failure: RoundFailure) => pauseRequest(failure.transition),
        loop.settings,
        loop.annotations
      )
    ),
    Stream.runDrain
  )
  return Effect.forever(
    Effect.catchAllCause(
      rounds,
      (cause) => Cause.isInterruptedOnly(cause) ? Effect.failCause(cause) : afterDefect(loop, cause)
    )
  )
}
