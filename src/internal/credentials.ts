/**
 * Credentials that change while the program runs: a token file (a rotated service-account token,
 * a kubeconfig `tokenFile`) and an exec credential plugin. Each keeps what it read and reads anew
 * when it is due or when the server said 401. None of them ever puts a credential in a message.
 *
 * @internal
 */
import * as Command from "@effect/platform/Command"
import type * as CommandExecutor from "@effect/platform/CommandExecutor"
import type { PlatformError } from "@effect/platform/Error"
import type * as FileSystem from "@effect/platform/FileSystem"
import { Chunk, Clock, Duration, Effect, Either, Exit, Option, Redacted, Ref, Schema, Stream } from "effect"
import { describeIssue, ExecCredential } from "./kubeconfigFile.ts"

/** The `Authorization` header value and how to drop it. */
export interface CredentialSource<E> {
  readonly authorization: Effect.Effect<Option.Option<Redacted.Redacted<string>>, E>
  readonly invalidate: Effect.Effect<void>
  /** What is read, for a person: `exec plugin "gke-gcloud-auth-plugin" for user "u"`; never a credential. */
  readonly what: string
}

const bearer = (token: string): Redacted.Redacted<string> => Redacted.make(`Bearer ${token}`)

const errnoWords: Record<string, string> = {
  ENOENT: "no such file",
  EACCES: "permission denied",
  EPERM: "operation not permitted",
  EISDIR: "it is a directory",
  ENOTDIR: "a parent is not a directory",
  ELOOP: "too many symbolic links"
}

/** `ENOENT (no such file)`: the errno a person can search for, and what it means. */
export const describePlatformError = (error: PlatformError): string => {
  const code = error._tag === "SystemError" ? (error.cause as { code?: unknown } | undefined)?.code : undefined
  if (typeof code === "string") return errnoWords[code] === undefined ? code : `${code} (${errnoWords[code]})`
  return error._tag === "SystemError" ? error.reason : "bad argument"
}

/** Whether a file read failed because the file is not there (as opposed to unreadable). */
export const isNotFound = (error: PlatformError): boolean => error._tag === "SystemError" && error.reason === "NotFound"

/**
 * A token read from a file, re-read when `period` has passed since the last read (kubelet rotates
 * projected service-account tokens; client-go re-reads once a minute) or at once after
 * `invalidate`. A failed re-read keeps the token read before, as client-go does: a token that has
 * not expired yet still works, and the next 401 will say so if it has.
 */
export const fileToken = <E>(options: {
  readonly fs: FileSystem.FileSystem
  readonly file: string
  /** The kubeconfig's `token`, used while the file cannot be read. */
  readonly fallback: Option.Option<string>
  /** `tokenFile /x` as a person should read it in a message. */
  readonly what: string
  readonly period: Duration.Duration
  readonly fail: (problem: string) => E
}): Effect.Effect<CredentialSource<E>, E> =>
  Effect.gen(function*() {
    const periodMillis = Duration.toMillis(options.period)
    const read = options.fs.readFileString(options.file).pipe(
      Effect.mapError((error) => `${options.what} cannot be read: ${describePlatformError(error)}`),
      Effect.map((text) => text.trim()),
      Effect.filterOrFail(
        (token) => token.length > 0,
        () => `${options.what} is empty`
      )
    )
    const readOrFallback = (previous: Option.Option<Redacted.Redacted<string>>) =>
      Effect.matchEffect(read, {
        onSuccess: (token) => Effect.succeed(Option.some(bearer(token))),
        onFailure: (problem) => {
          const kept = Option.orElse(previous, () => Option.map(options.fallback, bearer))
          return Option.isSome(kept)
            ? Effect.logWarning(`kubeconfig: ${problem}; still using the token read before`).pipe(Effect.as(kept))
            : Effect.fail(options.fail(problem))
        }
      })

    const first = yield* readOrFallback(Option.none())
    const state = yield* Ref.make({ header: first, readAt: Option.some(yield* Clock.currentTimeMillis) })
    const lock = yield* Effect.makeSemaphore(1)

    const authorization = lock.withPermits(1)(
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const { header, readAt } = yield* Ref.get(state)
        if (Option.isSome(readAt) && now - readAt.value < periodMillis) return header
        const next = yield* readOrFallback(header)
        yield* Ref.set(state, { header: next, readAt: Option.some(now) })
        yield* Effect.logDebug(`kubeconfig: read ${options.what} again`)
        return next
      })
    )
    const invalidate = Ref.update(state, (current) => ({ ...current, readAt: Option.none() }))
    return { authorization, invalidate, what: options.what }
  })

