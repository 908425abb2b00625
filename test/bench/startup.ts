/**
 * The start-up row (issue 43 §4): how long the built program (`dist/bin/sandbox-watch.js`, bundled
 * afresh from the working tree) takes to answer `--help` and `--version`, and to print `synced`
 * against the simulated API server, beside `node -e 0` and `npm start -- --help`. Each figure is
 * wall time and CPU time (user + sys): on a busy machine the CPU time is the one to read.
 */
import { Context, Effect, Exit, Layer, Scope } from "effect"
import { spawn, spawnSync } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { SandboxResource } from "../../src/Sandbox.ts"
import * as Sim from "../../src/SimulatedApiServer.ts"

export interface StartupFigures {
  readonly wallMs: number
  readonly cpuMs: number
}

/** One way to start: what the row is called and how to measure it once. */
export interface StartupRow {
  readonly key: string
  readonly label: string
  /** The goal on a quiet machine, in ms of wall time (none for the references). */
  readonly goalMs?: number
  readonly measure: () => Promise<StartupFigures>
}

const bin = "dist/bin/sandbox-watch.js"

/**
 * `command` run to its end under bash, whose `times` gives the CPU its children used: Node cannot
 * read a finished child's usage itself.
 */
const toExit = (root: string, command: ReadonlyArray<string>) => (): Promise<StartupFigures> =>
  new Promise((resolve, reject) => {
    const began = performance.now()
    const child = spawn("bash", ["-c", "\"$@\" >/dev/null 2>&1; code=$?; times; exit $code", "bash", ...command], {
      cwd: root,
      env: { ...process.env, NODE_OPTIONS: "" },
      stdio: ["ignore", "pipe", "inherit"]
    })
    let out = ""
    child.stdout.on("data", (d: Buffer) => (out += d.toString()))
    child.on("error", reject)
    child.on("exit", (code) => {
      const wallMs = performance.now() - began
      // `times`: the shell's user and sys, then its children's: `0m0.061s 0m0.012s`.
      const children = out.trim().split("\n").pop() ?? ""
      const seconds = [...children.matchAll(/(\d+)m([\d.]+)s/g)].map((m) => Number(m[1]) * 60 + Number(m[2]))
      if (code !== 0 || seconds.length !== 2) return reject(new Error(`${command.join(" ")}: exit ${code}: ${out}`))
      resolve({ wallMs, cpuMs: (seconds[0]! + seconds[1]!) * 1000 })
    })
  })

const clockTicks = Number(spawnSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).stdout.trim()) || 100

/** A live process's CPU so far (user + sys), from /proc; NaN where there is no /proc. */
const cpuMsOf = (pid: number): number => {
  try {
    // Fields 14 and 15 (utime, stime) after the parenthesised command name.
    const fields = Fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ")
    return ((Number(fields[11]) + Number(fields[12])) / clockTicks) * 1000
  } catch {
    return Number.NaN
  }
}

/** The program against `kubeconfig` until its `synced` line: wall and CPU to that line, then SIGTERM. */
const toSynced = (root: string, kubeconfig: string) => (): Promise<StartupFigures> =>
  new Promise((resolve, reject) => {
    const began = performance.now()
    const child = spawn(process.execPath, [bin, "--kubeconfig", kubeconfig, "--output", "ndjson"], {
      cwd: root,
      env: { PATH: process.env["PATH"], HOME: Path.dirname(kubeconfig) },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let out = ""
    let err = ""
    let figures: StartupFigures | undefined
    child.stderr.on("data", (d: Buffer) => (err += d.toString()))
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString()
      if (figures === undefined && out.includes(`{"event":"synced"}`)) {
        figures = { wallMs: performance.now() - began, cpuMs: cpuMsOf(child.pid!) }
        child.kill("SIGTERM")
      }
    })
    child.on("error", reject)
    child.on("exit", (code) =>
      figures !== undefined && code === 0
        ? resolve(figures)
        : reject(new Error(`${bin} to synced: exit ${code}: ${err.trim().split("\n").slice(0, 3).join(" / ")}`)))
  })

/** Sandboxes the simulator holds for the synced row: a small namespace, so start-up is what is measured. */
const SyncedSandboxes = 10

/**
 * Bundles the program from the working tree, starts the simulator with a few Sandboxes and writes a
 * kubeconfig for it; returns the rows and how to stop the simulator.
 */
export const prepare = async (root: string): Promise<{
  readonly rows: ReadonlyArray<StartupRow>
  readonly about: string
  readonly close: () => Promise<void>
}> => {
  const bundled = spawnSync(process.execPath, ["scripts/bundle-bin.mjs"], { cwd: root, encoding: "utf8" })
  if (bundled.status !== 0) throw new Error(`bundling the program failed: ${bundled.stderr}`)
  const scope = Effect.runSync(Scope.make())
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "sandbox-watch-startup-"))
  const close = async () => {
    await Effect.runPromise(Scope.close(scope, Exit.void))
    Fs.rmSync(dir, { recursive: true, force: true })
  }
  try {
    const context = await Effect.runPromise(
      Layer.buildWithScope(Sim.layer({ resource: SandboxResource, namespace: "startup" }), scope)
    )
    const server = Context.get(context, Sim.SimulatedApiServer)
    await Effect.runPromise(Effect.forEach(
      Array.from({ length: SyncedSandboxes }, (_, i) => i),
      (i) =>
        server.create({
          apiVersion: "jr2.dev/v1alpha1",
          kind: "Sandbox",
          metadata: { name: `s${i}`, labels: { "jr2.dev/run": "r1" } }
        }),
      { discard: true }
    ))
    const kubeconfig = Path.join(dir, "kubeconfig")
    Fs.writeFileSync(
      kubeconfig,
      JSON.stringify({
        apiVersion: "v1",
        kind: "Config",
        "current-context": "sim",
        clusters: [{ name: "sim", cluster: { server: server.url } }],
        contexts: [{ name: "sim", context: { cluster: "sim", namespace: "startup" } }]
      })
    )
    const node = process.execPath
    return {
      rows: [
        { key: "node", label: "`node -e 0`", measure: toExit(root, [node, "-e", "0"]) },
        {
          key: "help",
          label: "`node dist/bin/sandbox-watch.js --help`",
          goalMs: 300,
          measure: toExit(root, [node, bin, "--help"])
        },
        {
          key: "version",
          label: "`node dist/bin/sandbox-watch.js --version`",
          goalMs: 300,
          measure: toExit(root, [node, bin, "--version"])
        },
        {
          key: "synced",
          label: `\`node dist/bin/sandbox-watch.js\` to \`synced\` (simulator, ${SyncedSandboxes} Sandboxes)`,
          goalMs: 1000,
          measure: toSynced(root, kubeconfig)
        },
        {
          key: "npm-help",
          // esbuild's own process outlives the shell's wait, so `times` cannot count it: its ~1.5 s
          // of CPU (measured alone) is in the wall time only.
          label: "`npm start -- --help` (bundles first; CPU without esbuild's)",
          measure: toExit(root, ["npm", "start", "--silent", "--", "--help"])
        }
      ],
      about:
        `Bundled from the working tree by \`node scripts/bundle-bin.mjs\`; Node ${process.version}; the simulator (src/SimulatedApiServer.ts) runs in the runner's process.`,
      close
    }
  } catch (error) {
    await close()
    throw error
  }
}
