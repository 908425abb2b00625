/**
 * The program as a person or a script runs it: a child process, its lines and its exit code. Every
 * wait is on a line the program writes or on its exit, never on wall time.
 */
import { CliConfig, Command, HelpDoc } from "@effect/cli"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { execFile } from "node:child_process"
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { stringify } from "yaml"
import * as Cli from "../src/cli/Cli.ts"
import * as Usage from "../src/cli/Usage.ts"
import { DefaultLabelSelector, SandboxResource } from "../src/Sandbox.ts"
import * as Sim from "../src/SimulatedApiServer.ts"
import * as Program from "./support/ProgramProcess.ts"

const Token = "s3cr3t-token-for-the-program-test"

/** A temp directory, removed when the test's scope closes. */
const tempDir = Effect.acquireRelease(
  Effect.sync(() => mkdtempSync(join(tmpdir(), "sandbox-watch-program-"))),
  (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
)

const kubeconfigFor = (server: string, namespace: string) =>
  stringify({
    apiVersion: "v1",
    kind: "Config",
    "current-context": "sim",
    clusters: [{ name: "sim", cluster: { server } }],
    contexts: [{ name: "sim", context: { cluster: "sim", user: "me", namespace } }],
    users: [{ name: "me", user: { token: Token } }]
  })

const sandbox = (name: string, status?: object) => ({
  apiVersion: "jr2.dev/v1alpha1",
  kind: "Sandbox",
  metadata: { name, labels: { "jr2.dev/run": "r1" } },
  spec: { resources: { limits: { memory: "256Mi" } } },
  ...(status === undefined ? {} : { status })
})

interface Line {
  readonly event: string
  readonly name?: string
  readonly sandbox?:
    | { readonly metadata: { readonly name: string }; readonly status?: { readonly phase?: string } }
    | null
}
const parse = (line: string): Line => JSON.parse(line) as Line
/** A change line, shortly: `name phase`, `name -` without a phase, `name gone`. */
const short = (line: string): string => {
  const l = parse(line)
  if (l.event !== "change") return l.event
  return `${l.name} ${l.sandbox === null ? "gone" : (l.sandbox?.status?.phase ?? "-")}`
}
/** Starting a child costs seconds on a loaded machine (loading `effect` alone); room for it. */
const ProcessTimeout = 90_000

const isSynced = (line: string) => line === `{"event":"synced"}`
/** The demo says on its synced line that what follows is invented, not a cluster's. */
const isDemoSynced = (line: string) => line === `{"event":"synced","demo":true}`
const changeOf = (name: string, what: (l: Line) => boolean) => (line: string) => {
  const l = parse(line)
  return l.event === "change" && l.name === name && what(l)
}

describe("sandbox-watch --output ndjson against a simulated API server", () => {
  it.scopedLive(
    "tells the first list, then synced, then every change and deletion; SIGTERM exits 0",
    () =>
      Effect.gen(function*() {
        const server = yield* Sim.SimulatedApiServer
        yield* server.create(sandbox("a", { phase: "Pending" }))
        yield* server.create(sandbox("b"))
        // Not under the selector: never told.
        yield* server.create({ apiVersion: "jr2.dev/v1alpha1", kind: "Sandbox", metadata: { name: "unlabelled" } })
        const dir = yield* tempDir
        const kubeconfig = join(dir, "kubeconfig")
        writeFileSync(kubeconfig, kubeconfigFor(server.url, "ns"))

        const program = yield* Program.start(["--kubeconfig", kubeconfig, "--output", "ndjson"], { HOME: dir })
        const synced = yield* program.awaitStdout(isSynced)
        const initial = (yield* program.stdout).slice(0, synced).map(short).sort()
        expect(initial).toStrictEqual(["a Pending", "b -"])

        yield* server.create(sandbox("c"))
        yield* program.awaitStdout(changeOf("c", (l) => l.sandbox !== null), synced)
        yield* server.mergePatch("a", { status: { phase: "Ready", endpoint: "10.0.0.1:7000" } }, {
          subresource: "status"
        })
        yield* program.awaitStdout(changeOf("a", (l) => l.sandbox?.status?.phase === "Ready"), synced)
        yield* server.delete("b")
        yield* program.awaitStdout(changeOf("b", (l) => l.sandbox === null), synced)
        // A Sandbox that stops matching the selector is gone as far as the watch can say.
        yield* server.mergePatch("c", { metadata: { labels: { "jr2.dev/run": null } } })
        yield* program.awaitStdout(changeOf("c", (l) => l.sandbox === null), synced)

        yield* program.kill("SIGTERM")
        expect(yield* program.exited).toStrictEqual({ code: 0, signal: null })

        const stdout = yield* program.stdout
        expect(stdout.slice(synced).map(short)).toStrictEqual(["synced", "c -", "a Ready", "b gone", "c gone"])
        // The cached object as decoded: its metadata, spec and status, nothing the schema drops.
        const ready = parse(stdout.find(changeOf("a", (l) => l.sandbox?.status?.phase === "Ready"))!)
        expect(ready.sandbox).toMatchObject({
          metadata: { name: "a", namespace: "ns" },
          spec: { resources: { limits: { memory: "256Mi" } } },
          status: { phase: "Ready", endpoint: "10.0.0.1:7000" }
        })
        const stderr = yield* program.stderr
        expect(stderr[0]).toMatch(
          /^sandbox-watch: watching Sandboxes in namespace ns \(selector jr2\.dev\/run\) on http:\/\/127\.0\.0\.1:\d+/
        )
        expect([...stdout, ...stderr].some((l) => l.includes(Token))).toBe(false)
        // The watch asked what it should, of the namespace the context named: by default
        // (--list-mode auto) a streaming list, which the simulator serves as 1.34+ does.
        const [watch] = yield* server.requestsOf("watch")
        expect(watch).toMatchObject({
          namespace: "ns",
          query: { labelSelector: "jr2.dev/run", sendInitialEvents: "true" },
          acceptEncoding: undefined
        })
        expect(yield* server.requestsOf("list")).toEqual([])
      }).pipe(Effect.provide(Sim.layer({ resource: SandboxResource, namespace: "ns", token: Token }))),
    ProcessTimeout
  )
})

/**
 * The program against the simulated server with Sandboxes `a` (Pending) and `b`, its flags `args`,
 * run until synced and stopped with SIGTERM (exit 0 checked): what it printed before synced.
 */
const syncedOnce = (args: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const server = yield* Sim.SimulatedApiServer
    yield* server.create(sandbox("a", { phase: "Pending" }))
    yield* server.create(sandbox("b"))
    const dir = yield* tempDir
    const kubeconfig = join(dir, "kubeconfig")
    writeFileSync(kubeconfig, kubeconfigFor(server.url, "ns"))
    const program = yield* Program.start(["--kubeconfig", kubeconfig, "--output", "ndjson", ...args], { HOME: dir })
    const synced = yield* program.awaitStdout(isSynced)
    const told = (yield* program.stdout).slice(0, synced).map(short).sort()
    yield* program.kill("SIGTERM")
    expect(yield* program.exited).toStrictEqual({ code: 0, signal: null })
    return { server, told, stderr: yield* program.stderr }
  })

