/**
 * The `sandbox-watch` program: watch every Sandbox under a selector in one namespace and show it,
 * as a live table for a person or as NDJSON for a program. With no cluster configured (or with
 * `--demo`) it runs against an embedded simulated API server played by a demo operator.
 */
import { Command, HelpDoc, Options, ValidationError } from "@effect/cli"
import { NodeContext } from "@effect/platform-node"
import { Cause, Config, Console, Data, Duration, Effect, Either, Layer, Logger, LogLevel, Option } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as NodePath from "node:path"
import { parseLabelSelector } from "../internal/labelSelector.ts"
import { withoutUserInfo } from "../internal/urlUserInfo.ts"
import * as KubeClient from "../KubeClient.ts"
import * as KubeConfig from "../KubeConfig.ts"
import * as Orchestrator from "../Orchestrator.ts"
import { DefaultLabelSelector } from "../Sandbox.ts"
import * as SandboxWatch from "../SandboxWatch.ts"
import * as SimulatedApiServer from "../SimulatedApiServer.ts"
import * as Demo from "./Demo.ts"
import * as LogText from "./LogText.ts"
import * as NdjsonOutput from "./NdjsonOutput.ts"
import * as NoAnswerNotice from "./NoAnswerNotice.ts"
import * as TableView from "./TableView.ts"
import * as Telemetry from "./Telemetry.ts"
import * as Usage from "./Usage.ts"

/** The environment variable that names the service-account directory when `--service-account-dir` does not. */
export const ServiceAccountDirVariable = "SANDBOX_WATCH_SERVICE_ACCOUNT_DIR"

/** The program's name, in help and in every error line. */
export const Name = Usage.Name
export const Version = Usage.Version

/** The configuration cannot be used (a broken kubeconfig, a context that does not exist, ...). */
export class ConfigurationError extends Data.TaggedError("ConfigurationError")<{ readonly message: string }> {}

/** The process should end with this exit code; what to say has been said. */
export class ExitCode extends Data.TaggedError("ExitCode")<{ readonly code: number }> {}

/** stdout was closed under us (a reader like `head` went away): the program ends quietly. */
class StdoutClosed extends Data.TaggedError("StdoutClosed")<{}> {}

/**
 * `90s`, `2m`, `1h30m`, `1500ms`, `1.5s`, or a bare number of seconds; also Effect's `2 minutes`.
 * None when it is none of those.
 */
export const parseDuration = (text: string): Option.Option<Duration.Duration> => {
  const s = text.trim()
  if (/^\d+(\.\d+)?$/.test(s)) return Option.some(Duration.seconds(Number(s)))
  const units: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }
  const parts = [...s.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h)/g)]
  if (parts.length > 0 && parts.map((p) => p[0]).join("") === s) {
    return Option.some(Duration.millis(parts.reduce((sum, p) => sum + Number(p[1]) * (units[p[2] ?? ""] ?? 0), 0)))
  }
  const decoded = Duration.decodeUnknown(s)
  return Option.filter(decoded, (d) => Duration.isFinite(d))
}

/** The flags, parsed. */
export interface Flags {
  readonly namespace: Option.Option<string>
  readonly selector: string
  readonly kubeconfig: Option.Option<string>
  readonly context: Option.Option<string>
  readonly serviceAccountDir: Option.Option<string>
  readonly output: Option.Option<"table" | "ndjson">
  readonly demo: boolean
  readonly duration: Option.Option<Duration.Duration>
  readonly logFormat: "text" | "json" | "logfmt"
  readonly logLevel: Option.Option<LogLevel.Literal>
  readonly metricsAddress: Option.Option<Telemetry.Address>
  readonly headersTimeout: Option.Option<Duration.Duration>
  readonly bodyTimeout: Option.Option<Duration.Duration>
  readonly maxLineBytes: Option.Option<number>
  readonly maxListPageBytes: Option.Option<number>
  readonly maxListItems: Option.Option<number>
  readonly maxListBytes: Option.Option<number>
  readonly listMode: "auto" | "stream" | "paged"
  readonly gzipStreamingLists: boolean
}

