/**
 * The benchmark runner: starts the replay server, runs every program of every scenario in a fresh
 * child process per round, alternating programs round by round, and prints markdown tables of
 * medians with min–max, the ratios the targets are stated in, and the command that reproduces them.
 *
 *   npm run bench                         # full run (N = 10,000, M = 200,000, 5 rounds)
 *   npm run bench -- --quick              # development: smaller N and M, 2 rounds
 *   npm run bench -- --only sync,heap     # some scenarios
 *   npm run bench -- --programs sw@20,floor@20
 *   npm run bench -- --profile sw@20:tp   # one child's measured window profiled, and its hottest functions
 *   npm run bench -- --profile sw@20:lat --allocations   # what allocates, by function
 *   npm run bench -- --snapshot sw@20     # the heap scenario with a heap snapshot, by constructor
 *   npm run bench -- --snapshot sw@20 --only storm   # what grows during the reconnect storm
 *   npm run bench -- --snapshot sw@20 --only fanout  # what 10,000 idle subscriptions hold
 *   npm run bench -- --only sync --no-apiserver      # without the real kube-apiserver rows
 *   npm run bench -- --only sync,heap,scale          # N and 10 × N (`--scale-n`): linear or not
 *   npm run bench -- --only scale --scale-apiserver  # the scale rows also against the real kube-apiserver
 *   npm run bench -- --only lat --node-flags=--max-semi-space-size=64   # V8 flags for every child
 *   npm run bench -- --only startup       # the built program's start-up: --help, --version, to synced
 *
 * The sync scenario also runs every program against a real kube-apiserver on etcd, 1.37.2 (or
 * `KUBE_APISERVER_VERSION`), when `bash test/apiserver/build.sh` has built it (started once,
 * seeded with the same N Sandboxes).
 *
 * Programs: `floor@20`, `sw@20` (sandbox-watch), `floor@22`, `sw@22`, `cn2@22` (client-node 2.0.1,
 * which needs Node >= 22.19), `cn1@20` (client-node 1.4.0, opt-in). Node 22 is the `node` package
 * installed in test/bench (`npm ci --prefix test/bench`), as is client-node.
 */
import { spawn, spawnSync } from "node:child_process"
import type { ChildProcess } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import type { DataShape } from "./data.ts"
import { markdown } from "./profile.ts"
import type { ChildParams, ChildResult, Fanout, Scenario } from "./protocol.ts"
import { modeOf, SecretEnv } from "./protocol.ts"
import * as RealServer from "./realServer.ts"
import type { RealTarget } from "./realServer.ts"
import * as Server from "./server.ts"
import { diffMarkdown as snapshotDiff, markdown as snapshotMarkdown } from "./snapshot.ts"
import * as Startup from "./startup.ts"

const here = Path.dirname(fileURLToPath(import.meta.url))
const root = Path.resolve(here, "../..")
const cacheDir = Path.join(here, ".cache")
const node22 = Path.join(here, "node_modules/node/bin/node")
const peerDir = Path.join(here, "node_modules/@kubernetes/client-node")

// ---------------------------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------------------------

const argv = process.argv.slice(2)
const flag = (name: string) => argv.includes(`--${name}`)
const option = (name: string): string | undefined => {
  const at = argv.indexOf(`--${name}`)
  return at >= 0 ? argv[at + 1] : argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3)
}
if (flag("help")) {
  console.log(Fs.readFileSync(fileURLToPath(import.meta.url), "utf8").split("*/")[0])
  process.exit(0)
}
const quick = flag("quick")
/** Child stderr as it comes, and (with BENCH_TRACE=1) every request the replay server answers. */
const verbose = flag("verbose")
const num = (name: string, full: number, small: number) => Number(option(name) ?? (quick ? small : full))
/** V8 flags for every child (e.g. `--node-flags=--max-semi-space-size=64`): a deployment's tuning. */
const childNodeFlags = option("node-flags")?.split(" ").filter((f) => f !== "") ?? []
const shape: DataShape = {
  n: num("n", 10_000, 2_000),
  m: num("m", 200_000, 20_000),
  hot: num("hot", 100, 100),
  storm: num("storm", 10_000, 1_000),
  // Issue 31's set-up: 10,000 events, whose second half comes after the first ~5,000 events' warm-up
  // (`test/bench/results/2026-12-07-warm-up.md`).
  latencyEvents: num("latency-events", 10_000, 1_000),
  latencyRate: num("latency-rate", 1_000, 1_000)
}
const idleSubscribers = num("idle", 10_000, 2_000)
/** The scale scenario's N: sync and heap again at ten times the size, to see they stay linear. */
const scaleN = num("scale-n", shape.n * 10, shape.n * 10)
const scaleShape: DataShape = { ...shape, n: scaleN }
const rounds = num("rounds", 5, 2)
/** Start-ups are short and noisy: more of them. */
const startupRounds = num("startup-rounds", 10, 5)
const childTimeoutMs = num("timeout", 600_000, 300_000)
/** `startup` runs no child of child.ts: the built program itself, started as a user starts it. */
type RunScenario = Scenario | "startup"
const allScenarios: ReadonlyArray<RunScenario> = ["startup", "sync", "tp", "heap", "fanout", "storm", "lat", "scale"]
const scenarios = (option("only")?.split(",") ?? allScenarios) as ReadonlyArray<RunScenario>
for (const s of scenarios) {
  if (!allScenarios.includes(s)) throw new Error(`unknown scenario ${s}; one of ${allScenarios.join(", ")}`)
}

// ---------------------------------------------------------------------------------------------
// Programs
// ---------------------------------------------------------------------------------------------

interface Program {
  readonly id: string
  readonly client: "floor" | "clientNode" | "sandboxWatch"
  readonly node: string
  readonly nodeName: string
  readonly peer?: string
  readonly label: string
}

