/**
 * A subscriber's mailbox (`src/internal/latestMailbox.ts`) and the hub that fills them: the latest
 * value per key, in the order the keys last changed; nothing lost when a reader gives up waiting
 * (its wait has no canceller, so an abandoned wait must not swallow what comes after it); and a
 * value stored without waking the reader, for the watch to wake after its cache step; and a put
 * that lands wherever the reader's fiber yields in its take still reaches it.
 */
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Effect, Exit, Fiber, Option } from "effect"
import { LatestMailbox } from "../src/internal/latestMailbox.ts"
import { SubscriberHub } from "../src/internal/subscriberHub.ts"

describe("LatestMailbox", () => {
  it.effect("keeps the latest value per key, oldest change first", () =>
    Effect.gen(function*() {
      const mailbox = new LatestMailbox<string, number>()
      mailbox.put("a", 1)
      mailbox.put("b", 2)
      mailbox.put("a", 3)
      expect(Chunk.toReadonlyArray(yield* mailbox.takeAll)).toEqual([["b", 2], ["a", 3]])
    }))

  it.effect("a reader waits until something is put, then gets it", () =>
    Effect.gen(function*() {
      const mailbox = new LatestMailbox<string, number>()
      const reader = yield* Effect.fork(mailbox.takeAll)
      yield* Effect.yieldNow()
      expect(Option.isNone(yield* Fiber.poll(reader))).toBe(true)
      mailbox.put("a", 1)
      expect(Chunk.toReadonlyArray(yield* Fiber.join(reader))).toEqual([["a", 1]])
    }))

  it.effect("store keeps the value without waking the reader; wakeReader wakes it with what was stored", () =>
    Effect.gen(function*() {
      const mailbox = new LatestMailbox<string, number>()
      expect(mailbox.store("a", 1)).toBe(false) // nobody waits yet
      expect(Chunk.toReadonlyArray(yield* mailbox.takeAll)).toEqual([["a", 1]])
      const reader = yield* Effect.fork(mailbox.takeAll)
      yield* Effect.yieldNow()
      expect(mailbox.store("b", 2)).toBe(true)
      yield* Effect.yieldNow()
      expect(Option.isNone(yield* Fiber.poll(reader))).toBe(true)
      mailbox.store("b", 3)
      mailbox.wakeReader()
      expect(Chunk.toReadonlyArray(yield* Fiber.join(reader))).toEqual([["b", 3]])
    }))

  it.effect("a mailbox of one key (a name's) keeps its latest value until taken, then holds nothing", () =>
    Effect.gen(function*() {
      const mailbox = new LatestMailbox<string, number>("one")
      mailbox.put("a", 1)
      mailbox.put("a", 2)
      expect(Chunk.toReadonlyArray(yield* mailbox.takeAll)).toEqual([["a", 2]])
      // Taken: the next take waits for the next put rather than seeing the old value again.
      const reader = yield* Effect.fork(mailbox.takeAll)
      yield* Effect.yieldNow()
      expect(Option.isNone(yield* Fiber.poll(reader))).toBe(true)
      mailbox.put("a", 3)
      expect(Chunk.toReadonlyArray(yield* Fiber.join(reader))).toEqual([["a", 3]])
    }))

  it.effect("SubscriberHub.tell stores in every mailbox of the name and of every name, and lists the waiting readers", () =>
    Effect.gen(function*() {
      const hub = new SubscriberHub<number>()
      const one = hub.add("a")
      const every = hub.add(undefined)
      const other = hub.add("b")
      const waiting = yield* Effect.fork(one.takeAll)
      yield* Effect.yieldNow()
      const woken: Array<LatestMailbox<string, number>> = []
      hub.tell("a", 1, woken)
      expect(woken).toEqual([one])
      for (const mailbox of woken) mailbox.wakeReader()
      expect(Chunk.toReadonlyArray(yield* Fiber.join(waiting))).toEqual([["a", 1]])
      expect(Chunk.toReadonlyArray(yield* every.takeAll)).toEqual([["a", 1]])
      expect(other.store("b", 0)).toBe(false)
      expect(Chunk.toReadonlyArray(yield* other.takeAll)).toEqual([["b", 0]])
    }))

  it.effect("a reader interrupted while waiting loses nothing: what is put next goes to the next take", () =>
    Effect.gen(function*() {
      const mailbox = new LatestMailbox<string, number>()
      const abandoned = yield* Effect.fork(mailbox.takeAll)
      yield* Effect.yieldNow()
      yield* Fiber.interrupt(abandoned)
      // Put while nobody waits (the abandoned wait's wake is still set), then a new reader.
      mailbox.put("a", 1)
      expect(Chunk.toReadonlyArray(yield* mailbox.takeAll)).toEqual([["a", 1]])
      // And a new wait after an abandoned one is the one woken.
      const gaveUp = yield* Effect.fork(mailbox.takeAll)
      yield* Effect.yieldNow()
      yield* Fiber.interrupt(gaveUp)
      const next = yield* Effect.fork(mailbox.takeAll)
      yield* Effect.yieldNow()
      mailbox.put("b", 2)
      expect(Chunk.toReadonlyArray(yield* Fiber.join(next))).toEqual([["b", 2]])
    }))

  // A take looks for something pending, then registers its wake: a put landing between the two once
  // found no wake to call, and the reader slept with the value pending until the next put. Nothing
  // but its op budget running out makes a fiber yield there, so these sweep the budget: the reader
  // does a little work, then takes; the putter runs the moment the reader first yields, wherever
  // that is. (Budgets under about 11 can stall a forked fiber outright in effect 3.22's run loop.)
  const budgets = Array.from({ length: 54 }, (_, i) => 11 + i)
  const kinds = ["one", "many"] as const
  const work = (ops: number): Effect.Effect<void> =>
    ops === 0 ? Effect.void : Effect.flatMap(Effect.void, () => work(ops - 1))
  /** Every op budget with each kind of mailbox. */
  const sweep = budgets.flatMap((budget) => kinds.map((keys) => ({ budget, keys })))
  /** A reader that does a little work, then takes, under an op budget. */
  const busyReader = (mailbox: LatestMailbox<string, number>, budget: number) =>
    Effect.withMaxOpsBeforeYield(Effect.fork(Effect.zipRight(work(10), mailbox.takeAll)), budget)
  /** Lets the other fibers run, up to `rounds` times, until `fiber` is done. */
  const untilDone = (fiber: Fiber.RuntimeFiber<unknown>, rounds = 100) =>
    Effect.gen(function*() {
      for (let i = 0; i < rounds && fiber.unsafePoll() === null; i++) yield* Effect.yieldNow()
    })

  it.effect("a put that lands while the reader is between its look and its wait wakes it, at every op budget", () =>
    Effect.gen(function*() {
      const asleep: Array<string> = []
      for (const { budget, keys } of sweep) {
        const mailbox = new LatestMailbox<string, number>(keys)
        const reader = yield* busyReader(mailbox, budget)
        yield* Fiber.await(yield* Effect.fork(Effect.sync(() => mailbox.put("a", 1))))
        yield* untilDone(reader)
        if (reader.unsafePoll() === null) asleep.push(`${keys}, budget ${budget}`)
        else expect(Chunk.toReadonlyArray(yield* Fiber.join(reader))).toEqual([["a", 1]])
        yield* Fiber.interrupt(reader)
      }
      // Each names a reader asleep with "a" pending.
      expect(asleep).toEqual([])
    }))

  it.effect("a reader interrupted wherever it yields in its take loses nothing: the value goes to it or to the next take", () =>
    Effect.gen(function*() {
      for (const { budget, keys } of sweep) {
        const mailbox = new LatestMailbox<string, number>(keys)
        const reader = yield* busyReader(mailbox, budget)
        // The put and the interrupt, in the reader's first yield, wherever it is.
        yield* Fiber.await(
          yield* Effect.fork(Effect.zipRight(Effect.sync(() => mailbox.put("a", 1)), Fiber.interrupt(reader)))
        )
        const exit = yield* Fiber.await(reader)
        const next = yield* Effect.fork(mailbox.takeAll)
        yield* untilDone(next)
        const toReader = Exit.isSuccess(exit) ? Chunk.toReadonlyArray(exit.value) : []
        const toNext = next.unsafePoll() === null ? [] : Chunk.toReadonlyArray(yield* Fiber.join(next))
        expect([keys, budget, [...toReader, ...toNext]]).toEqual([keys, budget, [["a", 1]]])
        yield* Fiber.interrupt(next)
      }
    }))

  it.effect("a wake left by an abandoned wait does not end a later wait with nothing taken", () =>
    Effect.gen(function*() {
      for (const keys of kinds) {
        const mailbox = new LatestMailbox<string, number>(keys)
        const abandoned = yield* Effect.fork(mailbox.takeAll)
        yield* Effect.yieldNow()
        yield* Fiber.interrupt(abandoned)
        // Stored while the abandoned wait's wake is set; the reader takes it before the wake is called.
        expect(mailbox.store("a", 1)).toBe(true)
        expect(Chunk.toReadonlyArray(yield* mailbox.takeAll)).toEqual([["a", 1]])
        const waiting = yield* Effect.fork(mailbox.takeAll)
        yield* Effect.yieldNow()
        mailbox.wakeReader()
        yield* untilDone(waiting, 10)
        // Nothing was put since the take: the wait goes on, and hears the next put.
        expect([keys, waiting.unsafePoll()]).toEqual([keys, null])
        mailbox.put("b", 2)
        expect(Chunk.toReadonlyArray(yield* Fiber.join(waiting))).toEqual([["b", 2]])
      }
    }))
})