/** A usage error about one flag's value, naming the flag (`main` adds where to look next). */
const invalid = (flag: string, text: string, why: string) =>
  Effect.fail(ValidationError.invalidValue(HelpDoc.p(`--${flag} ${JSON.stringify(text)}: ${why}`)))

/** A namespace name is an RFC 1123 label: what kube-apiserver accepts in a request's path. */
const NamespaceName = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/

/** Why `name` cannot be a namespace, if it cannot. */
export const namespaceProblem = (name: string): Option.Option<string> =>
  name.length > 63
    ? Option.some(`not a namespace name: ${name.length} characters, at most 63`)
    : NamespaceName.test(name)
    ? Option.none()
    : Option.some(
      "not a namespace name: lower-case letters, digits and '-', starting and ending with a letter or digit"
    )

/** A byte count: a whole number, or one with a binary suffix (`16Mi`, `512Ki`, `1Gi`; `512MiB` too). */
export const parseBytes = (text: string): Option.Option<number> => {
  // `512Mi` as Kubernetes writes a quantity, or `512MiB` as people write a size: the same.
  const match = /^(\d+)(Ki|Mi|Gi)?B?$/.exec(text.trim())
  if (match === null) return Option.none()
  const n = Number(match[1]) *
    (match[2] === "Gi" ? 2 ** 30 : match[2] === "Mi" ? 2 ** 20 : match[2] === "Ki" ? 2 ** 10 : 1)
  return Number.isSafeInteger(n) && n > 0 ? Option.some(n) : Option.none()
}

/** A flag that takes a duration (`30s`, `2m`), said wrong in one line. */
const durationFlag = ({ description, name }: Usage.FlagDoc) =>
  Options.text(name).pipe(
    Options.withPseudoName("duration"),
    Options.withDescription(description),
    Options.mapEffect((text) =>
      Option.match(parseDuration(text), {
        onNone: () => invalid(name, text, "not a duration; try 30s, 5m or 1h30m"),
        onSome: (
          d
        ) => (Duration.greaterThan(d, Duration.zero) ? Effect.succeed(d) : invalid(name, text, "must be more than 0"))
      })
    ),
    Options.optional
  )

/** A flag that takes a byte count (`16Mi`, `1048576`), said wrong in one line. */
const bytesFlag = ({ description, name }: Usage.FlagDoc) =>
  Options.text(name).pipe(
    Options.withPseudoName("bytes"),
    Options.withDescription(description),
    Options.mapEffect((text) =>
      Option.match(parseBytes(text), {
        onNone: () => invalid(name, text, "not a byte count; try 16Mi or 1048576"),
        onSome: Effect.succeed
      })
    ),
    Options.optional
  )

/** A flag that takes a whole number of at least 1, said wrong in one line. */
const countFlag = ({ description, name }: Usage.FlagDoc) =>
  Options.text(name).pipe(
    Options.withPseudoName("count"),
    Options.withDescription(description),
    Options.mapEffect((text) =>
      /^[1-9][0-9]*$/.test(text) && Number.isSafeInteger(Number(text))
        ? Effect.succeed(Number(text))
        : invalid(name, text, "not a whole number of at least 1")
    ),
    Options.optional
  )

/** `a or b`, `a, b or c`. */
const oneOf = (choices: ReadonlyArray<string>): string =>
  choices.length < 2 ? choices.join("") : `${choices.slice(0, -1).join(", ")} or ${choices[choices.length - 1]}`

/**
 * A flag that takes one of `choices`, said wrong in one line naming the flag (the parser's own
 * choice says only "Expected one of the following cases").
 */
const choiceFlag = <const C extends string>({ alias, description, name }: Usage.FlagDoc, choices: ReadonlyArray<C>) =>
  Options.text(name).pipe(
    (options) => (alias === undefined ? options : Options.withAlias(options, alias)),
    Options.withPseudoName(choices.join(" | ")),
    Options.withDescription(description),
    Options.mapEffect((text) =>
      (choices as ReadonlyArray<string>).includes(text)
        ? Effect.succeed(text as C)
        : invalid(name, text, `must be ${oneOf(choices)}`)
    )
  )

