/**
 * The cache-and-tell step (`src/internal/cacheSteps.ts`): the watch's fiber is the cache's only
 * writer, so when nobody holds the `SubscriptionRef`'s lock a step runs in one synchronous run
 * rather than through `SubscriptionRef.modify`. It must still be what `modify` is: the value set and
 * published to `changes`, and a step that waits while someone (a subscriber registering, a
 * `changes` starting) holds the lock.
 */
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Deferred, Effect, Fiber, Option, Queue, Stream, SubscriptionRef } from "effect"
import { makeCacheSteps, type SandboxHub, unlockedParts } from "../src/internal/cacheSteps.ts"
import * as SandboxCache from "../src/internal/sandboxCache.ts"
import { SubscriberHub } from "../src/internal/subscriberHub.ts"
import { modified, sandbox } from "./support/ScriptedKubeClient.ts"

const list = {
  items: [sandbox("a", "1"), sandbox("b", "2")],
  undecodable: [],
  resourceVersion: "2",
  pages: 1,
  restarts: 0
}

/** An empty cache, its hub and the steps over them. */
const stepsOverEmptyCache = Effect.map(SubscriptionRef.make(SandboxCache.empty), (cache) => {
  const hub: SandboxHub = new SubscriberHub()
  return { cache, hub, steps: makeCacheSteps(cache, hub) }
})

describe("cache steps", () => {
  it.effect("the installed effect's SubscriptionRef has the parts the one-writer step reads", () =>
    Effect.gen(function*() {
      const cache = yield* SubscriptionRef.make(SandboxCache.empty)
      // Were this to fail after an upgrade, every step would take the lock: right, but slower.
      expect(unlockedParts(cache)).toBeDefined()
    }))

  it.effect("a step sets the cache and publishes it to the ref's changes, as SubscriptionRef.modify does", () =>
    Effect.gen(function*() {
      const { cache, steps } = yield* stepsOverEmptyCache
      const seen = yield* Queue.unbounded<SandboxCache.SandboxCache>()
      yield* Effect.fork(Stream.runForEach(cache.changes, (value) => Queue.offer(seen, value)))
      // Its first value says it is subscribed: `changes` subscribes before it reads, under the lock.
      expect(yield* Queue.take(seen)).toBe(SandboxCache.empty)
      const listed = yield* steps.applyList(list)
      const applied = yield* steps.applyEvents(Chunk.of(modified(sandbox("a", "3", "Ready"))), "2")
      expect(yield* SubscriptionRef.get(cache)).toBe(applied.cache)
      expect(yield* Queue.take(seen)).toBe(listed.cache)
      expect(yield* Queue.take(seen)).toBe(applied.cache)
      expect(Option.map(applied.cache.objects.getOption("a"), (s) => s.metadata.resourceVersion)).toEqual(
        Option.some("3")
      )
    }))

  it.effect("while someone holds the ref's lock, a step waits for it and then applies", () =>
    Effect.gen(function*() {
      const { cache, steps } = yield* stepsOverEmptyCache
      yield* steps.applyList(list)
      const release = yield* Deferred.make<void>()
      const holding = yield* Effect.fork(
        SubscriptionRef.modifyEffect(
          cache,
          (current) => Effect.as(Deferred.await(release), [current, current] as const)
        )
      )
      yield* Effect.yieldNow()
      const step = yield* Effect.fork(steps.applyEvents(Chunk.of(modified(sandbox("b", "3"))), "2"))
      yield* Effect.yieldNow()
      expect(Option.isNone(yield* Fiber.poll(step))).toBe(true)
      expect((yield* SubscriptionRef.get(cache)).objects.get("b")?.metadata.resourceVersion).toBe("2")
      yield* Deferred.succeed(release, undefined)
      const held = yield* Fiber.join(holding)
      const applied = yield* Fiber.join(step)
      expect(applied.cache.objects.get("b")?.metadata.resourceVersion).toBe("3")
      expect(held.objects.get("b")?.metadata.resourceVersion).toBe("2")
      expect(yield* SubscriptionRef.get(cache)).toBe(applied.cache)
    }))

  it.effect("a told subscriber is woken once the step is over", () =>
    Effect.gen(function*() {
      const { hub, steps } = yield* stepsOverEmptyCache
      yield* steps.applyList(list)
      const mailbox = hub.add("a")
      const waiting = yield* Effect.fork(mailbox.takeAll)
      yield* Effect.yieldNow()
      yield* steps.applyEvents(Chunk.of(modified(sandbox("a", "3"))), "2")
      const told = Chunk.toReadonlyArray(yield* Fiber.join(waiting))
      expect(told.map(([name, value]) => [name, Option.map(value, (s) => s.metadata.resourceVersion)])).toEqual([
        ["a", Option.some("3")]
      ])
    }))
})
