/**
 * The waits the Orchestrator makes on Sandboxes, built on the one watch: a Sandbox becoming Ready,
 * a repo fetch landing, and the running verdict on whether a Sandbox is still there. Nothing here
 * polls or asks the API server: every answer is what the watch last heard the cluster say, and a
 * failure carries that evidence in words a person can act on.
 *
 * The watch tells nothing while it is cut off, backing off or re-listing, so none of that reaches
 * a wait: a wait only hears the cluster. Unknown is never loss.
 */
import { Context, Data, Duration, Effect, Layer, Option, Stream } from "effect"
import { isOlder } from "./internal/resourceVersion.ts"
import type { RepoStatus, Sandbox } from "./Sandbox.ts"
import * as Evidence from "./SandboxEvidence.ts"
import { SandboxWatch } from "./SandboxWatch.ts"
import type { SandboxLookup, SandboxWatchService } from "./SandboxWatch.ts"

/** The operator says the Sandbox is `Lost`: its pod is gone or terminal, and it never comes back. */
export class SandboxLost extends Data.TaggedError("SandboxLost")<{
  readonly sandboxName: string
  /** The `Lost` condition's reason (`Evicted`, `NodeLost`, `PodDeleted`, ...); `Unknown` without one. */
  readonly reason: string
  /** The `Lost` condition's message. */
  readonly detail: Option.Option<string>
  readonly sandbox: Sandbox
}> {
  override get message(): string {
    return `sandbox "${this.sandboxName}" is Lost (${
      Evidence.describeReasoned({ reason: this.reason, message: this.detail })
    }); a Lost Sandbox never comes back: provision a new one`
  }
}

/** The cluster says the Sandbox is not there: deleted, or it no longer matches the watch's selector. */
export class SandboxGone extends Data.TaggedError("SandboxGone")<{
  readonly sandboxName: string
  /** The Sandbox as last seen before it went, if this wait saw it. */
  readonly lastSeen: Option.Option<Sandbox>
}> {
  override get message(): string {
    return `sandbox "${this.sandboxName}" is gone: the cluster no longer has it (deleted, or its labels no longer match the watch's selector); provision a new one if it is still needed`
  }
}

/** Why a Sandbox was not Ready when the wait ran out, as the cluster last said it. */
export type NotReadyFinding = Data.TaggedEnum<{
  /** The watch never completed its first list: the cluster said nothing at all. */
  NotSynced: {}
  /** The cluster has had no Sandbox of that name since the wait began. */
  NeverSeen: {}
  /** The Sandbox as last seen, and what its status says. */
  Seen: { readonly sandbox: Sandbox; readonly evidence: Evidence.NotReadyEvidence }
}>
export const NotReadyFinding = Data.taggedEnum<NotReadyFinding>()

/** A Sandbox that did not become Ready in time, with what the cluster last said about it. */
export class SandboxNotReady extends Data.TaggedError("SandboxNotReady")<{
  readonly sandboxName: string
  readonly timeout: Duration.Duration
  readonly finding: NotReadyFinding
}> {
  override get message(): string {
    const head = `sandbox "${this.sandboxName}" is not Ready after ${Duration.format(this.timeout)}`
    return NotReadyFinding.$match(this.finding, {
      NotSynced: () =>
        `${head}: the watch has not finished its first list, so the cluster has said nothing about it; check that the API server is reachable and that the Sandbox resource is installed`,
      NeverSeen: () =>
        `${head}: never seen: the cluster has no Sandbox of that name under the watch's selector; check that it was created in the watched namespace with the selector's label`,
      Seen: ({ evidence }) => `${head}: ${Evidence.describeNotReady(evidence)}`
    })
  }
}

/** The node cache tried the asked revision of a repo and said why it could not fetch it. */
export class RepoFetchFailed extends Data.TaggedError("RepoFetchFailed")<{
  readonly sandboxName: string
  readonly key: string
  readonly asked: string
  /** The entry's `error`, in the node cache's words. */
  readonly error: string
  readonly entry: RepoStatus
}> {
  override get message(): string {
    return `sandbox "${this.sandboxName}" could not fetch repo "${this.key}" at "${this.asked}": ${
      Evidence.oneLine(this.error)
    }`
  }
}

