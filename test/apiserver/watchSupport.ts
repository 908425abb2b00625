/**
 * What the SandboxWatch tests against the real kube-apiserver share: clients (direct, through a
 * fault proxy, with a token that can change), a probe that records what the watch asked of the
 * server and what it heard, recorders of what subscribers were told, waits on those records, and
 * the checks the fault tests make once the faults stop.
 *
 * Every wait is on a recorded value changing (event-driven) or, for state outside this process,
 * a poll; each has a generous deadline only so that a failure says what was last seen.
 */
import { Cause, Duration, Effect, Exit, Option, Redacted, Stream, SubscriptionRef } from "effect"
import type { Scope } from "effect"
import * as KubeClient from "../../src/KubeClient.ts"
import type { ClusterConnection } from "../../src/KubeConfig.ts"
import { KubeConfig } from "../../src/KubeConfig.ts"
import type { KubeClientError } from "../../src/KubeError.ts"
import type { Sandbox } from "../../src/Sandbox.ts"
import { Sandbox as SandboxSchema, SandboxResource } from "../../src/Sandbox.ts"
import type { SandboxWatchService } from "../../src/SandboxWatch.ts"
import type { WatchEvent } from "../../src/WatchEvent.ts"
import { InitialEventsEndAnnotation } from "../../src/WatchEvent.ts"
import * as Facts from "./ApiServerFacts.ts"
import type { ApiServerFacts } from "./RealApiServer.ts"
import { readTruth } from "./truthReads.ts"

// ---------------------------------------------------------------------------------------------
// Objects and clients

/** A Sandbox body labelled `jr2.dev/run=<run>`; `status` is ignored by a create (status subresource). */
export const sandboxBody = (namespace: string, name: string, run: string, extra: Record<string, unknown> = {}) => ({
  apiVersion: "jr2.dev/v1alpha1",
  kind: "Sandbox",
  metadata: { name, namespace, labels: { "jr2.dev/run": run } },
  spec: { repos: [{ key: "main", url: "https://example.test/repo.git" }], resources: { limits: { memory: "2Gi" } } },
  ...extra
})

/** A `KubeClient` on `connection`, closed with the scope. */
export const clientOn = (
  connection: ClusterConnection
): Effect.Effect<KubeClient.KubeClientService, never, Scope.Scope> =>
  Effect.provideService(KubeClient.make(), KubeConfig, connection)

/** A token a test can swap while the watch runs: the client reads it afresh for every request. */
export interface SwitchableToken {
  readonly connection: ClusterConnection
  readonly set: (token: string) => Effect.Effect<void>
}

export const switchableToken = (
  facts: ApiServerFacts,
  options: { readonly server?: string; readonly token: string }
): SwitchableToken => {
  let token = options.token
  return {
    connection: {
      ...Facts.connection(facts, options.server === undefined ? {} : { server: options.server }),
      authorization: Effect.sync(() => Option.some(Redacted.make(`Bearer ${token}`)))
    },
    set: (next) =>
      Effect.sync(() => {
        token = next
      })
  }
}

/**
 * Creates `names` labelled `run`, each then written `Pending` (a create ignores status); returns
 * the setter of a name's phase, which answers with the write's resourceVersion.
 */
export const seedPending = (
  admin: KubeClient.KubeClientService,
  namespace: string,
  run: string,
  names: ReadonlyArray<string>
) =>
  Effect.gen(function*() {
    const setPhase = (name: string, phase: string) =>
      Effect.map(
        admin.mergePatch(SandboxResource, namespace, name, { status: { phase } }, { subresource: "status" }),
        versionOf
      )
    for (const name of names) {
      yield* admin.create(SandboxResource, namespace, sandboxBody(namespace, name, run))
      yield* setPhase(name, "Pending")
    }
    return setPhase
  })

/**
 * The objects of `run`, as a fresh quorum list decodes them: the server's truth, by name. Read
 * once the server serves it (`readTruth`: a restarted server's 429 is waited out, not a failure).
 */
export const truthOf = (client: KubeClient.KubeClientService, namespace: string, run: string) =>
  Effect.map(
    readTruth(client.listAll(SandboxResource, SandboxSchema, { namespace, labelSelector: `jr2.dev/run=${run}` })),
    (list) => new Map(list.items.map((s) => [s.metadata.name, s] as const))
  )

