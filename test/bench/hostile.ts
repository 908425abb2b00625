/**
 * The program against hostile apiservers (issue 30): for each mode a small node:http server on
 * loopback answers the Sandbox list and watch badly, on purpose, and the program runs against it as
 * a user runs it (`--kubeconfig K --output ndjson --duration 20s`). Per mode: peak RSS, RSS over the
 * run, wall time from spawn to exit, exit code, whether stderr says defect or bug, and the first log
 * line that names the problem. On demand, never part of `npm test`.
 *
 *   npx tsx test/bench/hostile.ts                       # every mode; writes test/bench/results/<date>-hostile-rss.md
 *   npx tsx test/bench/hostile.ts --only baseline,endless-page   # some modes; writes nothing
 *   npx tsx test/bench/hostile.ts --only endless-page --duration 90  # longer, to see RSS level off; writes nothing
 *   npx tsx test/bench/hostile.ts --only endless-stream-large --program-args "--max-list-bytes 512Mi"  # other budgets; writes nothing
 *
 * A correct run: no defect, exit 0 at about the duration, RSS bounded by the budgets (a page
 * 128 MiB, an error body 64 KiB, 10,000 pages, a watch line 16 MiB) except where the data is
 * honest and the cache is what needs the memory.
 */
import { execFileSync, spawn } from "node:child_process"
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import {
  DefaultMaxErrorBodyBytes,
  DefaultMaxLineBytes,
  DefaultMaxListPageBytes,
  DefaultMaxListPages
} from "../../src/KubeClient.ts"
import { apiVersion, collectionPath } from "../../src/KubeResource.ts"
import { SandboxResource } from "../../src/Sandbox.ts"

const root = fileURLToPath(new URL("../../", import.meta.url))
const Token = "hostile-bench-token"
const Namespace = "ns"
const durationAt = process.argv.indexOf("--duration")
/** The program's `--duration`; another than 20 s (to see whether RSS levels off) writes no results file. */
const DurationSeconds = durationAt === -1 ? 20 : Number(process.argv[durationAt + 1])
const programArgsAt = process.argv.indexOf("--program-args")
/** More flags for the program (another budget, to choose a default by): a run with them writes no results file. */
const ProgramArgs = programArgsAt === -1
  ? []
  : (process.argv[programArgsAt + 1] ?? "").split(/\s+/).filter((a) => a !== "")
/** Past this the child is killed and the row says so: a hang, not a slow exit. */
const KillAfterMs = (DurationSeconds + 40) * 1000
const SampleEveryMs = 200
const Path_ = collectionPath(SandboxResource, Namespace)
const ApiVersion = apiVersion(SandboxResource)

// -------------------------------------------------------------------------------------------------
// What the servers send
// -------------------------------------------------------------------------------------------------

const sandboxJson = (name: string, status = `{"phase":"Pending"}`) =>
  `{"apiVersion":"${ApiVersion}","kind":"Sandbox","metadata":{"name":"${name}","namespace":"${Namespace}",` +
  `"uid":"uid-${name}","resourceVersion":"1","labels":{"jr2.dev/run":"r1"}},` +
  `"spec":{"resources":{"limits":{"memory":"256Mi"}}},"status":${status}}`

const listJson = (items: ReadonlyArray<string>, resourceVersion = "1", continueToken?: string) =>
  `{"kind":"SandboxList","apiVersion":"${ApiVersion}","metadata":{"resourceVersion":"${resourceVersion}"` +
  `${continueToken === undefined ? "" : `,"continue":"${continueToken}"`}},"items":[${items.join(",")}]}`

const Deep = 100_000
const deepValue = () => "[".repeat(Deep) + "]".repeat(Deep)

interface Counts {
  lists: number
  watches: number
  bytes: number
}

interface Mode {
  readonly id: string
  readonly what: string
  readonly list: (req: Http.IncomingMessage, res: Http.ServerResponse, counts: Counts) => void
  readonly watch: (req: Http.IncomingMessage, res: Http.ServerResponse, counts: Counts) => void
}

