/** The client's watches: a watch request opened as a pull of typed events, under its silence limit. */
import { Duration, Effect, type Schema, Scope } from "effect"
import type { KubeClientError } from "../KubeError.ts"
import { KubeLineTooLongError, KubeMalformedLineError, KubeWatchIdleError } from "../KubeError.ts"
import type { KubeResource } from "../KubeResource.ts"
import { collectionPath } from "../KubeResource.ts"
import type { HasMetadata } from "../ObjectMeta.ts"
import type { WatchEvent } from "../WatchEvent.ts"
import { isInitialEventsEnd } from "../WatchEvent.ts"
import { type Decode, safeExcerpt, toBookmark, undecodable } from "./bodyDecoding.ts"
import type { DeadlineTimer } from "./deadlineTimer.ts"
import { bodyBroke, toStatus } from "./httpFailure.ts"
import { isRecord } from "./isRecord.ts"
import type { WatchOptions, WatchPull } from "./kubeClientTypes.ts"
import { cutsFor, decodeObjectWithoutManagedFields } from "./managedFields.ts"
import { excerpt, type LineHandler, pullLines } from "./ndjsonLines.ts"
import { ownedDecoderFor } from "./plainDecoder.ts"
import { spanAttributes, watchQuery } from "./requestParts.ts"
import type { Requests, Sent } from "./requestSender.ts"

/**
 * Turns each line of a watch body into at most one event. Object events go through the caller's
 * schema; a misfit becomes `UNDECODABLE` (it still carries a resourceVersion to resume from).
 */
const watchLines = <A extends HasMetadata>(
  decode: Decode<A>,
  path: string,
  secret: string | undefined,
  /** Called at a streaming list's end bookmark (`k8s.io/initial-events-end`). */
  onInitialEventsEnd: (() => void) | undefined
): LineHandler<WatchEvent<A>, KubeMalformedLineError | KubeLineTooLongError> => {
  const malformed = (what: string, line: string) =>
    new KubeMalformedLineError({ path, message: `the watch GET ${path} ${what}`, excerpt: safeExcerpt(line, secret) })

  const push = (parsed: unknown, line: string, out: Array<WatchEvent<A>>): KubeMalformedLineError | undefined => {
    if (!isRecord(parsed)) return malformed("sent a line that is not a JSON object", line)
    const type = parsed.type
    switch (type) {
      case "ADDED":
      case "MODIFIED":
      case "DELETED": {
        const result = decode(parsed.object)
        if (result._tag === "Right") {
          const object = result.right
          out.push({
            type,
            object,
            name: object.metadata.name,
            resourceVersion: object.metadata.resourceVersion,
            bytes: line.length
          })
        } else {
          out.push(undecodable(type, parsed.object, result.left))
        }
        return undefined
      }
      case "BOOKMARK": {
        const bookmark = toBookmark(parsed.object)
        if (bookmark === undefined) return malformed("sent a BOOKMARK without metadata.resourceVersion", line)
        if (onInitialEventsEnd !== undefined && isInitialEventsEnd(bookmark)) {
          onInitialEventsEnd()
        }
        out.push(bookmark)
        return undefined
      }
      case "ERROR":
        out.push({ type: "ERROR", status: toStatus(parsed.object) })
        return undefined
      default:
        return malformed(
          typeof type === "string"
            ? `sent an event of unknown type "${excerpt(type, 40)}"`
            : "sent a line without an event type",
          line
        )
    }
  }

  return {
    onLine: (line: string, out: Array<WatchEvent<A>>) => {
      if (line.length === 0) return undefined
      let parsed: unknown
      try {
        parsed = JSON.parse(line)
      } catch {
        if (line.trim() === "") return undefined
        // Not the parser's message: it quotes the line, where the excerpt is already scrubbed.
        return malformed("sent a line that is not JSON", line)
      }
      return push(parsed, line, out)
    },
    onEnd: (rest: string, out: Array<WatchEvent<A>>) => {
      if (rest.trim() === "") return undefined
      let parsed: unknown
      try {
        // A last event complete but for its newline is still an event.
        parsed = JSON.parse(rest)
      } catch {
        return malformed(
          "ended in the middle of a line: the connection was closed or a proxy cut the body short; resume the watch from the last resourceVersion",
          rest
        )
      }
      return push(parsed, rest, out)
    },
    onTooLong: (limitBytes: number) =>
      new KubeLineTooLongError({
        path,
        limitBytes,
        message:
          `the watch GET ${path} sent a line longer than ${limitBytes} bytes; it was refused rather than buffered (if objects that large are expected, raise KubeClientOptions.maxLineBytes, the program's --max-line-bytes)`
      })
  }
}

