import { describe, expect, it } from "@effect/vitest"
import { Option } from "effect"
import * as TableView from "../src/cli/TableView.ts"
import type { Sandbox } from "../src/Sandbox.ts"

const at = 1_000_000
const health = {
  synced: true,
  lastHeard: Option.some(at - 3_000),
  answered: true,
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
          metadata: { name: "alpha", resourceVersion: "4", creationTimestamp: new Date(at - 7_200_000).toISOString() },
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
      "NAME            PHASE     READY   SCHEDULED               RESTARTS   AGE   LAST CHANGE   NOTE",
      "alpha           Ready     True    True                    3          2h    2m ago",
      "bravo           Lost      -       -                       0          -     0s ago        Evicted: low memory",
      "charlie         Pending   -       False (Unschedulable)   0          -     5s ago        Unschedulable",
      "gone-recently   (gone)    -       -                       -          -     10s ago",
      "",
      "12:00:00.000 INFO  hello"
    ])
  })

  it("before the first list it says it is waiting; after, that there are none; clipped to the terminal's width", () => {
    const waiting = TableView.render(
      { rows: new Map(), health: { ...health, synced: false, lastHeard: Option.none() }, header: [], logs: [] },
      at,
      { colours: false, width: 20 }
    )
    expect(waiting).toStrictEqual(["not synced yet | la…", "", "NAME   PHASE   READ…", "(waiting for the fi…"])
    const none = TableView.render({ rows: new Map(), health, header: [], logs: [] }, at, { colours: false })
    expect(none[3]).toBe("(no Sandboxes under the selector)")
  })

  const wide = new Map<string, TableView.Row>([
    [
      "alpha",
      row({
        metadata: { name: "alpha", resourceVersion: "4" },
        status: {
          phase: "Lost",
          conditions: [{ type: "Lost", status: "True", reason: "Evicted", message: "the node ran low on memory" }]
        }
      }, 5_000)
    ]
  ])

  it("shows control characters in names and reasons as visible escapes, and cuts a long field", () => {
    const clear = "a\x1b[2J\x1b[31mRED"
    const split = "b\nc"
    const reason = `Evicted\u009b2J\x7f\t${"x".repeat(200)}`
    const hostile = new Map<string, TableView.Row>([
      [clear, row({ metadata: { name: clear, resourceVersion: "1" }, status: { phase: "Ready\r" } }, 0)],
      [
        split,
        row({
          metadata: { name: split, resourceVersion: "2" },
          status: { phase: "Lost", conditions: [{ type: "Lost", status: "True", reason }] }
        }, 0)
      ]
    ])
    const lines = TableView.render({ rows: hostile, health, header: [], logs: [`told ${clear}`] }, at, {
      colours: false
    })
    // No control character reaches the terminal, and each Sandbox is one line.
    for (const line of lines) expect(line).not.toMatch(/[\u0000-\u001f\u007f-\u009f]/)
    expect(lines).toHaveLength(7)
    expect(lines[3]!.startsWith("a\\x1b[2J\\x1b[31mRED   Ready\\r   -")).toBe(true)
    expect(lines[4]!.startsWith(`b\\nc${" ".repeat(18)}Lost      -`)).toBe(true)
    const note = `Evicted\\x9b2J\\x7f\\t${"x".repeat(TableView.MaxCellChars - 1 - 19)}…`
    expect(note).toHaveLength(TableView.MaxCellChars)
    expect(lines[4]!.endsWith(`   ${note}`)).toBe(true)
    expect(lines[6]).toBe("told a\\x1b[2J\\x1b[31mRED")
    expect(TableView.visible("back\\slash \u0085 é")).toBe("back\\\\slash \\x85 é")
  })

  it("fits the width: NOTE is truncated first, then LAST CHANGE goes", () => {
    const full = TableView.render({ rows: wide, health, header: [], logs: [] }, at, { colours: false })
    expect(full[3]).toBe(
      "alpha   Lost    -       -           0          -     5s ago        Evicted: the node ran low on memory"
    )
    const narrower = TableView.render({ rows: wide, health, header: [], logs: [] }, at, { colours: false, width: 80 })
    expect(narrower[2]).toBe("NAME    PHASE   READY   SCHEDULED   RESTARTS   AGE   LAST CHANGE   NOTE")
    expect(narrower[3]).toBe("alpha   Lost    -       -           0          -     5s ago        Evicted: the…")
    expect(narrower[3]).toHaveLength(80)
    const narrow = TableView.render({ rows: wide, health, header: [], logs: [] }, at, { colours: false, width: 60 })
    expect(narrow[2]).toBe("NAME    PHASE   READY   SCHEDULED   RESTARTS   AGE")
    expect(narrow[3]).toBe("alpha   Lost    -       -           0          -")
  })

  it("fits the height: the header stays, the rows end in '… N more', the logs get what is left", () => {
    const many = new Map<string, TableView.Row>(
      Array.from(
        { length: 10 },
        (_, i) => [`s${i}`, row({ metadata: { name: `s${i}`, resourceVersion: "1" } }, 0)] as const
      )
    )
    const lines = TableView.render({ rows: many, health, header: ["watching"], logs: ["a log line"] }, at, {
      colours: false,
      height: 10
    })
    expect(lines).toHaveLength(9)
    expect(lines.slice(0, 4).map((l) => l.split(" ")[0])).toEqual(["watching", "synced", "", "NAME"])
    expect(lines.slice(4).map((l) => l.split(" ")[0])).toEqual(["s0", "s1", "s2", "s3", "…"])
    expect(lines[8]).toBe("… 6 more")
    const roomy = TableView.render({ rows: many, health, header: [], logs: ["a log line"] }, at, {
      colours: false,
      height: 20
    })
    expect(roomy.slice(-2)).toEqual(["", "a log line"])
  })

  it("says why it is not synced within 80 columns, however long the server's URL", () => {
    const server = `https://${"a-very-long-host-name.".repeat(4)}example.internal:6443/a/proxy/path/in/front/of/it`
    const why = "got no answer: connect ECONNREFUSED 10.0.0.1:6443"
    const problem = `GET /apis/jr2.dev/v1alpha1/namespaces/ns/sandboxes?watch=1&labelSelector=jr2.dev%2Frun` +
      `&sendInitialEvents=true&timeoutSeconds=240 to ${server} ${why}; re-listing (streaming) in 30s`
    const notSynced = { ...health, synced: false, lastHeard: Option.none(), cached: 0 }
    const lines = TableView.render(
      {
        rows: new Map(),
        health: notSynced,
        header: [`watching Sandboxes in namespace ns (selector jr2.dev/run) on ${server}, from kubeconfig`],
        logs: [`12:00:00.000 WARN  ${problem}`],
        problem
      },
      at,
      { colours: false, width: 80 }
    )
    expect(lines.every((l) => l.length <= 80)).toBe(true)
    expect(lines[1]).toMatch(/^not synced: /)
    expect(lines[1]).toContain(why)
    // Once synced, the last problem is history: the status line is the counters again.
    const synced = TableView.render({ rows: new Map(), health, header: [], logs: [], problem }, at, {
      colours: false,
      width: 80
    })
    expect(synced[0]).toBe("synced | last heard 3s ago | re-lists 2 | watch restarts 1 | 3 cached")
  })
})