/** `--namespace --demo` is a forgotten value, not a namespace called `--demo`. */
const notAFlag = (flag: string) => (text: string) =>
  text.startsWith("-") ? invalid(flag, text, `needs a value, and ${text} is a flag`) : Effect.succeed(text)

const flags = {
  namespace: Options.text("namespace").pipe(
    Options.withPseudoName("name"),
    Options.withAlias("n"),
    Options.withDescription(Usage.Flags.namespace.description),
    Options.mapEffect(notAFlag("namespace")),
    // Checked here: a bad name would be a path kube-apiserver answers 404, retried for ever.
    Options.mapEffect((text) =>
      Option.match(namespaceProblem(text), {
        onNone: () => Effect.succeed(text),
        onSome: (why) => invalid("namespace", text, why)
      })
    ),
    Options.optional
  ),
  selector: Options.text("selector").pipe(
    Options.withPseudoName("selector"),
    Options.withAlias("l"),
    Options.withDescription(Usage.Flags.selector.description),
    Options.withDefault(DefaultLabelSelector),
    Options.mapEffect((text) =>
      Either.match(parseLabelSelector(text), {
        onLeft: (error) => invalid("selector", text, `not a label selector: ${error.message}`),
        onRight: () => Effect.succeed(text)
      })
    )
  ),
  kubeconfig: Options.text("kubeconfig").pipe(
    Options.withPseudoName("file"),
    Options.withDescription(Usage.Flags.kubeconfig.description),
    Options.mapEffect(notAFlag("kubeconfig")),
    Options.optional
  ),
  context: Options.text("context").pipe(
    Options.withPseudoName("name"),
    Options.withDescription(Usage.Flags.context.description),
    Options.mapEffect(notAFlag("context")),
    Options.optional
  ),
  serviceAccountDir: Options.text("service-account-dir").pipe(
    Options.withPseudoName("dir"),
    Options.withDescription(Usage.Flags.serviceAccountDir.description),
    Options.withFallbackConfig(Config.string(ServiceAccountDirVariable)),
    Options.mapEffect(notAFlag("service-account-dir")),
    Options.optional,
    // An empty variable (`value: ""` in a manifest) names no directory, as kubectl reads an empty KUBECONFIG.
    Options.map(Option.filter((dir) => dir.length > 0))
  ),
  output: choiceFlag(Usage.Flags.output, ["table", "ndjson"]).pipe(Options.optional),
  demo: Options.boolean("demo").pipe(
    Options.withDescription(Usage.Flags.demo.description)
  ),
  duration: Options.text("duration").pipe(
    Options.withPseudoName("duration"),
    Options.withDescription(Usage.Flags.duration.description),
    Options.mapEffect((text) =>
      Option.match(parseDuration(text), {
        onNone: () =>
          Effect.fail(
            ValidationError.invalidValue(
              HelpDoc.p(`--duration ${JSON.stringify(text)} is not a duration; try 30s, 5m or 1h30m`)
            )
          ),
        onSome: Effect.succeed
      })
    ),
    Options.optional
  ),
  logFormat: choiceFlag(Usage.Flags.logFormat, ["text", "json", "logfmt"]).pipe(
    Options.withDefault("text" as const)
  ),
  logLevel: choiceFlag(Usage.Flags.logLevel, ["trace", "debug", "info", "warning", "error", "fatal", "none"]).pipe(
    Options.map((level): LogLevel.Literal => (level === "warning" ? "Warning" : capitalize(level)) as LogLevel.Literal),
    // Optional: given first, @effect/cli's own --log-level takes it, and must not be overridden.
    Options.optional
  ),
  metricsAddress: Options.text("metrics-address").pipe(
    Options.withPseudoName("host:port"),
    Options.withDescription(Usage.Flags.metricsAddress.description),
    Options.mapEffect((text) =>
      Option.match(Telemetry.parseAddress(text), {
        onNone: () => invalid("metrics-address", text, "not HOST:PORT"),
        onSome: Effect.succeed
      })
    ),
    Options.optional
  ),
  headersTimeout: durationFlag(Usage.Flags.headersTimeout),
  bodyTimeout: durationFlag(Usage.Flags.bodyTimeout),
  listMode: choiceFlag(Usage.Flags.listMode, ["auto", "stream", "paged"]).pipe(
    Options.withDefault("auto" as const)
  ),
  gzipStreamingLists: Options.boolean("gzip-streaming-lists").pipe(
    Options.withDescription(Usage.Flags.gzipStreamingLists.description)
  ),
  maxLineBytes: bytesFlag(Usage.Flags.maxLineBytes),
  maxListPageBytes: bytesFlag(Usage.Flags.maxListPageBytes),
  maxListItems: countFlag(Usage.Flags.maxListItems),
  maxListBytes: bytesFlag(Usage.Flags.maxListBytes)
}

