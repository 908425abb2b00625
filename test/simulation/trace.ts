/**
 * What happened in a run, in order, for a person reading a failure: what the truth did, what the
 * server did with each request, what the watch said (its log lines), what readers heard, and what
 * the checks found.
 */
export type Actor = "truth" | "server" | "watch" | "reader" | "wait" | "check"

export interface TraceEntry {
  readonly at: number
  readonly actor: Actor
  readonly text: string
}

/** Keeps at most this many entries (a run that loops would otherwise grow without end). */
const MaxEntries = 50_000

export class Trace {
  readonly entries: Array<TraceEntry> = []
  private dropped = 0

  constructor(private readonly now: () => number) {}

  add(actor: Actor, text: string): void {
    if (this.entries.length >= MaxEntries) {
      this.dropped++
      return
    }
    this.entries.push({ at: this.now(), actor, text })
  }

  /** The trace as lines: `   12.500s server  #7 watch rv=105 ...`. */
  format(): string {
    const lines = this.entries.map((entry) =>
      `${(entry.at / 1000).toFixed(3).padStart(9)}s ${entry.actor.padEnd(6)} ${entry.text}`
    )
    if (this.dropped > 0) lines.push(`(${this.dropped} more entries not kept)`)
    return lines.join("\n")
  }
}