const node22Available = Fs.existsSync(node22)
const peerAvailable = Fs.existsSync(peerDir)
const nodeOf = (v: "20" | "22") => (v === "20" ? process.execPath : node22)
const nodeVersion = (v: "20" | "22") => (v === "20" ? process.version : `v22 (test/bench)`)
const knownPrograms: Record<string, Program> = {
  "floor@20": { id: "floor@20", client: "floor", node: nodeOf("20"), nodeName: "20", label: "floor" },
  "sw@20": { id: "sw@20", client: "sandboxWatch", node: nodeOf("20"), nodeName: "20", label: "sandbox-watch" },
  "cn1@20": {
    id: "cn1@20",
    client: "clientNode",
    node: nodeOf("20"),
    nodeName: "20",
    peer: "client-node-1",
    label: "client-node 1.4.0"
  },
  "floor@22": { id: "floor@22", client: "floor", node: nodeOf("22"), nodeName: "22", label: "floor" },
  "sw@22": { id: "sw@22", client: "sandboxWatch", node: nodeOf("22"), nodeName: "22", label: "sandbox-watch" },
  "cn2@22": {
    id: "cn2@22",
    client: "clientNode",
    node: nodeOf("22"),
    nodeName: "22",
    peer: "@kubernetes/client-node",
    label: "client-node 2.0.1"
  }
}
const requested = option("programs")?.split(",") ?? ["floor@22", "cn2@22", "sw@22", "floor@20", "sw@20"]
const skipped: Array<string> = []
const programs: Array<Program> = []
for (const id of requested) {
  const program = knownPrograms[id]
  if (program === undefined) throw new Error(`unknown program ${id}; one of ${Object.keys(knownPrograms).join(", ")}`)
  if (program.nodeName === "22" && !node22Available) {
    skipped.push(`${id}: no Node 22 in test/bench (run \`npm ci --prefix test/bench\`)`)
  } else if (program.client === "clientNode" && !peerAvailable) {
    skipped.push(`${id}: client-node not installed (run \`npm ci --prefix test/bench\`)`)
  } else programs.push(program)
}

/** One line of a scenario's table: a program, with the variant the scenario runs it in. */
interface Entry {
  readonly key: string
  readonly program: Program
  readonly label: string
  readonly pageSize: number
  readonly fanout?: Fanout
  readonly slim?: boolean
  readonly waits?: boolean
  /** Against the real kube-apiserver instead of the replay server. */
  readonly real?: boolean
  /** Lists as a streaming list (`listMode: "stream"`) instead of in pages. */
  readonly stream?: boolean
  /** Asks for the streaming list gzipped (`gzipStreamingLists`; only the real 1.37+ compresses). */
  readonly gzip?: boolean
}

const realLabel = `against the real kube-apiserver ${RealServer.KubeVersion} (etcd)`

/**
 * The streaming-list rows of the sync and scale scenarios (issue 28): sandbox-watch and the floor
 * again, listing with one `sendInitialEvents` watch instead of pages. client-node 2.0.1's informer
 * has no streaming list, so it has none. The latency row has sandbox-watch's too: what a modern
 * server gives the default `auto`, whose list runs the watch's own line, parse and decode code 10,000
 * times before the first event (`test/bench/results/2026-12-07-warm-up.md`).
 */
const streamEntriesOf = (
  scenario: Scenario,
  program: Program,
  base: { readonly program: Program; readonly label: string },
  pageSize: number
): Array<Entry> =>
  ((scenario === "sync" || scenario === "scale") && program.client !== "clientNode") ||
    (scenario === "lat" && program.client === "sandboxWatch")
    ? [{ ...base, key: `${program.id}/stream`, label: `${base.label}, streaming list`, pageSize, stream: true }]
    : []

const entriesOf = (scenario: Scenario, withRealServer = false): Array<Entry> => {
  const out: Array<Entry> = []
  for (const program of programs) {
    const base = { program, label: `${program.label} (Node ${program.nodeName})` }
    // client-node's informer lists once, unpaged (its listFn is one call); the others page by 500.
    const pageSize = program.client === "clientNode" ? 0 : 500
    if (scenario === "fanout") {
      // Its target is relative to sandbox-watch's own no-subscriber run, so one Node suffices:
      // the project's (20), unless only Node 22 programs were asked for.
      const fanoutNode = programs.some((p) => p.client === "sandboxWatch" && p.nodeName === "20") ? "20" : "22"
      if (program.nodeName !== fanoutNode) continue
      if (program.client === "sandboxWatch") {
        for (const fanout of ["none", "idle", "waits", "hot"] as const) {
          const idle = idleSubscribers.toLocaleString("en")
          const what = {
            none: "no subscriber",
            idle: `${idle} idle subscribers (\`changes\` streams)`,
            waits: `${idle} idle waits (\`waitFor\`)`,
            hot: `${shape.hot} subscribers on the hot names`
          }[fanout]
          out.push({ ...base, key: `${program.id}/${fanout}`, label: `${base.label}, ${what}`, pageSize, fanout })
        }
      } else if (program.client === "floor") out.push({ ...base, key: program.id, pageSize })
      continue
    }
    out.push({ ...base, key: program.id, pageSize })
    if (scenario === "sync" && program.client === "floor") {
      out.push({ ...base, key: `${program.id}/unpaged`, label: `${base.label}, one unpaged list`, pageSize: 0 })
    }
    out.push(...streamEntriesOf(scenario, program, base, pageSize))
    if (scenario === "lat" && program.client === "sandboxWatch") {
      out.push({
        ...base,
        key: `${program.id}/waits`,
        label: `${base.label}, subscribers as \`waitFor\` waits`,
        pageSize,
        waits: true
      })
    }
    if (scenario === "heap" && program.client === "floor") {
      out.push({
        ...base,
        key: `${program.id}/slim`,
        label: `${base.label}, managedFields deleted`,
        pageSize,
        slim: true
      })
    }
  }
  // Every sync line again against the real server, below the replay ones, in the same rounds (and
  // every scale line, with `--scale-apiserver`).
  if ((scenario === "sync" || scenario === "scale") && withRealServer) {
    out.push(...out.map((e) => ({ ...e, key: `${e.key}/real`, label: `${e.label}, ${realLabel}`, real: true })))
    // WatchListCompression (1.37+): the same streaming list asked for gzipped, to see whether it
    // pays on loopback. The replay server sends no gzip, so only against the real server.
    for (const e of [...out]) {
      if (e.real === true && e.stream === true && e.gzip !== true && e.program.client === "sandboxWatch") {
        out.push({ ...e, key: e.key.replace("/real", "/gzip/real"), label: `${e.label}, gzipped`, gzip: true })
      }
    }
  }
  return out
}