const simulated = (options: Partial<Sim.Options> = {}) =>
  Sim.layer({ resource: SandboxResource, namespace: "ns", token: Token, ...options })

describe("sandbox-watch --list-mode", () => {
  it.scopedLive("paged: a LIST, then plain watches; no streaming list is asked for", () =>
    Effect.gen(function*() {
      const { server, told } = yield* syncedOnce(["--list-mode", "paged"])
      expect(told).toStrictEqual(["a Pending", "b -"])
      const [list] = yield* server.requestsOf("list")
      expect(list).toMatchObject({ namespace: "ns", query: { labelSelector: "jr2.dev/run", limit: "500" } })
      for (const watch of yield* server.requestsOf("watch")) {
        expect(watch.query.sendInitialEvents).toBeUndefined()
      }
    }).pipe(Effect.provide(simulated())), ProcessTimeout)

  it.scopedLive(
    "auto against a server with the WatchList gate off: one 422, then pages, and a log line says why",
    () =>
      Effect.gen(function*() {
        const { server, stderr, told } = yield* syncedOnce([])
        expect(told).toStrictEqual(["a Pending", "b -"])
        expect(yield* server.requestsOf("list")).toHaveLength(1)
        const said = stderr.filter((line) => line.includes("every list is paged from now on"))
        expect(said).toHaveLength(1)
        expect(said[0]).toContain("WatchList feature gate")
      }).pipe(Effect.provide(simulated({ watchList: false }))),
    ProcessTimeout
  )

  it.scopedLive(
    "auto against a server that ignores sendInitialEvents (answers a plain watch and closes): synced after three clean closes, said once",
    () =>
      Effect.gen(function*() {
        const { server, stderr, told } = yield* syncedOnce([])
        expect(told).toStrictEqual(["a Pending", "b -"])
        expect(yield* server.requestsOf("list")).toHaveLength(1)
        const streamed = (yield* server.requestsOf("watch")).filter((w) => w.query.sendInitialEvents === "true")
        expect(streamed).toHaveLength(3)
        const said = stderr.filter((line) => line.includes("every list is paged from now on"))
        expect(said).toHaveLength(1)
        expect(said[0]).toContain("3 streaming lists in a row")
      }).pipe(Effect.provide(simulated({ ignoreSendInitialEvents: true }))),
    ProcessTimeout
  )

  it.scopedLive(
    "--gzip-streaming-lists asks for gzip, and the gzipped streaming list syncs",
    () =>
      Effect.gen(function*() {
        const { server, told } = yield* syncedOnce(["--gzip-streaming-lists"])
        expect(told).toStrictEqual(["a Pending", "b -"])
        const [watch] = yield* server.requestsOf("watch")
        expect(watch).toMatchObject({ query: { sendInitialEvents: "true" }, acceptEncoding: "gzip" })
      }).pipe(Effect.provide(simulated())),
    ProcessTimeout
  )

  it.scopedLive(
    "stream: syncs from one streaming watch: no list request reaches the server",
    () =>
      Effect.gen(function*() {
        const { server, told } = yield* syncedOnce(["--list-mode", "stream"])
        expect(told).toStrictEqual(["a Pending", "b -"])
        expect(yield* server.requestsOf("list")).toEqual([])
        const [watch] = yield* server.requestsOf("watch")
        expect(watch?.query).toMatchObject({ sendInitialEvents: "true", resourceVersionMatch: "NotOlderThan" })
      }).pipe(Effect.provide(simulated())),
    ProcessTimeout
  )
})

