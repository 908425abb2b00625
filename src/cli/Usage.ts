/**
 * The program's name, version and flags as plain data, and the `--help` and `--version` text made
 * from them. This module imports nothing, so that `main.ts` answers `--help` and `--version` without
 * loading Effect (about a second of CPU). The parser (`Cli.ts`) takes every flag's description from
 * here, so help and parser say the same; a test checks that each flag the parser accepts is here.
 */

/** The program's name, in help and in every error line. */
export const Name = "sandbox-watch"
export const Version = "0.1.0"

/** One flag as help shows it. */
export interface FlagDoc {
  readonly name: string
  readonly alias?: string
  /** What the value looks like (`name`, `table | ndjson`); none for a switch. */
  readonly value?: string
  readonly description: string
}

const DefaultSelector = "jr2.dev/run"

/** Every flag of the program, in the order help lists them. */
export const Flags = {
  namespace: {
    name: "namespace",
    alias: "n",
    value: "name",
    description: "The namespace to watch. Default: the context's namespace (or the service account's), else `default`."
  },
  selector: {
    name: "selector",
    alias: "l",
    value: "selector",
    description:
      `The label selector of the Sandboxes to watch, checked before the first request. Default: \`${DefaultSelector}\`.`
  },
  kubeconfig: {
    name: "kubeconfig",
    value: "file",
    description: "The kubeconfig file to use (default: KUBECONFIG, then ~/.kube/config, then in-cluster)."
  },
  context: {
    name: "context",
    value: "name",
    description: "The kubeconfig context to use. Default: the kubeconfig's current-context."
  },
  serviceAccountDir: {
    name: "service-account-dir",
    value: "dir",
    description: "Where a pod's service account is mounted (token, ca.crt, namespace), for the in-cluster " +
      "configuration; also SANDBOX_WATCH_SERVICE_ACCOUNT_DIR. Default: " +
      "`/var/run/secrets/kubernetes.io/serviceaccount`."
  },
  output: {
    name: "output",
    alias: "o",
    value: "table | ndjson",
    description:
      "`table`: a live view for a terminal (default when stdout is a terminal). `ndjson`: one JSON object a line (default otherwise)."
  },
  demo: {
    name: "demo",
    description:
      "Run against an embedded simulated API server played by a demo operator; its `synced` line says `\"demo\":true`. " +
      "Without it, the demo runs only when nothing points at a cluster (no --kubeconfig, KUBECONFIG, ~/.kube/config " +
      "or pod environment); a configuration that is there but cannot be used is an error, never the demo."
  },
  duration: {
    name: "duration",
    value: "duration",
    description: "Stop after this long, e.g. `30s`, `5m`, `1h`. Default: run until interrupted."
  },
  logFormat: {
    name: "log-format",
    value: "text | json | logfmt",
    description:
      "How log lines are written to stderr: `text` (for a person), `json` (one object a line, annotations as fields) or `logfmt`. Default: `text`."
  },
  logLevel: {
    name: "log-level",
    value: "trace | debug | info | warning | error | fatal | none",
    description: "The least severe log lines written, anywhere on the command line. Default: `info`."
  },
  metricsAddress: {
    name: "metrics-address",
    value: "host:port",
    description:
      "Serve /metrics (Prometheus), /healthz and /readyz at this address, e.g. `127.0.0.1:9090` or `:9090` (port 0: any free port, said on stderr). Default: off."
  },
  headersTimeout: {
    name: "headers-timeout",
    value: "duration",
    description:
      "How long a request to the apiserver may wait for its answer's status and headers, and before that for its credentials (an exec plugin's run). Default: `30s`."
  },
  bodyTimeout: {
    name: "body-timeout",
    value: "duration",
    description: "How long a list page or another answer that is not a watch may take to arrive whole. Default: `60s`."
  },
  listMode: {
    name: "list-mode",
    value: "auto | stream | paged",
    description:
      "How the watch lists: `auto` (stream, and page from then on once the server shows it cannot), `stream` (one watch with the initial events, kube-apiserver 1.27+ with WatchList), or `paged` (pages of 500). Default: `auto`."
  },
  gzipStreamingLists: {
    name: "gzip-streaming-lists",
    description:
      "Ask kube-apiserver 1.37+ to gzip a streaming list (WatchListCompression): fewer bytes, more CPU on both ends; for a cluster behind a slow or metered link."
  },
  maxLineBytes: {
    name: "max-line-bytes",
    value: "bytes",
    description:
      "The longest watch event accepted, e.g. `16Mi` (Ki, Mi, Gi, KiB, MiB, GiB or plain bytes); a longer one is refused, not buffered. Default: `16Mi`."
  },
  maxListPageBytes: {
    name: "max-list-page-bytes",
    value: "bytes",
    description:
      "The largest list page (or other answer that is not a watch) read, e.g. `128Mi`; past it the read stops, the list fails and is tried again after a back-off. Default: `128Mi`."
  },
  maxListItems: {
    name: "max-list-items",
    value: "count",
    description:
      "The most Sandboxes one list (paged or streamed) holds; past it the list fails and is tried again after a back-off. Raise it only for a namespace that really holds more. Default: `100000`."
  },
  maxListBytes: {
    name: "max-list-bytes",
    value: "bytes",
    description:
      "The most JSON one list (paged or streamed) holds, e.g. `512Mi` (the length each Sandbox it keeps was read from, managedFields left out); past it the list fails and is tried again after a back-off. Raise it for a namespace that really holds that much (about 14,000 Sandboxes of 2.3 KB); a list this large costs several times as much memory while it lasts. Default: `32Mi`."
  }
} as const satisfies Record<string, FlagDoc>

