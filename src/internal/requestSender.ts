/**
 * The client's requests: sent with fresh credentials under the headers deadline, their bodies read
 * under the body deadline and byte budgets, a non-2xx answer turned into its typed error.
 */
import type { Dispatcher } from "@effect/platform-node/Undici"
import { Clock, Duration, Effect, Exit, FiberId, Option, Redacted, type Scope, type Tracer } from "effect"
import type { ClusterConnection, KubeConfigError } from "../KubeConfig.ts"
import type { KubeClientError } from "../KubeError.ts"
import { KubeBodyTooLargeError, KubeMalformedBodyError, KubeTransportError } from "../KubeError.ts"
import { bodyLabels, decodeBody, safeExcerpt } from "./bodyDecoding.ts"
import type { DeadlineTimer } from "./deadlineTimer.ts"
import { bodyBroke, deadlinePassed, requestFailed, scrub, statusError } from "./httpFailure.ts"
import type { Answer, Outgoing } from "./undiciExchange.ts"
import { BodyOverLimit, HeadersDeadlinePassed, headerValue, send as sendOn, targetOf } from "./undiciExchange.ts"
import { withoutUserInfo } from "./urlUserInfo.ts"

const UserAgent = "sandbox-watch/0.1.0"

/** The credential itself (without its scheme), so error texts can be scrubbed of it. */
export const secretOf = (authorization: Option.Option<Redacted.Redacted<string>>): string | undefined =>
  Option.isSome(authorization) ? Redacted.value(authorization.value).replace(/^\S+\s+/, "") : undefined

/** The credentials were not read within the headers deadline. */
class CredentialsTooSlow {
  readonly _tag = "CredentialsTooSlow"
}

type Authorization = Option.Option<Redacted.Redacted<string>>

/**
 * The connection's credentials, read under the headers deadline: the request's deadline covers
 * getting them too (an exec plugin waiting for a browser login, an identity provider that does not
 * answer, would otherwise hold the request for ever, and the watch with it). Out of time, the read
 * is interrupted, which stops an exec plugin (`internal/credentials.ts`), and the request fails at
 * once, without waiting for it to stop: its fiber is the client's (`reads`), not the request's,
 * which would wait for it as it ends. A read that is already a value (a static token, no
 * credentials) needs no deadline; any other runs in a fiber of its own, as only a fiber can be
 * interrupted apart from the request's: about 16 µs a request, where `Effect.timeoutFail` costs
 * about 45 (two fibers and a sleep) and a resume about 700.
 */
const readWithin = (
  authorization: Effect.Effect<Authorization, KubeConfigError>,
  timer: DeadlineTimer,
  reads: Scope.Scope,
  millis: number
): Effect.Effect<Authorization, KubeConfigError | CredentialsTooSlow> =>
  Exit.isExit(authorization) ? authorization : Effect.flatMap(
    // Interruptible whatever the request is (a write in a finalizer is not): else the deadline
    // could not stop a hung plugin, and the client's scope would wait for it on close.
    Effect.forkIn(Effect.interruptible(authorization), reads),
    (reading) =>
      Effect.async<Authorization, KubeConfigError | CredentialsTooSlow>((resume) => {
        let settled = false
        const settle = (result: Effect.Effect<Authorization, KubeConfigError | CredentialsTooSlow>) => {
          if (settled) return
          settled = true
          armed.clear()
          reading.removeObserver(settle)
          resume(result)
        }
        const armed = timer.arm(millis, () => {
          reading.unsafeInterruptAsFork(FiberId.none)
          settle(Effect.fail(new CredentialsTooSlow()))
        })
        reading.addObserver(settle)
        return Effect.sync(() => {
          settled = true
          armed.clear()
          reading.removeObserver(settle)
          reading.unsafeInterruptAsFork(FiberId.none)
        })
      })
  )

/** A request not sent: its credentials could not be read, or not in time. */
const notSent = (
  request: {
    readonly method: string
    readonly path: string
    readonly server: string
    /** What the credentials are read from (`exec plugin "x" for user "u"`). */
    readonly credentials: string
    readonly deadline: string
  },
  error: KubeConfigError | CredentialsTooSlow
): KubeTransportError => {
  const { credentials, deadline, method, path, server } = request
  return new KubeTransportError({
    method,
    path,
    message: error instanceof CredentialsTooSlow
      ? `${method} ${path} to ${server} was not sent: reading its credentials (${credentials}) took longer ` +
        `than ${deadline} and was abandoned. A plugin may be waiting for a person (a browser login, a ` +
        `prompt: nobody answers them here), or an identity provider or file system not answering: check ` +
        `that the credentials can be read on this host without a person; if it is only slow, raise ` +
        `KubeClientOptions.headersTimeout, the program's --headers-timeout`
      : `${method} ${path} to ${server} was not sent: its credentials could not be read: ${error.message}`,
    reached: "not-sent"
  })
}

