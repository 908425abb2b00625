/**
 * What the runner tells a child and what a child answers: one JSON argument in, one JSON line out.
 */
import type { DataShape } from "./data.ts"

/** `scale` is sync and heap at once on a larger N (the runner's `--scale-n`), with the peak RSS. */
export type Scenario = "sync" | "tp" | "heap" | "fanout" | "storm" | "lat" | "scale"

/**
 * Fan-out variants: no subscriber, 10,000 idle `changes` streams on other names, 10,000 idle
 * `waitFor` waits on other names, one stream on each hot name.
 */
export type Fanout = "none" | "idle" | "waits" | "hot"

export interface ChildParams {
  readonly client: string
  readonly scenario: Scenario
  readonly url: string
  /** `<mode>-<run id>`: the server's behaviour, and this child's own state there. */
  readonly namespace: string
  readonly shape: DataShape
  /** List page size; 0 for one unpaged list. */
  readonly pageSize: number
  /**
   * How the floor and sandbox-watch list: in pages (`pageSize`; the default) or as a streaming list
   * (one watch with `sendInitialEvents=true`, the objects as `ADDED` lines up to the bookmark
   * annotated `k8s.io/initial-events-end`). client-node 2.0.1's informer has no streaming list.
   */
  readonly listMode?: "paged" | "stream"
  /** sandbox-watch's `gzipStreamingLists`: a streaming list asked for gzipped. */
  readonly gzip?: boolean
  readonly fanout?: Fanout
  /** Idle subscribers of the `idle` and `waits` fan-outs. */
  readonly idleSubscribers?: number
  /** Tell latency: subscribers are `waitFor` waits rather than `changes` streams. */
  readonly waits?: boolean
  /** Floor only: drop `metadata.managedFields` before caching, the least a slimming cache keeps. */
  readonly slim?: boolean
  /** The peer package to load (client-node 2.x or its 1.x alias). */
  readonly peer?: string
  /**
   * `url` is the real kube-apiserver: HTTPS verified against its CA, with a bearer token. Both come
   * by environment ({@link SecretEnv}), never in these params, which are a process argument.
   */
  readonly tls?: boolean
}

export interface ChildResult {
  /** The figures, by name (ms, events per second, bytes...). */
  readonly figures: Record<string, number>
  /** A problem worth showing next to the figures (a wrong final state, a missing subscriber). */
  readonly note?: string
}

/** The environment variables that carry the real kube-apiserver's CA (PEM) and token to a child. */
export const SecretEnv = { ca: "BENCH_APISERVER_CA", token: "BENCH_APISERVER_TOKEN" } as const

export interface ApiServerSecrets {
  readonly caPem: string
  /** Secret: never printed, never in a result. */
  readonly token: string
}

/** The CA and token of a `tls` child, from its environment; undefined for the replay server. */
export const apiServerSecrets = (p: ChildParams): ApiServerSecrets | undefined => {
  if (p.tls !== true) return undefined
  const caPem = process.env[SecretEnv.ca] ?? ""
  const token = process.env[SecretEnv.token] ?? ""
  if (caPem === "" || token === "") {
    throw new Error(`a tls child needs ${SecretEnv.ca} and ${SecretEnv.token} in its environment`)
  }
  return { caPem, token }
}

/** The mode of a scenario's namespace on the replay server. */
export const modeOf = (scenario: Scenario): string => scenario === "fanout" ? "hot" : scenario