/** A write's answer: the object's name and resourceVersion, for a test to wait on. */
export const versionOf = (answer: unknown): string => {
  const rv = (answer as { metadata?: { resourceVersion?: unknown } } | null)?.metadata?.resourceVersion
  if (typeof rv !== "string") {
    throw new Error(`the write's answer had no metadata.resourceVersion: ${JSON.stringify(answer)}`)
  }
  return rv
}

// ---------------------------------------------------------------------------------------------
// Waiting

/** Waits until the ref's value satisfies `predicate`; after `limit`, dies with the last value. */
export const waitFor = <A>(
  ref: SubscriptionRef.SubscriptionRef<A>,
  predicate: (a: A) => boolean,
  what: string,
  limit: Duration.DurationInput = "30 seconds"
): Effect.Effect<A> =>
  ref.changes.pipe(
    Stream.filter(predicate),
    Stream.runHead,
    Effect.map(Option.getOrThrow),
    Effect.timeoutOption(limit),
    Effect.flatMap(Option.match({
      onSome: Effect.succeed,
      onNone: () =>
        Effect.flatMap(SubscriptionRef.get(ref), (last) =>
          Effect.dieMessage(`waited ${Duration.format(Duration.decode(limit))} for ${what}; last seen: ${show(last)}`))
    }))
  )

/** Polls `get` (state outside this process: the server, the watch's health) until `check` holds. */
export const poll = <A, E, R>(
  get: Effect.Effect<A, E, R>,
  check: (a: A) => boolean,
  what: string,
  limit: Duration.DurationInput = "30 seconds"
): Effect.Effect<A, E, R> =>
  Effect.gen(function*() {
    const deadline = Date.now() + Duration.toMillis(Duration.decode(limit))
    for (;;) {
      const value = yield* get
      if (check(value)) return value
      if (Date.now() > deadline) {
        return yield* Effect.dieMessage(
          `polled ${Duration.format(Duration.decode(limit))} for ${what}; last seen: ${show(value)}`
        )
      }
      // A poll of another process's state: the pause is between looks, it makes nothing happen.
      yield* Effect.sleep("25 millis")
    }
  })

const show = (value: unknown): string => {
  const text = JSON.stringify(value, (_key, v) => (v instanceof Map ? Object.fromEntries(v) : v))
  return text === undefined ? String(value) : text.length > 4_000 ? `${text.slice(0, 4_000)}…` : text
}

// ---------------------------------------------------------------------------------------------
// What the watch asked and heard: a KubeClient that records

/** One watch event as the probe keeps it. */
export interface HeardEvent {
  readonly type: WatchEvent<unknown>["type"]
  readonly name?: string
  readonly resourceVersion?: string
  readonly code?: number
  readonly reason?: string
  /** A bookmark's `k8s.io/initial-events-end` annotation said `"true"`: a streaming list's end. */
  readonly initialEventsEnd?: true
}

/** One watch request and what came of it. */
export interface WatchCall {
  /** `Date.now()` when the watch was asked for (real time: these tests run on the real clock). */
  readonly at: number
  readonly resourceVersion: string | undefined
  readonly timeoutSeconds: number | undefined
  readonly allowWatchBookmarks: boolean | undefined
  readonly labelSelector: string | undefined
  /** Set on a streaming list's watch (rule 16). */
  readonly sendInitialEvents: boolean | undefined
  readonly events: ReadonlyArray<HeardEvent>
  /** `open`; `end` (the server closed it); `interrupted` (we hung up); or the failure's tag and code. */
  readonly outcome: string
  /** The failure's message, when the watch failed with one (a Status's `message`, in words). */
  readonly failureMessage?: string
}

/** One whole (paged) list and what came of it. */
export interface ListCall {
  readonly limit: number | undefined
  readonly resourceVersion: string | undefined
  readonly labelSelector: string | undefined
  readonly outcome:
    | {
      readonly _tag: "Listed"
      readonly names: ReadonlyArray<string>
      readonly pages: number
      readonly restarts: number
      readonly resourceVersion: string
    }
    | { readonly _tag: "Failed"; readonly failure: string }
}

export interface WireLog {
  readonly lists: ReadonlyArray<ListCall>
  readonly watches: ReadonlyArray<WatchCall>
}

export interface Probe {
  readonly client: KubeClient.KubeClientService
  readonly log: SubscriptionRef.SubscriptionRef<WireLog>
  readonly await: (
    predicate: (log: WireLog) => boolean,
    what: string,
    limit?: Duration.DurationInput
  ) => Effect.Effect<WireLog>
}