/** Writes what `next` gives until it gives undefined (then ends) or the client goes, minding backpressure. */
const pump = (res: Http.ServerResponse, counts: Counts, next: () => string | Buffer | undefined) => {
  const go = () => {
    while (!res.destroyed && !res.writableEnded) {
      const chunk = next()
      if (chunk === undefined) {
        res.end()
        return
      }
      counts.bytes += chunk.length
      if (!res.write(chunk)) {
        res.once("drain", go)
        return
      }
    }
  }
  go()
}

const json200 = (res: Http.ServerResponse) => {
  res.writeHead(200, { "content-type": "application/json" })
  res.flushHeaders()
}

const sendJson = (res: Http.ServerResponse, counts: Counts, body: string, status = 200) => {
  counts.bytes += Buffer.byteLength(body)
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) })
  res.end(body)
}

/** A watch that answers and then says nothing (no bookmarks), until the client goes. */
const quietWatch: Mode["watch"] = (_req, res) => json200(res)

/**
 * A quiet watch that refuses a streaming list as kube-apiserver 1.20 does (422), so the program's
 * `auto` pages: for the modes whose hostility is in the paged list.
 */
const quietWatchPagedOnly: Mode["watch"] = (req, res, counts) => {
  if (new URL(req.url ?? "/", "http://x").searchParams.get("sendInitialEvents") !== "true") {
    return quietWatch(req, res, counts)
  }
  sendJson(
    res,
    counts,
    `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch","reason":"Invalid","code":422}`,
    422
  )
}

/** A streaming list's watch that pumps what `next` makes for ever, never its end bookmark; other watches are quiet. */
const endlessStreamingList = (makeNext: () => () => string | Buffer): Mode["watch"] => (req, res, counts) => {
  if (new URL(req.url ?? "/", "http://x").searchParams.get("sendInitialEvents") !== "true") {
    return quietWatch(req, res, counts)
  }
  json200(res)
  pump(res, counts, makeNext())
}

/** A watch that sends these lines, then says nothing. */
const watchSending = (lines: () => ReadonlyArray<string>): Mode["watch"] => (_req, res, counts) => {
  json200(res)
  for (const line of lines()) {
    counts.bytes += line.length
    res.write(line)
  }
}

const tenSandboxes: Mode["list"] = (_req, res, counts) =>
  sendJson(res, counts, listJson(Array.from({ length: 10 }, (_, i) => sandboxJson(`s-${i}`))))

const continueOf = (req: Http.IncomingMessage) => new URL(req.url ?? "/", "http://x").searchParams.get("continue")

const Spaces = Buffer.alloc(64 * 1024, " ")
const Xs = Buffer.alloc(64 * 1024, "x")

/** About 1 MiB of list items, each followed by a comma (names repeat from chunk to chunk). */
const itemChunk = (() => {
  const items: Array<string> = []
  let size = 0
  for (let i = 0; size < 1024 * 1024; i++) {
    const item = sandboxJson(`big-${i}`) + ","
    items.push(item)
    size += item.length
  }
  return Buffer.from(items.join(""))
})()

/** A Sandbox whose Ready condition's message is 256 KiB (etcd takes objects up to 1.5 MiB). */
const LargeMessage = "m".repeat(256 * 1024)
const largeSandboxJson = (name: string) =>
  sandboxJson(name, `{"phase":"Pending","conditions":[{"type":"Ready","status":"False","message":"${LargeMessage}"}]}`)

const TwoMillion = 2_000_000
const PageOf = 500
const smallSandbox = (i: number) =>
  `{"apiVersion":"${ApiVersion}","kind":"Sandbox","metadata":{"name":"m-${i}","namespace":"${Namespace}",` +
  `"resourceVersion":"1","labels":{"jr2.dev/run":"r1"}}}`

