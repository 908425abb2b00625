/**
 * The library as an orchestrator developer gets it: `npm pack`, installed into a fresh app that
 * brings its own `effect` (another patch of the same minor), once as a CommonJS app (what
 * `npm init -y` makes) and once as an ES-module app, each compiled by a plain NodeNext `tsc`, its
 * README example run by plain `node` on one Effect, the app's own, and its `bin` run through `npx`.
 * The example is `fixture/src/main.ts`, which is also the README's library section, word for word;
 * `fixture/src/oneEffect.ts` says which Effect the app and the library share.
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
// Two apps' installs to delete: on a busy machine that outlasts the default hook timeout.
afterAll(() => Fs.promises.rm(work, { recursive: true, force: true }), 300_000)

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

/** Runs `make` once, when first asked: the tests that need the same packed tarball or app share it. */
const once = <A>(make: () => Promise<A>): () => Promise<A> => {
  let made: Promise<A> | undefined
  return () => (made ??= make())
}

const packed = once(async () => {
  // The `node` on PATH (so npm's, npx's, the example's and the bin's) is the Node these tests run
  // on: `npm run test:node` puts each tested Node first on PATH.
  const pathNode = await succeeded("node --version", run("node", ["--version"], repo))
  expect(pathNode.stdout.trim()).toBe(process.version)
  const ran = await succeeded("npm pack", run("npm", ["pack", "--pack-destination", work, "--json"], repo))
  const [{ filename, files }] = JSON.parse(ran.stdout) as [{ filename: string; files: Array<{ path: string }> }]
  return { tarball: Path.join(work, filename), shipped: files.map((f) => f.path) }
})

type AppType = "commonjs" | "module"

/** A fresh app of that type, as a newcomer starts one, with the packed library and its peers installed. */
const appOf = (type: AppType) =>
  once(async () => {
    const { tarball } = await packed()
    const app = Path.join(work, `${type}-app`)
    Fs.cpSync(fixture, app, { recursive: true })
    await succeeded("npm init -y", run("npm", ["init", "-y"], app))
    if (type === "module") await succeeded("npm pkg set type=module", run("npm", ["pkg", "set", "type=module"], app))
    await succeeded(
      "npm install",
      run("npm", [
        "install",
        "--no-audit",
        "--no-fund",
        "--prefer-offline",
        tarball,
        `effect@${consumerEffect}`,
        `@effect/platform@${pinned("@effect/platform")}`,
        `@effect/platform-node@${pinned("@effect/platform-node")}`,
        `typescript@${pinned("typescript")}`,
        `@types/node@${pinned("@types/node")}`,
        // @effect/platform-node's own declarations import `ws`: any of its users type-checking
        // without skipLibCheck needs these (left on, so our declarations are checked too).
        "@types/ws@^8"
      ], app)
    )
    return app
  })
const apps: Record<AppType, () => Promise<string>> = { commonjs: appOf("commonjs"), module: appOf("module") }

/** The subpaths the package exports, one a public module (`./SandboxWatch` is `SandboxWatch`). */
const publicModules = Object.keys(manifest.exports)
  .filter((key) => key !== "." && key !== "./package.json" && !key.includes("*"))
  .map((key) => key.slice(2))