describe("sandbox-watch's client limits as flags", () => {
  it.scopedLive(
    "--max-line-bytes reaches the client: a watch event above it is refused, said in a log line, and the cache kept",
    () =>
      Effect.gen(function*() {
        const server = yield* Sim.SimulatedApiServer
        yield* server.create(sandbox("a", { phase: "Pending" }))
        const dir = yield* tempDir
        const kubeconfig = join(dir, "kubeconfig")
        writeFileSync(kubeconfig, kubeconfigFor(server.url, "ns"))
        const program = yield* Program.start(
          ["--kubeconfig", kubeconfig, "--output", "ndjson", "--max-line-bytes", "2Ki", "--headers-timeout", "5s"],
          { HOME: dir }
        )
        const synced = yield* program.awaitStdout(isSynced)
        // A 4 KiB annotation makes the watch line longer than 2 KiB.
        yield* server.mergePatch("a", { metadata: { annotations: { big: "x".repeat(4096) } } })
        yield* program.awaitStderr((line) => line.includes("longer than 2048 bytes"))
        yield* program.kill("SIGTERM")
        expect(yield* program.exited).toStrictEqual({ code: 0, signal: null })
        // Nothing told gone on the way.
        expect((yield* program.stdout).slice(synced).filter(changeOf("a", (l) => l.sandbox === null))).toEqual([])
      }).pipe(Effect.provide(Sim.layer({ resource: SandboxResource, namespace: "ns", token: Token }))),
    ProcessTimeout
  )
  it.scopedLive(
    "--max-list-page-bytes reaches the client: a list page above it is abandoned, said in a log line, and nothing is synced or told",
    () =>
      Effect.gen(function*() {
        const server = yield* Sim.SimulatedApiServer
        yield* server.create(sandbox("a", { phase: "Pending" }))
        yield* server.mergePatch("a", { metadata: { annotations: { big: "x".repeat(4096) } } })
        const dir = yield* tempDir
        const kubeconfig = join(dir, "kubeconfig")
        writeFileSync(kubeconfig, kubeconfigFor(server.url, "ns"))
        const program = yield* Program.start(
          ["--kubeconfig", kubeconfig, "--output", "ndjson", "--list-mode", "paged", "--max-list-page-bytes", "2Ki"],
          { HOME: dir }
        )
        yield* program.awaitStderr((line) => line.includes("more than 2048 bytes"))
        yield* program.kill("SIGTERM")
        expect(yield* program.exited).toStrictEqual({ code: 0, signal: null })
        expect(yield* program.stdout).toEqual([])
      }).pipe(Effect.provide(Sim.layer({ resource: SandboxResource, namespace: "ns", token: Token }))),
    ProcessTimeout
  )
})

describe("sandbox-watch --max-list-bytes", () => {
  it.scopedLive(
    "reaches the client: a streaming list holding more is abandoned, said with the budget and the flag, nothing synced or told",
    () =>
      Effect.gen(function*() {
        const server = yield* Sim.SimulatedApiServer
        // Two Sandboxes of about 3 KiB each: past a budget of 4 KiB together, within it alone.
        for (const name of ["a", "b"]) {
          yield* server.create(
            sandbox(name, {
              phase: "Pending",
              conditions: [{ type: "Ready", status: "False", message: "m".repeat(3000) }]
            })
          )
        }
        const dir = yield* tempDir
        const kubeconfig = join(dir, "kubeconfig")
        writeFileSync(kubeconfig, kubeconfigFor(server.url, "ns"))
        const program = yield* Program.start(
          [
            "--kubeconfig",
            kubeconfig,
            "--output",
            "ndjson",
            "--list-mode",
            "stream",
            "--max-list-bytes",
            "4KiB",
            // JSON logs carry the restart reason as an annotation (the text format leaves it out).
            "--log-format",
            "json"
          ],
          { HOME: dir }
        )
        const at = yield* program.awaitStderr((line) => line.includes("went past 4 KiB (4096 bytes) of JSON held"))
        const said = (yield* program.stderr)[at]!
        expect(said).toContain("--max-list-bytes")
        expect(said).toContain("too-large")
        yield* program.kill("SIGTERM")
        expect(yield* program.exited).toStrictEqual({ code: 0, signal: null })
        expect(yield* program.stdout).toEqual([])
      }).pipe(Effect.provide(Sim.layer({ resource: SandboxResource, namespace: "ns", token: Token }))),
    ProcessTimeout
  )

  it.scopedLive("one that is not a size is a usage error: exit 2, naming the flag", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const program = yield* Program.start(["--demo", "--max-list-bytes", "lots"], { HOME: dir })
      expect((yield* program.exited).code).toBe(2)
      expect((yield* program.stderr).join("\n")).toContain(`--max-list-bytes "lots": not a byte count`)
    }), ProcessTimeout)
})

