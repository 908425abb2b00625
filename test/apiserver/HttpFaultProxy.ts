/**
 * An HTTP-level fault proxy in front of the real kube-apiserver: it terminates TLS on loopback (with
 * the apiserver's own serving certificate, so a client that trusts the server trusts the proxy),
 * forwards every request to the server, and on demand answers or bends a request the way an HTTP
 * middlebox or an overloaded apiserver does: a 429 with Retry-After, a 500 Status, a 502 HTML page,
 * a 504 "too large resource version", an `ERROR` 410 inside a live watch, a malformed line, a body
 * cut mid-line, bytes dripped a few at a time, a list body that stalls. The TCP fault proxy
 * (`test/support/FaultProxy.ts`) works below TLS and cannot say any of these.
 *
 * Every request is recorded (kind, time, whether a fault answered it) so a test can count what the
 * watch asked while a fault lasted.
 */
import { Effect } from "effect"
import type { Scope } from "effect"
import * as fs from "node:fs"
import * as http from "node:http"
import * as https from "node:https"
import type { AddressInfo } from "node:net"
import * as path from "node:path"
import type { ApiServerFacts } from "./RealApiServer.ts"

export type RequestKind = "list" | "watch" | "other"

/** What the proxy does to the next request of a kind. */
export type HttpFault =
  | { readonly _tag: "TooManyRequests"; readonly retryAfterSeconds: number }
  | { readonly _tag: "InternalError" }
  | { readonly _tag: "BadGatewayHtml" }
  | { readonly _tag: "TooLargeResourceVersion" }
  /** A watch answered 200, then an `ERROR` 410 Status, then the end: an expired resourceVersion. */
  | { readonly _tag: "ExpiredInStream" }
  /** A watch's real stream, with a line that is not JSON written first. */
  | { readonly _tag: "MalformedLine" }
  /** A watch answered 200 with half an event line, then the connection destroyed. */
  | { readonly _tag: "CutMidLine" }
  /** The real answer, written on `bytes` at a time with a pause between (lines and characters split). */
  | { readonly _tag: "Drip"; readonly bytes: number; readonly everyMillis: number }
  /** The real answer's status and headers and its first bytes, then nothing: the body stalls. */
  | { readonly _tag: "StallBody" }

export interface Seen {
  readonly kind: RequestKind
  /** `Date.now()` when the request arrived. */
  readonly at: number
  /** The fault that answered it; none when it was forwarded as it was. */
  readonly fault: HttpFault["_tag"] | undefined
  readonly query: Readonly<Record<string, string>>
  /** Resolves when the client hung up before the answer was finished. */
  readonly abandoned: Promise<void>
}

export interface HttpFaultProxy {
  /** `https://127.0.0.1:<port>`. */
  readonly url: string
  /** The next `count` requests of `kind` get `fault`. */
  readonly failNext: (kind: RequestKind, count: number, fault: HttpFault) => Effect.Effect<void>
  /** Every request so far, oldest first. */
  readonly seen: Effect.Effect<ReadonlyArray<Seen>>
  /** Destroys every answer still open (a watch's, a stalled list's): the client sees a reset. */
  readonly cutOpen: Effect.Effect<number>
}

const kindOf = (url: URL, method: string): RequestKind =>
  method !== "GET" || !url.pathname.endsWith("/sandboxes")
    ? "other"
    : url.searchParams.get("watch") === "1" || url.searchParams.get("watch") === "true"
    ? "watch"
    : "list"

const statusBody = (code: number, reason: string, message: string, details?: Record<string, unknown>) =>
  JSON.stringify({
    kind: "Status",
    apiVersion: "v1",
    metadata: {},
    status: "Failure",
    message,
    reason,
    ...(details === undefined ? {} : { details }),
    code
  })

