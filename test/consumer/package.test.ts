/**
 * The library as an orchestrator developer gets it: `npm pack`, installed into a fresh project that
 * brings its own `effect` (another patch of the same minor), type-checked by a plain NodeNext
 * `tsc`, its README example run by plain `node`, and its `bin` run through `npx`. The example is
 * `fixture/src/main.ts`, which is also the README's library section, word for word.
 */
import { execFile } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, describe, expect, it } from "vitest"

const repo = Path.resolve(Path.dirname(fileURLToPath(import.meta.url)), "../..")
const fixture = Path.join(repo, "test/consumer/fixture")
const work = Fs.mkdtempSync(Path.join(Os.tmpdir(), "sandbox-watch-consumer-"))
afterAll(() => Fs.rmSync(work, { recursive: true, force: true }))

interface Ran {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

/** Runs a command to its end (bounded), with its output kept for the failure message. */
const run = (command: string, args: ReadonlyArray<string>, cwd: string, timeoutMs = 240_000): Promise<Ran> =>
  new Promise((resolve) => {
    execFile(
      command,
      args,
      { cwd, timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024, env: { ...process.env, NO_COLOR: "1" } },
      (error, stdout, stderr) =>
        resolve({ code: error === null ? 0 : typeof error.code === "number" ? error.code : null, stdout, stderr })
    )
  })

const succeeded = async (what: string, ran: Promise<Ran>): Promise<Ran> => {
  const result = await ran
  if (result.code !== 0) {
    throw new Error(
      `${what} exited ${result.code}\n--- stdout\n${result.stdout.slice(-4000)}\n--- stderr\n${
        result.stderr.slice(-4000)
      }`
    )
  }
  return result
}

/** Every installed copy of a package: `node_modules/<name>/package.json` anywhere below `root`. */
const copiesOf = (root: string, name: string): Array<string> => {
  const found: Array<string> = []
  const walk = (dir: string) => {
    const modules = Path.join(dir, "node_modules")
    if (!Fs.existsSync(modules)) return
    for (const entry of Fs.readdirSync(modules)) {
      const scoped = entry.startsWith("@")
        ? Fs.readdirSync(Path.join(modules, entry)).map((e) => `${entry}/${e}`)
        : [entry]
      for (const pkg of scoped) {
        const at = Path.join(modules, pkg)
        if (pkg === name) found.push(JSON.parse(Fs.readFileSync(Path.join(at, "package.json"), "utf8")).version)
        walk(at)
      }
    }
  }
  walk(root)
  return found
}

const manifest = JSON.parse(Fs.readFileSync(Path.join(repo, "package.json"), "utf8"))
const pinned = (name: string): string => manifest.devDependencies[name]
/** The consumer's effect: another patch of the minor this project pins. */
const consumerEffect = (() => {
  const [major, minor, patch = 0] = pinned("effect").split(".").map(Number)
  return `${major}.${minor}.${patch > 0 ? patch - 1 : patch + 1}`
})()

describe("the packed package, installed and used as a consumer does", () => {
  it(
    "packs, installs beside the consumer's own effect, type-checks with plain NodeNext, runs the README example and the bin",
    async () => {
      // The `node` on PATH (so npm's, npx's, the example's and the bin's) is the Node these tests run
      // on: `npm run test:node` puts each tested Node first on PATH.
      const pathNode = await succeeded("node --version", run("node", ["--version"], repo))
      expect(pathNode.stdout.trim()).toBe(process.version)

      const packed = await succeeded("npm pack", run("npm", ["pack", "--pack-destination", work, "--json"], repo))
      const [{ filename, files }] = JSON.parse(packed.stdout) as [{ filename: string; files: Array<{ path: string }> }]
      const shipped = files.map((f) => f.path)
      expect(shipped).toContain("dist/index.js")
      expect(shipped).toContain("dist/index.d.ts")
      expect(shipped).toContain("dist/bin/sandbox-watch.js")
      expect(shipped.filter((p) => /^(test|scratchpad)\//.test(p) || p.includes("bench"))).toEqual([])

      const project = Path.join(work, "consumer")
      Fs.cpSync(fixture, project, { recursive: true })
      Fs.writeFileSync(
        Path.join(project, "package.json"),
        JSON.stringify({ name: "consumer", private: true, type: "module" })
      )
      await succeeded(
        "npm install",
        run("npm", [
          "install",
          "--no-audit",
          "--no-fund",
          "--prefer-offline",
          Path.join(work, filename),
          `effect@${consumerEffect}`,
          `@effect/platform@${pinned("@effect/platform")}`,
          `@effect/platform-node@${pinned("@effect/platform-node")}`,
          `typescript@${pinned("typescript")}`,
          `@types/node@${pinned("@types/node")}`,
          // @effect/platform-node's own declarations import `ws`: any of its users type-checking
          // without skipLibCheck needs these (left on, so our declarations are checked too).
          "@types/ws@^8"
        ], project)
      )

      // One copy of effect, the consumer's: the library's is a peer, not a dependency of its own.
      expect(copiesOf(project, "effect")).toEqual([consumerEffect])
      // The program's own needs stay out of a library install.
      expect(copiesOf(project, "@effect/cli")).toEqual([])
      expect(copiesOf(project, "tsx")).toEqual([])

      await succeeded("tsc --noEmit", run("npx", ["tsc", "--noEmit"], project))
      await succeeded("tsc", run("npx", ["tsc"], project))
      const example = await succeeded("node dist/main.js", run("node", ["dist/main.js"], project, 60_000))
      expect(example.stdout + example.stderr).toContain("sb-1 is ready at 10.0.0.7:8080")
      expect(example.stderr).not.toContain("Executing an Effect versioned")

      const demo = await succeeded(
        "npx sandbox-watch --demo",
        // --metrics-address too: the bundled bin loads the exporter from a chunk of its own.
        run(
          "npx",
          ["sandbox-watch", "--demo", "--duration", "5s", "--output", "ndjson", "--metrics-address", "127.0.0.1:0"],
          project,
          60_000
        )
      )
      expect(demo.stderr).toContain("metrics at http://127.0.0.1:")
      expect(demo.stdout.split("\n")).toContain(`{"event":"synced","demo":true}`)
      // The bin carries its own effect, bundled: it starts without resolving the consumer's.
      const version = await succeeded(
        "npx sandbox-watch --version",
        run("npx", ["sandbox-watch", "--version"], project)
      )
      expect(version.stdout.trim()).toBe(manifest.version)
    },
    600_000
  )

  it.each(["src/main.ts", "src/cluster.ts"])(
    "the README's library example %s is the consumer's script, word for word (type-checked above)",
    (file) => {
      const readme = Fs.readFileSync(Path.join(repo, "README.md"), "utf8")
      const script = Fs.readFileSync(Path.join(fixture, file), "utf8")
      expect(readme).toContain("```ts\n" + script + "```")
    }
  )
})
