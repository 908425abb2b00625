/**
 * The cache-and-tell step: the watch's cache changes only here, in one `SubscriptionRef.modify`
 * that also tells the subscribers of every name it changes. Subscribers register under the same
 * lock (`subscriptions.ts`), so nothing slips between what they read and what they are told.
 *
 * @internal
 */
import { type Chunk, Effect, MutableRef, type Option, SubscriptionRef } from "effect"
import type { Sandbox } from "../Sandbox.ts"
import type { WatchEvent } from "../WatchEvent.ts"
import type { FullList } from "./kubeClientTypes.ts"
import type { LatestMailbox } from "./latestMailbox.ts"
import * as SandboxCache from "./sandboxCache.ts"
import type { SubscriberHub } from "./subscriberHub.ts"

export type CacheRef = SubscriptionRef.SubscriptionRef<SandboxCache.SandboxCache>
export type SandboxHub = SubscriberHub<Option.Option<Sandbox>>
export type SandboxMailbox = LatestMailbox<string, Option.Option<Sandbox>>

export interface CacheSteps {
  /** The cache becomes the list, in one step (rule 1). */
  readonly applyList: (list: FullList<Sandbox>) => Effect.Effect<SandboxCache.ListApplied>
  /** One chunk of watch events from resourceVersion `from`. */
  readonly applyEvents: (
    events: Chunk.Chunk<WatchEvent<Sandbox>>,
    from: string
  ) => Effect.Effect<SandboxCache.EventsApplied>
}

/**
 * The parts of effect's `SubscriptionRef` the one-writer step reads: its value's cell, its `PubSub`
 * and its lock's free permits. Not effect's public surface: `unlockedParts` checks their shape once
 * and, on a version without them, the step always takes the lock (the same result, more work).
 */
interface UnlockedParts<A> {
  readonly cell: MutableRef.MutableRef<A>
  readonly pubsub: { readonly unsafeOffer: (value: A) => boolean }
  readonly lock: { readonly free: number }
}

const MutableRefTypeId = Symbol.for("effect/MutableRef")

const isObject = (value: unknown): value is Record<PropertyKey, unknown> => typeof value === "object" && value !== null

/** The parts of `ref` the one-writer step needs, or none when its shape is not the one known. */
export const unlockedParts = <A>(ref: SubscriptionRef.SubscriptionRef<A>): UnlockedParts<A> | undefined => {
  const parts = ref as unknown as Record<PropertyKey, unknown>
  const inner = parts.ref
  const cell = isObject(inner) ? inner.ref : undefined
  const { pubsub, semaphore } = parts
  if (
    !isObject(cell) || !(MutableRefTypeId in cell) || !isObject(pubsub) || typeof pubsub.unsafeOffer !== "function" ||
    !isObject(semaphore) || typeof semaphore.free !== "number"
  ) {
    return undefined
  }
  return {
    cell: cell as unknown as MutableRef.MutableRef<A>,
    pubsub: pubsub as UnlockedParts<A>["pubsub"],
    lock: semaphore as UnlockedParts<A>["lock"]
  }
}

export const makeCacheSteps = (cache: CacheRef, hub: SandboxHub): CacheSteps => {
  // Told inside the cache's step, woken after it: readers woken inside the lock's region made
  // their work outlive young collections (bench `lat` row under `--trace-gc-nvp`).
  const toWake: Array<SandboxMailbox> = []
  const tell: SandboxCache.Tell = (name, value, onlyNamed) => hub.tell(name, value, toWake, onlyNamed)
  const wakeTold = <R>(applied: R): R => {
    for (let i = 0; i < toWake.length; i++) toWake[i]!.wakeReader()
    toWake.length = 0
    return applied
  }
  /**
   * One step of the cache under its lock (`SubscriptionRef.modify`): `apply` gets the cache and
   * returns the next one with what it did. Uninterruptible, the step and the wakes after it: what the
   * cluster said is applied whole or not at all, and a told reader is always woken. (The lock's own
   * switches back to interruptible made each step's garbage outlive young collections: bench `lat`
   * row, `BENCH_LAT_ONLY_TARGET=1`.)
   */
  const lockedStep = <R extends { readonly cache: SandboxCache.SandboxCache }>(
    apply: (old: SandboxCache.SandboxCache) => R
  ): Effect.Effect<R> =>
    Effect.uninterruptible(Effect.map(
      SubscriptionRef.modify(cache, (old) => {
        const applied = apply(old)
        return [applied, applied.cache] as const
      }),
      wakeTold
    ))
  const parts = unlockedParts(cache)
  /**
   * The same step, in one synchronous run when nobody holds the lock: this fiber is the cache's only
   * writer, and nothing can come between a read and a write made in one run, so it is what
   * `SubscriptionRef.modify` does (the value set, then published to `changes`) without the permit's
   * own steps, or its `PubSub.publish` effect. When the lock is held (a subscriber registering, a
   * `changes` starting), the step waits for it as before. Why: a step per chunk, thousands a second
   * (`scratchpad/tellCost.ts`, the cache step's row).
   */
  const applyToCache = <R extends { readonly cache: SandboxCache.SandboxCache }>(
    apply: (old: SandboxCache.SandboxCache) => R
  ): Effect.Effect<R> =>
    parts === undefined ? lockedStep(apply) : Effect.suspend(() => {
      if (parts.lock.free < 1) return lockedStep(apply)
      const applied = apply(MutableRef.get(parts.cell))
      MutableRef.set(parts.cell, applied.cache)
      parts.pubsub.unsafeOffer(applied.cache)
      return Effect.succeed(wakeTold(applied))
    })

  return {
    applyList: (list) => applyToCache((old) => SandboxCache.applyList(old, list, hub.subscribedNames(), tell)),
    applyEvents: (events, from) => applyToCache((old) => SandboxCache.applyEvents(old, events, from, tell))
  }
}
