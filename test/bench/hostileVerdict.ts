/**
 * What a row of the hostile bench (`hostile.ts`) had to do, what the program did, and the verdict:
 * pure, so `test/HostileVerdict.test.ts` can hold the checker to canned observations. A row that
 * did not do what it names is a failure, never a figure: every expectation is checked against what
 * the program itself reported (its `/metrics` and `/healthz`, its exit, its stdout) and what the
 * server saw it ask for.
 */

/** How the program lists in a row: `--list-mode paged`, or a streaming list (`auto`, served properly). */
export type ListKind = "paged" | "stream"

/**
 * What a row must end as:
 * - `Synced`: the first list landed with exactly `cached` Sandboxes; each of `restarts` (restart
 *   reasons of `sandbox_watch_restarts_total`) happened and no other; `decodeFailures: "some"`
 *   when the server sent objects that do not fit the schema, else none may be counted.
 * - `Refused`: never synced, nothing told, and every restart was for `reason` (at least one).
 * - `Unfinished`: a list that never ends: never synced, nothing told, and any restart only for one
 *   of `allowedRestarts` (a list still being read has none).
 */
export type Outcome =
  | {
    readonly _tag: "Synced"
    readonly cached: number
    readonly restarts?: ReadonlyArray<string>
    readonly decodeFailures?: "some"
  }
  | { readonly _tag: "Refused"; readonly reason: string }
  | { readonly _tag: "Unfinished"; readonly allowedRestarts: ReadonlyArray<string> }

export interface Expectation {
  readonly outcome: Outcome
  /** Peak RSS (VmHWM, or /usr/bin/time's maximum) must stay at or under this. */
  readonly rssCeilingMiB: number
}

/** The watch as its last `/metrics` scrape said. */
export interface WatchFigures {
  /** `sandbox_watch_relists_total{reason="initial"}`: the first list landed (synced). */
  readonly initialLists: number
  /** `sandbox_watch_cached_sandboxes` (0 when never set). */
  readonly cached: number
  /** `sandbox_watch_decode_failures_total`. */
  readonly decodeFailures: number
  /** `sandbox_watch_restarts_total` by `reason`. */
  readonly restarts: Readonly<Record<string, number>>
}

export interface Observation {
  readonly kind: ListKind
  /** How the process ended; `killed` when the bench had to kill it (a hang). */
  readonly exit: { readonly code: number | null; readonly signal: string | null; readonly killed: boolean }
  readonly peakRssMiB: number
  /** stderr said "defect" or "a bug". */
  readonly defect: boolean
  /** What the server was asked: paged list requests and streaming lists (`sendInitialEvents=true`). */
  readonly served: { readonly pagedLists: number; readonly streamingLists: number }
  /** `/healthz` answers of 200 seen while the program ran. */
  readonly healthy: number
  /** The last `/metrics` scrape that answered; none when it never did. */
  readonly watch: WatchFigures | undefined
  /**
   * The Sandboxes of the first list, as the program's log line said it landed ("listed N
   * Sandboxes ... (initial)"); none when it said no such thing. A scrape can miss a landing: the
   * landing of a huge list keeps the event loop from answering until the run is over.
   */
  readonly landed: number | undefined
  /** Change lines the program printed on stdout. */
  readonly told: number
}

export interface Verdict {
  readonly pass: boolean
  /** Each way the row did not do what it names, in words; empty when it passed. */
  readonly failures: ReadonlyArray<string>
}

const restartsSaid = (restarts: Readonly<Record<string, number>>) => {
  const reasons = Object.entries(restarts).filter(([, n]) => n > 0)
  return reasons.length === 0 ? "none" : reasons.map(([reason, n]) => `${reason} ×${n}`).join(", ")
}

/** What the row must do, in a few words, for the table. */
export const expected = (e: Expectation): string => {
  const o = e.outcome
  const what = o._tag === "Synced"
    ? `synced, ${o.cached.toLocaleString("en")} cached${o.decodeFailures === "some" ? ", decode failures" : ""}${
      (o.restarts ?? []).length === 0 ? "" : `, restarts ${(o.restarts ?? []).join("/")}`
    }`
    : o._tag === "Refused"
    ? `refused: ${o.reason}`
    : `never synced${o.allowedRestarts.length === 0 ? "" : ` (or refused: ${o.allowedRestarts.join("/")})`}`
  return `${what}; alive; RSS ≤ ${e.rssCeilingMiB} MiB`
}

/** What the program did, in a few words, for the table. */
export const did = (o: Observation): string => {
  if (o.watch === undefined) return "no /metrics answer"
  const w = o.watch
  const cached = cachedIfSynced(o)
  const state = cached === undefined
    ? "not synced"
    : `synced, ${cached.toLocaleString("en")} cached${w.initialLists > 0 ? "" : " (by its log)"}`
  return `${state}; restarts ${restartsSaid(w.restarts)}${
    w.decodeFailures > 0 ? `; ${w.decodeFailures} decode failures` : ""
  }; ${o.told.toLocaleString("en")} told`
}

