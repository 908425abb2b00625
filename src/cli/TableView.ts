/**
 * The program's live view for a terminal, like `kubectl get -w` but redrawn in place: one row per
 * Sandbox (name, phase, ready, scheduled, restarts, last change and the most telling reason), a
 * status line from the watch's health, and the latest log lines beneath.
 */
import { Clock, Duration, Effect, Option, Queue, Schedule, Stream } from "effect"
import type { Sandbox } from "../Sandbox.ts"
import { condition } from "../Sandbox.ts"
import * as Evidence from "../SandboxEvidence.ts"
import type { SandboxWatchHealth } from "../SandboxWatch.ts"
import { SandboxWatch } from "../SandboxWatch.ts"

/** One Sandbox as the view shows it: its last state (none: gone) and when that was heard. */
export interface Row {
  readonly sandbox: Option.Option<Sandbox>
  /** Epoch milliseconds. */
  readonly changedAt: number
}

export interface ViewState {
  readonly rows: ReadonlyMap<string, Row>
  readonly health: SandboxWatchHealth
  /** Lines above the table: what is being watched, a demo notice. */
  readonly header: ReadonlyArray<string>
  /** The latest log lines, oldest first. */
  readonly logs: ReadonlyArray<string>
  /** The latest warning's message, if any: why the watch is not synced, while it is not. */
  readonly problem?: string | undefined
}

/** How long a gone Sandbox stays on screen (dimmed) before its row is dropped. */
export const GoneRowTtl = Duration.minutes(1)

const ansi = {
  reset: "\x1b[0m",
  bold: "\x1b[1m",
  dim: "\x1b[2m",
  red: "\x1b[31m",
  green: "\x1b[32m",
  yellow: "\x1b[33m",
  home: "\x1b[H",
  clearLine: "\x1b[K",
  clearBelow: "\x1b[J",
  hideCursor: "\x1b[?25l",
  showCursor: "\x1b[?25h"
}

/** `5s`, `3m`, `2h`: kubectl's short ages. */
export const age = (millis: number): string => {
  const s = Math.max(0, Math.floor(millis / 1000))
  if (s < 120) return `${s}s`
  const m = Math.floor(s / 60)
  if (m < 120) return `${m}m`
  return `${Math.floor(m / 60)}h`
}

/** The most telling reason a Sandbox is as it is, or empty. */
export const note = (sandbox: Sandbox): string => {
  if (Evidence.isLost(sandbox)) return Evidence.describeReasoned(Evidence.lost(sandbox))
  const e = Evidence.notReady(sandbox)
  const waiting = e.waiting.map((w) => `${w.container} ${w.reason ?? "waiting"}`)
  const parts = [
    ...Option.toArray(Option.map(e.unscheduled, (c) => c.reason)),
    ...waiting,
    ...Option.toArray(Option.flatMap(e.harness, (t) => Option.map(t.reason, (r) => `harness ${r}`))),
    ...Option.toArray(Option.flatMap(e.effector, (t) => Option.map(t.reason, (r) => `effector ${r}`))),
    ...(sandbox.status?.repos ?? []).filter((r) => r.error !== undefined && r.attempted !== r.fetched).map((r) =>
      `repo ${r.key} failed`
    )
  ]
  return parts.join(", ")
}

const conditionCell = (sandbox: Sandbox, type: string): string => {
  const c = condition(sandbox, type)
  if (c === undefined) return "-"
  return c.status === "False" && c.reason ? `False (${c.reason})` : c.status
}

const restarts = (sandbox: Sandbox): number =>
  (sandbox.status?.harness?.restartCount ?? 0) + (sandbox.status?.effector?.restartCount ?? 0)

const Columns = ["NAME", "PHASE", "READY", "SCHEDULED", "RESTARTS", "AGE", "LAST CHANGE", "NOTE"] as const
const LastChange = 6
const Note = 7

/** How long ago the cluster created it, from `metadata.creationTimestamp`; `-` when not known. */
const created = (sandbox: Sandbox, now: number): string => {
  const at = Date.parse(sandbox.metadata.creationTimestamp ?? "")
  return Number.isNaN(at) ? "-" : age(now - at)
}

const Named: Readonly<Record<string, string>> = { "\n": "\\n", "\r": "\\r", "\t": "\\t" }

/**
 * `text` with every control character (C0, DEL, C1) shown as a visible escape (`\x1b`, `\n`): names
 * and reasons come from whoever can write a Sandbox, and raw they could clear or recolour the
 * operator's terminal or split a row. A backslash is doubled so an escape cannot be faked.
 */
export const visible = (text: string): string =>
  text.replace(
    /[\u0000-\u001f\u007f-\u009f\\]/g,
    (c) => c === "\\" ? "\\\\" : Named[c] ?? `\\x${c.charCodeAt(0).toString(16).padStart(2, "0")}`
  )

/** The most characters a cell shows, whatever the terminal: one long reason does not widen a column past use. */
export const MaxCellChars = 80

