/**
 * The program's machine-readable output: one JSON object a line, written as it happens.
 *
 * - `{"event":"synced"}` once, after the first list, when every Sandbox that list had has been told;
 *   `{"event":"synced","demo":true}` when what follows is the demo's, invented, not a cluster's;
 * - `{"event":"change","name":"<name>","sandbox":{...}}` when the cluster says the Sandbox exists in
 *   that state (the cached object, as decoded);
 * - `{"event":"change","name":"<name>","sandbox":null}` when the cluster says it is gone.
 *
 * Every name the cluster has or had under the selector is told. Nothing else is ever written here:
 * logs go elsewhere (stderr), so a reader can parse every line.
 */
import { Chunk, Effect, Option, Stream } from "effect"
import type { SandboxChange } from "../SandboxWatch.ts"
import { SandboxWatch } from "../SandboxWatch.ts"

export interface Options {
  /** The watch is of the demo's simulated cluster: the `synced` line says so. */
  readonly demo: boolean
}

/** The `synced` line. */
export const syncedLine = (options: Options): string =>
  JSON.stringify(options.demo ? { event: "synced", demo: true } : { event: "synced" })

/** A `change` line: the Sandbox as cached, or `null` for gone. */
export const changeLine = (change: SandboxChange): string =>
  JSON.stringify({ event: "change", name: change.name, sandbox: Option.getOrNull(change.sandbox) })

/**
 * The lines, in order. Waits for the watch's first list; then tells every change, and says `synced`
 * once every Sandbox the cache held has been told. `allChanges` hands a new subscriber the whole
 * cache as its first batch, so `synced` follows that batch (or comes at once when the cache is
 * empty) — no per-line snapshot, which would cost O(n²) on a large namespace.
 */
export const lines = (options: Options): Stream.Stream<string, never, SandboxWatch> =>
  Stream.unwrap(
    Effect.gen(function*() {
      const watch = yield* SandboxWatch
      yield* watch.synced
      const emptyAtSync = (yield* watch.snapshot).size === 0
      let saidSynced = emptyAtSync
      const changes = watch.allChanges.pipe(
        Stream.mapChunks((batch) => {
          const out = Chunk.map(batch, changeLine)
          if (saidSynced) return out
          saidSynced = true
          return Chunk.append(out, syncedLine(options))
        })
      )
      return emptyAtSync ? Stream.concat(Stream.make(syncedLine(options)), changes) : changes
    })
  )

/** Write every line with `write` (one call a line, without the newline) until interrupted. */
export const run = <E>(
  write: (line: string) => Effect.Effect<void, E>,
  options: Options
): Effect.Effect<void, E, SandboxWatch> => Stream.runForEach(lines(options), write)
