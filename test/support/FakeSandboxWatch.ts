/**
 * A SandboxWatch a test drives by hand: what "the cluster said" is whatever the test sets. It keeps
 * the watch's contract (nothing before the first list, then the cached value at once, then every
 * change) and nothing else, so the Orchestrator's waits can be tested without a cluster.
 */
import { Context, Deferred, Effect, Layer, Option, PubSub, Ref, Stream, SubscriptionRef } from "effect"
import type { Sandbox } from "../../src/Sandbox.ts"
import { SandboxWatch } from "../../src/SandboxWatch.ts"
import type { SandboxChange, SandboxWatchService } from "../../src/SandboxWatch.ts"

export interface FakeSandboxWatchControl {
  /** The first list landed with these Sandboxes. */
  readonly sync: (sandboxes?: ReadonlyArray<Sandbox>) => Effect.Effect<void>
  /** The cluster says this Sandbox now exists in this state. */
  readonly put: (sandbox: Sandbox) => Effect.Effect<void>
  /** The cluster says this name is gone. */
  readonly remove: (name: string) => Effect.Effect<void>
  /** The server answered, with a failure say: health's `answered` (a list is an answer too). */
  readonly answer: Effect.Effect<void>
  /** How many readers are subscribed to one name right now. */
  readonly readers: (name: string) => Effect.Effect<number>
}

export class FakeSandboxWatch
  extends Context.Tag("test/FakeSandboxWatch")<FakeSandboxWatch, FakeSandboxWatchControl>()
{}

export const layer: Layer.Layer<SandboxWatch | FakeSandboxWatch> = Layer.effectContext(
  Effect.gen(function*() {
    const synced = yield* Deferred.make<void>()
    const cells = new Map<string, SubscriptionRef.SubscriptionRef<Option.Option<Sandbox>>>()
    const readers = new Map<string, number>()
    const relists = yield* Ref.make(0)
    const answered = yield* Ref.make(false)
    const all = yield* PubSub.unbounded<SandboxChange>()
    const cell = (name: string) =>
      Effect.gen(function*() {
        const existing = cells.get(name)
        if (existing) return existing
        const created = yield* SubscriptionRef.make(Option.none<Sandbox>())
        cells.set(name, created)
        return created
      })
    const set = (name: string, value: Option.Option<Sandbox>) =>
      Effect.flatMap(cell(name), (c) => SubscriptionRef.set(c, value)).pipe(
        Effect.zipRight(PubSub.publish(all, { name, sandbox: value }))
      )
    const snapshot: Effect.Effect<ReadonlyMap<string, Sandbox>> = Effect.gen(function*() {
      const map = new Map<string, Sandbox>()
      for (const [name, c] of cells) {
        const value = yield* SubscriptionRef.get(c)
        if (Option.isSome(value)) map.set(name, value.value)
      }
      return map
    })

    const changes = (name: string) =>
      Stream.unwrapScoped(
        Effect.gen(function*() {
          yield* Deferred.await(synced)
          yield* Effect.acquireRelease(
            Effect.sync(() => readers.set(name, (readers.get(name) ?? 0) + 1)),
            () => Effect.sync(() => readers.set(name, (readers.get(name) ?? 1) - 1))
          )
          return (yield* cell(name)).changes
        })
      )

    const service: SandboxWatchService = {
      synced: Deferred.await(synced),
      get: (name) => Effect.flatMap(cell(name), SubscriptionRef.get),
      changes,
      // The real one parks on a mailbox; here the contract is what matters: `step` over `changes`.
      waitFor: (name, step) =>
        changes(name).pipe(
          Stream.mapEffect(step),
          Stream.filterMap((answer) => answer),
          Stream.runHead,
          Effect.flatMap(Option.match({ onNone: () => Effect.never, onSome: Effect.succeed }))
        ),
      allChanges: Stream.unwrapScoped(
        Effect.gen(function*() {
          yield* Deferred.await(synced)
          const subscription = yield* PubSub.subscribe(all)
          const now = yield* snapshot
          return Stream.fromIterable([...now].map(([name, s]): SandboxChange => ({ name, sandbox: Option.some(s) })))
            .pipe(
              Stream.concat(Stream.fromQueue(subscription))
            )
        })
      ),
      snapshot,
      lookup: (name) =>
        Effect.gen(function*() {
          return {
            synced: yield* Deferred.isDone(synced),
            sandbox: yield* Effect.flatMap(cell(name), SubscriptionRef.get),
            unknown: false,
            resourceVersion: Option.none()
          }
        }),
      health: Effect.gen(function*() {
        const done = yield* Deferred.isDone(synced)
        const map = yield* snapshot
        const subscribers = [...readers.values()].reduce((sum, n) => sum + n, 0)
        return {
          synced: done,
          lastHeard: Option.none(),
          answered: done || (yield* Ref.get(answered)),
          relists: yield* Ref.get(relists),
          watchRestarts: 0,
          cached: map.size,
          unknown: 0,
          resourceVersion: Option.none(),
          subscribers
        }
      })
    }
    const control: FakeSandboxWatchControl = {
      sync: (sandboxes = []) =>
        Effect.forEach(sandboxes, (s) => set(s.metadata.name, Option.some(s)), { discard: true }).pipe(
          Effect.zipRight(Deferred.succeed(synced, undefined)),
          Effect.asVoid
        ),
      put: (sandbox) => set(sandbox.metadata.name, Option.some(sandbox)),
      remove: (name) => set(name, Option.none()),
      answer: Ref.set(answered, true),
      readers: (name) => Effect.sync(() => readers.get(name) ?? 0)
    }
    return Context.make(SandboxWatch, service).pipe(Context.add(FakeSandboxWatch, control))
  })
)