describe("the packed package, installed and used as a consumer does", () => {
  it(
    "ships an ES-module build, a CommonJS build, one set of declarations and the bin, nothing of the tests",
    async () => {
      const { shipped } = await packed()
      for (
        const file of ["dist/esm/index.js", "dist/cjs/index.js", "dist/dts/index.d.ts", "dist/bin/sandbox-watch.js"]
      ) {
        expect(shipped).toContain(file)
      }
      // Each build's format for Node and TypeScript: the package's is `module`.
      expect(shipped).toContain("dist/cjs/package.json")
      expect(shipped).toContain("dist/dts/package.json")
      for (const module of publicModules) {
        expect(manifest.exports[`./${module}`]).toEqual({
          types: `./dist/dts/${module}.d.ts`,
          import: `./dist/esm/${module}.js`,
          require: `./dist/cjs/${module}.js`,
          default: `./dist/cjs/${module}.js`
        })
        expect(shipped).toContain(`dist/esm/${module}.js`)
        expect(shipped).toContain(`dist/cjs/${module}.js`)
        expect(shipped).toContain(`dist/dts/${module}.d.ts`)
      }
      // The program is the bin's bundle, not a part of the library's builds.
      expect(shipped.filter((p) => /^dist\/(esm|cjs|dts)\/cli\//.test(p))).toEqual([])
      expect(shipped.filter((p) => /^(test|scratchpad)\//.test(p) || p.includes("bench"))).toEqual([])
    },
    600_000
  )

  it.each<{ type: AppType; build: "cjs" | "esm"; other: "cjs" | "esm"; compiledImport: string }>([
    { type: "commonjs", build: "cjs", other: "esm", compiledImport: `require("sandbox-watch")` },
    { type: "module", build: "esm", other: "cjs", compiledImport: `from "sandbox-watch"` }
  ])(
    "a $type app installs it beside its own effect, compiles with plain NodeNext, and runs the README example on one Effect, its own",
    async ({ build, compiledImport, other, type }) => {
      const app = await apps[type]()
      const declared = JSON.parse(Fs.readFileSync(Path.join(app, "package.json"), "utf8")).type ?? "commonjs"
      expect(declared).toBe(type)

      // One copy of effect, the consumer's: the library's is a peer, not a dependency of its own.
      expect(copiesOf(app, "effect")).toEqual([consumerEffect])
      // The program's own needs stay out of a library install.
      expect(copiesOf(app, "@effect/cli")).toEqual([])
      expect(copiesOf(app, "tsx")).toEqual([])

      // `tsc` fails on a type error as `tsc --noEmit` would, and emits what `node` runs.
      await succeeded("tsc", run("npx", ["tsc"], app))
      expect(Fs.readFileSync(Path.join(app, "dist/main.js"), "utf8")).toContain(compiledImport)

      const example = await succeeded("node dist/main.js", run("node", ["dist/main.js"], app, 60_000))
      expect(example.stdout + example.stderr).toContain("sb-1 is ready at 10.0.0.7:8080")
      expect(example.stderr).not.toContain("Executing an Effect versioned")

      const probed = await succeeded("node dist/oneEffect.js", run("node", ["dist/oneEffect.js"], app, 60_000))
      const oneEffect = JSON.parse(probed.stdout)
      // The app's kind picks one build of each, and only that one is loaded.
      for (const pkg of ["effect", "sandbox-watch"]) {
        expect(oneEffect.files[pkg][other], `${pkg}'s ${other} files loaded by a ${type} app`).toBe(0)
        expect(oneEffect.files[pkg][build]).toBeGreaterThan(0)
      }
      expect(oneEffect.sameTagPrototype).toBe(true)
      expect(oneEffect.sameLayerPrototype).toBe(true)
      expect(oneEffect.subpathIsRootModule).toEqual(Object.fromEntries(publicModules.map((m) => [m, true])))
    },
    600_000
  )

  it("a CommonJS app on TypeScript's classic `module: commonjs` resolution type-checks, subpaths too", async () => {
    // Many existing Node services compile so (node10 resolution, blind to `exports`): `typesVersions`
    // gives them the subpaths' declarations.
    const app = await apps.commonjs()
    await succeeded(
      "tsc --module commonjs --moduleResolution node10",
      run("npx", ["tsc", "--noEmit", "--module", "commonjs", "--moduleResolution", "node10"], app)
    )
  }, 600_000)

  it("runs its bin through npx, Effect bundled in", async () => {
    const app = await apps.commonjs()
    const demo = await succeeded(
      "npx sandbox-watch --demo",
      // --metrics-address too: the bundled bin loads the exporter from a chunk of its own.
      run(
        "npx",
        ["sandbox-watch", "--demo", "--duration", "5s", "--output", "ndjson", "--metrics-address", "127.0.0.1:0"],
        app,
        60_000
      )
    )
    expect(demo.stderr).toContain("metrics at http://127.0.0.1:")
    expect(demo.stdout.split("\n")).toContain(`{"event":"synced","demo":true}`)
    // The bin carries its own effect, bundled: it starts without resolving the consumer's.
    const version = await succeeded("npx sandbox-watch --version", run("npx", ["sandbox-watch", "--version"], app))
    expect(version.stdout.trim()).toBe(manifest.version)
  }, 600_000)

  it.each(["src/main.ts", "src/cluster.ts"])(
    "the README's library example %s is the consumer's script, word for word (type-checked above)",
    (file) => {
      const readme = Fs.readFileSync(Path.join(repo, "README.md"), "utf8")
      const script = Fs.readFileSync(Path.join(fixture, file), "utf8")
      expect(readme).toContain("```ts\n" + script + "```")
    }
  )
})
