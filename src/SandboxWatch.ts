/**
 * The one watch of every Sandbox in a namespace (design notes in the implementation below).
 *
 * @since 0.1.0
 */
import type { Duration, Effect, Option, Stream } from "effect"
import { Context } from "effect"
import type { Sandbox } from "./Sandbox.ts"

/** One name's new state: the Sandbox as the cluster now says it is, or none when it says gone. */
export interface SandboxChange {
  readonly name: string
  readonly sandbox: Option.Option<Sandbox>
}

/** For readiness probes and status lines. */
export interface SandboxWatchHealth {
  readonly synced: boolean
  /** Epoch milliseconds of the last list, event or bookmark; none before the first answer. */
  readonly lastHeard: Option.Option<number>
  readonly relists: number
  readonly watchRestarts: number
  readonly cached: number
}

/** @since 0.1.0 */
export interface SandboxWatchService {
  /** Completes once the first list has landed. */
  readonly synced: Effect.Effect<void>
  /** The Sandbox as last seen; meaningful once synced. */
  readonly get: (name: string) => Effect.Effect<Option.Option<Sandbox>>
  /**
   * Nothing before the first list; then the cached value at once, then every change the cluster
   * reports. A slow reader skips to the latest state rather than queueing a backlog.
   */
  readonly changes: (name: string) => Stream.Stream<Option.Option<Sandbox>>
  /**
   * Every name: nothing before the first list, then each cached Sandbox once, then every change.
   * A slow reader gets the latest state of each name that changed, never a backlog.
   */
  readonly allChanges: Stream.Stream<SandboxChange>
  /** Every cached Sandbox, by name. */
  readonly snapshot: Effect.Effect<ReadonlyMap<string, Sandbox>>
  readonly health: Effect.Effect<SandboxWatchHealth>
}

/** @since 0.1.0 */
export class SandboxWatch extends Context.Tag("sandbox-watch/SandboxWatch")<SandboxWatch, SandboxWatchService>() {}

export interface SandboxWatchOptions {
  readonly namespace: string
  /** Default `jr2.dev/run`. */
  readonly labelSelector?: string
  /** First back-off after a failure; doubles up to the cap. Default 500 ms. */
  readonly backoffFloor?: Duration.DurationInput
  /** Default 30 s. */
  readonly backoffCap?: Duration.DurationInput
  /** Asked of the server on every watch. Default 240. */
  readonly timeoutSeconds?: number
  /** Silence longer than `timeoutSeconds` plus this means a dead connection. Default 30 s. */
  readonly idleMargin?: Duration.DurationInput
  /** Page size of lists. Default 500. */
  readonly pageSize?: number
  /** Randomise back-offs by ±20% so many watchers do not retry in step. Default true. */
  readonly jitter?: boolean
}