const modes: ReadonlyArray<Mode> = [
  {
    id: "endless-page",
    what: "a list page that never ends (200, the JSON opening, then spaces for ever)",
    list: (_req, res, counts) => {
      json200(res)
      let opened = false
      pump(res, counts, () => {
        if (opened) return Spaces
        opened = true
        return `{"kind":"SandboxList","apiVersion":"${ApiVersion}","metadata":{"resourceVersion":"1"},"items":[`
      })
    },
    watch: quietWatch
  },
  {
    id: "endless-500",
    what: "a 500 whose body never ends (a Status opening, then `x` for ever)",
    list: (_req, res, counts) => {
      res.writeHead(500, { "content-type": "application/json" })
      let opened = false
      pump(res, counts, () => {
        if (opened) return Xs
        opened = true
        return `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","code":500,"message":"`
      })
    },
    watch: quietWatch
  },
  {
    id: "endless-continue",
    what: "a list whose `continue` never ends (a fresh token on every page, one item a page)",
    list: (_req, res, counts) => {
      const n = counts.lists
      sendJson(
        res,
        counts,
        listJson([sandboxJson(`c-${n}`)], "1", `token-${n + 1}-${Math.random().toString(36).slice(2)}`)
      )
    },
    watch: quietWatchPagedOnly
  },
  {
    id: "endless-stream-repeat",
    what:
      "a streaming list that sends the same Sandbox as ADDED for ever, never its end bookmark (issue 42: ~15 MB/s before)",
    list: tenSandboxes,
    watch: endlessStreamingList(() => {
      const line = Buffer.from(`{"type":"ADDED","object":${sandboxJson("same")}}\n`.repeat(256))
      return () => line
    })
  },
  {
    id: "endless-stream-new",
    what:
      "a streaming list that sends a new Sandbox as ADDED for ever, never its end bookmark (held by name: stops at maxListItems)",
    list: tenSandboxes,
    watch: endlessStreamingList(() => {
      let n = 0
      return () => {
        const lines: Array<string> = []
        for (let i = 0; i < 256; i++) lines.push(`{"type":"ADDED","object":${sandboxJson(`n-${n++}`)}}\n`)
        return lines.join("")
      }
    })
  },
  {
    id: "endless-stream-large",
    what: "a streaming list that sends a new Sandbox with a 256 KiB condition message as ADDED for ever, never its " +
      "end bookmark (issue 46: out of heap in 24 s before; held by its bytes: stops at maxListBytes)",
    list: tenSandboxes,
    watch: endlessStreamingList(() => {
      let n = 0
      return () => `{"type":"ADDED","object":${largeSandboxJson(`l-${n++}`)}}\n`
    })
  },
  {
    id: "endless-continue-large",
    what: "a paged list (the streaming request refused with 422) whose pages hold 16 new Sandboxes with a 256 KiB " +
      "condition message each, its continue never ending (stops at maxListBytes)",
    list: (_req, res, counts) => {
      const n = counts.lists
      sendJson(
        res,
        counts,
        listJson(Array.from({ length: 16 }, (_, i) => largeSandboxJson(`p-${n}-${i}`)), "1", `token-${n + 1}`)
      )
    },
    watch: quietWatchPagedOnly
  },
  {
    id: "gigabyte-page",
    what: "a 1 GiB list page, streamed (must be refused at the 128 MiB page budget)",
    list: (_req, res, counts) => {
      json200(res)
      const opening = `{"kind":"SandboxList","apiVersion":"${ApiVersion}","metadata":{"resourceVersion":"1"},"items":[`
      const chunks = Math.floor((1024 * 1024 * 1024 - opening.length) / itemChunk.length)
      let sent = -1
      pump(res, counts, () => {
        sent++
        if (sent === 0) return opening
        if (sent <= chunks) return itemChunk
        if (sent === chunks + 1) return sandboxJson("last") + "]}"
        return undefined
      })
    },
    watch: quietWatch
  },
  {
    id: "deep-list-item",
    what: "a list item nested 100,000 deep (`status.phase`) beside a normal item, then a quiet watch",
    list: (_req, res, counts) =>
      sendJson(res, counts, listJson([sandboxJson("deep", `{"phase":${deepValue()}}`), sandboxJson("normal")])),
    watch: quietWatch
  },
  {
    id: "deep-watch-event",
    what: "a normal list, then a watch event nested 100,000 deep (`status.phase`), then quiet",
    list: (_req, res, counts) => sendJson(res, counts, listJson([sandboxJson("normal")])),
    watch: watchSending(() => [
      `{"type":"ADDED","object":${
        sandboxJson("deep", `{"phase":${deepValue()}}`).replace(`"resourceVersion":"1"`, `"resourceVersion":"2"`)
      }}\n`
    ])
  },
  {
    id: "managed-fields-line",
    what: "a normal list, then a watch line of `\"managedFields\":[` repeated to 8 MiB, never closed (then a newline)",
    list: (_req, res, counts) => sendJson(res, counts, listJson([sandboxJson("normal")])),
    watch: watchSending(() => {
      const head =
        `{"type":"ADDED","object":{"apiVersion":"${ApiVersion}","kind":"Sandbox","metadata":{"name":"mf","namespace":"${Namespace}",`
      const key = `"managedFields":[`
      return [head + key.repeat(Math.floor((8 * 1024 * 1024 - head.length) / key.length)) + "\n"]
    })
  },
  {
    id: "two-million",
    what: "a list of 2,000,000 small items in pages of 500 (honest but huge: the cache's memory), then a quiet watch",
    list: (req, res, counts) => {
      const page = Number(continueOf(req)?.replace("page-", "") ?? "0")
      const from = page * PageOf
      const items = Array.from({ length: Math.min(PageOf, TwoMillion - from) }, (_, i) => smallSandbox(from + i))
      const last = from + PageOf >= TwoMillion
      sendJson(res, counts, listJson(items, "1", last ? undefined : `page-${page + 1}`))
    },
    watch: quietWatch
  },
  {
    id: "baseline",
    what: "a normal list of 10 Sandboxes and a quiet watch",
    list: tenSandboxes,
    watch: quietWatch
  }
]