/** The asked revision of a repo had not landed when the wait ran out. */
export class RepoFetchTimedOut extends Data.TaggedError("RepoFetchTimedOut")<{
  readonly sandboxName: string
  readonly key: string
  readonly asked: string
  readonly timeout: Duration.Duration
  /** The repo's status entry as last seen; none when the Sandbox had no entry for the key. */
  readonly entry: Option.Option<RepoStatus>
  /** The Sandbox as last seen; none when the wait heard nothing of it. */
  readonly lastSeen: Option.Option<Sandbox>
}> {
  override get message(): string {
    const head = `sandbox "${this.sandboxName}" has not fetched repo "${this.key}" at "${this.asked}" after ${
      Duration.format(this.timeout)
    }`
    if (Option.isNone(this.lastSeen)) {
      return `${head}: the watch heard nothing of the Sandbox; check that the API server is reachable`
    }
    return Option.match(this.entry, {
      onNone: () => `${head}: the Sandbox has no status for that repo yet; check that the node cache is running`,
      onSome: (e) =>
        `${head}: last seen asked ${show(e.asked)}, attempted ${show(e.attempted)}, fetched ${show(e.fetched)}${
          e.error ? `, error ${Evidence.oneLine(e.error)}` : ""
        }`
    })
  }
}

const show = (s: string | undefined): string => (s === undefined ? "nothing" : `"${s}"`)

/**
 * What the cluster last said about a Sandbox the Orchestrator holds. `Alive` repeats only when the
 * phase changes; `Lost` and `Gone` are final.
 */
export type Verdict = Data.TaggedEnum<{
  Alive: { readonly phase: Option.Option<string>; readonly sandbox: Sandbox }
  Lost: { readonly reason: string; readonly detail: Option.Option<string>; readonly sandbox: Sandbox }
  Gone: {}
}>
export const Verdict = Data.taggedEnum<Verdict>()

export interface WaitOptions {
  /** How long to wait for the cluster to say so. */
  readonly timeout: Duration.DurationInput
}

/** Options of `awaitReady`. */
export interface ReadyOptions extends WaitOptions {
  /**
   * The resourceVersion the create of this Sandbox answered with. With it, a Sandbox never seen
   * fails the wait as `SandboxGone` (not "not yet") when the watch has heard the cluster at or past
   * that point without it — checked when the wait begins and on each change of the name: it was
   * deleted, or never matched the selector. A state older than it is an earlier Sandbox of the
   * same name (a watch catching up hears it, and its deletion): neither its `Ready` nor its
   * deletion answers this wait. Without it, a Sandbox never seen is waited for until the timeout.
   */
  readonly createdAt?: string
}

export interface OrchestratorService {
  /**
   * Succeeds with the Sandbox once its phase is `Ready`. A Sandbox not yet seen is waited for: it
   * was just created and the watch may not have heard of it yet. Fails at once when it is `Lost`,
   * or gone after being seen; on timeout, with what the cluster last said.
   */
  readonly awaitReady: (
    name: string,
    options: ReadyOptions
  ) => Effect.Effect<Sandbox, SandboxLost | SandboxGone | SandboxNotReady>
  /**
   * Succeeds with the repo's status entry once `fetched` is `asked`. Fails when the node cache
   * attempted `asked` and reported an error, when the Sandbox is Lost or the cluster says it is not
   * there (it is asked of a Sandbox that exists), and on timeout with the entry as last seen.
   */
  readonly awaitRepoFetched: (
    name: string,
    key: string,
    asked: string,
    options: WaitOptions
  ) => Effect.Effect<RepoStatus, SandboxLost | SandboxGone | RepoFetchFailed | RepoFetchTimedOut>
  /**
   * The verdicts on a Sandbox, from what the cluster says only: `Alive` on each new phase, then
   * `Lost` or `Gone`, after which the stream ends. Nothing before the watch's first list.
   */
  readonly continuity: (name: string) => Stream.Stream<Verdict>
}

export class Orchestrator extends Context.Tag("sandbox-watch/Orchestrator")<Orchestrator, OrchestratorService>() {}

