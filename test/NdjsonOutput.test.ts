import { describe, expect, it } from "@effect/vitest"
import { Effect, Queue, Stream } from "effect"
import * as NdjsonOutput from "../src/cli/NdjsonOutput.ts"
import type { Sandbox } from "../src/Sandbox.ts"
import * as FakeSandboxWatch from "./support/FakeSandboxWatch.ts"

const sandbox = (name: string, resourceVersion: string, phase?: string): Sandbox => ({
  metadata: { name, resourceVersion },
  ...(phase === undefined ? {} : { status: { phase } })
})

/** The output's lines as they come, and the fake cluster to drive. */
const setupWith = (options: NdjsonOutput.Options) =>
  Effect.gen(function*() {
    const fake = yield* FakeSandboxWatch.FakeSandboxWatch
    const out = yield* Queue.unbounded<string>()
    yield* Effect.forkScoped(Stream.runForEach(NdjsonOutput.lines(options), (line) => Queue.offer(out, line)))
    const take = (n: number) => Effect.forEach(Array.from({ length: n }), () => Queue.take(out))
    return { fake, out, take }
  })
const setup = setupWith({ demo: false })

describe("NdjsonOutput.lines", () => {
  it.scoped("tells every Sandbox of the first list, then synced, then each change and deletion", () =>
    Effect.gen(function*() {
      const { fake, take } = yield* setup
      yield* fake.sync([sandbox("a", "1", "Pending"), sandbox("b", "2")])
      const first = yield* take(3)
      expect(first.slice(0, 2).sort()).toStrictEqual([
        `{"event":"change","name":"a","sandbox":{"metadata":{"name":"a","resourceVersion":"1"},"status":{"phase":"Pending"}}}`,
        `{"event":"change","name":"b","sandbox":{"metadata":{"name":"b","resourceVersion":"2"}}}`
      ])
      expect(first[2]).toBe(`{"event":"synced"}`)
      yield* fake.put(sandbox("a", "3", "Ready"))
      yield* fake.remove("b")
      expect(yield* take(2)).toStrictEqual([
        `{"event":"change","name":"a","sandbox":{"metadata":{"name":"a","resourceVersion":"3"},"status":{"phase":"Ready"}}}`,
        `{"event":"change","name":"b","sandbox":null}`
      ])
    }).pipe(Effect.provide(FakeSandboxWatch.layer)))

  it.scoped("says synced at once after an empty first list, and synced only once", () =>
    Effect.gen(function*() {
      const { fake, out, take } = yield* setup
      yield* fake.sync([])
      expect(yield* take(1)).toStrictEqual([`{"event":"synced"}`])
      yield* fake.put(sandbox("new", "7"))
      yield* fake.remove("new")
      expect(yield* take(2)).toStrictEqual([
        `{"event":"change","name":"new","sandbox":{"metadata":{"name":"new","resourceVersion":"7"}}}`,
        `{"event":"change","name":"new","sandbox":null}`
      ])
      expect(yield* Queue.size(out)).toBe(0)
    }).pipe(Effect.provide(FakeSandboxWatch.layer)))

  it.scoped("says nothing before the first list", () =>
    Effect.gen(function*() {
      const { fake, out, take } = yield* setup
      for (let i = 0; i < 100; i++) yield* Effect.yieldNow()
      expect(yield* Queue.size(out)).toBe(0)
      yield* fake.sync([sandbox("a", "1")])
      expect(yield* take(2)).toStrictEqual([
        `{"event":"change","name":"a","sandbox":{"metadata":{"name":"a","resourceVersion":"1"}}}`,
        `{"event":"synced"}`
      ])
    }).pipe(Effect.provide(FakeSandboxWatch.layer)))

  it.scoped("the demo says so on its synced line: what follows is invented, not a cluster's", () =>
    Effect.gen(function*() {
      const { fake, take } = yield* setupWith({ demo: true })
      yield* fake.sync([sandbox("a", "1")])
      expect(yield* take(2)).toStrictEqual([
        `{"event":"change","name":"a","sandbox":{"metadata":{"name":"a","resourceVersion":"1"}}}`,
        `{"event":"synced","demo":true}`
      ])
    }).pipe(Effect.provide(FakeSandboxWatch.layer)))

  it.scoped("the demo's synced line after an empty first list says so too", () =>
    Effect.gen(function*() {
      const { fake, take } = yield* setupWith({ demo: true })
      yield* fake.sync([])
      expect(yield* take(1)).toStrictEqual([`{"event":"synced","demo":true}`])
    }).pipe(Effect.provide(FakeSandboxWatch.layer)))
})
