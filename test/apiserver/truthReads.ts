/**
 * A test's own reads of the server's truth (the fresh list a watch is compared with), made as
 * patiently as the watch makes its requests. Right after a restart kube-apiserver 1.31+ answers
 * lists with 429 "storage is (re)initializing" until its watch cache has caught up, a server
 * behind a proxy may answer a 5xx or nothing at all for a moment: a test that read once would fail
 * by chance (issue 42: faults.test.ts's restart scenario did, once). Only those are asked again,
 * honouring Retry-After, until a deadline; any other answer is the test's to see.
 */
import { Clock, Duration, Effect, Either, Option } from "effect"
import type { KubeClientError } from "../../src/KubeError.ts"
import * as KubeError from "../../src/KubeError.ts"

/** Not serving yet, or not reachable: what the watch, too, asks again. */
export const notServingYet = (error: KubeClientError): boolean =>
  error._tag === "KubeTransportError" ||
  (error._tag === "KubeStatusError" && (error.code === 429 || error.code >= 500))

/**
 * Runs `read` until it succeeds, asking again after a failure `notServingYet` accepts: after the
 * server's Retry-After if it named one, else a step of 100 ms doubling with every try to 1 s. Past `limit` (or on any other
 * failure) it fails with the last error.
 */
export const readTruth = <A, R>(
  read: Effect.Effect<A, KubeClientError, R>,
  limit: Duration.DurationInput = "60 seconds"
): Effect.Effect<A, KubeClientError, R> =>
  Effect.gen(function*() {
    const deadline = (yield* Clock.currentTimeMillis) + Duration.toMillis(Duration.decode(limit))
    let pause = Duration.millis(100)
    for (;;) {
      const result = yield* Effect.either(read)
      if (Either.isRight(result)) return result.right
      const error = result.left
      if (!notServingYet(error) || (yield* Clock.currentTimeMillis) >= deadline) return yield* Effect.fail(error)
      const asked = KubeError.retryAfter(error)
      yield* Effect.logDebug(`a truth read was not served yet (${error.message}); asking again`)
      // A real server warming up: a real pause between tries (harness time, not the watch's).
      yield* Effect.sleep(Option.getOrElse(asked, () => pause))
      pause = Duration.min(Duration.times(pause, 2), Duration.seconds(1))
    }
  })
