import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Logger, TestClock } from "effect"
import * as NoAnswerNotice from "../src/cli/NoAnswerNotice.ts"
import * as FakeSandboxWatch from "./support/FakeSandboxWatch.ts"

/** Runs the notice with a logger that keeps each line as `LEVEL message`. */
const noticed = Effect.gen(function*() {
  const said: Array<string> = []
  const logger = Logger.make(({ logLevel, message }) => {
    said.push(`${logLevel.label} ${(Array.isArray(message) ? message : [message]).join(" ")}`)
  })
  yield* Effect.forkScoped(
    NoAnswerNotice.sayWhenUnanswered("https://10.0.0.1:6443").pipe(
      Effect.provide(Logger.replace(Logger.defaultLogger, logger))
    )
  )
  yield* Effect.yieldNow()
  return said
})

describe("NoAnswerNotice", () => {
  it.scoped("says once, at 5 s, that the server has not answered, and what to check", () =>
    Effect.gen(function*() {
      const said = yield* noticed
      yield* TestClock.adjust(Duration.subtract(NoAnswerNotice.Wait, Duration.millis(1)))
      expect(said).toEqual([])
      yield* TestClock.adjust("1 millis")
      expect(said).toEqual([
        "WARN the server at https://10.0.0.1:6443 has not answered since sandbox-watch started, 5s ago: " +
        "check that address, that the cluster is up, and any proxy or VPN on the way; still trying"
      ])
      yield* TestClock.adjust("10 minutes")
      expect(said).toHaveLength(1)
    }).pipe(Effect.provide(FakeSandboxWatch.layer)))

  it.scoped("says nothing when the server answered in time, if only with a failure", () =>
    Effect.gen(function*() {
      const fake = yield* FakeSandboxWatch.FakeSandboxWatch
      const said = yield* noticed
      yield* TestClock.adjust("4 seconds")
      yield* fake.answer
      yield* TestClock.adjust("10 minutes")
      expect(said).toEqual([])
    }).pipe(Effect.provide(FakeSandboxWatch.layer)))

  it.scoped("says nothing once the first list has landed", () =>
    Effect.gen(function*() {
      const fake = yield* FakeSandboxWatch.FakeSandboxWatch
      const said = yield* noticed
      yield* fake.sync([])
      yield* TestClock.adjust("10 minutes")
      expect(said).toEqual([])
    }).pipe(Effect.provide(FakeSandboxWatch.layer)))
})
