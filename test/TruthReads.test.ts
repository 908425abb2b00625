/**
 * The real-server tests' reads of the server's truth (`test/apiserver/truthReads.ts`) wait out a
 * server that is not serving yet, as the watch does, and nothing else: on the test clock.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, Fiber, Ref, TestClock } from "effect"
import type { KubeClientError } from "../src/KubeError.ts"
import { readTruth } from "./apiserver/truthReads.ts"
import { statusError, transportError } from "./support/ScriptedKubeClient.ts"
import { nextPause } from "./support/waiting.ts"

/** A read that fails with each of `failures` in turn, then answers "truth"; counts its tries. */
const scripted = (failures: ReadonlyArray<KubeClientError>) =>
  Effect.map(Ref.make(0), (tries) => ({
    tries: Ref.get(tries),
    read: Effect.flatMap(Ref.getAndUpdate(tries, (n) => n + 1), (n) =>
      n < failures.length ? Effect.fail(failures[n]!) : Effect.succeed("truth"))
  }))

const storageInitializing = statusError(429, "TooManyRequests", "storage is (re)initializing", {
  retryAfterSeconds: 2
})

describe("readTruth", () => {
  it.effect("waits a restarting server's 429 Retry-After, a 503 and a refused connection, then reads", () =>
    Effect.gen(function*() {
      const { read, tries } = yield* scripted([
        storageInitializing,
        statusError(503, "ServiceUnavailable", "the apiserver is not ready"),
        transportError("connect ECONNREFUSED 127.0.0.1:6443")
      ])
      const reading = yield* Effect.fork(readTruth(read))
      const pauses: Array<number> = []
      for (let i = 0; i < 3; i++) {
        const pause = yield* nextPause()
        pauses.push(pause)
        yield* TestClock.adjust(`${pause} millis`)
      }
      expect(yield* Fiber.join(reading)).toBe("truth")
      // The Retry-After the server named; then the step, 100 ms doubling with every try.
      expect(pauses).toEqual([2000, 200, 400])
      expect(yield* tries).toBe(4)
    }))

  it.effect("any other answer is the test's to see, at once", () =>
    Effect.gen(function*() {
      const { read, tries } = yield* scripted([statusError(404, "NotFound", "sandboxes.jr2.dev not found")])
      const result = yield* Effect.either(readTruth(read))
      expect(Either.isLeft(result) && result.left._tag === "KubeStatusError" && result.left.code).toBe(404)
      expect(yield* tries).toBe(1)
    }))

  it.effect("a server that never serves fails the read with its last answer after the deadline", () =>
    Effect.gen(function*() {
      const { read } = yield* scripted(Array.from({ length: 1_000 }, () => storageInitializing))
      const reading = yield* Effect.fork(Effect.either(readTruth(read, "10 seconds")))
      yield* TestClock.adjust("12 seconds")
      const result = yield* Fiber.join(reading)
      expect(Either.isLeft(result) && result.left.message).toBe("storage is (re)initializing")
    }))
})
