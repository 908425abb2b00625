/**
 * The program against hostile apiservers (issues 30, 42, 46): for each mode a small node:http
 * server on loopback answers the Sandbox list badly, on purpose, on each list path the mode applies
 * to (a paged list, `--list-mode paged`; a streaming list served as kube-apiserver 1.27+ serves it,
 * the program in its default `auto`), and the program runs against it as a user runs it
 * (`--kubeconfig K --output ndjson --duration 20s`, with `--metrics-address` and JSON logs). Each
 * row states what must happen (`hostileModes.ts`: synced with N Sandboxes cached, or refused with a
 * restart reason such as `too-large`; alive to its duration; an RSS ceiling) and is checked against
 * what the program reported (`/metrics`, `/healthz`, exit, stdout) and what the server was asked
 * (`hostileVerdict.ts`). A row that did not do what it names FAILs, and the run exits 1.
 * On demand, never part of `npm test`.
 *
 *   npx tsx test/bench/hostile.ts                                  # every row but two-million's
 *   npx tsx test/bench/hostile.ts --duration 10                    # a smoke run
 *   npx tsx test/bench/hostile.ts --only two-million               # 2,000,000 Sandboxes, paged and streamed
 *   npx tsx test/bench/hostile.ts --only gigabyte-page,baseline/stream --skip gigabyte-page/paged
 *   npx tsx test/bench/hostile.ts --only endless-stream-big/stream --duration 40
 *   npx tsx test/bench/hostile.ts --write-results                  # also writes test/bench/results/<date>-hostile-rss.md
 *   npx tsx test/bench/hostile.ts --program source                 # src/cli/main.ts through tsx, not the bundled bin
 *
 * A mode may need longer than `--duration` to do what it names (`endless-stream-new` and
 * `gigabyte-page` 30 s, `endless-continue` 45 s, `two-million` 180 s): its row runs that long. `two-million` runs only when named (minutes, GiBs).
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
  DefaultMaxListItems,
  DefaultMaxListPageBytes,
  DefaultMaxListPages
} from "../../src/KubeClient.ts"
import { collectionPath } from "../../src/KubeResource.ts"
import { SandboxResource } from "../../src/Sandbox.ts"
import { type Mode, modes, Namespace, type Served } from "./hostileModes.ts"
import {
  did,
  expected,
  judge,
  type ListKind,
  type Observation,
  type Verdict,
  type WatchFigures,
  watchFiguresOf
} from "./hostileVerdict.ts"

const root = fileURLToPath(new URL("../../", import.meta.url))
const Token = "hostile-bench-token"
const argOf = (flag: string) => {
  const at = process.argv.indexOf(flag)
  return at === -1 ? undefined : process.argv[at + 1]
}
/** The program's `--duration`, unless a mode needs longer to do what it names. */
const DurationSeconds = Number(argOf("--duration") ?? "20")
const SampleEveryMs = 200
const ScrapeEveryMs = 500
const ScrapeTimeoutMs = 2_000
const Path_ = collectionPath(SandboxResource, Namespace)
/**
 * What runs: the bundled bin an operator runs (`npx sandbox-watch`, `npm start`), built first; or,
 * with `--program source`, `src/cli/main.ts` through tsx, whose transpiler adds its own memory.
 */
const Program = argOf("--program") ?? "bin"
if (Program !== "bin" && Program !== "source") throw new Error(`--program is bin or source, not ${Program}`)
const ProgramArgs = Program === "bin" ? ["dist/bin/sandbox-watch.js"] : ["--import", "tsx", "src/cli/main.ts"]
const ProgramShown = Program === "bin" ? "node dist/bin/sandbox-watch.js" : "node --import tsx src/cli/main.ts"

// -------------------------------------------------------------------------------------------------
// One row: a mode's server, the program against it on one list path, what it did
// -------------------------------------------------------------------------------------------------