describe("sandbox-watch with no cluster configured", () => {
  it.scopedLive(
    "runs the demo, says so on stderr's first line, and stops after --duration with exit 0",
    () =>
      Effect.gen(function*() {
        const home = yield* tempDir
        const program = yield* Program.start(["--output", "ndjson", "--duration", "4s"], Program.noClusterEnv(home))
        const exited = yield* program.exited
        const stdout = yield* program.stdout
        const stderr = yield* program.stderr
        expect(exited).toStrictEqual({ code: 0, signal: null })
        expect(stderr[0]).toMatch(
          /^sandbox-watch: no Kubernetes cluster is configured, so this is the demo: an embedded simulated API server at http:\/\/127\.0\.0\.1:\d+/
        )
        // stdout stays pure NDJSON: the demo's narration went to stderr.
        const lines = stdout.map(parse)
        expect(lines.filter((l) => l.event === "synced")).toHaveLength(1)
        expect(stdout.filter(isDemoSynced)).toHaveLength(1)
        expect(lines.every((l) => l.event === "synced" || l.event === "change")).toBe(true)
        expect(new Set(lines.filter((l) => l.event === "change").map((l) => l.name))).toStrictEqual(
          new Set(["alpha-1", "bravo-1", "charlie-1", "delta-1"])
        )
        expect(stderr.some((l) => l.includes("demo: round 1: creating Sandboxes alpha-1, bravo-1, charlie-1, delta-1")))
          .toBe(true)
      }),
    ProcessTimeout
  )

  it.scopedLive(
    "--demo with the table ends cleanly on SIGINT: exit 0 and the cursor shown again",
    () =>
      Effect.gen(function*() {
        const home = yield* tempDir
        const program = yield* Program.start(["--demo", "--output", "table"], Program.noClusterEnv(home))
        yield* program.awaitStdout((l) => l.includes("alpha-1") && l.includes("Pending"))
        // The screen is redrawn in place: read it without its ANSI controls.
        const stdout = (yield* program.stdout).map((l) => l.replace(/\x1b\[[0-9;?]*[A-Za-z]/g, ""))
        expect(stdout.some((l) => /NAME\s+PHASE\s+READY\s+SCHEDULED\s+RESTARTS\s+AGE\s+LAST CHANGE\s+NOTE/.test(l)))
          .toBe(
            true
          )
        expect(stdout.some((l) => l.startsWith("demo: watching an embedded simulated API server at http://127.0.0.1:")))
          .toBe(true)
        expect(
          stdout.some((l) =>
            /^synced \| last heard \d+s ago \| re-lists \d+ \| watch restarts \d+ \| \d+ cached/.test(l)
          )
        ).toBe(true)
        yield* program.kill("SIGINT")
        expect(yield* program.exited).toStrictEqual({ code: 0, signal: null })
        expect((yield* program.stdout).join("\n").endsWith("\x1b[?25h")).toBe(true)
      }),
    ProcessTimeout
  )

  it.scopedLive("--demo ends cleanly on SIGTERM once synced", () =>
    Effect.gen(function*() {
      const home = yield* tempDir
      const program = yield* Program.start(["--demo", "--output", "ndjson"], Program.noClusterEnv(home))
      yield* program.awaitStdout(isDemoSynced)
      yield* program.kill("SIGTERM")
      expect(yield* program.exited).toStrictEqual({ code: 0, signal: null })
    }), ProcessTimeout)
})

describe("sandbox-watch configuration errors", () => {
  const fails = (
    args: (dir: string) => ReadonlyArray<string>,
    env: (dir: string) => Record<string, string> = (dir) => ({ HOME: dir })
  ) =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const program = yield* Program.start(["--output", "ndjson", ...args(dir)], env(dir))
      const exited = yield* program.exited
      return { exited, stdout: yield* program.stdout, stderr: yield* program.stderr, dir }
    })

  it.scopedLive("a kubeconfig that is not YAML: one line on stderr, exit 1", () =>
    Effect.gen(function*() {
      const { dir, exited, stderr, stdout } = yield* fails((dir) => {
        writeFileSync(join(dir, "broken"), "clusters: [this is: {not yaml\n")
        return ["--kubeconfig", join(dir, "broken")]
      })
      expect(exited).toStrictEqual({ code: 1, signal: null })
      expect(stdout).toStrictEqual([])
      expect(stderr).toHaveLength(1)
      expect(stderr[0]).toMatch(
        new RegExp(`^sandbox-watch: kubeconfig ${join(dir, "broken").replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}: `)
      )
    }), ProcessTimeout)

  it.scopedLive(
    "a service-account directory named but holding no token: one line, exit 1, never the demo",
    () =>
      Effect.gen(function*() {
        const { dir, exited, stderr, stdout } = yield* fails(
          (dir) => ["--service-account-dir", join(dir, "no-sa")],
          (dir) => ({ HOME: dir, KUBERNETES_SERVICE_HOST: "127.0.0.1", KUBERNETES_SERVICE_PORT: "1" })
        )
        expect(exited).toStrictEqual({ code: 1, signal: null })
        expect(stdout).toStrictEqual([])
        expect(stderr).toHaveLength(1)
        expect(stderr[0]).toContain(
          `in-cluster (127.0.0.1:1 is set, but ${join(dir, "no-sa", "token")} does not exist)`
        )
      }),
    ProcessTimeout
  )

  it.scopedLive("a kubeconfig named but missing: one line, exit 1", () =>
    Effect.gen(function*() {
      const { exited, stderr } = yield* fails((dir) => ["--kubeconfig", join(dir, "nope")])
      expect(exited.code).toBe(1)
      expect(stderr).toHaveLength(1)
      expect(stderr[0]).toMatch(/^sandbox-watch: kubeconfig .*nope: does not exist$/)
    }), ProcessTimeout)

  it.scopedLive("KUBECONFIG naming a context that does not exist: one line, exit 1", () =>
    Effect.gen(function*() {
      const { exited, stderr } = yield* fails(
        () => [],
        (dir) => {
          writeFileSync(
            join(dir, "config"),
            kubeconfigFor("http://127.0.0.1:1", "ns").replace("current-context: sim", "current-context: elsewhere")
          )
          return { HOME: dir, KUBECONFIG: join(dir, "config") }
        }
      )
      expect(exited.code).toBe(1)
      expect(stderr).toHaveLength(1)
      expect(stderr[0]).toMatch(/^sandbox-watch: .*elsewhere/)
      expect(stderr[0]).not.toContain(Token)
    }), ProcessTimeout)

  it.scopedLive("a --duration that is not a duration is a usage error: exit 2", () =>
    Effect.gen(function*() {
      const { exited, stderr } = yield* fails(() => ["--demo", "--duration", "soon"])
      expect(exited.code).toBe(2)
      // One line: what is wrong and where to look, not the message and a second line.
      expect(stderr).toStrictEqual([
        `sandbox-watch: --duration "soon" is not a duration; try 30s, 5m or 1h30m; see sandbox-watch --help`
      ])
    }), ProcessTimeout)

  it.scopedLive("a flag the program does not have is a usage error: exit 2, one line", () =>
    Effect.gen(function*() {
      const { exited, stderr, stdout } = yield* fails(() => ["--demo", "--bogus"])
      expect(exited.code).toBe(2)
      expect(stdout).toStrictEqual([])
      expect(stderr).toStrictEqual([`sandbox-watch: Received unknown argument: '--bogus'; see sandbox-watch --help`])
    }), ProcessTimeout)

  it.scopedLive(
    "a --namespace that is not a namespace name is a usage error: exit 2, one line, no request",
    () =>
      Effect.gen(function*() {
        // --demo --duration: today's program would run (and end) rather than hang on a 404 for ever.
        for (const bad of ["", "Bad_NS!", "a".repeat(64), "Upper"]) {
          const { exited, stderr, stdout } = yield* fails(() => ["--demo", "--duration", "5s", "--namespace", bad])
          expect(exited.code).toBe(2)
          expect(stdout).toStrictEqual([])
          expect(stderr).toHaveLength(1)
          expect(stderr[0]).toContain(`sandbox-watch: --namespace ${JSON.stringify(bad)}: not a namespace name`)
        }
      }),
    ProcessTimeout
  )

  it.scopedLive("a limit that is not one is a usage error: exit 2, naming the flag", () =>
    Effect.gen(function*() {
      for (
        const [args, said] of [
          [["--max-line-bytes", "lots"], `--max-line-bytes "lots": not a byte count`],
          [["--max-list-page-bytes", "0"], `--max-list-page-bytes "0": not a byte count`],
          [["--max-list-items", "0"], `--max-list-items "0": not a whole number of at least 1`],
          [["--body-timeout", "0s"], `--body-timeout "0s": must be more than 0`],
          [["--headers-timeout", "soon"], `--headers-timeout "soon": not a duration`]
        ] as const
      ) {
        const { exited, stderr } = yield* fails(() => ["--demo", ...args])
        expect(exited.code).toBe(2)
        expect(stderr.join("\n")).toContain(said)
      }
    }), ProcessTimeout)
})