/** A client-go exec plugin, resolved: what to run and how. */
export interface ExecSpec {
  /** As written, or resolved against the kubeconfig's directory when it is a relative path. */
  readonly command: string
  readonly args: ReadonlyArray<string>
  readonly env: ReadonlyArray<{ readonly name: string; readonly value: string }>
  readonly apiVersion: string
  readonly installHint: Option.Option<string>
  /** `spec.cluster` of `KUBERNETES_EXEC_INFO`, when the kubeconfig asked for `provideClusterInfo`. */
  readonly cluster: Option.Option<Record<string, unknown>>
  /** `user "u"`, for messages and logs. */
  readonly what: string
}

/** More than any credential needs; a plugin printing more is broken. */
const MAX_STDOUT_BYTES = 1024 * 1024
const MAX_STDERR_BYTES = 8 * 1024
/** How much of the plugin's stderr an error quotes. */
const STDERR_EXCERPT_CHARS = 300

const collect = (stream: Stream.Stream<Uint8Array, PlatformError>, cap: number) =>
  Stream.runFold(stream, { chunks: Chunk.empty<Uint8Array>(), bytes: 0 }, (acc, chunk) =>
    // Keep draining past the cap so the plugin never blocks on a full pipe; just stop keeping.
    acc.bytes >= cap
      ? { ...acc, bytes: acc.bytes + chunk.length }
      : { chunks: Chunk.append(acc.chunks, chunk), bytes: acc.bytes + chunk.length }).pipe(
      Effect.map(({ bytes, chunks }) => ({
        text: Buffer.concat(Chunk.toReadonlyArray(chunks)).subarray(0, cap).toString("utf8"),
        truncated: bytes > cap
      }))
    )

/** The plugin's stderr, on one line and short: it is for a person, and it may be long. */
export const stderrExcerpt = (stderr: string): string => {
  const line = stderr.replace(/\s+/g, " ").trim()
  return line.length > STDERR_EXCERPT_CHARS ? `${line.slice(0, STDERR_EXCERPT_CHARS)}…` : line
}

/** How long an interrupted plugin has to end on SIGTERM before it is sent SIGKILL. */
const PLUGIN_STOP_GRACE = Duration.seconds(2)

/**
 * Stops a plugin whose run was interrupted (the request's deadline passed, or its caller let go):
 * SIGTERM to its process group, SIGKILL if it has not ended within the grace. The executor's own
 * release sends SIGTERM and waits for the end with no limit: a plugin that ignores SIGTERM would
 * hold the credentials' lock (every later read waiting behind it) and the program's exit for ever.
 */
const stopPlugin = (process: CommandExecutor.Process): Effect.Effect<void> =>
  // `kill` signals the group, then waits for the plugin to end: interruptibly, as a finalizer runs
  // uninterruptibly and the timeout could not cut the wait short.
  Effect.timeoutOption(Effect.interruptible(process.kill("SIGTERM")), PLUGIN_STOP_GRACE).pipe(
    Effect.flatMap((ended) => Option.isSome(ended) ? Effect.void : process.kill("SIGKILL")),
    Effect.ignore
  )

/**
 * Run the plugin and read its `ExecCredential`. Failures are sentences naming the command and the
 * exit code, quoting stderr (shortened) and never stdout: stdout is where the credential is.
 */
const runPlugin = (
  executor: CommandExecutor.CommandExecutor,
  spec: ExecSpec
): Effect.Effect<{ readonly token: string; readonly expiresAt: Option.Option<number> }, string> => {
  const name = `exec plugin "${spec.command}"`
  const hint = Option.match(spec.installHint, { onNone: () => "", onSome: (text) => `. ${text.trim()}` })
  const execInfo = {
    apiVersion: spec.apiVersion,
    kind: "ExecCredential",
    spec: {
      interactive: false,
      ...Option.match(spec.cluster, { onNone: () => ({}), onSome: (cluster) => ({ cluster }) })
    }
  }
  const command = Command.make(spec.command, ...spec.args).pipe(
    Command.env({
      ...Object.fromEntries(spec.env.map(({ name, value }) => [name, value])),
      KUBERNETES_EXEC_INFO: JSON.stringify(execInfo)
    }),
    // Not interactive: the plugin gets an empty stdin rather than ours.
    Command.feed("")
  )
  return Effect.scoped(
    Effect.gen(function*() {
      const process = yield* executor.start(command).pipe(
        Effect.mapError((error) =>
          isNotFound(error)
            ? `${name} was not found${hint}`
            : `${name} could not be started: ${describePlatformError(error)}`
        )
      )
      yield* Effect.addFinalizer((exit) => Exit.isInterrupted(exit) ? stopPlugin(process) : Effect.void)
      const [stdout, stderr, exitCode] = yield* Effect.all(
        [
          collect(process.stdout, MAX_STDOUT_BYTES),
          collect(process.stderr, MAX_STDERR_BYTES),
          Effect.either(process.exitCode)
        ],
        { concurrency: "unbounded" }
      ).pipe(Effect.mapError((error) => `${name} could not be read: ${describePlatformError(error)}`))
      const said = stderrExcerpt(stderr.text)
      const stderrPart = said.length === 0 ? "" : `; stderr: ${said}`
      if (Either.isLeft(exitCode)) return yield* Effect.fail(`${name} was killed by a signal${stderrPart}`)
      if (exitCode.right !== 0) return yield* Effect.fail(`${name} exited with code ${exitCode.right}${stderrPart}`)
      if (stdout.truncated) return yield* Effect.fail(`${name} printed more than ${MAX_STDOUT_BYTES} bytes`)
      return yield* decodeCredential(name, spec.apiVersion, stdout.text)
    })
  )
}

