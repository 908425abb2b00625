/**
 * `npm start`, and the bundled `bin`: the sandbox-watch program. See `src/cli/Cli.ts`.
 *
 * `--help` and `--version`, and a flag given no value, are answered from `Usage.ts` alone, before
 * Effect is loaded: a command-line tool answers those at once. Anything else loads the program.
 */
import * as Module from "node:module"
import * as Usage from "./Usage.ts"

const asked = Usage.builtIn(process.argv.slice(2))
const missingValue = Usage.missingValue(process.argv.slice(2))
if (asked === "help") {
  const colours = process.stdout.isTTY === true && (process.env.NO_COLOR ?? "") === ""
  process.stdout.write(Usage.help({ colours, width: process.stdout.columns }))
} else if (asked === "version") {
  process.stdout.write(`${Usage.Version}\n`)
} else if (missingValue !== undefined) {
  // A usage error, as the parser's are: one line, exit 2.
  process.stderr.write(`${Usage.usageLine(missingValue)}\n`)
  process.exitCode = 2
} else {
  // Node 22.1+ keeps the compiled program on disk (os.tmpdir()) for the next start; Node 20 has no
  // such cache, and NODE_DISABLE_COMPILE_CACHE turns it off.
  ;(Module as { readonly enableCompileCache?: () => unknown }).enableCompileCache?.()
  const [NodeRuntime, Exit, Cli] = await Promise.all([
    import("@effect/platform-node/NodeRuntime"),
    import("effect/Exit"),
    import("./Cli.ts")
  ])

  // A reader that goes away (`| head`) closes stdout: the write fails and the program ends quietly,
  // rather than dying on an unhandled 'error' event.
  process.stdout.on("error", () => {})

  NodeRuntime.runMain(Cli.main(process.argv), {
    // Cli.main says what went wrong itself, in one line; logs never go to stdout.
    disableErrorReporting: true,
    disablePrettyLogger: true,
    teardown: (exit, onExit) => onExit(Exit.isSuccess(exit) ? 0 : Cli.exitCode(exit.cause))
  })
}