/** The table's cells, one array a row, ordered by name. Gone rows past the TTL are left out. */
export const cells = (
  rows: ReadonlyMap<string, Row>,
  now: number
): Array<{ readonly cells: ReadonlyArray<string>; readonly phase: string }> =>
  [...rows.entries()]
    .filter(([, row]) => Option.isSome(row.sandbox) || now - row.changedAt < Duration.toMillis(GoneRowTtl))
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([name, row]) => shown(row, name, now))

const shown = (
  row: Row,
  name: string,
  now: number
): { readonly cells: ReadonlyArray<string>; readonly phase: string } => {
  const { cells, phase } = raw(row, name, now)
  return { phase, cells: cells.map((c) => truncate(visible(c), MaxCellChars)) }
}

const raw = (row: Row, name: string, now: number): { readonly cells: ReadonlyArray<string>; readonly phase: string } =>
  Option.match(row.sandbox, {
    onNone: () => ({
      phase: "(gone)",
      cells: [name, "(gone)", "-", "-", "-", "-", `${age(now - row.changedAt)} ago`, ""]
    }),
    onSome: (s) => {
      const phase = Option.getOrElse(Evidence.phase(s), () => "-")
      return {
        phase,
        cells: [
          name,
          phase,
          conditionCell(s, "Ready"),
          conditionCell(s, "Scheduled"),
          String(restarts(s)),
          created(s, now),
          `${age(now - row.changedAt)} ago`,
          note(s)
        ]
      }
    }
  })

/**
 * A warning as the status line says it: without the request and the server it names (`GET <path>
 * to <server> got no answer: ...`), which can be longer than a terminal; the header names the server.
 */
export const shortProblem = (message: string): string =>
  visible(message.replace(/^[A-Z]+ \/\S* (?:to \S+ )?/, "").replace(/\s+/g, " ").trim())

/**
 * The status line: synced, last heard, re-lists, restarts, cached. Not synced, why comes first
 * (the latest warning), so that it is what a narrow terminal still shows.
 */
export const statusLine = (health: SandboxWatchHealth, now: number, problem?: string): string =>
  [
    health.synced
      ? "synced"
      : problem === undefined
      ? "not synced yet"
      : `not synced: ${shortProblem(problem)}`,
    `last heard ${Option.match(health.lastHeard, { onNone: () => "never", onSome: (t) => `${age(now - t)} ago` })}`,
    `re-lists ${health.relists}`,
    `watch restarts ${health.watchRestarts}`,
    `${health.cached} cached`
  ].join(" | ")

const colour = (phase: string): string =>
  phase === "Ready"
    ? ansi.green
    : phase === "Lost"
    ? ansi.red
    : phase === "(gone)"
    ? ansi.dim
    : phase === "Pending"
    ? ansi.yellow
    : ""

const Gap = "   "

/** `text` cut to `width` characters, the last one an ellipsis when anything was cut. */
const truncate = (text: string, width: number): string =>
  text.length <= width ? text : width <= 0 ? "" : `${text.slice(0, width - 1)}…`

/**
 * The columns shown and their widths within `width`: NOTE is truncated first, then LAST CHANGE
 * goes; what still does not fit is clipped line by line.
 */
const layout = (
  table: ReadonlyArray<{ readonly cells: ReadonlyArray<string> }>,
  width: number | undefined
): { readonly shown: ReadonlyArray<number>; readonly widths: ReadonlyArray<number> } => {
  const natural = Columns.map((title, i) => Math.max(title.length, ...table.map((r) => r.cells[i]?.length ?? 0)))
  const total = (shown: ReadonlyArray<number>) =>
    shown.reduce((sum, i) => sum + (natural[i] ?? 0), 0) + Gap.length * (shown.length - 1)
  let shown: Array<number> = Columns.map((_, i) => i)
  if (width === undefined || total(shown) <= width) return { shown, widths: natural }
  const widths = [...natural]
  const withoutNote = total(shown.filter((i) => i !== Note)) + Gap.length
  if (width - withoutNote >= Columns[Note].length) {
    widths[Note] = width - withoutNote
    return { shown, widths }
  }
  shown = shown.filter((i) => i !== Note && i !== LastChange)
  return { shown, widths }
}

/**
 * The whole screen as lines, plain (no ANSI) when `colours` is false. Pure: a test can assert it.
 * Within `width` columns and `height` lines when given: the header stays, rows past the height end
 * in "… N more", and the logs get what room is left.
 */