/** Read an `ExecCredential`; no message quotes the output, not even in part. */
const decodeCredential = (
  name: string,
  apiVersion: string,
  stdout: string
): Effect.Effect<{ readonly token: string; readonly expiresAt: Option.Option<number> }, string> => {
  let json: unknown
  try {
    json = JSON.parse(stdout)
  } catch {
    // JSON.parse's own message quotes the text it choked on.
    return Effect.fail(`${name} did not print an ExecCredential (its output is not JSON)`)
  }
  const decoded = Schema.decodeUnknownEither(ExecCredential)(json)
  if (Either.isLeft(decoded)) {
    const problems = describeIssue(decoded.left.issue).map(
      ({ path, problem }) => `${path.length === 0 ? "the output" : path.map(String).join(".")} ${problem}`
    )
    return Effect.fail(`${name} printed an invalid ExecCredential: ${problems.slice(0, 3).join("; ")}`)
  }
  const credential = decoded.right
  if (credential.apiVersion !== apiVersion) {
    return Effect.fail(`${name} answered with another apiVersion than the kubeconfig asks for (${apiVersion})`)
  }
  const status = credential.status
  if (status === undefined) return Effect.fail(`${name} printed an ExecCredential without a status`)
  if (status.token === undefined || status.token.length === 0) {
    return Effect.fail(
      status.clientCertificateData !== undefined
        ? `${name} returned a client certificate; this client supports only token credentials from exec plugins`
        : `${name} returned no token`
    )
  }
  if (status.expirationTimestamp === undefined) return Effect.succeed({ token: status.token, expiresAt: Option.none() })
  const expiresAt = Date.parse(status.expirationTimestamp)
  return Number.isNaN(expiresAt)
    ? Effect.fail(`${name} returned an expirationTimestamp that is not an RFC 3339 time`)
    : Effect.succeed({ token: status.token, expiresAt: Option.some(expiresAt) })
}

/**
 * An exec credential plugin, run on the first `authorization`, again once its
 * `expirationTimestamp` has passed (by `Clock`) or after `invalidate`. Without an expiry, its token
 * is kept until invalidated. Concurrent callers wait for one run.
 */
export const execCredential = <E>(options: {
  readonly executor: CommandExecutor.CommandExecutor
  readonly spec: ExecSpec
  readonly fail: (problem: string) => E
}): Effect.Effect<CredentialSource<E>> =>
  Effect.gen(function*() {
    const { spec } = options
    const cached = yield* Ref.make(
      Option.none<{ readonly header: Redacted.Redacted<string>; readonly expiresAt: Option.Option<number> }>()
    )
    const lock = yield* Effect.makeSemaphore(1)
    const authorization = lock.withPermits(1)(
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const current = yield* Ref.get(cached)
        if (
          Option.isSome(current) && Option.match(current.value.expiresAt, {
            onNone: () => true,
            onSome: (at) => now < at
          })
        ) {
          return Option.some(current.value.header)
        }
        yield* Effect.logDebug(`kubeconfig: running exec plugin "${spec.command}" for ${spec.what}`)
        const credential = yield* runPlugin(options.executor, spec).pipe(Effect.mapError(options.fail))
        const header = bearer(credential.token)
        yield* Ref.set(cached, Option.some({ header, expiresAt: credential.expiresAt }))
        yield* Effect.logDebug(
          `kubeconfig: exec plugin "${spec.command}" gave a token ${
            Option.match(credential.expiresAt, {
              onNone: () => "with no expiry",
              onSome: (at) => `valid until ${new Date(at).toISOString()}`
            })
          }`
        )
        return Option.some(header)
      })
    )
    return {
      authorization,
      invalidate: Ref.set(cached, Option.none()),
      what: `exec plugin "${spec.command}" for ${spec.what}`
    }
  })