/** Answered here, before anything else is loaded. */
const BuiltIns: ReadonlyArray<FlagDoc> = [
  { name: "help", alias: "h", description: "Show this help and exit." },
  { name: "version", description: "Print the version and exit." }
]

export const Description =
  "Keep the one watch of every Sandbox (jr2.dev/v1alpha1) under a label selector in a namespace, and show it: a live table on a terminal, NDJSON otherwise."

const Footer =
  "Exit codes: 0 when stopped (SIGINT, SIGTERM, --duration); 1 when the configuration cannot be used (one line says what is missing); 2 for a usage error (one line); 70 for a bug."

/** What the command line asks of the program before anything is loaded: help, the version, or neither. */
export const builtIn = (args: ReadonlyArray<string>): "help" | "version" | undefined => {
  // Past `--`, everything is an operand; the parser refuses those.
  const end = args.indexOf("--")
  const flags = end === -1 ? args : args.slice(0, end)
  if (flags.some((arg) => arg === "--help" || arg === "-h")) return "help"
  if (flags.includes("--version")) return "version"
  return undefined
}

/** Every flag by each way it is written: `--namespace`, `-n`. */
const byName = new Map<string, FlagDoc>(
  [...Object.values<FlagDoc>(Flags), ...BuiltIns].flatMap((doc): Array<[string, FlagDoc]> => [
    [`--${doc.name}`, doc],
    ...(doc.alias === undefined ? [] : [[`-${doc.alias}`, doc] as [string, FlagDoc]])
  ])
)

/** A usage error in one line: what was wrong, and where to look next. */
export const usageLine = (said: string): string => `${Name}: ${said}; see ${Name} --help`

/**
 * A flag that takes a value given none, said in words: the last argument, `--flag=` with nothing
 * after it, or followed by another of the program's flags. `main.ts` asks this before the parser
 * is loaded (the parser says "Received unknown argument: '--namespace'" of a flag it has).
 */
export const missingValue = (args: ReadonlyArray<string>): string | undefined => {
  for (let i = 0; i < args.length && args[i] !== "--"; i++) {
    const arg = args[i]!
    const equals = arg.startsWith("--") ? arg.indexOf("=") : -1
    const doc = byName.get(equals === -1 ? arg : arg.slice(0, equals))
    if (doc?.value === undefined) continue
    const needs = `--${doc.name} needs a value (${doc.value})`
    if (equals !== -1) {
      if (equals === arg.length - 1) return `${needs}, and none was given`
      continue
    }
    const next = args[i + 1]
    if (next === undefined) return `${needs}, and none was given`
    const nextName = next.startsWith("--") && next.includes("=") ? next.slice(0, next.indexOf("=")) : next
    if (byName.has(nextName)) return `${needs}, and ${next} is a flag`
    // The value: whatever it is, it is not read as a flag.
    i++
  }
  return undefined
}

/** `text` in lines of at most `width` characters, each after `indent`. */
const wrap = (text: string, width: number, indent: string): Array<string> => {
  const lines: Array<string> = []
  let line = ""
  for (const word of text.split(" ")) {
    if (line !== "" && indent.length + line.length + 1 + word.length > width) {
      lines.push(`${indent}${line}`)
      line = word
    } else line = line === "" ? word : `${line} ${word}`
  }
  if (line !== "") lines.push(`${indent}${line}`)
  return lines
}

const bold = (on: boolean) => (text: string) => (on ? `\x1b[1m${text}\x1b[0m` : text)

/** The help text: bold headings and flags only when `colours` (a terminal without NO_COLOR). */
export const help = (options: { readonly colours: boolean; readonly width?: number | undefined }): string => {
  const width = Math.max(60, Math.min(options.width ?? 100, 100))
  const b = bold(options.colours)
  const flag = (doc: FlagDoc) => {
    const names = `${doc.alias === undefined ? "    " : `-${doc.alias}, `}--${doc.name}`
    return [
      `  ${b(names)}${doc.value === undefined ? "" : ` ${doc.value}`}`,
      ...wrap(doc.description, width, "        ")
    ]
  }
  return [
    `${Name} ${Version}`,
    "",
    ...wrap(Description, width, ""),
    "",
    b("USAGE"),
    `  ${Name} [options]`,
    "",
    b("OPTIONS"),
    ...[...Object.values(Flags), ...BuiltIns].flatMap(flag),
    "",
    ...wrap(Footer, width, ""),
    ""
  ].join("\n")
}