/** Starts the proxy in front of `facts`' server; it stops (every socket closed) with the scope. */
export const make = (facts: ApiServerFacts): Effect.Effect<HttpFaultProxy, never, Scope.Scope> =>
  Effect.gen(function*() {
    const certDir = path.join(facts.dir, "certs")
    const upstream = new https.Agent({ ca: facts.caPem, keepAlive: true })
    const queued: Record<RequestKind, Array<HttpFault>> = { list: [], watch: [], other: [] }
    const seen: Array<Seen> = []
    const timers = new Set<NodeJS.Timeout>()
    const open = new Set<http.ServerResponse>()

    const forward = (
      req: http.IncomingMessage,
      res: http.ServerResponse,
      bend: (upstream: http.IncomingMessage) => void
    ) => {
      const out = https.request(`${facts.url}${req.url ?? "/"}`, {
        method: req.method,
        headers: { ...req.headers, host: new URL(facts.url).host },
        agent: upstream
      }, bend)
      out.on("error", () => res.destroy())
      res.on("close", () => out.destroy())
      req.pipe(out)
    }

    const pipeAsIs = (res: http.ServerResponse) => (answer: http.IncomingMessage) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers)
      answer.pipe(res)
    }

    const answer = (req: http.IncomingMessage, res: http.ServerResponse, fault: HttpFault | undefined) => {
      const send = (code: number, contentType: string, body: string, headers: Record<string, string> = {}) => {
        res.writeHead(code, { "content-type": contentType, ...headers })
        res.end(body)
      }
      if (fault === undefined) return forward(req, res, pipeAsIs(res))
      switch (fault._tag) {
        case "TooManyRequests":
          return send(
            429,
            "application/json",
            statusBody(429, "TooManyRequests", "Too many requests, please try again later.", {
              retryAfterSeconds: fault.retryAfterSeconds
            }),
            { "retry-after": String(fault.retryAfterSeconds) }
          )
        case "InternalError":
          return send(
            500,
            "application/json",
            statusBody(500, "InternalError", "Internal error occurred: etcdserver: request timed out")
          )
        case "BadGatewayHtml":
          return send(
            502,
            "text/html",
            "<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1></body></html>"
          )
        case "TooLargeResourceVersion":
          return send(
            504,
            "application/json",
            statusBody(504, "Timeout", "Timeout: Too large resource version: 999999999, current: 1", {
              causes: [{ reason: "ResourceVersionTooLarge", message: "Too large resource version" }],
              retryAfterSeconds: 1
            })
          )
        case "ExpiredInStream":
          return send(
            200,
            "application/json",
            `{"type":"ERROR","object":${statusBody(410, "Expired", "too old resource version: 1 (2)")}}\n`
          )
        case "MalformedLine":
          return forward(req, res, (upstreamAnswer) => {
            res.writeHead(upstreamAnswer.statusCode ?? 502, upstreamAnswer.headers)
            res.write("this is not json\n")
            upstreamAnswer.pipe(res)
          })
        case "CutMidLine":
          res.writeHead(200, { "content-type": "application/json" })
          res.write(`{"type":"MODIFIED","object":{"apiVersion":"jr2.dev/v1alpha1","kind":"Sand`)
          return void setTimeout(() => res.destroy(), 20)
        case "Drip":
          return forward(req, res, (upstreamAnswer) => {
            res.writeHead(upstreamAnswer.statusCode ?? 502, upstreamAnswer.headers)
            const pending: Array<Buffer> = []
            let ended = false
            const timer = setInterval(() => {
              const head = pending[0]
              if (head === undefined) {
                if (ended) {
                  clearInterval(timer)
                  timers.delete(timer)
                  res.end()
                }
                return
              }
              res.write(head.subarray(0, fault.bytes))
              if (head.length > fault.bytes) pending[0] = head.subarray(fault.bytes)
              else pending.shift()
            }, fault.everyMillis)
            timers.add(timer)
            res.on("close", () => {
              clearInterval(timer)
              timers.delete(timer)
            })
            upstreamAnswer.on("data", (chunk: Buffer) => pending.push(chunk))
            upstreamAnswer.on("end", () => (ended = true))
          })
        case "StallBody":
          return forward(req, res, (upstreamAnswer) => {
            res.writeHead(upstreamAnswer.statusCode ?? 502, upstreamAnswer.headers)
            upstreamAnswer.once("data", (chunk: Buffer) => {
              res.write(chunk.subarray(0, Math.min(64, chunk.length)))
              upstreamAnswer.destroy() // and nothing more is ever written
            })
          })
      }
    }

    const server = https.createServer({
      key: fs.readFileSync(path.join(certDir, "apiserver.key")),
      cert: fs.readFileSync(path.join(certDir, "apiserver.crt"))
    }, (req, res) => {
      const url = new URL(req.url ?? "/", "https://proxy")
      const kind = kindOf(url, req.method ?? "GET")
      const fault = queued[kind].shift()
      const abandoned = new Promise<void>((resolve) => res.once("close", () => !res.writableFinished && resolve()))
      seen.push({ kind, at: Date.now(), fault: fault?._tag, query: Object.fromEntries(url.searchParams), abandoned })
      open.add(res)
      res.once("close", () => open.delete(res))
      answer(req, res, fault)
    })
    const port = yield* Effect.acquireRelease(
      Effect.async<number>((resume) => {
        server.listen(0, "127.0.0.1", () => resume(Effect.succeed((server.address() as AddressInfo).port)))
      }),
      () =>
        Effect.async<void>((resume) => {
          for (const timer of timers) clearInterval(timer)
          server.closeAllConnections()
          upstream.destroy()
          server.close(() => resume(Effect.void))
        })
    )
    return {
      url: `https://127.0.0.1:${port}`,
      failNext: (kind, count, fault) =>
        Effect.sync(() => {
          for (let i = 0; i < count; i++) queued[kind].push(fault)
        }),
      seen: Effect.sync(() => seen.slice()),
      cutOpen: Effect.sync(() => {
        const count = open.size
        for (const res of open) res.destroy()
        return count
      })
    }
  })
