/**
 * The cache-and-tell step: the watch's cache changes only here, in one `SubscriptionRef.modify`
 * that also tells the subscribers of every name it changes. Subscribers register under the same
 * lock (`subscriptions.ts`), so nothing slips between what they read and what they are told.
 *
 * @internal
 */
import { type Chunk, Effect, type Option, SubscriptionRef } from "effect"
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
   * One step of the cache: `apply` gets the cache and returns the next one with what it did.
   * Uninterruptible, the step and the wakes after it: what the cluster said is applied whole or
   * not at all, and a told reader is always woken. (The lock's own switches back to interruptible
   * made each step's garbage outlive young collections: bench `lat` row, `BENCH_LAT_ONLY_TARGET=1`.)
   */
  const applyToCache = <R extends { readonly cache: SandboxCache.SandboxCache }>(
    apply: (old: SandboxCache.SandboxCache) => R
  ): Effect.Effect<R> =>
    Effect.uninterruptible(Effect.map(
      SubscriptionRef.modify(cache, (old) => {
        const applied = apply(old)
        return [applied, applied.cache] as const
      }),
      wakeTold
    ))

  return {
    applyList: (list) => applyToCache((old) => SandboxCache.applyList(old, list, hub.subscribedNames(), tell)),
    applyEvents: (events, from) => applyToCache((old) => SandboxCache.applyEvents(old, events, from, tell))
  }
}