// -------------------------------------------------------------------------------------------------
// One mode: its server, the program against it, what it did
// -------------------------------------------------------------------------------------------------

interface Row {
  readonly mode: Mode
  readonly peakMiB: number
  /** VmRSS (MiB) at a quarter, a half and three quarters of the duration, and the last sample. */
  readonly rssAt: ReadonlyArray<number | undefined>
  readonly wallS: number
  readonly exit: string
  readonly defect: boolean
  readonly logLine: string
  readonly synced: boolean
  readonly changes: number
  readonly counts: Counts
  readonly stderrFile: string
}

const hasTime = existsSync("/usr/bin/time")

const statusKb = (pid: number, field: "VmHWM" | "VmRSS"): number | undefined => {
  try {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(readFileSync(`/proc/${pid}/status`, "utf8"))
    return m === null ? undefined : Number(m[1])
  } catch {
    return undefined
  }
}

/** The program's own pid: under /usr/bin/time, time's child. */
const programPid = (pid: number): number | undefined => {
  if (!hasTime) return pid
  try {
    const children = readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(/\s+/)
    return children[0] === undefined || children[0] === "" ? undefined : Number(children[0])
  } catch {
    return undefined
  }
}

const runMode = async (mode: Mode, dir: string): Promise<Row> => {
  const counts: Counts = { lists: 0, watches: 0, bytes: 0 }
  const server = Http.createServer((req, res) => {
    res.on("error", () => {})
    const url = new URL(req.url ?? "/", "http://x")
    if (req.headers.authorization !== `Bearer ${Token}`) {
      sendJson(res, counts, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":401}`, 401)
    } else if (url.pathname !== Path_) {
      sendJson(res, counts, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":404}`, 404)
    } else if (url.searchParams.get("watch") === "1" || url.searchParams.get("watch") === "true") {
      counts.watches++
      mode.watch(req, res, counts)
    } else {
      mode.list(req, res, counts)
      counts.lists++
    }
  })
  server.on("clientError", (_e, socket) => socket.destroy())
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const port = (server.address() as AddressInfo).port

  const kubeconfig = Path.join(dir, `${mode.id}.kubeconfig`)
  writeFileSync(
    kubeconfig,
    JSON.stringify({
      apiVersion: "v1",
      kind: "Config",
      "current-context": "hostile",
      clusters: [{ name: "hostile", cluster: { server: `http://127.0.0.1:${port}` } }],
      contexts: [{ name: "hostile", context: { cluster: "hostile", user: "me", namespace: Namespace } }],
      users: [{ name: "me", user: { token: Token } }]
    })
  )
  const timeFile = Path.join(dir, `${mode.id}.time`)
  const args = [
    "--import",
    "tsx",
    "src/cli/main.ts",
    "--kubeconfig",
    kubeconfig,
    "--output",
    "ndjson",
    "--duration",
    `${DurationSeconds}s`,
    ...ProgramArgs
  ]
  const started = performance.now()
  const child = hasTime
    ? spawn("/usr/bin/time", ["-f", "%M", "-o", timeFile, process.execPath, ...args], {
      cwd: root,
      env: { PATH: process.env["PATH"], HOME: dir },
      stdio: ["ignore", "pipe", "pipe"]
    })
    : spawn(process.execPath, args, {
      cwd: root,
      env: { PATH: process.env["PATH"], HOME: dir },
      stdio: ["ignore", "pipe", "pipe"]
    })
  let stdout = ""
  let stderr = ""
  child.stdout.setEncoding("utf8").on("data", (c: string) => {
    // Only the line kinds are kept: a change line of a 2,000,000-item list is a lot of text.
    stdout += c.replace(/"sandbox":.*$/gm, "")
  })
  child.stderr.setEncoding("utf8").on("data", (c: string) => {
    if (stderr.length < 4 * 1024 * 1024) stderr += c
  })

  let hwm = 0
  const samples: Array<{ readonly at: number; readonly rssKb: number }> = []
  const sampler = setInterval(() => {
    const pid = child.pid === undefined ? undefined : programPid(child.pid)
    if (pid === undefined) return
    const h = statusKb(pid, "VmHWM")
    const r = statusKb(pid, "VmRSS")
    if (h !== undefined) hwm = Math.max(hwm, h)
    if (r !== undefined) samples.push({ at: performance.now() - started, rssKb: r })
  }, SampleEveryMs)
  let killed = false
  const killer = setTimeout(() => {
    killed = true
    const pid = child.pid === undefined ? undefined : programPid(child.pid)
    if (pid !== undefined && pid !== child.pid) process.kill(pid, "SIGKILL")
    child.kill("SIGKILL")
  }, KillAfterMs)

  const { code, signal } = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on("close", (code, signal) => resolve({ code, signal }))
  )
  const wallS = (performance.now() - started) / 1000
  clearInterval(sampler)
  clearTimeout(killer)
  server.closeAllConnections()
  await new Promise<void>((resolve) => server.close(() => resolve()))

  if (hasTime && existsSync(timeFile)) {
    const kb = Number(/(\d+)\s*$/.exec(readFileSync(timeFile, "utf8"))?.[1] ?? "0")
    hwm = Math.max(hwm, kb)
  }
  const stderrFile = Path.join(dir, `${mode.id}.stderr`)
  writeFileSync(stderrFile, stderr)
  const lines = stderr.split("\n").filter((l) => l.trim() !== "")
  // The first warning or error names the problem; a clean run has none, so its first log line then.
  const logs = lines.filter((l) => !l.startsWith("sandbox-watch: watching Sandboxes"))
  const logLine = logs.find((l) => /\b(WARN|ERROR|FATAL)\b|error|defect|a bug/i.test(l)) ?? logs[0] ?? ""
  const outLines = stdout.split("\n")
  const rssNear = (s: number) => {
    const at = samples.filter((x) => x.at <= s * 1000).at(-1)
    return at === undefined ? undefined : at.rssKb / 1024
  }
  const last = samples.at(-1)
  return {
    mode,
    peakMiB: hwm / 1024,
    rssAt: [
      rssNear(DurationSeconds / 4),
      rssNear(DurationSeconds / 2),
      rssNear(DurationSeconds * 3 / 4),
      last === undefined ? undefined : last.rssKb / 1024
    ],
    wallS,
    exit: killed ? `killed at ${KillAfterMs / 1000} s` : signal !== null ? signal : String(code),
    defect: /defect|a bug/i.test(stderr),
    logLine: logLine.length > 160 ? logLine.slice(0, 159) + "…" : logLine,
    synced: outLines.some((l) => l === `{"event":"synced"}`),
    changes: outLines.filter((l) => l.startsWith(`{"event":"change"`)).length,
    counts,
    stderrFile
  }
}

// -------------------------------------------------------------------------------------------------
// The table
// -------------------------------------------------------------------------------------------------

const cell = (text: string) => text.replace(/\|/g, "\\|").replace(/`/g, "'")
const mib = (n: number | undefined) => (n === undefined ? "–" : n.toFixed(0))
const bytes = (n: number) =>
  n >= 1024 * 1024 * 1024
    ? `${(n / 1024 / 1024 / 1024).toFixed(2)} GiB`
    : n >= 1024 * 1024
    ? `${(n / 1024 / 1024).toFixed(1)} MiB`
    : `${(n / 1024).toFixed(1)} KiB`

const table = (rows: ReadonlyArray<Row>) =>
  [
    `| mode | peak RSS MiB | RSS MiB at ${DurationSeconds / 4} / ${DurationSeconds / 2} / ${
      DurationSeconds * 3 / 4
    } s / last | wall s | exit | defect? | synced, changes | lists, watches, bytes served | first log line |`,
    "|---|---:|---|---:|---:|:---:|---|---|---|",
    ...rows.map((r) =>
      `| ${r.mode.id} | ${r.peakMiB.toFixed(0)} | ${r.rssAt.map(mib).join(" / ")} | ${
        r.wallS.toFixed(1)
      } | ${r.exit} | ${r.defect ? "**yes**" : "no"} | ${
        r.synced ? "synced" : "not synced"
      }, ${r.changes} | ${r.counts.lists}, ${r.counts.watches}, ${bytes(r.counts.bytes)} | ${cell(r.logLine)} |`
    )
  ].join("\n")

const main = async () => {
  const onlyAt = process.argv.indexOf("--only")
  const only = onlyAt === -1 ? undefined : new Set((process.argv[onlyAt + 1] ?? "").split(","))
  const chosen = modes.filter((m) => only === undefined || only.has(m.id))
  if (chosen.length === 0) throw new Error(`no such mode; the modes: ${modes.map((m) => m.id).join(", ")}`)
  const dir = mkdtempSync(Path.join(tmpdir(), "hostile-rss-"))
  const rows: Array<Row> = []
  const began = Date.now()
  for (const mode of chosen) {
    process.stderr.write(`${mode.id}: ${mode.what}\n`)
    const row = await runMode(mode, dir)
    process.stderr.write(
      `  peak ${row.peakMiB.toFixed(0)} MiB, ${row.wallS.toFixed(1)} s, exit ${row.exit}; stderr in ${row.stderrFile}\n`
    )
    rows.push(row)
  }
  const out = table(rows)
  process.stdout.write(out + "\n")

  if (only !== undefined || durationAt !== -1 || programArgsAt !== -1) return
  const commit = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: root, encoding: "utf8" }).trim()
  const dirty = execFileSync("git", ["status", "--porcelain", "--", "src"], { cwd: root, encoding: "utf8" }).trim()
  const date = new Date().toISOString().slice(0, 10)
  const resultsDir = Path.join(root, "test/bench/results")
  mkdirSync(resultsDir, { recursive: true })
  const file = Path.join(resultsDir, `${date}-hostile-rss.md`)
  writeFileSync(
    file,
    [
      `# The program against hostile apiservers, ${date}`,
      "",
      `\`npx tsx test/bench/hostile.ts\` at ${commit}${
        dirty === "" ? "" : " (src/ modified)"
      }, Node ${process.version}, ` +
      `${
        hasTime ? "peak RSS by /usr/bin/time (and VmHWM sampled" : "peak RSS by VmHWM sampled"
      } every ${SampleEveryMs} ms` +
      `${hasTime ? ")" : ""}; each mode runs \`node --import tsx src/cli/main.ts --kubeconfig K --output ndjson ` +
      `--duration ${DurationSeconds}s\` against its own node:http server on 127.0.0.1 (token auth, namespace ${Namespace}). ` +
      `Budgets: page ${bytes(DefaultMaxListPageBytes)}, error body ${bytes(DefaultMaxErrorBodyBytes)}, ` +
      `${DefaultMaxListPages.toLocaleString("en")} pages, watch line ${bytes(DefaultMaxLineBytes)}. ` +
      `Wall time ${((Date.now() - began) / 1000).toFixed(0)} s in all.`,
      "",
      ...chosen.map((m) => `- **${m.id}**: ${m.what}`),
      "",
      out,
      ""
    ].join("\n")
  )
  process.stderr.write(`written: ${Path.relative(root, file)}\n`)
  process.stderr.write(`each mode's stderr kept in ${dir}\n`)
}

await main()
