/**
 * The sandbox-watch program as a child process a test drives: its stdout and stderr as lines a test
 * waits on (never on wall time), its exit, and signals. The process is killed when the scope closes
 * if the test has not ended it.
 */
import type { Scope } from "effect"
import { Deferred, Effect } from "effect"
import { spawn, spawnSync } from "node:child_process"
import { fileURLToPath } from "node:url"

/** The checkout the program runs from. */
export const root = fileURLToPath(new URL("../../", import.meta.url))

export interface Exited {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
}

export interface ProgramProcess {
  /** Every stdout line so far. */
  readonly stdout: Effect.Effect<ReadonlyArray<string>>
  readonly stderr: Effect.Effect<ReadonlyArray<string>>
  /** Waits for the first stdout line (from `from` on) that satisfies `predicate`; returns its index. */
  readonly awaitStdout: (predicate: (line: string) => boolean, from?: number) => Effect.Effect<number>
  readonly awaitStderr: (predicate: (line: string) => boolean, from?: number) => Effect.Effect<number>
  readonly kill: (signal: NodeJS.Signals) => Effect.Effect<void>
  readonly exited: Effect.Effect<Exited>
}

/** A line channel: lines so far, and a way to wait for one. Plain and synchronous on purpose: a
 * waiter checks and registers in one step, so no line or end can slip between the two. */
const lineSink = () => {
  const lines: Array<string> = []
  const waiters = new Set<() => void>()
  let partial = ""
  let ended = false
  const wakeAll = () => {
    for (const wake of [...waiters]) wake()
  }
  const push = (chunk: string) => {
    partial += chunk
    const parts = partial.split("\n")
    partial = parts.pop() ?? ""
    lines.push(...parts)
    if (parts.length > 0) wakeAll()
  }
  const end = () => {
    if (partial.length > 0) lines.push(partial)
    partial = ""
    ended = true
    wakeAll()
  }
  const await_ = (predicate: (line: string) => boolean, from = 0): Effect.Effect<number> =>
    Effect.async<number>((resume) => {
      let next = from
      const check = () => {
        for (; next < lines.length; next++) {
          if (predicate(lines[next]!)) {
            waiters.delete(check)
            return resume(Effect.succeed(next))
          }
        }
        if (ended) {
          waiters.delete(check)
          resume(Effect.dieMessage(`the program ended without the line awaited; it wrote:\n${lines.join("\n")}`))
        }
      }
      waiters.add(check)
      check()
      return Effect.sync(() => waiters.delete(check))
    })
  return { lines: Effect.sync((): ReadonlyArray<string> => [...lines]), push, end, await: await_ }
}

/** What `node` runs: the source through tsx (quick to change), or the bundle `npm start` runs. */
export const FromSource: ReadonlyArray<string> = ["--import", "tsx", "src/cli/main.ts"]
export const Bundled: ReadonlyArray<string> = ["dist/bin/sandbox-watch.js"]

/** Builds {@link Bundled} as `npm start` does before it runs it (`scripts/bundle-bin.mjs`, a second or two). */
export const bundle: Effect.Effect<void> = Effect.suspend(() => {
  const built = spawnSync(process.execPath, ["scripts/bundle-bin.mjs"], { cwd: root, encoding: "utf8" })
  return built.status === 0
    ? Effect.void
    : Effect.dieMessage(`scripts/bundle-bin.mjs exited ${built.status ?? built.signal}:\n${built.stderr}`)
})

/** Start `node <entry> ...args` (the source unless told) with exactly `env` (plus PATH). */
export const start = (
  args: ReadonlyArray<string>,
  env: Readonly<Record<string, string | undefined>>,
  entry: ReadonlyArray<string> = FromSource
): Effect.Effect<ProgramProcess, never, Scope.Scope> =>
  Effect.gen(function*() {
    const out = lineSink()
    const err = lineSink()
    const exit = yield* Deferred.make<Exited>()
    const child = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const c = spawn(process.execPath, [...entry, ...args], {
          cwd: root,
          env: { PATH: process.env["PATH"], ...env } as NodeJS.ProcessEnv,
          stdio: ["ignore", "pipe", "pipe"]
        })
        c.stdout.setEncoding("utf8").on("data", out.push)
        c.stderr.setEncoding("utf8").on("data", err.push)
        c.on("close", (code, signal) => {
          out.end()
          err.end()
          Effect.runSync(Deferred.succeed(exit, { code, signal }))
        })
        return c
      }),
      (c) => (c.exitCode === null && c.signalCode === null
        ? Effect.sync(() => c.kill("SIGKILL")).pipe(Effect.zipRight(Deferred.await(exit)))
        : Effect.void)
    )
    return {
      stdout: out.lines,
      stderr: err.lines,
      awaitStdout: (predicate, from) => out.await(predicate, from),
      awaitStderr: (predicate, from) => err.await(predicate, from),
      kill: (signal) => Effect.sync(() => void child.kill(signal)),
      exited: Deferred.await(exit)
    }
  })

/** An environment with no cluster in it: an empty HOME, no KUBECONFIG, not in a pod. */
export const noClusterEnv = (home: string): Record<string, string | undefined> => ({ HOME: home })