/** The entry for one repo key in a Sandbox's status. */
export const repoEntry = (sandbox: Sandbox, key: string): Option.Option<RepoStatus> =>
  Option.fromNullable(sandbox.status?.repos?.find((r) => r.key === key))

/**
 * Run `decide` on every change of one name until it answers; on timeout, hand what was last heard
 * to `onTimeout`. A watch that ends (its scope closing) leaves the wait to its timeout: nothing
 * more will be heard, and the timeout's error says what was.
 */
const waitOn = <A, E, E2>(
  watch: SandboxWatchService,
  name: string,
  timeout: Duration.DurationInput,
  decide: (change: Option.Option<Sandbox>, seenBefore: Option.Option<Sandbox>) => Effect.Effect<Option.Option<A>, E>,
  onTimeout: (
    heard: {
      readonly synced: boolean
      readonly last: Option.Option<Option.Option<Sandbox>>
      readonly seen: Option.Option<Sandbox>
    }
  ) => Effect.Effect<never, E2>,
  /**
   * The resourceVersion the Sandbox waited on was created at, if known: a state older than it is
   * an earlier Sandbox of the same name (deleted since), the past, which this wait neither sees
   * nor takes the deletion of as its own; until this one is heard, it is "not there yet".
   */
  createdAt?: string
): Effect.Effect<A, E | E2> =>
  Effect.gen(function*() {
    // `last`: the latest change heard (none: nothing heard). `seen`: the last Sandbox that existed.
    // Plain variables: the wait runs `step` one change at a time.
    let last = Option.none<Option.Option<Sandbox>>()
    let seen = Option.none<Sandbox>()
    const answer = watch.waitFor(name, (heard) => {
      const change = createdAt !== undefined && Option.isSome(heard) &&
          isOlder(heard.value.metadata.resourceVersion, createdAt)
        ? Option.none<Sandbox>()
        : heard
      // The past's deletion, after only the past was heard: still "not there yet" (decided with
      // nothing seen before, from the cache at or past the create).
      if (change !== heard) return decide(change, Option.none())
      const seenBefore = seen
      last = Option.some(change)
      if (Option.isSome(change)) seen = change
      return decide(change, seenBefore)
    })
    const result = yield* Effect.timeoutOption(answer, timeout)
    if (Option.isSome(result)) return result.value
    const now = yield* watch.lookup(name)
    return yield* onTimeout({ synced: now.synced || Option.isSome(last), last, seen })
  })

/**
 * The watch has heard the cluster at or past `createdAt`. Where the order cannot be told (not
 * decimal resourceVersions), the answer is no: unknown is never loss.
 */
const heardPast = (heard: Option.Option<string>, createdAt: string): boolean =>
  Option.isSome(heard) && (heard.value === createdAt || isOlder(createdAt, heard.value))

/**
 * A Sandbox never seen is gone when one reading of the cache has it absent (not unknown) at or past
 * its create. Both facts from the same reading: "absent" told earlier and a resourceVersion read
 * later could straddle the create's own `ADDED`.
 */
const goneSinceCreate = (lookup: SandboxLookup, createdAt: string): boolean =>
  Option.isNone(lookup.sandbox) && !lookup.unknown && heardPast(lookup.resourceVersion, createdAt)

