/**
 * The bundled `bin` as a user runs it with plain `node`: its version, its help, and a short demo that
 * syncs. Run on each tested Node by `npm run test:node` (scripts/test-node.mjs), which builds `dist`
 * first and says which Node it meant (`SANDBOX_WATCH_NODE`), so a run on the wrong Node fails.
 */
import { execFile } from "node:child_process"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { describe, expect, it } from "vitest"

const repo = Path.resolve(Path.dirname(fileURLToPath(import.meta.url)), "../..")
const bin = Path.join(repo, "dist/bin/sandbox-watch.js")
const manifest = JSON.parse(Fs.readFileSync(Path.join(repo, "package.json"), "utf8"))

interface Ran {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

/** The bin under this Node (`process.execPath`, the one vitest runs on), to its end (bounded). */
const runBin = (args: ReadonlyArray<string>): Promise<Ran> =>
  new Promise((resolve) => {
    execFile(
      process.execPath,
      [bin, ...args],
      { cwd: repo, timeout: 45_000, env: { ...process.env, NO_COLOR: "1" } },
      (error, stdout, stderr) =>
        resolve({ code: error === null ? 0 : typeof error.code === "number" ? error.code : null, stdout, stderr })
    )
  })

const described = (ran: Ran) => `exit ${ran.code}\n--- stdout\n${ran.stdout}\n--- stderr\n${ran.stderr}`

describe(`the bundled bin on Node ${process.version}`, () => {
  it("runs on the Node asked for, from a built dist", () => {
    expect(
      process.env.SANDBOX_WATCH_NODE,
      "run through `npm run test:node -- <major>`, which names the Node it means"
    ).toBe(process.versions.node.split(".")[0])
    expect(Fs.existsSync(bin), `${bin} is missing: \`npm run build\` makes it`).toBe(true)
  })

  it("--version prints the package's version", async () => {
    const ran = await runBin(["--version"])
    expect(ran.code, described(ran)).toBe(0)
    expect(ran.stdout.trim()).toBe(manifest.version)
  })

  it("--help describes the program's options", async () => {
    const ran = await runBin(["--help"])
    expect(ran.code, described(ran)).toBe(0)
    expect(ran.stdout).toContain("sandbox-watch")
    expect(ran.stdout).toContain("--namespace")
    expect(ran.stdout).toContain("--demo")
  })

  it("--demo --duration 3s --output ndjson prints a synced line and exits 0", async () => {
    const ran = await runBin(["--demo", "--duration", "3s", "--output", "ndjson"])
    expect(ran.code, described(ran)).toBe(0)
    const events = ran.stdout.split("\n").filter((line) => line !== "").map((line) => JSON.parse(line).event)
    expect(events, described(ran)).toContain("synced")
  })
})