describe("sandbox-watch in a pod: where the service account is mounted", () => {
  /** A pod-shaped directory: a token, a CA and a namespace, as the kubelet mounts them. */
  const serviceAccountDir = (dir: string, name: string, namespace: string) => {
    const sa = join(dir, name)
    mkdirSync(sa)
    writeFileSync(join(sa, "token"), `${Token}\n`)
    writeFileSync(join(sa, "ca.crt"), readFileSync(new URL("./fixtures/kubeconfig/pki/ca.pem", import.meta.url)))
    writeFileSync(join(sa, "namespace"), namespace)
    return sa
  }
  // Nothing listens on port 1: the first line, what is watched and from where, is all these read.
  const podEnv = (dir: string) => ({ HOME: dir, KUBERNETES_SERVICE_HOST: "127.0.0.1", KUBERNETES_SERVICE_PORT: "1" })
  const firstLine = (args: ReadonlyArray<string>, env: Record<string, string>) =>
    Effect.gen(function*() {
      const program = yield* Program.start(["--output", "ndjson", ...args], env)
      const at = yield* program.awaitStderr((l) => l.length > 0)
      const first = (yield* program.stderr)[at]!
      yield* program.kill("SIGTERM")
      expect(yield* program.exited).toStrictEqual({ code: 0, signal: null })
      return first
    })

  it.scopedLive(
    "an empty SANDBOX_WATCH_SERVICE_ACCOUNT_DIR is not set: it points at no cluster",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const first = yield* firstLine([], { ...Program.noClusterEnv(dir), SANDBOX_WATCH_SERVICE_ACCOUNT_DIR: "" })
        expect(first).toMatch(/^sandbox-watch: no Kubernetes cluster is configured, so this is the demo/)
      }),
    ProcessTimeout
  )

  it.scopedLive(
    "SANDBOX_WATCH_SERVICE_ACCOUNT_DIR names the directory; --service-account-dir wins over it",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const fromEnv = serviceAccountDir(dir, "from-env", "team-env")
        const fromFlag = serviceAccountDir(dir, "from-flag", "team-flag")
        const env = { ...podEnv(dir), SANDBOX_WATCH_SERVICE_ACCOUNT_DIR: fromEnv }
        expect(yield* firstLine([], env)).toBe(
          "sandbox-watch: watching Sandboxes in namespace team-env (selector jr2.dev/run) on https://127.0.0.1:1, " +
            `from in-cluster service account ${fromEnv} (https://127.0.0.1:1)`
        )
        expect(yield* firstLine(["--service-account-dir", fromFlag], env)).toBe(
          "sandbox-watch: watching Sandboxes in namespace team-flag (selector jr2.dev/run) on https://127.0.0.1:1, " +
            `from in-cluster service account ${fromFlag} (https://127.0.0.1:1)`
        )
      }),
    ProcessTimeout
  )
})