/** The Sandboxes cached once synced (from `/metrics`, else the log line of the landing); none when not synced. */
const cachedIfSynced = (o: Observation): number | undefined =>
  o.watch !== undefined && o.watch.initialLists > 0 ? o.watch.cached : o.landed

/** The reasons restarts were counted for, besides `allowed`. */
const otherRestarts = (restarts: Readonly<Record<string, number>>, allowed: ReadonlyArray<string>) =>
  Object.entries(restarts).filter(([reason, n]) => n > 0 && !allowed.includes(reason)).map(([reason, n]) =>
    `${reason} ×${n}`
  )

/** Whether the program did what the row names. */
export const judge = (e: Expectation, o: Observation): Verdict => {
  const failures: Array<string> = []
  if (o.exit.killed) failures.push("hung: killed by the bench past its duration")
  else if (o.exit.signal !== null || o.exit.code !== 0) {
    failures.push(`did not live to its --duration: exit ${o.exit.signal ?? String(o.exit.code)}`)
  }
  if (o.defect) failures.push("stderr reports a defect")
  if (o.peakRssMiB > e.rssCeilingMiB) {
    failures.push(`peak RSS ${o.peakRssMiB.toFixed(0)} MiB over the ${e.rssCeilingMiB} MiB ceiling`)
  }
  // The hostile payload is only received on the path the row names.
  if (o.kind === "paged" && (o.served.pagedLists === 0 || o.served.streamingLists > 0)) {
    failures.push(
      `not the paged path: ${o.served.pagedLists} paged list requests, ${o.served.streamingLists} streaming lists`
    )
  }
  if (o.kind === "stream" && (o.served.streamingLists === 0 || o.served.pagedLists > 0)) {
    failures.push(
      `not the streaming path: ${o.served.streamingLists} streaming lists, ${o.served.pagedLists} paged list requests`
    )
  }
  if (o.healthy === 0) failures.push("/healthz never answered 200")
  if (o.watch === undefined) {
    failures.push("/metrics never answered: what the watch did is unknown")
    return { pass: false, failures }
  }
  const w = o.watch
  const cached = cachedIfSynced(o)
  const outcome = e.outcome
  switch (outcome._tag) {
    case "Synced": {
      if (cached === undefined) failures.push("never synced")
      else if (cached !== outcome.cached) failures.push(`synced with ${cached} cached, not ${outcome.cached}`)
      const wanted = outcome.restarts ?? []
      for (const reason of wanted) {
        if ((w.restarts[reason] ?? 0) === 0) failures.push(`no restart for ${reason}`)
      }
      const others = otherRestarts(w.restarts, wanted)
      if (others.length > 0) failures.push(`restarted for ${others.join(", ")}`)
      if (outcome.decodeFailures === "some" && w.decodeFailures === 0) failures.push("no decode failure counted")
      if (outcome.decodeFailures === undefined && w.decodeFailures > 0) {
        failures.push(`${w.decodeFailures} decode failures counted`)
      }
      break
    }
    case "Refused": {
      if (cached !== undefined) failures.push(`synced (${cached} cached) instead of refusing`)
      if ((w.restarts[outcome.reason] ?? 0) === 0) failures.push(`never refused as ${outcome.reason}`)
      const others = otherRestarts(w.restarts, [outcome.reason])
      if (others.length > 0) failures.push(`restarted for ${others.join(", ")}`)
      if (o.told > 0) failures.push(`told ${o.told} changes`)
      break
    }
    case "Unfinished": {
      if (cached !== undefined) failures.push(`synced (${cached} cached) a list that never ends`)
      const others = otherRestarts(w.restarts, outcome.allowedRestarts)
      if (others.length > 0) failures.push(`restarted for ${others.join(", ")}`)
      if (o.told > 0) failures.push(`told ${o.told} changes`)
      break
    }
  }
  return { pass: failures.length === 0, failures }
}

/**
 * The watch's figures from a Prometheus text scrape (`/metrics`). A series appears once first set,
 * so one that is missing is 0: a list still being read has counted nothing yet.
 */
export const watchFiguresOf = (text: string): WatchFigures => {
  let initialLists = 0
  let cached = 0
  let decodeFailures = 0
  const restarts: Record<string, number> = {}
  for (const line of text.split("\n")) {
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line)
    if (match === null) continue
    const [, name, labelText = "", valueText] = match
    if (!name!.startsWith("sandbox_watch_")) continue
    const value = Number(valueText)
    const labels = Object.fromEntries([...labelText.matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((l) => [l[1], l[2]]))
    switch (name) {
      case "sandbox_watch_relists_total":
        if (labels["reason"] === "initial") initialLists += value
        break
      case "sandbox_watch_cached_sandboxes":
        cached = value
        break
      case "sandbox_watch_decode_failures_total":
        decodeFailures += value
        break
      case "sandbox_watch_restarts_total": {
        const reason = labels["reason"] ?? ""
        restarts[reason] = (restarts[reason] ?? 0) + value
        break
      }
    }
  }
  return { initialLists, cached, decodeFailures, restarts }
}