// ---------------------------------------------------------------------------------------------
// Children
// ---------------------------------------------------------------------------------------------

let runCounter = 0
/** Children running now, killed if the run is interrupted. */
const liveChildren = new Set<ChildProcess>()

const runChild = (
  entry: Entry,
  scenario: Scenario,
  /** The replay server's url, or the real kube-apiserver (its namespace, CA and token). */
  server: string | RealTarget,
  /** Where to write a V8 profile of the measured window; none when undefined. */
  profileFile?: string,
  /** Node 22's own type stripping instead of tsx: source lines and names survive, for profiles. */
  stripTypes = false,
  /** Where to write a heap snapshot at the end of the heap scenario; none when undefined. */
  snapshotFile?: string
): Promise<ChildResult> => {
  const real = typeof server === "string" ? undefined : server
  const url = typeof server === "string" ? server : server.url
  const namespace = real?.namespace ?? `${modeOf(scenario)}-${process.pid}-${++runCounter}`
  // The token travels by environment only; whatever a child prints is shown without it.
  const redact = (text: string) => (real === undefined ? text : text.split(real.token).join("<token>"))
  const params: ChildParams = {
    client: entry.program.client,
    scenario,
    url,
    namespace,
    shape: scenario === "scale" ? scaleShape : shape,
    pageSize: entry.pageSize,
    ...(entry.fanout === undefined ? {} : { fanout: entry.fanout, idleSubscribers }),
    ...(entry.slim === true ? { slim: true } : {}),
    ...(entry.waits === true ? { waits: true } : {}),
    ...(entry.stream === true ? { listMode: "stream" as const } : {}),
    ...(entry.gzip === true ? { gzip: true } : {}),
    ...(entry.program.peer === undefined ? {} : { peer: entry.program.peer }),
    ...(real === undefined ? {} : { tls: true })
  }
  const secrets = real === undefined ? {} : { [SecretEnv.ca]: real.caPem, [SecretEnv.token]: real.token }
  return new Promise((resolve, reject) => {
    const child = spawn(
      entry.program.node,
      [
        "--expose-gc",
        ...childNodeFlags,
        ...(stripTypes ? ["--experimental-transform-types", "--no-warnings=ExperimentalWarning"] : ["--import", "tsx"]),
        "test/bench/child.ts",
        JSON.stringify(params)
      ],
      {
        cwd: root,
        stdio: ["ignore", "pipe", "pipe"],
        env: {
          ...process.env,
          NODE_OPTIONS: "",
          BENCH_PROFILE: profileFile ?? "",
          BENCH_HEAPSNAPSHOT: snapshotFile ?? "",
          ...secrets
        }
      }
    )
    liveChildren.add(child)
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()))
    child.stderr.on("data", (d: Buffer) => {
      stderr += d.toString()
      if (verbose) process.stderr.write(redact(d.toString()))
    })
    const timer = setTimeout(() => {
      child.kill("SIGKILL")
      reject(new Error(`${entry.key} ${scenario}: no answer in ${childTimeoutMs} ms`))
    }, childTimeoutMs)
    child.on("error", reject)
    child.on("exit", (code) => {
      liveChildren.delete(child)
      clearTimeout(timer)
      const keep = process.env.BENCH_STDOUT
      if (keep !== undefined && keep !== "") Fs.appendFileSync(keep, `== ${entry.key} ${scenario}\n${redact(stdout)}`)
      const line = stdout.trim().split("\n").pop() ?? ""
      if (code === 0 && line.startsWith("{")) return resolve(JSON.parse(line) as ChildResult)
      const why = redact(stderr.trim() || stdout.trim()).split("\n").slice(0, 6).join(" / ")
      reject(new Error(`${entry.key} ${scenario}: exit ${code}: ${why.slice(0, 600)}`))
    })
  })
}

// ---------------------------------------------------------------------------------------------
// Figures
// ---------------------------------------------------------------------------------------------

const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  const mid = Math.floor(s.length / 2)
  return s.length === 0 ? Number.NaN : s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2
}
const fmt = (x: number, digits = 0) =>
  Number.isFinite(x) ? x.toLocaleString("en", { maximumFractionDigits: digits, minimumFractionDigits: digits }) : "—"
const spread = (xs: ReadonlyArray<number>, digits = 0) =>
  xs.length === 0 ? "—" : `${fmt(median(xs), digits)} (${fmt(Math.min(...xs), digits)}–${fmt(Math.max(...xs), digits)})`

type Results = Map<string, Array<Record<string, number>>>

const figure = (results: Results, key: string, name: string) =>
  (results.get(key) ?? []).map((f) => f[name] ?? Number.NaN)
const ratio = (a: number, b: number) => (Number.isFinite(a) && Number.isFinite(b) && b !== 0 ? a / b : Number.NaN)
const verdict = (ok: boolean | undefined) => (ok === undefined ? "" : ok ? "✅" : "❌")

interface Table {
  readonly title: string
  readonly lines: ReadonlyArray<string>
}

/**
 * Under the sync and scale tables: each streaming row against the paged row of the same program on
 * the same server (issue 28's goal: peak RSS ≤ 0.6× paged, time to synced no worse). None when no
 * row streams.
 */