export const render = (
  state: ViewState,
  now: number,
  options: { readonly colours: boolean; readonly width?: number; readonly height?: number }
): Array<string> => {
  const table = cells(state.rows, now)
  const { shown, widths } = layout(table, options.width)
  const last = shown[shown.length - 1]
  const pad = (values: ReadonlyArray<string>) =>
    shown.map((i) => {
      const value = truncate(values[i] ?? "", widths[i] ?? 0)
      return i === last ? value : value.padEnd(widths[i] ?? 0)
    }).join(Gap).trimEnd()
  const clip = (line: string) => (options.width !== undefined ? truncate(line, options.width) : line)
  const paint = (code: string, line: string) => (options.colours && code !== "" ? `${code}${line}${ansi.reset}` : line)
  const top = [
    ...state.header.map((h) => clip(visible(h))),
    paint(ansi.dim, clip(statusLine(state.health, now, state.problem))),
    "",
    paint(ansi.bold, clip(pad(Columns)))
  ]
  const empty = state.health.synced ? "(no Sandboxes under the selector)" : "(waiting for the first list)"
  let rows = table.length === 0
    ? [paint(ansi.dim, clip(empty))]
    : table.map((r) => paint(colour(r.phase), clip(pad(r.cells))))
  let logs = state.logs.map((l) => paint(ansi.dim, clip(visible(l))))
  if (options.height !== undefined) {
    // One line short of the terminal, so the last newline does not scroll the header away.
    const room = Math.max(1, options.height - 1 - top.length)
    if (rows.length > room) {
      rows = [...rows.slice(0, room - 1), paint(ansi.dim, clip(`… ${rows.length - room + 1} more`))]
    }
    const left = room - rows.length - 1
    logs = left > 0 ? logs.slice(-left) : []
  }
  return [...top, ...rows, ...(logs.length === 0 ? [] : ["", ...logs])]
}

/** A bounded buffer of log lines the view shows under the table, and the latest warning's message. */
export class LogLines {
  private readonly lines: Array<string> = []
  private listener: (() => void) | undefined = undefined
  private latestProblem: string | undefined = undefined
  constructor(readonly capacity: number) {}
  /** A log line; `problem` is its message when it is a warning or worse. */
  push(line: string, problem?: string): void {
    this.lines.push(line)
    if (this.lines.length > this.capacity) this.lines.splice(0, this.lines.length - this.capacity)
    if (problem !== undefined) this.latestProblem = problem
    this.listener?.()
  }
  get current(): ReadonlyArray<string> {
    return this.lines
  }
  get problem(): string | undefined {
    return this.latestProblem
  }
  /** Be told of every push (the view redraws); one listener at a time. */
  onPush(listener: (() => void) | undefined): void {
    this.listener = listener
  }
}

export interface RunOptions {
  readonly header: ReadonlyArray<string>
  readonly logs: LogLines
  /** Writes a chunk of the screen as it is (no newline added). */
  readonly write: (text: string) => Effect.Effect<void>
  /** Columns of the terminal, when known. */
  readonly width: () => number | undefined
  /** Rows of the terminal, when known. */
  readonly height: () => number | undefined
  /** Calls `redraw` whenever the terminal is resized; returns how to stop. */
  readonly onResize: (redraw: () => void) => () => void
  readonly colours: boolean
}

/**
 * Redraw on every change and every second (ages move), until interrupted; the cursor is shown
 * again when the view ends.
 */
export const run = (options: RunOptions): Effect.Effect<void, never, SandboxWatch> =>
  Effect.gen(function*() {
    const watch = yield* SandboxWatch
    const rows = new Map<string, Row>()
    const dirty = yield* Queue.sliding<void>(1)
    const redraw = Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      const health = yield* watch.health
      for (const [name, row] of rows) {
        if (Option.isNone(row.sandbox) && now - row.changedAt >= Duration.toMillis(GoneRowTtl)) rows.delete(name)
      }
      const width = options.width()
      const height = options.height()
      const lines = render(
        {
          rows,
          health,
          header: options.header,
          logs: options.logs.current,
          problem: options.logs.problem
        },
        now,
        {
          colours: options.colours,
          ...(width === undefined ? {} : { width }),
          ...(height === undefined ? {} : { height })
        }
      )
      yield* options.write(`${ansi.home}${lines.map((l) => `${l}${ansi.clearLine}`).join("\n")}\n${ansi.clearBelow}`)
    })
    yield* Effect.acquireRelease(
      Effect.zipRight(
        options.write(`${ansi.hideCursor}\x1b[2J`),
        Effect.sync(() => {
          options.logs.onPush(() => Queue.unsafeOffer(dirty, undefined))
          // A resize clears what the terminal reflowed, then redraws.
          return options.onResize(() => {
            void Effect.runFork(options.write("\x1b[2J"))
            Queue.unsafeOffer(dirty, undefined)
          })
        })
      ),
      (stopResize) =>
        Effect.zipRight(
          Effect.sync(() => {
            options.logs.onPush(undefined)
            stopResize()
          }),
          options.write(ansi.showCursor)
        )
    )
    const changes = watch.allChanges.pipe(
      Stream.mapEffect((change) =>
        Effect.flatMap(Clock.currentTimeMillis, (now) =>
          Effect.sync(() => rows.set(change.name, { sandbox: change.sandbox, changedAt: now })))
      ),
      Stream.runForEach(() =>
        Queue.offer(dirty, undefined)
      )
    )
    const ticks = Effect.repeat(Queue.offer(dirty, undefined), Schedule.spaced("1 second"))
    const draws = Effect.forever(Effect.zipRight(Queue.take(dirty), redraw))
    yield* Effect.all([changes, ticks, draws], { concurrency: "unbounded", discard: true })
  }).pipe(Effect.scoped)