/**
 * `KubeStatusError 401`, `KubeTransportError`, ...; a failure from outside the client (one the
 * caller's stream carried into the watch) by its tag and reason. A watch the caller hangs up on
 * ends `interrupted`.
 */
export const describeFailure = (
  error: KubeClientError | { readonly _tag: string; readonly reason?: unknown }
): string =>
  error._tag === "KubeStatusError" && "code" in error
    ? `${error._tag} ${error.code}`
    : "reason" in error && typeof error.reason === "string" && !error._tag.startsWith("Kube")
    ? `${error._tag} ${error.reason}`
    : error._tag

const describeExit = (exit: Exit.Exit<unknown, KubeClientError>): string =>
  Exit.match(exit, {
    onSuccess: () => "end",
    onFailure: (cause) =>
      Cause.isInterruptedOnly(cause)
        ? "interrupted"
        : Option.match(Cause.failureOption(cause), { onNone: () => "defect", onSome: describeFailure })
  })

const heard = (event: WatchEvent<{ readonly metadata: { readonly name: string } }>): HeardEvent => {
  switch (event.type) {
    case "BOOKMARK":
      return {
        type: event.type,
        resourceVersion: event.resourceVersion,
        ...(event.annotations[InitialEventsEndAnnotation] === "true" ? { initialEventsEnd: true as const } : {})
      }
    case "ERROR":
      return {
        type: event.type,
        ...(event.status.code === undefined ? {} : { code: event.status.code }),
        ...(event.status.reason === undefined ? {} : { reason: event.status.reason })
      }
    case "UNDECODABLE":
      return { type: event.type, ...(event.name === undefined ? {} : { name: event.name }) }
    default:
      return { type: event.type, name: event.name, resourceVersion: event.resourceVersion }
  }
}

/** Wraps `inner` so that every `listAll` and `watch` the watch makes is recorded in order. */
export const probe = (inner: KubeClient.KubeClientService): Effect.Effect<Probe> =>
  Effect.gen(function*() {
    const log = yield* SubscriptionRef.make<WireLog>({ lists: [], watches: [] })
    const updateWatch = (index: number, f: (call: WatchCall) => WatchCall) =>
      SubscriptionRef.update(log, (l) => ({ ...l, watches: l.watches.map((w, i) => (i === index ? f(w) : w)) }))
    /** A new watch call in the log, open; its index. */
    const register = (options: KubeClient.WatchOptions) =>
      SubscriptionRef.modify(log, (l) => [
        l.watches.length,
        {
          ...l,
          watches: [
            ...l.watches,
            {
              at: Date.now(),
              resourceVersion: options.resourceVersion,
              timeoutSeconds: options.timeoutSeconds,
              allowWatchBookmarks: options.allowWatchBookmarks,
              labelSelector: options.labelSelector,
              sendInitialEvents: options.sendInitialEvents,
              events: [],
              outcome: "open"
            }
          ]
        }
      ])
    const client: KubeClient.KubeClientService = {
      ...inner,
      listAll: (resource, schema, options = {}) =>
        inner.listAll(resource, schema, options).pipe(
          Effect.exit,
          Effect.tap((exit) =>
            SubscriptionRef.update(log, (l) => ({
              ...l,
              lists: [
                ...l.lists,
                {
                  limit: options.limit,
                  resourceVersion: options.resourceVersion,
                  labelSelector: options.labelSelector,
                  outcome: Exit.isSuccess(exit)
                    ? {
                      _tag: "Listed" as const,
                      names: exit.value.items.map((item) => item.metadata.name),
                      pages: exit.value.pages,
                      restarts: exit.value.restarts,
                      resourceVersion: exit.value.resourceVersion
                    }
                    : { _tag: "Failed" as const, failure: describeExit(exit) }
                }
              ]
            }))
          ),
          Effect.flatten
        ),
      watch: (resource, schema, options = {}) =>
        Stream.unwrap(
          Effect.map(register(options), (index) =>
            inner.watch(resource, schema, options).pipe(
              Stream.tap((event) => updateWatch(index, (w) => ({ ...w, events: [...w.events, heard(event)] }))),
              Stream.ensuringWith((exit) => updateWatch(index, (w) => ({ ...w, outcome: describeExit(exit) })))
            ))
        ),
      // What SandboxWatch uses: the watch opened as a pull, recorded chunk by chunk. How it ended is
      // what its last pull said (end, or the failure), or else how its scope closed (`interrupted`).
      openWatch: (resource, schema, options = {}) =>
        Effect.gen(function*() {
          const index = yield* register(options)
          let outcome: string | undefined
          let failureMessage: string | undefined
          yield* Effect.addFinalizer((exit) =>
            updateWatch(index, (w) => ({
              ...w,
              outcome: outcome ?? describeExit(exit as Exit.Exit<unknown, never>),
              ...(failureMessage === undefined ? {} : { failureMessage })
            }))
          )
          const pull = yield* inner.openWatch(resource, schema, options).pipe(
            Effect.tapError((error) =>
              Effect.sync(() => {
                outcome = describeFailure(error)
                failureMessage = error.message
              })
            )
          )
          return pull.pipe(
            Effect.tap((chunk) =>
              updateWatch(index, (w) => ({ ...w, events: [...w.events, ...Array.from(chunk, heard)] }))
            ),
            Effect.tapError((end) =>
              Effect.sync(() => (outcome = Option.match(end, { onNone: () => "end", onSome: describeFailure })))
            )
          )
        })
    }
    return {
      client,
      log,
      await: (predicate, what, limit) => waitFor(log, predicate, what, limit)
    }
  })

