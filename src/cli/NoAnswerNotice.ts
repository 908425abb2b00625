/**
 * A server that never answers (a typo in the address, a cluster that is down, a proxy or VPN in
 * the way) is asked again for ever, as it should be, and each retry's warning gives the cause in a
 * socket's words (`connect ECONNREFUSED 10.0.0.1:6443`). Once, after the first few seconds without
 * any answer at all, a person is told in plain words what that means and what to check.
 */
import { Duration, Effect } from "effect"
import * as SandboxWatch from "../SandboxWatch.ts"

/** How long the program waits for a first answer before it says that none came. */
export const Wait: Duration.Duration = Duration.seconds(5)

/** What is said: `server` as it may be shown (no user info). */
export const message = (server: string, waited: Duration.Duration): string =>
  `the server at ${server} has not answered since sandbox-watch started, ${Duration.format(waited)} ago: ` +
  "check that address, that the cluster is up, and any proxy or VPN on the way; still trying"

/**
 * Says so once when the watch has heard no answer (`health.answered`) `wait` after this starts;
 * says nothing when it has, even a failure (a 401 or a 403 says what it is itself).
 */
export const sayWhenUnanswered = (server: string, wait: Duration.Duration = Wait) =>
  Effect.gen(function*() {
    const watch = yield* SandboxWatch.SandboxWatch
    yield* Effect.sleep(wait)
    const health = yield* watch.health
    if (!health.answered) yield* Effect.logWarning(message(server, wait))
  })