const capitalize = (word: string) => word.charAt(0).toUpperCase() + word.slice(1)

/** Where the program watches: a cluster it resolved, or the demo (with why, when it was not asked for). */
type Target =
  | { readonly _tag: "Cluster"; readonly connection: KubeConfig.ClusterConnection }
  | { readonly _tag: "Demo"; readonly notConfigured: Option.Option<string> }

/**
 * Which of the places kubectl reads point at a cluster, whether or not they work: `KUBECONFIG` set,
 * a `~/.kube/config` file, a pod's `KUBERNETES_SERVICE_HOST`/`_PORT`. Each as the prefix of the
 * line `KubeConfig.resolve` reports it under (its `looked`).
 */
const pointersToACluster = (env: NodeJS.ProcessEnv): ReadonlyArray<string> => {
  const home = env["HOME"] ?? Os.homedir()
  const homeConfig = NodePath.join(home, ".kube", "config")
  return [
    ...((env["KUBECONFIG"] ?? "").split(NodePath.delimiter).some((entry) => entry !== "") ? ["KUBECONFIG="] : []),
    ...(Fs.existsSync(homeConfig) ? [homeConfig] : []),
    ...((env["KUBERNETES_SERVICE_HOST"] ?? "") !== "" || (env["KUBERNETES_SERVICE_PORT"] ?? "") !== ""
      ? ["in-cluster"]
      : [])
  ]
}

/**
 * The cluster, or the demo: asked for (`--demo`), or when nothing at all points at a cluster. A
 * configuration that is there but cannot be used is an error naming what is missing, never the
 * demo: invented Sandboxes must not pass for a cluster's (kubectl invents none either).
 */
const resolveTarget = (f: Flags) => {
  if (f.demo) return Effect.succeed<Target>({ _tag: "Demo", notConfigured: Option.none() })
  // Named on purpose, so a cluster is meant: not finding one is an error, never the demo.
  const explicit = Option.isSome(f.kubeconfig) || Option.isSome(f.context) || Option.isSome(f.serviceAccountDir)
  return KubeConfig.resolve({
    path: Option.getOrUndefined(f.kubeconfig),
    context: Option.getOrUndefined(f.context),
    serviceAccountDir: Option.getOrUndefined(f.serviceAccountDir)
  }).pipe(
    Effect.map((connection): Target => ({ _tag: "Cluster", connection })),
    Effect.catchTags({
      KubeConfigNotFound: (error) => {
        if (explicit) return Effect.fail(new ConfigurationError({ message: error.message }))
        const pointers = pointersToACluster(process.env)
        if (pointers.length === 0) {
          return Effect.succeed<Target>({ _tag: "Demo", notConfigured: Option.some(error.message) })
        }
        const unusable = error.looked.filter((place) => pointers.some((prefix) => place.startsWith(prefix)))
        return Effect.fail(
          new ConfigurationError({
            message: `${(unusable.length > 0 ? unusable : error.looked).join("; ")}: ` +
              "a cluster is configured there but cannot be used; fix it, or pass --demo to watch the embedded simulated cluster"
          })
        )
      },
      KubeConfigError: (error) => Effect.fail(new ConfigurationError({ message: error.message }))
    })
  )
}

/** The log line formats: ours for a person, Effect's JSON and logfmt (annotations as fields) for machines. */
const formatters: Record<Flags["logFormat"], Logger.Logger<unknown, string>> = {
  text: Logger.make(LogText.formatLog),
  json: Logger.jsonLogger,
  logfmt: Logger.logfmtLogger
}