// ---------------------------------------------------------------------------------------------
// What subscribers were told

/** One thing a subscriber was told: a name and the Sandbox, or none for gone. */
export interface Told {
  readonly name: string
  readonly sandbox: Option.Option<Sandbox>
}

/** `name:phase` (`-` without one), or `name:gone`. */
export const short = (told: Told): string =>
  Option.match(told.sandbox, {
    onNone: () => `${told.name}:gone`,
    onSome: (s) => `${told.name}:${s.status?.phase ?? "-"}`
  })

export interface Recorder {
  readonly told: Effect.Effect<ReadonlyArray<Told>>
  /**
   * Waits until something is told at or after `since` (a `Date.now()`); returns when it was told.
   */
  readonly awaitToldSince: (since: number, what: string, limit?: Duration.DurationInput) => Effect.Effect<number>
  /** `short` of each thing told, in order. */
  readonly shorts: Effect.Effect<ReadonlyArray<string>>
  /** Waits until `predicate` holds of everything told so far. */
  readonly await: (
    predicate: (told: ReadonlyArray<Told>) => boolean,
    what: string,
    limit?: Duration.DurationInput
  ) => Effect.Effect<ReadonlyArray<Told>>
  /** Waits until `count` things were told; returns their `short`s. */
  readonly awaitShorts: (count: number) => Effect.Effect<ReadonlyArray<string>>
  /** Waits until `name` was last told the Sandbox at `resourceVersion` (or gone, for `"gone"`). */
  readonly awaitLast: (name: string, resourceVersion: string | "gone") => Effect.Effect<ReadonlyArray<Told>>
}

const recorder = (stream: Stream.Stream<Told>): Effect.Effect<Recorder, never, Scope.Scope> =>
  Effect.gen(function*() {
    const ref = yield* SubscriptionRef.make<ReadonlyArray<Told>>([])
    const at: Array<number> = []
    yield* Effect.forkScoped(Stream.runForEach(stream, (t) =>
      Effect.suspend(() => {
        at.push(Date.now())
        return SubscriptionRef.update(ref, (all) => [...all, t])
      })))
    const awaitTold = (
      predicate: (told: ReadonlyArray<Told>) => boolean,
      what: string,
      limit?: Duration.DurationInput
    ) => waitFor(ref, predicate, what, limit)
    return {
      told: SubscriptionRef.get(ref),
      awaitToldSince: (since, what, limit) =>
        Effect.map(
          // `at` grows before `ref` does: when `ref` changes, its times are there.
          awaitTold((all) => at.slice(0, all.length).some((t) => t >= since), what, limit),
          (all) => at.slice(0, all.length).find((t) => t >= since)!
        ),
      shorts: Effect.map(SubscriptionRef.get(ref), (all) => all.map(short)),
      await: awaitTold,
      awaitShorts: (count) =>
        Effect.map(awaitTold((t) => t.length >= count, `${count} things told`), (all) => all.map(short)),
      awaitLast: (name, resourceVersion) =>
        awaitTold((all) => {
          const last = lastByName(all).get(name)
          if (last === undefined) return false
          return resourceVersion === "gone"
            ? Option.isNone(last)
            : Option.isSome(last) && last.value.metadata.resourceVersion === resourceVersion
        }, `${name} told ${resourceVersion === "gone" ? "gone" : `at resourceVersion ${resourceVersion}`}`)
    }
  })