interface Row {
  readonly mode: Mode
  readonly kind: ListKind
  readonly durationS: number
  readonly observation: Observation
  readonly verdict: Verdict
  /** VmRSS (MiB) at a quarter, a half and three quarters of the duration, and the last sample. */
  readonly rssAt: ReadonlyArray<number | undefined>
  readonly wallS: number
  readonly served: Served
  readonly logLine: string
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

/** The body of a GET, or undefined when it failed, answered other than 200, or took too long. */
const get = (url: string): Promise<string | undefined> =>
  new Promise((resolve) => {
    const req = Http.get(url, { timeout: ScrapeTimeoutMs }, (res) => {
      let body = ""
      res.setEncoding("utf8").on("data", (c: string) => (body += c))
      res.on("end", () => resolve(res.statusCode === 200 ? body : undefined))
      res.on("error", () => resolve(undefined))
    })
    req.on("timeout", () => req.destroy())
    req.on("error", () => resolve(undefined))
  })

const isStreamingList = (url: URL) =>
  url.searchParams.get("sendInitialEvents") === "true" || url.searchParams.get("sendInitialEvents") === "1"

const status = (code: number, message: string) =>
  `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"${message}","code":${code}}`

/** The Sandboxes of the first list, as the program's log line said it landed; none when it did not. */
const landedOf = (stderr: string): number | undefined => {
  for (const line of stderr.split("\n")) {
    try {
      const log = JSON.parse(line) as { readonly message?: unknown }
      const said = /^(?:listed|streamed) (\d+) Sandboxes at resourceVersion \S+ \(initial\)/.exec(String(log.message))
      if (said !== null) return Number(said[1])
    } catch {
      // Not a log line.
    }
  }
  return undefined
}

/** The first warning or error the program logged (JSON logs), or a line that is not a log (a crash). */
const firstProblem = (stderr: string): string => {
  for (const line of stderr.split("\n")) {
    if (line.trim() === "") continue
    try {
      const log = JSON.parse(line) as {
        readonly message?: unknown
        readonly logLevel?: unknown
        readonly annotations?: { readonly reason?: unknown }
      }
      if (!["WARN", "ERROR", "FATAL"].includes(String(log.logLevel))) continue
      const reason = typeof log.annotations?.reason === "string" && log.annotations.reason !== ""
        ? ` [${log.annotations.reason}]`
        : ""
      return `${log.logLevel}${reason} ${String(log.message)}`
    } catch {
      return line
    }
  }
  return ""
}

const runRow = async (mode: Mode, kind: ListKind, dir: string): Promise<Row> => {
  const expectation = mode.expect[kind]!
  const durationS = Math.max(DurationSeconds, mode.minDurationS ?? 0)
  const served: Served = { pagedLists: 0, streamingLists: 0, watches: 0, bytes: 0 }
  const server = Http.createServer((req, res) => {
    res.on("error", () => {})
    const url = new URL(req.url ?? "/", "http://x")
    const watching = url.searchParams.get("watch") === "1" || url.searchParams.get("watch") === "true"
    const answer = (code: number, message: string) => {
      const body = status(code, message)
      served.bytes += body.length
      res.writeHead(code, { "content-type": "application/json", "content-length": body.length })
      res.end(body)
    }
    if (req.headers.authorization !== `Bearer ${Token}`) return answer(401, "Unauthorized")
    if (url.pathname !== Path_) return answer(404, `the server could not find ${url.pathname}`)
    if (watching && isStreamingList(url)) {
      served.streamingLists++
      return mode.streamingList === undefined
        ? answer(422, "this mode serves no streaming list")
        : mode.streamingList(req, res, served)
    }
    if (watching) {
      served.watches++
      return mode.watch(req, res, served)
    }
    served.pagedLists++
    return mode.list === undefined ? answer(405, "this mode serves no paged list") : mode.list(req, res, served)
  })
  server.on("clientError", (_e, socket) => socket.destroy())
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const port = (server.address() as AddressInfo).port

  const name = `${mode.id}-${kind}`
  const kubeconfig = Path.join(dir, `${name}.kubeconfig`)
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
  const timeFile = Path.join(dir, `${name}.time`)
  const args = [
    ...ProgramArgs,
    "--kubeconfig",
    kubeconfig,
    "--output",
    "ndjson",
    "--duration",
    `${durationS}s`,
    "--log-format",
    "json",
    "--metrics-address",
    "127.0.0.1:0",
    "--list-mode",
    kind === "paged" ? "paged" : "auto",
    ...(mode.args ?? [])
  ]
  const started = performance.now()
  const command = hasTime ? "/usr/bin/time" : process.execPath
  const child = spawn(command, hasTime ? ["-f", "%M", "-o", timeFile, process.execPath, ...args] : args, {
    cwd: root,
    env: { PATH: process.env["PATH"], HOME: dir },
    stdio: ["ignore", "pipe", "pipe"]
  })
  let told = 0
  let partial = ""
  child.stdout.setEncoding("utf8").on("data", (c: string) => {
    // Counted, not kept: 2,000,000 change lines are a lot of text.
    const lines = (partial + c).split("\n")
    partial = lines.pop() ?? ""
    for (const line of lines) if (line.startsWith(`{"event":"change"`)) told++
  })
  let stderr = ""
  let metricsUrl: string | undefined
  child.stderr.setEncoding("utf8").on("data", (c: string) => {
    if (stderr.length < 4 * 1024 * 1024) stderr += c
    metricsUrl ??= /metrics at (http:\/\/[^\s/]+)\/metrics/.exec(stderr)?.[1]
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

  // What the program says of itself, read while it runs: the last scrape that answered is kept.
  let healthy = 0
  let watch: WatchFigures | undefined
  let scraping = false
  const scraper = setInterval(() => {
    if (scraping || metricsUrl === undefined) return
    scraping = true
    const base = metricsUrl
    void (async () => {
      if ((await get(`${base}/healthz`)) !== undefined) healthy++
      const text = await get(`${base}/metrics`)
      if (text !== undefined) watch = watchFiguresOf(text)
    })().finally(() => (scraping = false))
  }, ScrapeEveryMs)

  let killed = false
  const killAfterMs = (durationS + 40) * 1000
  const killer = setTimeout(() => {
    killed = true
    const pid = child.pid === undefined ? undefined : programPid(child.pid)
    if (pid !== undefined && pid !== child.pid) process.kill(pid, "SIGKILL")
    child.kill("SIGKILL")
  }, killAfterMs)

  const { code, signal } = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on("close", (code, signal) => resolve({ code, signal }))
  )
  const wallS = (performance.now() - started) / 1000
  clearInterval(sampler)
  clearInterval(scraper)
  clearTimeout(killer)
  server.closeAllConnections()
  await new Promise<void>((resolve) => server.close(() => resolve()))

  if (hasTime && existsSync(timeFile)) {
    // /usr/bin/time writes "Command terminated by signal N" or "exited with non-zero status" first.
    const kb = Number(/(\d+)\s*$/.exec(readFileSync(timeFile, "utf8"))?.[1] ?? "0")
    hwm = Math.max(hwm, kb)
  }
  const stderrFile = Path.join(dir, `${name}.stderr`)
  writeFileSync(stderrFile, stderr)
  const rssNear = (s: number) => {
    const at = samples.filter((x) => x.at <= s * 1000).at(-1)
    return at === undefined ? undefined : at.rssKb / 1024
  }
  const last = samples.at(-1)
  const observation: Observation = {
    kind,
    exit: { code, signal, killed },
    peakRssMiB: hwm / 1024,
    defect: /defect|a bug/i.test(stderr),
    served: { pagedLists: served.pagedLists, streamingLists: served.streamingLists },
    healthy,
    watch,
    landed: landedOf(stderr),
    told
  }
  const logLine = firstProblem(stderr)
  return {
    mode,
    kind,
    durationS,
    observation,
    verdict: judge(expectation, observation),
    rssAt: [
      rssNear(durationS / 4),
      rssNear(durationS / 2),
      rssNear(durationS * 3 / 4),
      last === undefined ? undefined : last.rssKb / 1024
    ],
    wallS,
    served,
    logLine: logLine.length > 140 ? logLine.slice(0, 139) + "…" : logLine,
    stderrFile
  }
}

// -------------------------------------------------------------------------------------------------
// The table
// -------------------------------------------------------------------------------------------------

const cell = (text: string) => text.replace(/\|/g, "\\|").replace(/`/g, "'").replace(/\n/g, " ")
const mib = (n: number | undefined) => (n === undefined ? "–" : n.toFixed(0))
const bytes = (n: number) =>
  n >= 1024 * 1024 * 1024
    ? `${(n / 1024 / 1024 / 1024).toFixed(2)} GiB`
    : n >= 1024 * 1024
    ? `${(n / 1024 / 1024).toFixed(1)} MiB`
    : `${(n / 1024).toFixed(1)} KiB`

const exitOf = (o: Observation) =>
  o.exit.killed ? "killed (hung)" : o.exit.signal !== null ? o.exit.signal : String(o.exit.code)

const table = (rows: ReadonlyArray<Row>) =>
  [
    "| row | s | must | did | verdict | peak RSS MiB | RSS MiB at ¼ / ½ / ¾ / last | wall s | exit | paged lists, streaming lists, watches, bytes served | first warning |",
    "|---|---:|---|---|---|---:|---|---:|---:|---|---|",
    ...rows.map((r) =>
      `| ${r.mode.id} / ${r.kind} | ${r.durationS} | ${cell(expected(r.mode.expect[r.kind]!))} | ${
        cell(did(r.observation))
      } | ${r.verdict.pass ? "PASS" : `**FAIL**: ${cell(r.verdict.failures.join("; "))}`} | ${
        r.observation.peakRssMiB.toFixed(0)
      } | ${r.rssAt.map(mib).join(" / ")} | ${r.wallS.toFixed(1)} | ${
        exitOf(r.observation)
      } | ${r.served.pagedLists}, ${r.served.streamingLists}, ${r.served.watches}, ${bytes(r.served.bytes)} | ${
        cell(r.logLine)
      } |`
    )
  ].join("\n")

/** `mode` (each list path it applies to) or `mode/kind`, comma-separated. */
const rowsNamed = (text: string | undefined) =>
  text === undefined ? undefined : new Set(text.split(",").map((s) => s.trim()).filter((s) => s !== ""))

const main = async () => {
  const only = rowsNamed(argOf("--only"))
  const skip = rowsNamed(argOf("--skip")) ?? new Set<string>()
  const named = (set: ReadonlySet<string>, mode: Mode, kind: ListKind) =>
    set.has(mode.id) || set.has(`${mode.id}/${kind}`)
  const chosen = modes.flatMap((mode) =>
    (["paged", "stream"] as const)
      .filter((kind) => mode.expect[kind] !== undefined)
      .filter((kind) =>
        (only === undefined ? mode.onlyWhenNamed === undefined : named(only, mode, kind)) && !named(skip, mode, kind)
      )
      .map((kind) => ({ mode, kind }))
  )
  const left = only === undefined ? modes.filter((m) => m.onlyWhenNamed !== undefined) : []
  if (chosen.length === 0) {
    throw new Error(
      `no such row; the rows: ${
        modes.flatMap((m) => Object.keys(m.expect).map((k) => `${m.id}/${k}`)).join(", ")
      } (a mode's name alone picks each of its list paths)`
    )
  }
  // The bin of this checkout, not one left from an older build; the commit and state it was built from.
  if (Program === "bin") execFileSync(process.execPath, ["scripts/bundle-bin.mjs"], { cwd: root, stdio: "inherit" })
  const commit = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: root, encoding: "utf8" }).trim()
  const dirty = execFileSync("git", ["status", "--porcelain", "--", "src"], { cwd: root, encoding: "utf8" }).trim()
  const dir = mkdtempSync(Path.join(tmpdir(), "hostile-rss-"))
  const rows: Array<Row> = []
  const began = Date.now()
  for (const { kind, mode } of chosen) {
    process.stderr.write(`${mode.id} / ${kind}: ${mode.what}\n`)
    const row = await runRow(mode, kind, dir)
    process.stderr.write(
      `  ${row.verdict.pass ? "PASS" : `FAIL (${row.verdict.failures.join("; ")})`}: peak ${
        row.observation.peakRssMiB.toFixed(0)
      } MiB, ${row.wallS.toFixed(1)} s, exit ${exitOf(row.observation)}; stderr in ${row.stderrFile}\n`
    )
    rows.push(row)
  }
  const out = table(rows)
  const failed = rows.filter((r) => !r.verdict.pass)
  const summary = `${rows.length - failed.length} of ${rows.length} rows PASS` +
    (failed.length === 0 ? "" : `; FAIL: ${failed.map((r) => `${r.mode.id}/${r.kind}`).join(", ")}`)
  const notRun = left.map((m) => `${m.id} not run (${m.onlyWhenNamed}): \`--only ${m.id}\``).join("; ")
  process.stdout.write(`${out}\n\n${summary}\n${notRun === "" ? "" : `${notRun}\n`}`)
  process.stderr.write(`each row's stderr kept in ${dir}\n`)

  if (process.argv.includes("--write-results")) {
    const date = new Date().toISOString().slice(0, 10)
    const resultsDir = Path.join(root, "test/bench/results")
    mkdirSync(resultsDir, { recursive: true })
    const file = Path.join(resultsDir, `${date}-hostile-rss.md`)
    writeFileSync(
      file,
      [
        `# The program against hostile apiservers, ${date}`,
        "",
        `\`npx tsx test/bench/hostile.ts ${process.argv.slice(2).join(" ")}\` at ${commit}${
          dirty === "" ? "" : " (src/ modified)"
        }, Node ${process.version}, ` +
        `${
          hasTime ? "peak RSS by /usr/bin/time (and VmHWM sampled" : "peak RSS by VmHWM sampled"
        } every ${SampleEveryMs} ms` +
        `${hasTime ? ")" : ""}; each row runs \`${ProgramShown} --kubeconfig K --output ndjson ` +
        `--duration <s>s --log-format json --metrics-address 127.0.0.1:0 --list-mode paged|auto\` against its own ` +
        `node:http server on 127.0.0.1 (token auth, namespace ${Namespace}); what it did is read from its /metrics ` +
        `and /healthz every ${ScrapeEveryMs} ms. Budgets: page ${bytes(DefaultMaxListPageBytes)}, error body ` +
        `${bytes(DefaultMaxErrorBodyBytes)}, ${DefaultMaxListPages.toLocaleString("en")} pages, ` +
        `${DefaultMaxListItems.toLocaleString("en")} objects a list, watch line ${bytes(DefaultMaxLineBytes)}. ` +
        `Wall time ${((Date.now() - began) / 1000).toFixed(0)} s in all.`,
        "",
        ...[...new Set(chosen.map((c) => c.mode))].map((m) => `- **${m.id}**: ${m.what}`),
        "",
        out,
        "",
        summary,
        ""
      ].join("\n")
    )
    process.stderr.write(`written: ${Path.relative(root, file)}\n`)
  }
  if (failed.length > 0) process.exitCode = 1
}

await main()
