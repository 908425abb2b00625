/**
 * The program's machine-readable output: one JSON object a line, written as it happens.
 *
 * - `{"event":"synced"}` once, after the first list, when every Sandbox that list had has been told;
 * - `{"event":"change","name":"<name>","sandbox":{...}}` when the cluster says the Sandbox exists in
 *   that state (the cached object, as decoded);
 * - `{"event":"change","name":"<name>","sandbox":null}` when the cluster says it is gone.
 *
 * Every name the cluster has or had under the selector is told. Nothing else is ever written here:
 * logs go elsewhere (stderr), so a reader can parse every line.
 *
 * @since 0.1.0
 */
import { Effect, Option, Stream } from "effect"
import type { SandboxChange } from "./SandboxWatch.ts"
import { SandboxWatch } from "./SandboxWatch.ts"

/** The `synced` line. */
export const syncedLine = (): string => JSON.stringify({ event: "synced" })

/** A `change` line: the Sandbox as cached, or `null` for gone. */
export const changeLine = (change: SandboxChange): string =>
  JSON.stringify({ event: "change", name: change.name, sandbox: Option.getOrNull(change.sandbox) })

/**
 * The lines, in order. Waits for the watch's first list; then tells every change, and says `synced`
 * as soon as every Sandbox the cache then holds has been told (at once when it holds none). Each
 * check takes a fresh snapshot, so a Sandbox deleted before it was told does not hold `synced` back.
 */
export const lines: Stream.Stream<string, never, SandboxWatch> = Stream.unwrap(
  Effect.gen(function*() {
    const watch = yield* SandboxWatch
    yield* watch.synced
    const told = new Set<string>()
    let saidSynced = false
    const maybeSynced: Effect.Effect<ReadonlyArray<string>> = Effect.suspend(() =>
      saidSynced
        ? Effect.succeed([])
        : Effect.map(watch.snapshot, (snapshot) => {
          for (const name of snapshot.keys()) if (!told.has(name)) return []
          saidSynced = true
          return [syncedLine()]
        })
    )
    const first = yield* maybeSynced
    return Stream.concat(
      Stream.fromIterable(first),
      watch.allChanges.pipe(
        Stream.mapEffect((change) => {
          told.add(change.name)
          return Effect.map(maybeSynced, (after) => [changeLine(change), ...after])
        }),
        Stream.flattenIterables
      )
    )
  })
)

/** Write every line with `write` (one call a line, without the newline) until interrupted. */
export const run = <E>(write: (line: string) => Effect.Effect<void, E>): Effect.Effect<void, E, SandboxWatch> =>
  Stream.runForEach(lines, write)
