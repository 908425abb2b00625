/**
 * Credentials that cannot be read (an `exec` plugin that exits non-zero, an unreadable token file)
 * are paced as an answer that is a failure (rule 7), not as no answer: the plugin is spawned at
 * the counted back-off's pace, not once a second. The real client, a connection whose credentials
 * always fail, and the test clock.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Option, Ref, TestClock } from "effect"
import * as KubeClient from "../src/KubeClient.ts"
import * as KubeConfig from "../src/KubeConfig.ts"
import * as SandboxWatch from "../src/SandboxWatch.ts"

/** A connection whose every read of credentials fails, counting the reads. */
const failingCredentials = (reads: Ref.Ref<number>): KubeConfig.ClusterConnection => ({
  // Nothing listens here: a request that were sent would fail another way, and say so.
  server: "https://127.0.0.1:1",
  namespace: Option.none(),
  tls: KubeConfig.defaultTls,
  authorization: Effect.zipRight(
    Ref.update(reads, (n) => n + 1),
    Effect.fail(
      new KubeConfig.KubeConfigError({
        file: Option.none(),
        message: "the exec plugin `aws-iam-authenticator` exited with status 1"
      })
    )
  ),
  invalidate: Effect.void,
  source: "a test's connection"
})

describe("SandboxWatch: credentials that cannot be read", () => {
  it.scoped("are read again at the counted back-off's pace: at most about 30 times in 10 minutes, not once a second", () =>
    Effect.gen(function*() {
      const reads = yield* Ref.make(0)
      const client = yield* KubeClient.make().pipe(
        Effect.provide(Layer.succeed(KubeConfig.KubeConfig, failingCredentials(reads)))
      )
      yield* SandboxWatch.make({ namespace: "ns", jitter: false, listMode: "paged" }).pipe(
        Effect.provideService(KubeClient.KubeClient, client)
      )
      for (let step = 0; step < 60; step++) yield* TestClock.adjust("10 seconds")
      const read = yield* Ref.get(reads)
      // 500 ms doubling to the 30 s cap: 0.5, 1, 2, 4, 8, 16, 30, 30, ... about 25 in 10 minutes.
      expect(read).toBeGreaterThanOrEqual(20)
      expect(read).toBeLessThanOrEqual(31)
    }))

  // Every request has a deadline, reading its credentials included: an exec plugin that hangs (an
  // IdP that does not answer, a browser login nobody answers) once held the watch for ever, one
  // read in ten minutes.
  it.scoped("a read of credentials that never ends is given up and tried again, not waited on for ever", () =>
    Effect.gen(function*() {
      const reads = yield* Ref.make(0)
      const hanging: KubeConfig.ClusterConnection = {
        ...failingCredentials(reads),
        authorization: Effect.zipRight(Ref.update(reads, (n) => n + 1), Effect.never)
      }
      const client = yield* KubeClient.make().pipe(Effect.provide(Layer.succeed(KubeConfig.KubeConfig, hanging)))
      yield* SandboxWatch.make({ namespace: "ns", jitter: false, listMode: "paged" }).pipe(
        Effect.provideService(KubeClient.KubeClient, client)
      )
      for (let step = 0; step < 60; step++) yield* TestClock.adjust("10 seconds")
      expect(yield* Ref.get(reads)).toBeGreaterThanOrEqual(2)
    }))
})