/**
 * Logs never go to stdout: to stderr, and in the table view under the table (a warning's message
 * also to its status line, which says why the watch is not synced).
 */
const loggerFor = (view: Option.Option<TableView.LogLines>, format: Flags["logFormat"]) =>
  Logger.make<unknown, void>((options) => {
    const line = formatters[format].log(options)
    if (Option.isSome(view)) {
      view.value.push(
        line,
        LogLevel.greaterThanEqual(options.logLevel, LogLevel.Warning) ? LogText.messageText(options) : undefined
      )
    }
    // With a table on the terminal, stderr on the same terminal would tear the screen.
    if (Option.isNone(view) || !process.stderr.isTTY) process.stderr.write(`${line}\n`)
  })

/**
 * Traces over OTLP/HTTP (JSON) when the standard `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
 * `OTEL_EXPORTER_OTLP_ENDPOINT` is set, named by `OTEL_SERVICE_NAME`: the list and watch spans of
 * `SandboxWatch` and `KubeClient`. Without either, nothing is loaded.
 */
const tracing = Layer.unwrapEffect(Effect.suspend(() => {
  const base = process.env.OTEL_EXPORTER_OTLP_ENDPOINT ?? ""
  const url = process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ||
    (base === "" ? "" : `${base.replace(/\/+$/, "")}/v1/traces`)
  if (url === "") return Effect.succeed(Layer.empty)
  return Effect.map(
    Effect.promise(() =>
      Promise.all([
        import("@effect/opentelemetry/OtlpTracer"),
        import("@effect/opentelemetry/OtlpSerialization"),
        import("@effect/platform-node/NodeHttpClient")
      ])
    ),
    ([OtlpTracer, OtlpSerialization, NodeHttpClient]) =>
      OtlpTracer.layer({
        url,
        resource: { serviceName: process.env.OTEL_SERVICE_NAME || Name, serviceVersion: Version },
        exportInterval: "2 seconds",
        // An unreachable collector delays the exit by at most this.
        shutdownTimeout: "2 seconds"
      }).pipe(Layer.provide(OtlpSerialization.layerJson), Layer.provide(NodeHttpClient.layerUndici))
  )
}))

/** Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org). */
const colourful = (stream: NodeJS.WriteStream = process.stdout) =>
  stream.isTTY === true && (process.env.NO_COLOR ?? "") === ""