const streamComparison = (entries: ReadonlyArray<Entry>, results: Results): Array<string> => {
  const streamed = entries.filter((e) => e.stream === true)
  if (streamed.length === 0) return []
  const out = [
    "",
    "Streaming list against the same program's paged list on the same server (medians; × floor of a streaming row is against the streaming floor):",
    "",
    "| program | ms to synced × paged | peak RSS × paged | peak RSS − start × paged | goal: RSS ≤ 0.6×, time ≤ 1.0× |",
    "|---|---:|---:|---:|:---:|"
  ]
  for (const e of streamed) {
    const paged = e.key.replace("/stream", "").replace("/gzip", "")
    const m = (key: string, name: string) => median(figure(results, key, name))
    const rTime = ratio(m(e.key, "ms"), m(paged, "ms"))
    const rRss = ratio(m(e.key, "peakRssMB"), m(paged, "peakRssMB"))
    const rGrowth = ratio(
      m(e.key, "peakRssMB") - m(e.key, "rssStartMB"),
      m(paged, "peakRssMB") - m(paged, "rssStartMB")
    )
    const judged = e.program.client === "sandboxWatch" && Number.isFinite(rTime) && Number.isFinite(rRss)
    out.push(
      `| ${e.label} | ${fmt(rTime, 2)} | ${fmt(rRss, 2)} | ${fmt(rGrowth, 2)} | ${
        judged ? `${verdict(rRss <= 0.6)} ${verdict(rTime <= 1.0)}` : ""
      } |`
    )
  }
  return out
}