export type OpenWatch = <A extends HasMetadata, I>(
  resource: KubeResource,
  schema: Schema.Schema<A, I>,
  options?: WatchOptions
) => Effect.Effect<WatchPull<A>, KubeClientError, Scope.Scope>

export const makeOpenWatch = (
  { send, server }: Requests,
  timer: DeadlineTimer,
  maxLineBytes: number
): OpenWatch => {
  const openWatch = <A extends HasMetadata, I>(
    resource: KubeResource,
    schema: Schema.Schema<A, I>,
    options: WatchOptions = {}
  ): Effect.Effect<WatchPull<A>, KubeClientError, Scope.Scope> => {
    const path = collectionPath(resource, options.namespace) + watchQuery(options)
    const idleMillis = options.idleTimeout === undefined ? undefined : Duration.toMillis(options.idleTimeout)
    const idleMillisAfterList = options.idleTimeoutAfterInitialEvents === undefined
      ? undefined
      : Duration.toMillis(options.idleTimeoutAfterInitialEvents)
    const decode = ownedDecoderFor(schema)
    // Lines are decoded without their managedFields, unless the schema reads them.
    const decodeLine = cutsFor(schema) ? decodeObjectWithoutManagedFields : undefined
    // The span lives as long as the watch's scope. (`Stream.withSpan` would provide it afresh to
    // every chunk read: a watch reads thousands a second, and that doubled what each allocated.)
    // Nested `flatMap`s, not `Effect.gen`: a resume runs this once, and the generator's
    // resumptions showed in its profile (`npm run bench -- --profile sw@22:storm`).
    const opened = (sent: Sent, scope: Scope.Scope): Effect.Effect<WatchPull<A>> => {
      const body = sent.answer.body
      // The silence limit, kept by the client's timer (no fiber per watch); every read touches it.
      // Bytes that arrived and wait for a slow reader are not silence (`body.unread`).
      // The limit in force: a streaming list's, until its end bookmark sets the watch's.
      let limitMillis = idleMillis
      const silence = idleMillis === undefined ? undefined : timer.armSilence(
        idleMillis,
        () =>
          body.fail(
            new KubeWatchIdleError({
              path,
              idleMillis: limitMillis!,
              message: `the watch GET ${path} to ${server} sent nothing for ${
                Duration.format(limitMillis!)
              } (its idleTimeout); the connection was taken for dead and closed`
            })
          ),
        () => body.unread
      )
      const onInitialEventsEnd = silence === undefined || idleMillisAfterList === undefined ? undefined : () => {
        limitMillis = idleMillisAfterList
        silence.setLimit(idleMillisAfterList)
      }
      const read = Effect.mapBoth(body.next, {
        onFailure: (cause) =>
          cause instanceof KubeWatchIdleError
            ? cause
            : bodyBroke({ method: "GET", path, server, cause, secret: sent.secret }),
        onSuccess: (bytes) => {
          silence?.touch()
          return bytes
        }
      })
      // However the watch ends, an unfinished body is destroyed (that aborts the request). Added to
      // the scope directly: `Effect.addFinalizer` would capture the fiber's refs to run it under,
      // five copies of the fiber's FiberRefs per watch (`npx tsx scratchpad/fiberRefWrites.ts`),
      // which a plain side effect does not need.
      return Effect.map(
        Scope.addFinalizer(
          scope,
          Effect.sync(() => {
            silence?.clear()
            body.discard()
          })
        ),
        () => pullLines(read, maxLineBytes, watchLines(decode, path, sent.secret, onInitialEventsEnd), decodeLine)
      )
    }
    return Effect.flatMap(
      Effect.makeSpanScoped("KubeClient.watch", {
        // A stack trace per watch costs an Error each resume; the attributes say which watch it is.
        captureStackTrace: false,
        attributes: spanAttributes(resource, options.namespace, options.resourceVersion, options.labelSelector)
      }),
      (span) =>
        send(
          "GET",
          path,
          undefined,
          span,
          (sent) => Effect.flatMap(Effect.scope, (scope) => opened(sent, scope)),
          options.acceptGzip
        )
    )
  }
  return openWatch
}