export interface Sent {
  readonly answer: Answer
  readonly secret: string | undefined
}

export type HttpMethod = Outgoing["method"]

export interface Limits {
  readonly maxLineBytes: number
  readonly headersTimeout: Duration.Duration
  readonly bodyTimeout: Duration.Duration
  readonly maxListPageBytes: number
  readonly maxErrorBodyBytes: number
  readonly maxListPages: number
  readonly maxListItems: number
  readonly maxListBytes: number
}

/** What the list paging and the watch opening send their requests with. */
export interface Requests {
  readonly server: string
  readonly send: <A, R>(
    method: HttpMethod,
    path: string,
    body: { readonly text: string; readonly contentType: string } | undefined,
    parent: Tracer.AnySpan | undefined,
    use: (sent: Sent) => Effect.Effect<A, KubeClientError, R>,
    /** Ask for a gzipped answer (`Accept-Encoding: gzip`); it is inflated as it is read. */
    acceptGzip?: boolean
  ) => Effect.Effect<A, KubeClientError, R>
  readonly readBody: (
    method: string,
    path: string,
    sent: Sent,
    kind?: "answer" | "error"
  ) => Effect.Effect<Buffer, KubeTransportError | KubeBodyTooLargeError>
  readonly json: (
    method: HttpMethod,
    path: string,
    body?: unknown,
    contentType?: string
  ) => Effect.Effect<unknown, KubeClientError>
}

