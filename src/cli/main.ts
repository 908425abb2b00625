/**
 * `npm start`: the sandbox-watch program. See `src/cli/Cli.ts`.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Exit } from "effect"
import * as Cli from "./Cli.ts"

// A reader that goes away (`| head`) closes stdout: the write fails and the program ends quietly,
// rather than dying on an unhandled 'error' event.
process.stdout.on("error", () => {})

NodeRuntime.runMain(Cli.main(process.argv), {
  // Cli.main says what went wrong itself, in one line; logs never go to stdout.
  disableErrorReporting: true,
  disablePrettyLogger: true,
  teardown: (exit, onExit) => onExit(Exit.isSuccess(exit) ? 0 : Cli.exitCode(exit.cause))
})