/** Records what `watch.changes(name)` tells. */
export const recordChanges = (watch: SandboxWatchService, name: string) =>
  recorder(Stream.map(watch.changes(name), (sandbox) => ({ name, sandbox })))

/** Records what `watch.allChanges` tells. */
export const recordAll = (watch: SandboxWatchService) =>
  recorder(Stream.map(watch.allChanges, (change) => ({ name: change.name, sandbox: change.sandbox })))

/** The last thing told of each name. */
export const lastByName = (told: ReadonlyArray<Told>): ReadonlyMap<string, Option.Option<Sandbox>> => {
  const last = new Map<string, Option.Option<Sandbox>>()
  for (const t of told) last.set(t.name, t.sandbox)
  return last
}

// ---------------------------------------------------------------------------------------------
// The checks after faults

/** A stable text of a value (keys sorted), to compare decoded objects whatever their key order. */
export const canonical = (value: unknown): string =>
  JSON.stringify(value, (_key, v) =>
    v !== null && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, (v as Record<string, unknown>)[k]]))
      : v)

/**
 * Where the last things told disagree with the server's truth, for the names a recorder covers
 * (`names`; every name told or true for `allChanges`): a name that exists must have been last told
 * exactly the listed object; one that does not must have been last told gone (or never told).
 */
export const disagreements = (
  told: ReadonlyArray<Told>,
  truth: ReadonlyMap<string, Sandbox>,
  names?: ReadonlyArray<string>
): ReadonlyArray<string> => {
  const last = lastByName(told)
  const covered = names ?? [...new Set([...last.keys(), ...truth.keys()])]
  const out: Array<string> = []
  for (const name of covered) {
    const expected = truth.get(name)
    const got = last.get(name)
    if (expected === undefined) {
      if (got !== undefined && Option.isSome(got)) {
        out.push(`${name}: told rv ${got.value.metadata.resourceVersion}, but it is gone`)
      }
    } else if (got === undefined || Option.isNone(got)) {
      out.push(
        `${name}: exists at rv ${expected.metadata.resourceVersion}, but was last told ${
          got === undefined ? "nothing" : "gone"
        }`
      )
    } else if (canonical(got.value) !== canonical(expected)) {
      out.push(
        `${name}: told rv ${got.value.metadata.resourceVersion}, the server has rv ${expected.metadata.resourceVersion}`
      )
    }
  }
  return out
}

/** Names whose told resourceVersions (as integers) ever went backwards, with the offending pair. */
export const backwards = (told: ReadonlyArray<Told>): ReadonlyArray<string> => {
  const newest = new Map<string, bigint>()
  const out: Array<string> = []
  for (const t of told) {
    if (Option.isNone(t.sandbox)) continue
    const rv = BigInt(t.sandbox.value.metadata.resourceVersion)
    const before = newest.get(t.name)
    if (before !== undefined && rv < before) out.push(`${t.name}: ${before} then ${rv}`)
    if (before === undefined || rv > before) newest.set(t.name, rv)
  }
  return out
}

/**
 * Names of `neverRemoved` (never deleted nor un-labelled once they existed) told gone after they
 * were first told present. A name subscribed to before it was created is rightly told gone first.
 */
export const falselyGone = (told: ReadonlyArray<Told>, neverRemoved: ReadonlyArray<string>): ReadonlyArray<string> => {
  const seen = new Set<string>()
  const out: Array<string> = []
  for (const t of told) {
    if (!neverRemoved.includes(t.name)) continue
    if (Option.isSome(t.sandbox)) seen.add(t.name)
    else if (seen.has(t.name)) out.push(t.name)
  }
  return out
}

// ---------------------------------------------------------------------------------------------
// Back in step after a fault heals (issue 42, item 9)

/**
 * How long after `healedAt` (`Date.now()` when the fault stopped) `recorder` was first told
 * something: with a change made during the fault or at its end, the time the watch took to be back
 * in step. Printed, one line a scenario, so the figure is measured rather than guessed; not
 * asserted (a speed goal belongs to a benchmark). Waits up to `limit` for it.
 */
export const backInStep = (
  scenario: string,
  recorder: Recorder,
  healedAt: number,
  limit: Duration.DurationInput = "120 seconds"
): Effect.Effect<number> =>
  Effect.gen(function*() {
    const told = yield* recorder.awaitToldSince(healedAt, `${scenario}: a change told after the heal`, limit)
    const millis = told - healedAt
    console.log(`[back-in-step] ${scenario}: first change told ${(millis / 1000).toFixed(2)} s after the heal`)
    return millis
  })