describe("sandbox-watch never shows invented data as a cluster's", () => {
  /** The program in `env` (HOME an empty directory unless `env` says): its exit and lines. */
  const runIn = (env: (home: string) => Record<string, string>) =>
    Effect.gen(function*() {
      const home = yield* tempDir
      const program = yield* Program.start(["--output", "ndjson", "--duration", "5s"], env(home))
      const exited = yield* program.exited
      return { exited, stdout: yield* program.stdout, stderr: yield* program.stderr, home }
    })

  it.scopedLive(
    "KUBECONFIG naming only files that do not exist: exit 1, one line naming them, no demo",
    () =>
      Effect.gen(function*() {
        const { exited, stderr, stdout } = yield* runIn((home) => ({
          HOME: home,
          KUBECONFIG: `${join(home, "gone-a")}:${join(home, "gone-b")}`
        }))
        expect(exited).toStrictEqual({ code: 1, signal: null })
        expect(stdout).toStrictEqual([])
        expect(stderr).toHaveLength(1)
        expect(stderr[0]).toMatch(/^sandbox-watch: KUBECONFIG=.*gone-a:.*gone-b \(no such file\)/)
        expect(stderr[0]).not.toContain("simulated API server at")
      }),
    ProcessTimeout
  )

  it.scopedLive(
    "a pod's environment without a service-account token: exit 1, one line naming the token file",
    () =>
      Effect.gen(function*() {
        const { exited, stderr, stdout } = yield* runIn((home) => ({
          HOME: home,
          KUBERNETES_SERVICE_HOST: "127.0.0.1",
          KUBERNETES_SERVICE_PORT: "1"
        }))
        expect(exited).toStrictEqual({ code: 1, signal: null })
        expect(stdout).toStrictEqual([])
        expect(stderr).toHaveLength(1)
        expect(stderr[0]).toMatch(
          /^sandbox-watch: .*127\.0\.0\.1:1 is set, but \/var\/run\/secrets\/.*\/token does not exist/
        )
      }),
    ProcessTimeout
  )

  it.scopedLive("a ~/.kube/config that names no cluster: exit 1, one line naming it", () =>
    Effect.gen(function*() {
      const { exited, stderr, stdout } = yield* runIn((home) => {
        mkdirSync(join(home, ".kube"))
        writeFileSync(join(home, ".kube", "config"), "apiVersion: v1\nkind: Config\nclusters: []\n")
        return { HOME: home }
      })
      expect(exited).toStrictEqual({ code: 1, signal: null })
      expect(stdout).toStrictEqual([])
      expect(stderr).toHaveLength(1)
      expect(stderr[0]).toMatch(/^sandbox-watch: .*\.kube\/config \(no clusters, contexts or users in it\)/)
    }), ProcessTimeout)
})

describe("sandbox-watch --help", () => {
  // `script` gives the program a pseudo-terminal, as an operator's shell would.
  const helpOnTerminal = (home: string, env: Record<string, string>) =>
    Effect.async<string>((resume) => {
      execFile(
        "script",
        ["-qec", `${process.execPath} --import tsx src/cli/main.ts --help`, "/dev/null"],
        { cwd: Program.root, env: { PATH: process.env["PATH"], HOME: home, TERM: "xterm", ...env } },
        (_error, stdout) => resume(Effect.succeed(stdout))
      )
    })

  it.scopedLive("on a terminal it is in colour, and plain with NO_COLOR set", () =>
    Effect.gen(function*() {
      const home = yield* tempDir
      const coloured = yield* helpOnTerminal(home, {})
      expect(coloured).toContain("--namespace")
      expect(coloured).toContain("\x1b[")
      const plain = yield* helpOnTerminal(home, { NO_COLOR: "1" })
      expect(plain).toContain("--namespace")
      expect(plain).not.toContain("\x1b[")
    }), ProcessTimeout)

  it.scopedLive("lists every flag and exits 0, in plain text on a pipe", () =>
    Effect.gen(function*() {
      const home = yield* tempDir
      const program = yield* Program.start(["--help"], { HOME: home })
      expect(yield* program.exited).toStrictEqual({ code: 0, signal: null })
      const help = (yield* program.stdout).join("\n")
      expect(help).toContain("sandbox-watch 0.1.0")
      // Not a terminal: no ANSI style codes (@effect/cli writes them unasked).
      expect(help).not.toContain("\x1b[")
      for (
        const flag of [
          "--namespace",
          "--selector",
          "--kubeconfig",
          "--context",
          "--output table | ndjson",
          "--demo",
          "--duration",
          "--service-account-dir"
        ]
      ) {
        expect(help).toContain(flag)
      }
    }), ProcessTimeout)

  it("lists exactly the flags the parser accepts", () => {
    // The help is written from Usage.ts without loading the parser; this keeps the two in step.
    const parsed = HelpDoc.toAnsiText(Command.getHelp(Cli.command, CliConfig.defaultConfig))
    const flagsIn = (text: string) => new Set(text.match(/--[a-z][a-z-]*/g))
    const cliBuiltIns = ["--completions", "--wizard"]
    const help = Usage.help({ colours: false })
    expect(flagsIn(help)).toStrictEqual(new Set([...flagsIn(parsed)].filter((f) => !cliBuiltIns.includes(f))))
    expect(Usage.Flags.selector.description).toContain(`\`${DefaultLabelSelector}\``)
    expect(Usage.Version).toBe(JSON.parse(readFileSync(join(Program.root, "package.json"), "utf8")).version)
  })

  it.scopedLive(
    "shows only the program's own options: no built-in of the CLI library, each flag once",
    () =>
      Effect.gen(function*() {
        const home = yield* tempDir
        const program = yield* Program.start(["--help"], { HOME: home })
        expect(yield* program.exited).toStrictEqual({ code: 0, signal: null })
        const help = (yield* program.stdout).join("\n")
        for (const leak of ["--wizard", "--completions", "A user-defined piece of text", "This setting is optional"]) {
          expect(help).not.toContain(leak)
        }
        expect(help.match(/^\s*--log-level\b/gm)).toHaveLength(1)
      }),
    ProcessTimeout
  )
})