const tableOf = (
  scenario: Scenario,
  entries: ReadonlyArray<Entry>,
  results: Results,
  /** Lines under the table: what a group of rows ran against, or why it did not run. */
  below: ReadonlyArray<string> = [],
  /** The run's earlier scenarios: the scale table compares with sync and heap at N. */
  earlier: Partial<Record<Scenario, Results>> = {}
): Table => {
  // The floor on the same Node and the same server.
  const floorOf = (e: Entry) =>
    `floor@${e.program.nodeName}${e.stream === true ? "/stream" : ""}${e.real === true ? "/real" : ""}`
  const row = (cells: ReadonlyArray<string>) => `| ${cells.join(" | ")} |`
  const lines: Array<string> = []
  const runs = (e: Entry) => (results.get(e.key) ?? []).length
  switch (scenario) {
    case "sync": {
      lines.push(
        row([
          "program",
          "ms to synced, median (min–max)",
          "× floor",
          "target ≤ 1.1× floor",
          "CPU ms, median",
          "× floor by CPU",
          "peak RSS MB to synced, median (min–max)",
          "RSS MB at start, median",
          "runs"
        ]),
        "|---|---:|---:|:---:|---:|---:|---:|---:|---:|"
      )
      for (const e of entries) {
        const ms = figure(results, e.key, "ms")
        const cpu = figure(results, e.key, "cpuMs")
        const rss = figure(results, e.key, "peakRssMB")
        const r = ratio(median(ms), median(figure(results, floorOf(e), "ms")))
        const rc = ratio(median(cpu), median(figure(results, floorOf(e), "cpuMs")))
        // The target is about the client's own work, which only the replay server isolates.
        const judged = e.program.client === "sandboxWatch" && e.real !== true
        lines.push(
          row([
            e.label,
            spread(ms, 1),
            fmt(r, 2),
            judged ? verdict(r <= 1.1) : "",
            fmt(median(cpu)),
            fmt(rc, 2),
            spread(rss),
            fmt(median(figure(results, e.key, "rssStartMB"))),
            String(runs(e))
          ])
        )
      }
      lines.push(...streamComparison(entries, results))
      if (below.length > 0) lines.push("", ...below)
      return {
        title: `1. Time to synced, N = ${fmt(shape.n)} (list, parse, cache; client-node: its N-th \`add\`)`,
        lines
      }
    }
    case "tp": {
      lines.push(
        row([
          "program",
          "events/s, median (min–max)",
          "× floor",
          "target ≥ 1.0× floor",
          "CPU µs per event, median",
          "× floor by CPU",
          "runs"
        ]),
        "|---|---:|---:|:---:|---:|---:|---:|"
      )
      for (const e of entries) {
        const eps = figure(results, e.key, "eventsPerSec")
        const cpu = figure(results, e.key, "cpuUsPerEvent")
        const r = ratio(median(eps), median(figure(results, floorOf(e), "eventsPerSec")))
        const rc = ratio(median(cpu), median(figure(results, floorOf(e), "cpuUsPerEvent")))
        lines.push(
          row([
            e.label,
            spread(eps),
            fmt(r, 2),
            e.program.client === "sandboxWatch" ? verdict(r >= 1.0) : "",
            fmt(median(cpu), 1),
            fmt(rc, 2),
            String(runs(e))
          ])
        )
      }
      return {
        title: `2. Watch throughput, M = ${fmt(shape.m)} MODIFIED over ${
          fmt(shape.n)
        } names, to the last one cached (and told to its subscriber)`,
        lines
      }
    }
    case "heap": {
      lines.push(
        row(["program", "heap bytes per cached object, median (min–max)", "× floor", "target ≤ 0.7× floor", "runs"]),
        "|---|---:|---:|:---:|---:|"
      )
      for (const e of entries) {
        const b = figure(results, e.key, "perObject")
        const r = ratio(median(b), median(figure(results, floorOf(e), "perObject")))
        lines.push(
          row([
            e.label,
            spread(b),
            fmt(r, 2),
            e.program.client === "sandboxWatch" ? verdict(r <= 0.7) : "",
            String(runs(e))
          ])
        )
      }
      return {
        title: `3. Heap per cached object after GC, N = ${fmt(shape.n)} (heapUsed after sync − before start)`,
        lines
      }
    }
    case "fanout": {
      lines.push(
        row([
          "program",
          "events/s, median (min–max)",
          "× no subscriber",
          "target: idle costs ≤ 10%",
          "CPU µs per event, median",
          "heap bytes per subscriber",
          "runs"
        ]),
        "|---|---:|---:|:---:|---:|---:|---:|"
      )
      for (const e of entries) {
        const eps = figure(results, e.key, "eventsPerSec")
        const base = e.fanout === undefined
          ? Number.NaN
          : median(figure(results, `${e.program.id}/none`, "eventsPerSec"))
        const r = ratio(median(eps), base)
        const cpu = median(figure(results, e.key, "cpuUsPerEvent"))
        const perSubscriber = e.fanout === undefined || e.fanout === "none"
          ? ""
          : fmt(median(figure(results, e.key, "bytesPerSubscriber")))
        lines.push(
          row([
            e.label,
            spread(eps),
            e.fanout === undefined ? "" : fmt(r, 2),
            e.fanout === "idle" || e.fanout === "waits" ? verdict(r >= 0.9) : "",
            fmt(cpu, 1),
            perSubscriber,
            String(runs(e))
          ])
        )
      }
      return {
        title: `4. Fan-out: M = ${fmt(shape.m)} MODIFIED over the ${shape.hot} hot names of ${fmt(shape.n)}`,
        lines
      }
    }
    case "storm": {
      lines.push(
        row([
          "program",
          "resumes/s",
          "resumes/s after the first 10%",
          "CPU ms per resume",
          "heap growth MB, median (max)",
          "of it V8 code space MB",
          "heap growth after the first 10% MB, median (max)",
          "bytes kept per resume after the first 10%",
          "live fibers before → after",
          "subscriptions before → after",
          "target: < 2 MB after warm-up, back to before",
          "runs"
        ]),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|---:|"
      )
      for (const e of entries) {
        const growth = figure(results, e.key, "heapGrowthMB")
        const warmGrowth = figure(results, e.key, "heapGrowthAfterWarmupMB")
        const mbSpread = (
          xs: ReadonlyArray<number>
        ) => (xs.length === 0 ? "—" : `${fmt(median(xs), 2)} (${fmt(Math.max(...xs), 2)})`)
        const fb = figure(results, e.key, "fibersBefore")
        const fa = figure(results, e.key, "fibersAfter")
        const sb = figure(results, e.key, "subsBefore")
        const sa = figure(results, e.key, "subsAfter")
        const isSw = e.program.client === "sandboxWatch"
        const back = fb.every((b, i) => fa[i] === b) && sb.every((b, i) => sa[i] === b)
        lines.push(
          row([
            e.label,
            spread(figure(results, e.key, "reconnectsPerSec")),
            // Beside the target's figure, not instead of it: what the storm runs at once warm.
            spread(figure(results, e.key, "warmResumesPerSec")),
            fmt(median(figure(results, e.key, "cpuMsPerResume")), 2),
            mbSpread(growth),
            fmt(median(figure(results, e.key, "codeGrowthMB")), 2),
            mbSpread(warmGrowth),
            fmt(median(figure(results, e.key, "keptBytesPerResume"))),
            isSw ? `${fb.map((x) => fmt(x)).join(",")} → ${fa.map((x) => fmt(x)).join(",")}` : "",
            isSw ? `${sb.map((x) => fmt(x)).join(",")} → ${sa.map((x) => fmt(x)).join(",")}` : "",
            // The first tenth warms the JIT; what stays after it is what the storm leaks.
            isSw && warmGrowth.length > 0 ? verdict(Math.max(...warmGrowth) < 2 && back) : "",
            String(runs(e))
          ])
        )
      }
      return {
        title: `5. Reconnect storm: ${
          fmt(shape.storm)
        } watches each closed after one event and resumed; ${shape.hot} subscribers`,
        lines
      }
    }
    case "lat": {
      lines.push(
        row([
          "program",
          "p50 ms",
          "p99 ms, median (worst)",
          "p99 of the second half",
          "max ms",
          "collections, median",
          "longest GC pause ms",
          "events seen",
          "target p99 < 2 ms",
          "runs"
        ]),
        "|---|---:|---:|---:|---:|---:|---:|---:|:---:|---:|"
      )
      for (const e of entries) {
        const p99 = figure(results, e.key, "p99")
        lines.push(
          row([
            e.label,
            fmt(median(figure(results, e.key, "p50")), 3),
            p99.length === 0 ? "—" : `${fmt(median(p99), 3)} (${fmt(Math.max(...p99), 3)})`,
            fmt(median(figure(results, e.key, "p99SecondHalf")), 3),
            fmt(Math.max(...figure(results, e.key, "max")), 2),
            fmt(median(figure(results, e.key, "gcs"))),
            fmt(Math.max(...figure(results, e.key, "gcLongestMs")), 1),
            fmt(median(figure(results, e.key, "samples"))),
            e.program.client === "sandboxWatch" && p99.length > 0 ? verdict(Math.max(...p99) < 2) : "",
            String(runs(e))
          ])
        )
      }
      // The steady state (issue 31): the second half's p99, and the GC work scaled to 10k events, so
      // runs of other --latency-events compare.
      const perTenK = 10_000 / shape.latencyEvents
      lines.push(
        "",
        "Steady state (the second half's p50 and p99; collections and GC time per 10k events):",
        "",
        row([
          "program",
          "p50 of the second half ms, median",
          "p99 of the second half ms, median",
          "collections per 10k events",
          "GC ms per 10k events",
          "runs"
        ]),
        "|---|---:|---:|---:|---:|---:|"
      )
      for (const e of entries) {
        lines.push(row([
          e.label,
          fmt(median(figure(results, e.key, "p50SecondHalf")), 3),
          fmt(median(figure(results, e.key, "p99SecondHalf")), 3),
          fmt(median(figure(results, e.key, "gcs")) * perTenK, 1),
          fmt(median(figure(results, e.key, "gcTotalMs")) * perTenK, 1),
          String(runs(e))
        ]))
      }
      return {
        title: `6. Tell latency at ${
          fmt(shape.latencyRate)
        } events/s over ${shape.hot} hot names: server write → subscriber runs (${fmt(shape.latencyEvents)} events)`,
        lines
      }
    }
    case "scale": {
      lines.push(
        row([
          "program",
          `ms to synced, median (min–max)`,
          `× ${fmt(scaleN / shape.n, 1)} × its N = ${fmt(shape.n)} time`,
          "CPU ms, median",
          "heap bytes per cached object, median",
          `× its N = ${fmt(shape.n)} figure`,
          "peak RSS MB to synced, median (min–max)",
          "RSS MB at start, median",
          "target: both ≤ 1.1 (linear)",
          "runs"
        ]),
        "|---|---:|---:|---:|---:|---:|---:|---:|:---:|---:|"
      )
      const sync = earlier.sync ?? new Map()
      const heap = earlier.heap ?? new Map()
      for (const e of entries) {
        const ms = figure(results, e.key, "ms")
        const perObject = figure(results, e.key, "perObject")
        const rss = figure(results, e.key, "peakRssMB")
        // Linear: k times the objects in k times the time, at the same heap per object.
        const rTime = ratio(median(ms), (scaleN / shape.n) * median(figure(sync, e.key, "ms")))
        const rHeap = ratio(median(perObject), median(figure(heap, e.key, "perObject")))
        const judged = e.program.client === "sandboxWatch" && Number.isFinite(rTime) && Number.isFinite(rHeap)
        lines.push(
          row([
            e.label,
            spread(ms, 1),
            fmt(rTime, 2),
            fmt(median(figure(results, e.key, "cpuMs"))),
            fmt(median(perObject)),
            fmt(rHeap, 2),
            spread(rss),
            fmt(median(figure(results, e.key, "rssStartMB"))),
            judged ? verdict(rTime <= 1.1 && rHeap <= 1.1) : "",
            String(runs(e))
          ])
        )
      }
      lines.push(...streamComparison(entries, results))
      if (below.length > 0) lines.push("", ...below)
      if (earlier.sync === undefined || earlier.heap === undefined) {
        lines.push("", "The ratios need the sync and heap scenarios in the same run (`--only sync,heap,scale`).")
      }
      return {
        title: `7. Scale: N = ${fmt(scaleN)} (replay server${
          entries.some((e) => e.real === true) ? "; and the real kube-apiserver" : ""
        }): time to synced, heap per object and peak RSS`,
        lines
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------------

const command = `npm run bench${argv.length > 0 ? ` -- ${argv.join(" ")}` : ""}`

/** Stops the real kube-apiserver and its etcd while they run. */
let stopRealServer: (() => Promise<void>) | undefined

/**
 * The real kube-apiserver for the sync scenario, started and seeded; or, when it is not to be had,
 * the line that says so under the table (and a failure when it was there but would not start).
 */
const realServerFor = async (
  failures: Array<string>,
  /** How many Sandboxes to seed: N for the sync scenario, the scale N with `--scale-apiserver`. */
  n = shape.n
): Promise<{ readonly server?: RealServer.SeededServer; readonly below: string }> => {
  if (flag("no-apiserver")) return { below: "Real kube-apiserver rows not run (`--no-apiserver`)." }
  if (!RealServer.available()) {
    return {
      below: `Real kube-apiserver rows skipped: no kube-apiserver ${RealServer.KubeVersion} binary. ` +
        "`bash test/apiserver/build.sh` builds it (once; etcd from Debian), and every sync run includes them from then on."
    }
  }
  try {
    const server = await RealServer.startSeeded(
      n,
      (stop) => (stopRealServer = stop),
      (line) => process.stderr.write(`  real kube-apiserver: ${line}\n`)
    )
    return { server, below: server.about }
  } catch (error) {
    const message = `real kube-apiserver: ${error instanceof Error ? error.message : String(error)}`
    failures.push(message)
    await stopRealServer?.()
    stopRealServer = undefined
    return { below: `Real kube-apiserver rows not run: ${message.split("\n")[0]}` }
  }
}

const profileRun = async (spec: string) => {
  const [programId, scenario] = spec.split(":") as [string, Scenario | undefined]
  // tsx hands V8 whitespace-minified code whose functions are all "(anonymous)" on line 1, so a
  // profile runs on Node 22's own type stripping (exact names and lines): a Node 20 program is
  // profiled as its Node 22 twin.
  const asked = knownPrograms[programId]
  const program = asked?.nodeName === "20" ? (knownPrograms[asked.id.replace("@20", "@22")] ?? asked) : asked
  if (program === undefined || scenario === undefined || !allScenarios.includes(scenario)) {
    throw new Error(`--profile <program>:<scenario>, e.g. sw@20:tp; programs ${Object.keys(knownPrograms).join(", ")}`)
  }
  const entries = (() => {
    const saved = programs.splice(0, programs.length, program)
    const es = entriesOf(scenario)
    programs.splice(0, programs.length, ...saved)
    return es
  })()
  const variant = option("variant")
  const entry = entries.find((e) => variant === undefined || e.fanout === variant || e.key.endsWith(`/${variant}`)) ??
    entries[0]!
  const dir = Path.join(cacheDir, "profiles")
  Fs.mkdirSync(dir, { recursive: true })
  const name = `${entry.key.replace(/[@/]/g, "_")}-${scenario}-${Date.now()}.${
    flag("allocations") ? "heapprofile" : "cpuprofile"
  }`
  const server = await Server.start(shape)
  try {
    if (program !== asked) {
      console.log(
        `Profiling ${program.id} for ${asked?.id}: V8 profiles need Node 22's type stripping (tsx loses names and lines).`
      )
    }
    const strip = program.nodeName === "22"
    const result = await runChild(entry, scenario, server.url, Path.join(dir, name), strip)
    console.log(`${entry.label}, ${scenario}: ${JSON.stringify(result.figures)}\n`)
    console.log(markdown(Path.join(dir, name), Number(option("top") ?? "20")))
  } finally {
    await server.close()
  }
}

/**
 * The heap scenario of one program, with a heap snapshot of its cache, summarised by constructor;
 * or, with `--only storm`, snapshots a tenth of the way through the storm and at its end, and what
 * grew between them.
 */
const snapshotRun = async (programId: string) => {
  const program = knownPrograms[programId]
  if (program === undefined) throw new Error(`--snapshot <program>; one of ${Object.keys(knownPrograms).join(", ")}`)
  const saved = programs.splice(0, programs.length, program)
  const storm = option("only") === "storm"
  const fanout = option("only") === "fanout"
  const entry = fanout
    ? entriesOf("fanout").find((e) => e.fanout === (option("variant") ?? "idle"))!
    : entriesOf(storm ? "storm" : "heap")[0]!
  programs.splice(0, programs.length, ...saved)
  const dir = Path.join(cacheDir, "snapshots")
  Fs.mkdirSync(dir, { recursive: true })
  const file = Path.join(dir, `${program.id.replace(/[@/]/g, "_")}-${Date.now()}.heapsnapshot`)
  const server = await Server.start(shape)
  try {
    const scenario = fanout ? "fanout" : storm ? "storm" : "heap"
    const result = await runChild(entry, scenario, server.url, undefined, false, file)
    console.log(`${entry.label}, ${scenario}: ${JSON.stringify(result.figures)}\n`)
    const top = Number(option("top") ?? "25")
    if (fanout) {
      const count = result.figures.subscribers ?? 1
      console.log(`What ${count} subscriptions hold (heap once synced, without and with them):\n`)
      console.log(
        snapshotDiff(
          file.replace(/\.heapsnapshot$/, "-unsubscribed.heapsnapshot"),
          file.replace(/\.heapsnapshot$/, "-subscribed.heapsnapshot"),
          top,
          count
        )
      )
    } else if (storm) {
      const resumes = shape.storm - Math.ceil(shape.storm / 10)
      console.log(
        `Grown between a tenth of the way (after ${shape.storm - resumes} resumes) and the end (${resumes} more):\n`
      )
      console.log(
        snapshotDiff(
          file.replace(/\.heapsnapshot$/, "-partway.heapsnapshot"),
          file.replace(/\.heapsnapshot$/, "-after.heapsnapshot"),
          top,
          resumes
        )
      )
    } else console.log(snapshotMarkdown(file, top, shape.n))
  } finally {
    await server.close()
  }
}

/**
 * The start-up table: each way of starting, `startupRounds` times, the rows alternating round by
 * round; wall and CPU (user + sys) medians with min–max, and CPU against `node -e 0`.
 */
const startupTable = async (failures: Array<string>): Promise<Table> => {
  const { about, close, rows } = await Startup.prepare(root)
  const figures = new Map<string, Array<Startup.StartupFigures>>()
  const failed = new Set<string>()
  try {
    for (let r = 0; r < startupRounds; r++) {
      for (const row of r % 2 === 0 ? rows : [...rows].reverse()) {
        if (failed.has(row.key)) continue
        try {
          const measured = await row.measure()
          figures.set(row.key, [...(figures.get(row.key) ?? []), measured])
          process.stderr.write(`  startup round ${r + 1}/${startupRounds} ${row.key}: ${JSON.stringify(measured)}\n`)
        } catch (error) {
          failed.add(row.key)
          failures.push(`startup ${row.key}: ${error instanceof Error ? error.message : String(error)}`)
        }
      }
    }
  } finally {
    await close()
  }
  const of = (key: string, name: keyof Startup.StartupFigures) => (figures.get(key) ?? []).map((f) => f[name])
  const floorCpu = median(of("node", "cpuMs"))
  const lines = [
    "| how it starts | wall ms, median (min–max) | CPU ms (user + sys), median (min–max) | CPU × `node -e 0` | goal (quiet machine) | met, by CPU | runs |",
    "|---|---:|---:|---:|---:|:---:|---:|",
    ...rows.map((row) => {
      const cpu = of(row.key, "cpuMs")
      return `| ${row.label} | ${spread(of(row.key, "wallMs"))} | ${spread(cpu)} | ${
        fmt(ratio(median(cpu), floorCpu), 1)
      } | ${row.goalMs === undefined ? "" : `≤ ${fmt(row.goalMs)} ms`} | ${
        row.goalMs === undefined || cpu.length === 0 ? "" : verdict(median(cpu) <= row.goalMs)
      } | ${cpu.length} |`
    }),
    "",
    `${about} The goals are wall time on a quiet machine; on a busy one the CPU time is the fairer reading, so the verdict is by CPU.`
  ]
  return { title: `0. Start-up: the built program, beside \`node -e 0\` (${startupRounds} rounds)`, lines }
}

const main = async () => {
  const profile = option("profile")
  if (profile !== undefined) return profileRun(profile)
  const snapshot = option("snapshot")
  if (snapshot !== undefined) return snapshotRun(snapshot)

  const load = () => Os.loadavg().map((x) => x.toFixed(2)).join(" ")
  const git = (...args: Array<string>) => spawnSync("git", args, { cwd: root, encoding: "utf8" }).stdout.trim()
  const dirty = git("status", "--porcelain", "--", "src").split("\n").filter((l) => l !== "").length
  const startedAt = new Date()
  const header = [
    `# sandbox-watch benchmarks`,
    "",
    `Reproduce: \`${command}\` (from the repository root; \`npm ci --prefix test/bench\` first for client-node and Node 22).`,
    "",
    `Machine: ${Os.cpus().length} × ${Os.cpus()[0]?.model ?? "cpu"}, ${
      (Os.totalmem() / 2 ** 30).toFixed(0)
    } GiB; Node 20 = ${nodeVersion("20")}, Node 22 = ${
      node22Available ? "the `node` package of test/bench" : "absent"
    }. Load average at start: ${load()}.`,
    `Code: commit ${git("rev-parse", "--short", "HEAD")}${
      dirty > 0 ? `, with ${dirty} uncommitted change(s) under src/ (the working tree is what ran)` : ", src/ clean"
    }.`,
    ...(childNodeFlags.length > 0 ? [`Every child ran with \`${childNodeFlags.join(" ")}\`.`] : []),
    `Data: N = ${fmt(shape.n)} Sandboxes (~3.2 KB of JSON each, ~0.9 KB of it managedFields), M = ${
      fmt(shape.m)
    } events, ${rounds} rounds, each program in a fresh process per round, programs alternating.`
  ]
  console.log(header.join("\n"))
  for (const s of skipped) console.log(`Skipped ${s}`)

  const t0 = Date.now()
  const server = await Server.start(shape)
  /** The scale scenario's own replay server (N = `scaleN`), up only while it runs. */
  let scaleServer: Server.ReplayServer | undefined
  for (const scenario of scenarios) if (scenario === "tp" || scenario === "lat") server.prepare(scenario)
  if (scenarios.includes("fanout")) server.prepare("hot")
  console.log(`Replay server at ${server.url}; data serialized in ${((Date.now() - t0) / 1000).toFixed(1)} s.\n`)

  const tables: Array<Table> = []
  const failures: Array<string> = []
  const all: Record<string, Record<string, Array<Record<string, number>>>> = {}
  const resultsOf: Partial<Record<Scenario, Results>> = {}
  // An interrupt must leave no child, etcd or kube-apiserver running.
  const interrupted = (signal: NodeJS.Signals) => {
    process.stderr.write(`\n${signal}: stopping the children and servers\n`)
    for (const child of liveChildren) child.kill("SIGKILL")
    void (stopRealServer?.() ?? Promise.resolve()).finally(() => process.exit(130))
  }
  process.once("SIGINT", interrupted)
  process.once("SIGTERM", interrupted)
  try {
    for (const scenario of scenarios) {
      if (scenario === "startup") {
        const table = await startupTable(failures)
        tables.push(table)
        console.log(`## ${table.title}\n\n${table.lines.join("\n")}\n`)
        continue
      }
      // Up only while the sync scenario runs, so it does not weigh on the others.
      // The scale scenario's real rows are opt-in: seeding ten times N takes ten times as long.
      const real = scenario === "sync"
        ? await realServerFor(failures)
        : scenario === "scale" && flag("scale-apiserver")
        ? await realServerFor(failures, scaleN)
        : undefined
      if (scenario === "scale") scaleServer = await Server.start(scaleShape)
      const realTarget = real?.server?.target
      const entries = entriesOf(scenario, realTarget !== undefined)
      const results: Results = new Map()
      const failed = new Set<string>()
      const notes: Array<string> = []
      try {
        for (let r = 0; r < rounds; r++) {
          const order = r % 2 === 0 ? entries : [...entries].reverse()
          for (const entry of order) {
            if (failed.has(entry.key)) continue
            const began = Date.now()
            try {
              const result = await runChild(
                entry,
                scenario,
                entry.real === true && realTarget !== undefined
                  ? realTarget
                  : scenario === "scale" && scaleServer !== undefined
                  ? scaleServer.url
                  : server.url
              )
              const list = results.get(entry.key) ?? []
              list.push(result.figures)
              results.set(entry.key, list)
              if (result.note !== undefined) notes.push(`${entry.label}: ${result.note}`)
              process.stderr.write(
                `  ${scenario} round ${r + 1}/${rounds} ${entry.key}: ${JSON.stringify(result.figures)} (${
                  ((Date.now() - began) / 1000).toFixed(1)
                } s)\n`
              )
            } catch (error) {
              failed.add(entry.key)
              const message = error instanceof Error ? error.message : String(error)
              failures.push(message)
              process.stderr.write(`  ${scenario} round ${r + 1}/${rounds} ${entry.key}: FAILED ${message}\n`)
            }
          }
        }
      } finally {
        await stopRealServer?.()
        stopRealServer = undefined
        await scaleServer?.close()
        scaleServer = undefined
      }
      all[scenario] = Object.fromEntries(results)
      resultsOf[scenario] = results
      const table = tableOf(scenario, entries, results, real === undefined ? [] : [real.below], resultsOf)
      tables.push(table)
      console.log(`## ${table.title}\n\n${table.lines.join("\n")}\n`)
      for (const note of notes) console.log(`- ${note}`)
    }
  } finally {
    await stopRealServer?.()
    await scaleServer?.close()
    await server.close()
    process.off("SIGINT", interrupted)
    process.off("SIGTERM", interrupted)
  }
  const footer = [
    `Load average at end: ${load()}; wall time ${((Date.now() - t0) / 1000).toFixed(0)} s.`,
    ...failures.map((f) => `- FAILED ${f}`)
  ]
  console.log(footer.join("\n"))
  Fs.mkdirSync(cacheDir, { recursive: true })
  const stamp = startedAt.toISOString().replace(/[:.]/g, "-")
  const report = [
    header.join("\n"),
    ...skipped.map((s) => `Skipped ${s}`),
    "",
    ...tables.map((t) => `## ${t.title}\n\n${t.lines.join("\n")}\n`),
    footer.join("\n")
  ].join("\n")
  Fs.writeFileSync(Path.join(cacheDir, `bench-${stamp}.md`), report + "\n")
  Fs.writeFileSync(
    Path.join(cacheDir, `bench-${stamp}.json`),
    JSON.stringify({ command, shape, rounds, results: all }, null, 2)
  )
  console.log(`\nWritten to ${Path.relative(root, Path.join(cacheDir, `bench-${stamp}.md`))} (and .json).`)
  if (failures.length > 0) process.exitCode = 1
}

await main()
