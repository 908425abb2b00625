/**
 * The kubeconfig file as kubectl reads it: YAML (or JSON) text → a decoded, typed document, with
 * problems described in words that point at the line or the entry, and never at a value (a value
 * may be a token or a key).
 *
 * @internal
 */
import { Either, ParseResult, Schema, SchemaAST } from "effect"
import { LineCounter, parseDocument } from "yaml"

// `key:` with nothing after it is `null` in YAML; kubectl treats it as absent, so do we.
const opt = <S extends Schema.Schema.Any>(schema: S) => Schema.optionalWith(schema, { nullable: true })

/** `clusters[].cluster` */
export const Cluster = Schema.Struct({
  server: opt(Schema.String),
  "certificate-authority": opt(Schema.String),
  "certificate-authority-data": opt(Schema.String),
  "insecure-skip-tls-verify": opt(Schema.Boolean),
  "tls-server-name": opt(Schema.String),
  "proxy-url": opt(Schema.String)
})
export type Cluster = typeof Cluster.Type

/** `users[].user.exec`: a client-go credential plugin. */
export const ExecConfig = Schema.Struct({
  command: Schema.String,
  args: opt(Schema.Array(Schema.String)),
  env: opt(Schema.Array(Schema.Struct({ name: Schema.String, value: Schema.String }))),
  apiVersion: opt(Schema.String),
  installHint: opt(Schema.String),
  provideClusterInfo: opt(Schema.Boolean),
  // Read so that a wrong type is reported, not acted on: this client never prompts.
  interactiveMode: opt(Schema.String)
})
export type ExecConfig = typeof ExecConfig.Type

/** `users[].user` */
export const User = Schema.Struct({
  token: opt(Schema.String),
  tokenFile: opt(Schema.String),
  "client-certificate": opt(Schema.String),
  "client-certificate-data": opt(Schema.String),
  "client-key": opt(Schema.String),
  "client-key-data": opt(Schema.String),
  username: opt(Schema.String),
  password: opt(Schema.String),
  exec: opt(ExecConfig),
  "auth-provider": opt(Schema.Struct({ name: opt(Schema.String) }))
})
export type User = typeof User.Type

/** `contexts[].context` */
export const Context = Schema.Struct({
  cluster: opt(Schema.String),
  user: opt(Schema.String),
  namespace: opt(Schema.String)
})
export type Context = typeof Context.Type

/** The whole file. Unknown keys (`preferences`, `extensions`, ...) are ignored, as kubectl does. */
export const KubeConfigFile = Schema.Struct({
  apiVersion: opt(Schema.String),
  kind: opt(Schema.String),
  "current-context": opt(Schema.String),
  clusters: opt(Schema.Array(Schema.Struct({ name: Schema.String, cluster: opt(Cluster) }))),
  contexts: opt(Schema.Array(Schema.Struct({ name: Schema.String, context: opt(Context) }))),
  users: opt(Schema.Array(Schema.Struct({ name: Schema.String, user: opt(User) })))
})
export type KubeConfigFile = typeof KubeConfigFile.Type

/** What an `ExecCredential` printed by a plugin must look like (v1 and v1beta1 agree on it). */
export const ExecCredential = Schema.Struct({
  apiVersion: Schema.String,
  kind: Schema.Literal("ExecCredential"),
  status: opt(
    Schema.Struct({
      token: opt(Schema.String),
      expirationTimestamp: opt(Schema.String),
      clientCertificateData: opt(Schema.String),
      clientKeyData: opt(Schema.String)
    })
  )
})
export type ExecCredential = typeof ExecCredential.Type

const isAbsent = (ast: SchemaAST.AST): boolean =>
  ast._tag === "UndefinedKeyword" || (ast._tag === "Literal" && ast.literal === null)

const describeExpected = (ast: SchemaAST.AST): string => {
  switch (ast._tag) {
    case "StringKeyword":
      return "a string"
    case "BooleanKeyword":
      return "true or false"
    case "NumberKeyword":
      return "a number"
    case "TypeLiteral":
      return "a mapping"
    case "TupleType":
      return "a list"
    case "Literal":
      return JSON.stringify(ast.literal)
    case "Union":
      return ast.types
        .filter((member) => !isAbsent(member))
        .map(describeExpected)
        .join(" or ")
    case "Refinement":
      return describeExpected(ast.from)
    case "Transformation":
      return describeExpected(ast.to)
    default:
      return "something else"
  }
}