describe("sandbox-watch's messages a person can act on", () => {
  /** The program with `args` (and `env`, HOME a fresh directory), run to its exit: what it said. */
  const ran = (
    args: (dir: string) => ReadonlyArray<string>,
    env: (dir: string) => Record<string, string> = (dir) => ({ HOME: dir })
  ) =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const program = yield* Program.start(args(dir), env(dir))
      const exited = yield* program.exited
      return { exited, stdout: yield* program.stdout, stderr: yield* program.stderr, dir }
    })

  it.scopedLive(
    "a value that is not one of a flag's choices names the flag and the choices: exit 2",
    () =>
      Effect.gen(function*() {
        for (
          const [args, said] of [
            [["--output", "yaml"], `--output "yaml": must be table or ndjson`],
            [["-o", "yaml"], `--output "yaml": must be table or ndjson`],
            [["--log-format", "xml"], `--log-format "xml": must be text, json or logfmt`],
            [["--list-mode", "pages"], `--list-mode "pages": must be auto, stream or paged`],
            [
              ["--log-level", "loud"],
              `--log-level "loud": must be trace, debug, info, warning, error, fatal or none`
            ]
          ] as const
        ) {
          const { exited, stderr, stdout } = yield* ran(() => ["--demo", ...args])
          expect(exited.code).toBe(2)
          expect(stdout).toStrictEqual([])
          expect(stderr).toStrictEqual([`sandbox-watch: ${said}; see sandbox-watch --help`])
        }
      }),
    ProcessTimeout
  )

  it.scopedLive(
    "a flag that takes a value, given none, says its value is missing: exit 2",
    () =>
      Effect.gen(function*() {
        for (
          const [args, said] of [
            [["--demo", "--namespace"], "--namespace needs a value (name), and none was given"],
            [["--demo", "-n"], "--namespace needs a value (name), and none was given"],
            [["--demo", "--output"], "--output needs a value (table | ndjson), and none was given"],
            [["--kubeconfig", "--demo"], "--kubeconfig needs a value (file), and --demo is a flag"],
            [["--demo", "--metrics-address="], "--metrics-address needs a value (host:port), and none was given"],
            [
              ["--demo", "--log-level"],
              "--log-level needs a value (trace | debug | info | warning | error | fatal | none), and none was given"
            ]
          ] as const
        ) {
          const { exited, stderr, stdout } = yield* ran(() => args)
          expect(exited.code).toBe(2)
          expect(stdout).toStrictEqual([])
          expect(stderr).toStrictEqual([`sandbox-watch: ${said}; see sandbox-watch --help`])
        }
      }),
    ProcessTimeout
  )

  it.scopedLive(
    "an empty kubeconfig says it holds no clusters, contexts or users, named by --kubeconfig or by KUBECONFIG",
    () =>
      Effect.gen(function*() {
        const named = yield* ran((dir) => {
          writeFileSync(join(dir, "empty"), "")
          return ["--output", "ndjson", "--kubeconfig", join(dir, "empty")]
        })
        expect(named.exited.code).toBe(1)
        expect(named.stderr).toStrictEqual([
          `sandbox-watch: kubeconfig ${join(named.dir, "empty")}: no clusters, contexts or users in it`
        ])
        const fromEnv = yield* ran(() => ["--output", "ndjson"], (dir) => {
          writeFileSync(join(dir, "empty"), "")
          return { HOME: dir, KUBECONFIG: join(dir, "empty") }
        })
        expect(fromEnv.exited.code).toBe(1)
        expect(fromEnv.stderr).toHaveLength(1)
        expect(fromEnv.stderr[0]).toContain(
          `KUBECONFIG=${join(fromEnv.dir, "empty")} (no clusters, contexts or users in it)`
        )
      }),
    ProcessTimeout
  )

  it("every flag that takes a value is checked for one; a switch, a value and what follows `--` are not", () => {
    const valued = Object.values<Usage.FlagDoc>(Usage.Flags).filter((doc) => doc.value !== undefined)
    expect(valued.map((doc) => doc.name)).toContain("max-list-items")
    for (const doc of valued) {
      const needs = `--${doc.name} needs a value (${doc.value})`
      expect(Usage.missingValue(["--demo", `--${doc.name}`])).toBe(`${needs}, and none was given`)
      expect(Usage.missingValue([`--${doc.name}=`, "--demo"])).toBe(`${needs}, and none was given`)
      expect(Usage.missingValue([`--${doc.name}`, "--demo"])).toBe(`${needs}, and --demo is a flag`)
      expect(Usage.missingValue([`--${doc.name}`, "--context=prod"])).toBe(`${needs}, and --context=prod is a flag`)
      expect(Usage.missingValue([`--${doc.name}`, "x", "--demo"])).toBeUndefined()
      expect(Usage.missingValue([`--${doc.name}=x`])).toBeUndefined()
      if (doc.alias !== undefined) expect(Usage.missingValue([`-${doc.alias}`])).toBe(`${needs}, and none was given`)
    }
    expect(Usage.missingValue(["--demo", "--gzip-streaming-lists"])).toBeUndefined()
    expect(Usage.missingValue(["-n", "team-a", "--output", "ndjson", "--demo"])).toBeUndefined()
    expect(Usage.missingValue(["--demo", "--", "--namespace"])).toBeUndefined()
  })

  /** What the loop's warnings may take of a terminal line in the text format. */
  const TerminalColumns = 120

  it.scopedLive(
    "a server that never answers: said once, in words, after 5 s; the retries go on; each warning fits a terminal line",
    () =>
      Effect.gen(function*() {
        const { exited, stderr } = yield* ran((dir) => {
          writeFileSync(join(dir, "kubeconfig"), kubeconfigFor("https://127.0.0.1:1", "ns"))
          return ["--kubeconfig", join(dir, "kubeconfig"), "--output", "ndjson", "--duration", "10s"]
        })
        expect(exited).toStrictEqual({ code: 0, signal: null })
        const notice = stderr.filter((line) => line.includes("has not answered"))
        expect(notice).toHaveLength(1)
        expect(notice[0]).toMatch(
          /^\d\d:\d\d:\d\d\.\d{3} WARN {2}the server at https:\/\/127\.0\.0\.1:1 has not answered since sandbox-watch started, 5s ago: check that address, that the cluster is up, and any proxy or VPN on the way; still trying$/
        )
        // The retries went on after it.
        const warnings = stderr.filter((line) => / WARN /.test(line))
        expect(warnings.indexOf(notice[0]!)).toBeLessThan(warnings.length - 1)
        for (const line of warnings.filter((line) => line !== notice[0])) {
          expect(line).toContain("ECONNREFUSED 127.0.0.1:1")
          expect(line.length, line).toBeLessThanOrEqual(TerminalColumns)
        }
      }),
    ProcessTimeout
  )

  it.scopedLive(
    "a server that answers, if only with a failure, is never said not to answer",
    () =>
      Effect.gen(function*() {
        const server = yield* Sim.SimulatedApiServer
        const { exited, stderr } = yield* ran((dir) => {
          // The wrong token: every request is answered 401.
          writeFileSync(join(dir, "kubeconfig"), kubeconfigFor(server.url, "ns").replace(Token, "not-the-token"))
          return ["--kubeconfig", join(dir, "kubeconfig"), "--output", "ndjson", "--duration", "7s"]
        })
        expect(exited).toStrictEqual({ code: 0, signal: null })
        expect(stderr.some((line) => line.includes("401"))).toBe(true)
        expect(stderr.filter((line) => line.includes("has not answered"))).toEqual([])
      }).pipe(Effect.provide(simulated())),
    ProcessTimeout
  )

  it.scopedLive(
    "a password in the server's URL is refused, and said nowhere: text or JSON logs, a refusing port or a live server",
    () =>
      Effect.gen(function*() {
        const Password = "s3cretPW-in-the-url"
        const server = yield* Sim.SimulatedApiServer
        const live = new URL(server.url)
        for (const address of [`https://admin:${Password}@127.0.0.1:1`, `http://admin:${Password}@${live.host}`]) {
          for (const format of ["text", "json"]) {
            const { exited, stderr, stdout } = yield* ran((dir) => {
              writeFileSync(join(dir, "kubeconfig"), kubeconfigFor(address, "ns"))
              return [
                "--kubeconfig",
                join(dir, "kubeconfig"),
                "--output",
                "ndjson",
                "--log-format",
                format,
                "--metrics-address",
                "127.0.0.1:0",
                "--duration",
                "5s"
              ]
            })
            expect([...stdout, ...stderr].filter((line) => line.includes(Password))).toEqual([])
            expect(exited.code).toBe(1)
            expect(stderr).toHaveLength(1)
            expect(stderr[0]).toContain(`cluster "sim": its server URL carries a user name and password`)
          }
        }
        expect(yield* server.requestsOf("list")).toEqual([])
        expect(yield* server.requestsOf("watch")).toEqual([])
      }).pipe(Effect.provide(simulated())),
    ProcessTimeout
  )
})