const ansiStyle = /\x1b\[[0-9;]*m/g
const plain = (args: ReadonlyArray<unknown>) =>
  args.map((arg) => (typeof arg === "string" ? arg.replace(ansiStyle, "") : arg))

/**
 * `@effect/cli` styles what it prints with ANSI codes wherever it goes: this console drops them
 * from what goes to a pipe, a file, or a terminal with NO_COLOR set. Its usage errors (its only
 * use of `error`) are not printed: `main` says each in one line of its own.
 */
const cliConsole = (base: Console.Console): Console.Console => ({
  ...base,
  log: (...args) => base.log(...(colourful(process.stdout) ? args : plain(args))),
  error: () => Effect.void,
  unsafe: {
    ...base.unsafe,
    log: (...args) => base.unsafe.log(...(colourful(process.stdout) ? args : plain(args))),
    error: () => {}
  }
})

/** A usage error in one line: what was wrong, and where to look next. */
const usageLine = (error: ValidationError.ValidationError): string => {
  const said = "error" in error ? HelpDoc.toAnsiText(error.error) : "the command line is not understood"
  return Usage.usageLine(said.replace(ansiStyle, "").replace(/\s+/g, " ").trim())
}

/** The watch's silence that makes /readyz say not ready: its timeoutSeconds (240) plus its idle margin (30 s). */
const SilenceLimit = Duration.seconds(270)

const writeStdout = (text: string) =>
  Effect.async<void, StdoutClosed>((resume) => {
    process.stdout.write(text, (error) => resume(error ? Effect.fail(new StdoutClosed()) : Effect.void))
  })

/** The client's limits the flags set; an unset flag keeps the library's default. */
const clientOptions = (f: Flags): KubeClient.KubeClientOptions => ({
  ...Option.match(f.headersTimeout, { onNone: () => ({}), onSome: (headersTimeout) => ({ headersTimeout }) }),
  ...Option.match(f.bodyTimeout, { onNone: () => ({}), onSome: (bodyTimeout) => ({ bodyTimeout }) }),
  ...Option.match(f.maxLineBytes, { onNone: () => ({}), onSome: (maxLineBytes) => ({ maxLineBytes }) }),
  ...Option.match(f.maxListPageBytes, { onNone: () => ({}), onSome: (maxListPageBytes) => ({ maxListPageBytes }) }),
  ...Option.match(f.maxListItems, { onNone: () => ({}), onSome: (maxListItems) => ({ maxListItems }) }),
  ...Option.match(f.maxListBytes, { onNone: () => ({}), onSome: (maxListBytes) => ({ maxListBytes }) })
})

const watchLayer = (namespace: string, f: Flags) =>
  Orchestrator.layer.pipe(
    Layer.provideMerge(SandboxWatch.layer({
      namespace,
      labelSelector: f.selector,
      listMode: f.listMode,
      gzipStreamingLists: f.gzipStreamingLists
    })),
    Layer.provide(KubeClient.layerWith(clientOptions(f)))
  )

/** The program, given its flags. */
export const run = (f: Flags) =>
  Effect.suspend(() => {
    const output = Option.getOrElse(f.output, () => (process.stdout.isTTY ? "table" as const : "ndjson" as const))
    const view = output === "table" ? Option.some(new TableView.LogLines(8)) : Option.none<TableView.LogLines>()
    return Effect.gen(function*() {
      const target = yield* resolveTarget(f)
      // The first line says what is watched: on stderr for NDJSON (stdout stays pure), atop the table.
      const header: Array<string> = []
      // (In a machine log format it is a log line like the others, so stderr stays one format.)
      const say = (line: string) =>
        output === "table"
          ? Effect.sync(() => header.push(line))
          : f.logFormat === "text"
          ? Effect.sync(() => process.stderr.write(`${Name}: ${line}\n`))
          : Effect.logInfo(line)

      const show = (namespace: string, demo: boolean) =>
        output === "ndjson"
          ? NdjsonOutput.run((line) => writeStdout(`${line}\n`), { demo })
          : TableView.run({
            header,
            logs: view.pipe(Option.getOrElse(() => new TableView.LogLines(8))),
            write: (text) => writeStdout(text).pipe(Effect.catchAll(() => Effect.void)),
            width: () => process.stdout.columns,
            height: () => process.stdout.rows,
            onResize: (redraw) => {
              process.stdout.on("resize", redraw)
              return () => void process.stdout.off("resize", redraw)
            },
            colours: colourful()
          }).pipe(Effect.annotateLogs("namespace", namespace))
      const bounded = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
        Option.match(f.duration, {
          onNone: () => Effect.asVoid(effect),
          onSome: (d) => Effect.asVoid(Effect.timeoutOption(effect, d))
        })
      /** The watch shown, and its metrics and health served when asked, for as long as it runs. */
      const watchAndServe = (namespace: string, demo: boolean) =>
        Effect.scoped(Effect.gen(function*() {
          // Not the demo's: its server is in this process.
          if (target._tag === "Cluster") {
            yield* Effect.forkScoped(NoAnswerNotice.sayWhenUnanswered(withoutUserInfo(target.connection.server)))
          }
          if (Option.isSome(f.metricsAddress)) {
            const watch = yield* SandboxWatch.SandboxWatch
            const url = yield* Telemetry.serve(f.metricsAddress.value, watch, {
              silenceLimit: SilenceLimit,
              serviceName: Name,
              serviceVersion: Version
            }).pipe(Effect.mapError((error) => new ConfigurationError({ message: error.message })))
            yield* say(`metrics at ${url}/metrics, health at ${url}/healthz and ${url}/readyz`)
          }
          yield* bounded(show(namespace, demo))
        }))

      if (target._tag === "Cluster") {
        const namespace = Option.orElse(f.namespace, () => target.connection.namespace).pipe(
          Option.getOrElse(() => "default")
        )
        // The flag is checked as it is parsed; a context's (or service account's) namespace here.
        const problem = namespaceProblem(namespace)
        if (Option.isSome(problem)) {
          return yield* new ConfigurationError({
            message: `namespace ${JSON.stringify(namespace)} from ${target.connection.source}: ${problem.value}`
          })
        }
        yield* say(
          `watching Sandboxes in namespace ${namespace} (selector ${f.selector}) on ${
            withoutUserInfo(target.connection.server)
          }, from ${target.connection.source}`
        )
        return yield* watchAndServe(namespace, false).pipe(
          Effect.provide(
            watchLayer(namespace, f).pipe(
              Layer.provide(Layer.succeed(KubeConfig.KubeConfig, target.connection))
            )
          )
        )
      }

      const namespace = Option.getOrElse(f.namespace, () => "demo")
      const demoLayer = Demo.layer({ namespace })
      return yield* Effect.gen(function*() {
        const server = yield* SimulatedApiServer.SimulatedApiServer
        yield* say(
          Option.match(target.notConfigured, {
            onNone: () =>
              `demo: watching an embedded simulated API server at ${server.url} (namespace ${namespace}) played by a demo operator`,
            onSome: () =>
              `no Kubernetes cluster is configured, so this is the demo: an embedded simulated API server at ${server.url} (namespace ${namespace}) played by a demo operator. Point --kubeconfig or KUBECONFIG at a cluster to watch it instead.`
          })
        )
        if (Option.isSome(target.notConfigured)) yield* Effect.logDebug(target.notConfigured.value)
        yield* Effect.forkScoped(Demo.operator({ namespace }))
        yield* watchAndServe(namespace, true)
      }).pipe(
        Effect.scoped,
        Effect.provide(watchLayer(namespace, f).pipe(Layer.provideMerge(demoLayer))),
        Effect.catchTag("ServeError", (error) =>
          Effect.fail(
            new ConfigurationError({ message: `the demo could not start its simulated API server: ${error.message}` })
          ))
      )
    }).pipe(
      Effect.catchTag("StdoutClosed", () => Effect.void),
      Effect.provide(Logger.replace(Logger.defaultLogger, loggerFor(view, f.logFormat))),
      Effect.provide(
        Option.match(f.logLevel, {
          onNone: () => Layer.empty,
          onSome: (level) => Logger.minimumLogLevel(LogLevel.fromLiteral(level))
        })
      ),
      Effect.provide(tracing)
    )
  })

/** The command, for `@effect/cli`. */
export const command = Command.make(Name, flags, run).pipe(
  Command.withDescription(Usage.Description)
)

const cli = Command.run(command, { name: Name, version: Version })

/**
 * The whole program for `argv` (as `process.argv`): a usage error exits 2 (`@effect/cli` has said
 * why), a configuration error is one line on stderr and exits 1, a defect is a bug and says so.
 */
export const main = (argv: ReadonlyArray<string>): Effect.Effect<void, ExitCode> =>
  Console.consoleWith((base) => Effect.withConsole(cli(argv), cliConsole(base))).pipe(
    Effect.catchAll((error) =>
      ValidationError.isValidationError(error)
        ? Effect.zipRight(
          Effect.sync(() => process.stderr.write(`${usageLine(error)}\n`)),
          Effect.fail(new ExitCode({ code: 2 }))
        )
        : Effect.zipRight(
          Effect.sync(() => process.stderr.write(`${Name}: ${error.message}\n`)),
          Effect.fail(new ExitCode({ code: 1 }))
        )
    ),
    Effect.catchAllDefect((defect) =>
      Effect.zipRight(
        Effect.sync(() =>
          process.stderr.write(`${Name}: internal error (a bug): ${Cause.pretty(Cause.die(defect))}\n`)
        ),
        Effect.fail(new ExitCode({ code: 70 }))
      )
    ),
    Effect.provide(NodeContext.layer)
  )

/** The exit code a finished `main` asks for. */
export const exitCode = (cause: Cause.Cause<unknown>): number =>
  Cause.isInterruptedOnly(cause)
    ? 0
    : Option.match(Cause.failureOption(cause), { onNone: () => 1, onSome: (e) => (e instanceof ExitCode ? e.code : 1) })