export const makeRequests = (
  connection: ClusterConnection,
  dispatcher: Dispatcher,
  timer: DeadlineTimer,
  /** Where credential reads run (the client's scope). */
  reads: Scope.Scope,
  { bodyTimeout, headersTimeout, maxErrorBodyBytes, maxListPageBytes }: Limits
): Requests => {
  // As every message names it: a user name or password in the URL is never shown (nor sent: the
  // target is the origin and path).
  const server = withoutUserInfo(connection.server)
  const target = targetOf(server)
  const trust = { caGiven: Option.isSome(connection.tls.ca), source: connection.source }
  const headersMillis = Duration.toMillis(headersTimeout)
  const headersLimit = { timer, millis: headersMillis }
  // Interrupting a request or a body read aborts the request, so a deadline frees the connection
  // as well as the caller.
  const headersDeadline = Duration.format(headersTimeout)
  const bodyDeadline = Duration.format(bodyTimeout)
  const bodyMillis = Duration.toMillis(bodyTimeout)

  const credentialsWithin = readWithin(connection.authorization, timer, reads, headersMillis)
  // What the credentials are read from, for a message: never a credential.
  const credentials = connection.credentials ?? `those of ${connection.source}`

  /** Sends one request with fresh credentials; a non-2xx answer fails as a `KubeStatusError`. */
  /**
   * Sends a request and hands a 2xx answer to `use`, uninterruptibly: `use` must take the body at
   * once (so an interrupt can never leave a connection holding an unread body) and wait only in
   * interruptible reads.
   */
  const send = <A, R>(
    method: HttpMethod,
    path: string,
    body: { readonly text: string; readonly contentType: string } | undefined,
    /** The span the request belongs to; by default the current one. */
    parent: Tracer.AnySpan | undefined,
    use: (sent: Sent) => Effect.Effect<A, KubeClientError, R>,
    acceptGzip?: boolean
  ): Effect.Effect<A, KubeClientError, R> =>
    Effect.flatMap(
      // Nested, not `Effect.zip` (which runs as a `forEach`): a watch resume sends one of these.
      Effect.flatMap(
        Effect.mapError(
          credentialsWithin,
          (error) => notSent({ method, path, server, credentials, deadline: headersDeadline }, error)
        ),
        (authorization) =>
          Effect.map(
            parent === undefined ? Effect.option(Effect.currentSpan) : Effect.succeed(Option.some(parent)),
            (span) => [authorization, span] as const
          )
      ),
      ([authorization, span]) => {
        const secret = secretOf(authorization)
        const headers: Record<string, string> = { accept: "application/json", "user-agent": UserAgent }
        // The request's trace context, as W3C `traceparent`: the caller's span (KubeClient.list,
        // .watch, ...). No span of its own: a span per request cost a watch resume two context
        // changes and a span, and said nothing the caller's span and its typed error do not.
        if (Option.isSome(span)) {
          headers.traceparent = `00-${span.value.traceId}-${span.value.spanId}-${span.value.sampled ? "01" : "00"}`
        }
        if (Option.isSome(authorization)) headers.authorization = Redacted.value(authorization.value)
        if (body !== undefined) headers["content-type"] = body.contentType
        if (acceptGzip === true) headers["accept-encoding"] = "gzip"
        const outgoing = { method, path, headers, ...(body === undefined ? {} : { body: body.text }) }
        const sent = Effect.mapError(sendOn(dispatcher, target, outgoing, headersLimit), (cause) =>
          cause instanceof HeadersDeadlinePassed
            ? deadlinePassed({ method, path, server, secret }, "headers", headersDeadline)
            : requestFailed({ method, path, server, cause, secret, trust }))
        // The answer is handed over uninterruptibly, so no interrupt falls between its arrival and
        // whoever takes its body: `use` takes it at once (a watch's scope finalizer, or `readBody`,
        // which discards it when interrupted and reads interruptibly). The gap closed is two or
        // three runtime steps, where a fiber yields only when its op budget runs out. A guard of its
        // own around `use` cost a watch resume several times the runtime instructions this does
        // (`npx tsx scratchpad/effectOps.ts`).
        return Effect.uninterruptibleMask((restore) =>
          Effect.flatMap(restore(sent), (answer) =>
            answer.status >= 200 && answer.status < 300
              ? use({ answer, secret })
              : failWithStatus(method, path, answer, secret))
        )
      }
    )

  const failWithStatus = (
    method: string,
    path: string,
    answer: Answer,
    secret: string | undefined
  ): Effect.Effect<never, KubeClientError> =>
    Effect.gen(function*() {
      // A body that breaks off or stalls still leaves the status code to speak; only its first
      // bytes are read, which is all a message needs.
      const body = yield* Effect.orElseSucceed(
        Effect.map(readBody(method, path, { answer, secret }, "error"), (bytes) => decodeBody(bytes, false)),
        () => ""
      )
      const nowMillis = yield* Clock.currentTimeMillis
      const error = statusError({
        method,
        path,
        code: answer.status,
        contentType: headerValue(answer, "content-type"),
        retryAfter: headerValue(answer, "retry-after"),
        body,
        nowMillis,
        secret
      })
      // Whatever credential is cached is stale: the next request reads it afresh.
      if (error.code === 401) yield* connection.invalidate
      return yield* Effect.fail(error)
    })

  /**
   * A whole body's bytes, under the body deadline; the body destroyed (its connection closed) if
   * the read is cut short. The deadline is kept by the client's timer, as the headers' is:
   * `Effect.timeoutFail` raced two fibers and a sleep per body, and a list reads one body a page.
   */
  const readBody = (
    method: string,
    path: string,
    sent: Sent,
    kind: "answer" | "error" = "answer"
  ): Effect.Effect<Buffer, KubeTransportError | KubeBodyTooLargeError> =>
    Effect.suspend(() => {
      const body = sent.answer.body
      let late = false
      const deadline = timer.arm(bodyMillis, () => {
        late = true
        body.fail(new Error("the body deadline passed"))
      })
      // Interruptible even when `send` hands the answer over uninterruptibly: a read may stall.
      const read = kind === "error" ? body.upTo(maxErrorBodyBytes, "truncate") : body.upTo(maxListPageBytes, "fail")
      return Effect.onInterrupt(Effect.interruptible(read), () => Effect.sync(() => body.discard())).pipe(
        Effect.mapError((cause) =>
          cause instanceof BodyOverLimit
            ? new KubeBodyTooLargeError({
              method,
              path: scrub(path, sent.secret),
              limit: cause.limit,
              unit: "bytes",
              message:
                `${method} ${
                  scrub(path, sent.secret)
                } sent a body of more than ${cause.limit} bytes; reading stopped there (if pages that large are expected, raise ` +
                `KubeClientOptions.maxListPageBytes, the program's --max-list-page-bytes; else a proxy or ` +
                `server is sending more than a list)`
            })
            : late
            ? deadlinePassed({ method, path, server, secret: sent.secret }, "body", bodyDeadline)
            : bodyBroke({ method, path, server, cause, secret: sent.secret })
        ),
        Effect.ensuring(Effect.sync(() => deadline.clear()))
      )
    })

  const readText = (
    method: string,
    path: string,
    sent: Sent
  ): Effect.Effect<string, KubeTransportError | KubeBodyTooLargeError> =>
    Effect.map(readBody(method, path, sent), (bytes) => decodeBody(bytes, false))

  /** A write or a get: JSON (or nothing) back. */
  const json = (
    method: HttpMethod,
    path: string,
    body?: unknown,
    contentType = "application/json"
  ): Effect.Effect<unknown, KubeClientError> =>
    Effect.suspend(() =>
      send(
        method,
        path,
        body === undefined ? undefined : { text: JSON.stringify(body), contentType },
        undefined,
        (sent) =>
          Effect.flatMap(readText(method, path, sent), (text) =>
            Effect.try({
              try: (): unknown => (text.length === 0 ? null : JSON.parse(text)),
              catch: () =>
                new KubeMalformedBodyError({
                  method,
                  path,
                  message: `${method} ${path} answered 2xx with a body that is not JSON (${bodyLabels(sent.answer)})`,
                  excerpt: safeExcerpt(text, sent.secret)
                })
            }))
      )
    )

  return { server, send, readBody, json }
}
