import { describe, expect, it } from "@effect/vitest"
import { Option } from "effect"
import * as TableView from "../src/cli/TableView.ts"
import type { Sandbox } from "../src/Sandbox.ts"

const at = 1_000_000
const health = {
  synced: true,
  lastHeard: Option.some(at - 3_000),
  relists: 2,
  watchRestarts: 1,
  cached: 3,
  unknown: 0,
  resourceVersion: Option.some("42"),
  subscribers: 1
}
const row = (sandbox: Sandbox | undefined, agoMillis: number): TableView.Row => ({
  sandbox: Option.fromNullable(sandbox),
  changedAt: at - agoMillis
})

describe("TableView.render", () => {
  it("draws the header, the status line, a row per Sandbox by name, and the latest logs", () => {
    const rows = new Map<string, TableView.Row>([
      [
        "charlie",
        row({
          metadata: { name: "charlie", resourceVersion: "9" },
          status: {
            phase: "Pending",
            conditions: [{ type: "Scheduled", status: "False", reason: "Unschedulable", message: "0/3 nodes" }]
          }
        }, 5_000)
      ],
      [
        "alpha",
        row({
          metadata: { name: "alpha", resourceVersion: "4" },
          status: {
            phase: "Ready",
            conditions: [{ type: "Scheduled", status: "True" }, { type: "Ready", status: "True" }],
            harness: { restartCount: 2 },
            effector: { restartCount: 1 }
          }
        }, 150_000)
      ],
      [
        "bravo",
        row({
          metadata: { name: "bravo", resourceVersion: "7" },
          status: {
            phase: "Lost",
            conditions: [{ type: "Lost", status: "True", reason: "Evicted", message: "low memory" }]
          }
        }, 0)
      ],
      ["gone-recently", row(undefined, 10_000)],
      ["gone-long-ago", row(undefined, 61_000)]
    ])
    const lines = TableView.render(
      { rows, health, header: ["watching demo"], logs: ["12:00:00.000 INFO  hello"] },
      at,
      { colours: false }
    )
    expect(lines).toStrictEqual([
      "watching demo",
      "synced | last heard 3s ago | re-lists 2 | watch restarts 1 | 3 cached",
      "",
      "NAME            PHASE     READY   SCHEDULED               RESTARTS   LAST CHANGE   NOTE",
      "alpha           Ready     True    True                    3          2m ago",
      "bravo           Lost      -       -                       0          0s ago        Evicted: low memory",
      "charlie         Pending   -       False (Unschedulable)   0          5s ago        Unschedulable",
      "gone-recently   (gone)    -       -                       -          10s ago",
      "",
      "12:00:00.000 INFO  hello"
    ])
  })

  it("says so when there is no Sandbox, and clips to the terminal's width", () => {
    const lines = TableView.render(
      { rows: new Map(), health: { ...health, synced: false, lastHeard: Option.none() }, header: [], logs: [] },
      at,
      { colours: false, width: 20 }
    )
    expect(lines).toStrictEqual(["not synced yet | las", "", "NAME   PHASE   READY", "(no Sandboxes under ", ""])
  })
})