/**
 * The leaves of a decoding failure as `path: what was expected`. Deliberately not Effect's own
 * formatters: they print the actual value, and in a kubeconfig the actual value may be a token.
 */
export const describeIssue = (
  issue: ParseResult.ParseIssue,
  path: ReadonlyArray<PropertyKey> = []
): Array<{ readonly path: ReadonlyArray<PropertyKey>; readonly problem: string }> => {
  switch (issue._tag) {
    case "Pointer":
      return describeIssue(issue.issue, [...path, ...(Array.isArray(issue.path) ? issue.path : [issue.path])])
    case "Composite": {
      const issues: ReadonlyArray<ParseResult.ParseIssue> = Array.isArray(issue.issues)
        ? issue.issues
        : [issue.issues as ParseResult.ParseIssue]
      // An optional field is `X | null | undefined`: "should be null" helps nobody.
      const relevant = issue.ast._tag === "Union"
        ? issues.filter((inner) => !(inner._tag === "Type" && isAbsent(inner.ast)))
        : issues
      return relevant.flatMap((inner) => describeIssue(inner, path))
    }
    case "Refinement":
    case "Transformation":
      return describeIssue(issue.issue, path)
    case "Type":
      return [{ path, problem: `should be ${describeExpected(issue.ast)}` }]
    case "Missing":
      return [{ path, problem: "is required" }]
    case "Unexpected":
      return [{ path, problem: "is not allowed" }]
    case "Forbidden":
      return [{ path, problem: "could not be checked" }]
  }
}

const sections: Record<string, string> = { clusters: "cluster", contexts: "context", users: "user" }

/**
 * `users[2].user.token` → `user "ci": token`: a person finds an entry by its name, not its index.
 */
export const describePath = (raw: unknown, path: ReadonlyArray<PropertyKey>): string => {
  const [section, index, ...rest] = path
  if (typeof section === "string" && sections[section] !== undefined && typeof index === "number") {
    const entry = (raw as Record<string, unknown> | null)?.[section]
    const name = Array.isArray(entry) ? (entry[index] as { name?: unknown } | null)?.name : undefined
    const label = typeof name === "string" ? `${sections[section]} "${name}"` : `${section}[${index}]`
    // `users[0].user.token` — the `user` in the middle repeats the label.
    const tail = rest[0] === sections[section] ? rest.slice(1) : rest
    return tail.length === 0 ? label : `${label}: ${formatPath(tail)}`
  }
  return formatPath(path)
}

const formatPath = (path: ReadonlyArray<PropertyKey>): string =>
  path.length === 0
    ? "the document"
    : path
      .map((key, i) => (typeof key === "number" ? `[${key}]` : i === 0 ? String(key) : `.${String(key)}`))
      .join("")

/**
 * Parse kubeconfig text. `Left` is a sentence about the problem (no file name: the caller adds it),
 * never quoting the file's contents.
 */
export const parse = (
  text: string
): Either.Either<{ readonly raw: unknown; readonly config: KubeConfigFile }, string> => {
  const lineCounter = new LineCounter()
  // `prettyErrors: false`: the pretty form quotes the offending line, which may hold a token.
  const doc = parseDocument(text, { lineCounter, prettyErrors: false, uniqueKeys: true })
  const first = doc.errors[0]
  if (first !== undefined) {
    const { line, col } = lineCounter.linePos(first.pos[0])
    return Either.left(`is not valid YAML at line ${line}, column ${col}: ${first.message.split("\n")[0]}`)
  }
  let raw: unknown
  try {
    raw = doc.toJS({ maxAliasCount: 100 })
  } catch (error) {
    // An unresolved or runaway alias: the message names the alias, not a value.
    return Either.left(`is not valid YAML: ${error instanceof Error ? error.message.split("\n")[0] : "unreadable"}`)
  }
  // An empty file is an empty config, as kubectl has it.
  if (raw === null || raw === undefined) raw = {}
  if (typeof raw !== "object" || Array.isArray(raw)) {
    return Either.left("is not a kubeconfig: the document should be a mapping (apiVersion, clusters, contexts, users)")
  }
  const decoded = Schema.decodeUnknownEither(KubeConfigFile)(raw, { errors: "all" })
  if (Either.isLeft(decoded)) {
    const problems = describeIssue(decoded.left.issue).map(({ path, problem }) =>
      `${describePath(raw, path)} ${problem}`
    )
    return Either.left(`is not a valid kubeconfig: ${problems.slice(0, 5).join("; ")}`)
  }
  return Either.right({ raw, config: decoded.right })
}