/** Build the service over a watch. */
export const make = (watch: SandboxWatchService): OrchestratorService => {
  const lostError = (name: string, sandbox: Sandbox) => {
    const why = Evidence.lost(sandbox)
    return new SandboxLost({ sandboxName: name, reason: why.reason, detail: why.message, sandbox })
  }

  const awaitReady: OrchestratorService["awaitReady"] = (name, options) =>
    waitOn(
      watch,
      name,
      options.timeout,
      (change, seenBefore): Effect.Effect<Option.Option<Sandbox>, SandboxLost | SandboxGone> =>
        Option.match(change, {
          // Not there yet is not gone: the watch may not have heard of a Sandbox just created,
          // unless it has heard the cluster at or past the create and the Sandbox is not in it.
          onNone: () =>
            Option.isSome(seenBefore)
              ? Effect.fail(new SandboxGone({ sandboxName: name, lastSeen: seenBefore }))
              : options.createdAt === undefined
              ? Effect.succeed(Option.none())
              : Effect.flatMap(watch.lookup(name), (now) =>
                goneSinceCreate(now, options.createdAt!)
                  ? Effect.fail(new SandboxGone({ sandboxName: name, lastSeen: Option.none() }))
                  // Present in the cache now: its change is on its way to this wait.
                  : Effect.succeed(Option.none())),
          onSome: (sandbox) =>
            Evidence.isReady(sandbox)
              ? Effect.succeed(Option.some(sandbox))
              : Evidence.isLost(sandbox)
              ? Effect.fail(lostError(name, sandbox))
              : Effect.succeed(Option.none())
        }),
      ({ seen, synced }) => {
        const timeout = Duration.decode(options.timeout)
        const finding: NotReadyFinding = Option.match(seen, {
          onNone: () => (synced ? NotReadyFinding.NeverSeen() : NotReadyFinding.NotSynced()),
          onSome: (sandbox) => NotReadyFinding.Seen({ sandbox, evidence: Evidence.notReady(sandbox) })
        })
        return Effect.fail(new SandboxNotReady({ sandboxName: name, timeout, finding }))
      },
      options.createdAt
    )

  const awaitRepoFetched: OrchestratorService["awaitRepoFetched"] = (name, key, asked, options) =>
    waitOn(
      watch,
      name,
      options.timeout,
      (change, seenBefore): Effect.Effect<Option.Option<RepoStatus>, SandboxLost | SandboxGone | RepoFetchFailed> =>
        Option.match(change, {
          onNone: () => Effect.fail(new SandboxGone({ sandboxName: name, lastSeen: seenBefore })),
          onSome: (sandbox) => {
            const entry = repoEntry(sandbox, key)
            if (Option.isSome(entry) && entry.value.fetched === asked) return Effect.succeed(entry)
            if (Option.isSome(entry) && entry.value.attempted === asked && entry.value.error !== undefined) {
              return Effect.fail(
                new RepoFetchFailed({ sandboxName: name, key, asked, error: entry.value.error, entry: entry.value })
              )
            }
            if (Evidence.isLost(sandbox)) return Effect.fail(lostError(name, sandbox))
            return Effect.succeed(Option.none())
          }
        }),
      ({ seen }) =>
        Effect.fail(
          new RepoFetchTimedOut({
            sandboxName: name,
            key,
            asked,
            timeout: Duration.decode(options.timeout),
            entry: Option.flatMap(seen, (s) => repoEntry(s, key)),
            lastSeen: seen
          })
        )
    )

  const continuity: OrchestratorService["continuity"] = (name) =>
    watch.changes(name).pipe(
      // A slow reader skips to the latest state, so a delete and a re-create under the same name
      // can arrive as one change: a new uid means the Sandbox this stream was about is gone.
      Stream.mapAccum(Option.none<string>(), (uid, change) => {
        const next = Option.flatMap(change, (s) => Option.fromNullable(s.metadata.uid))
        const replaced = Option.isSome(uid) && Option.isSome(next) && uid.value !== next.value
        return [Option.orElse(uid, () => next), replaced ? Option.none<Sandbox>() : change] as const
      }),
      Stream.map(
        Option.match({
          onNone: () => Verdict.Gone(),
          onSome: (sandbox): Verdict => {
            if (Evidence.isLost(sandbox)) {
              const why = Evidence.lost(sandbox)
              return Verdict.Lost({ reason: why.reason, detail: why.message, sandbox })
            }
            return Verdict.Alive({ phase: Evidence.phase(sandbox), sandbox })
          }
        })
      ),
      Stream.changesWith((a, b) =>
        a._tag === "Alive" && b._tag === "Alive" &&
        Option.getEquivalence((x: string, y: string) => x === y)(a.phase, b.phase)
      ),
      Stream.takeUntil((v) => v._tag !== "Alive")
    )

  return { awaitReady, awaitRepoFetched, continuity }
}

export const layer: Layer.Layer<Orchestrator, never, SandboxWatch> = Layer.effect(
  Orchestrator,
  Effect.map(SandboxWatch, make)
)
