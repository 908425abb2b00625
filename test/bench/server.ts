/**
 * A replay apiserver for benchmarks: node:http on 127.0.0.1, answering lists and watches of
 * Sandboxes from bytes serialized once, up front, so a run measures the client's work and not the
 * server's. The namespace of a request says what to do (`<mode>-<run id>`), so one server serves
 * every child of a run and each child gets its own state:
 *
 * | mode | list | watch |
 * |---|---|---|
 * | `sync`, `heap`, `scale` | N objects, whole or paged | held open, silent |
 * | `tp` | N objects | after `go`: M `MODIFIED` of random names, a `BOOKMARK` every 1,000, as fast as the client reads; then ends |
 * | `hot` | N objects | the same over the first `hot` names only |
 * | `storm` | N objects | after `go`: one `MODIFIED` then the end, `storm` times over; then held open |
 * | `lat` | N objects | after `go`: `latencyEvents` events at `latencyRate`/s, each stamped with `process.hrtime` as written; then held open |
 *
 * A watch resumed at resourceVersion `r` continues with the event after `r`. `POST /bench/go/<ns>`
 * opens the gate: a child sets up its subscribers, then asks for the stream, so set-up is not timed.
 *
 * A **streaming list** (a watch with `sendInitialEvents=true`, `resourceVersionMatch=NotOlderThan`
 * and `allowWatchBookmarks=true`, as kube-apiserver 1.27+ with WatchList answers it) streams the N
 * objects as `ADDED` lines, from the same per-object bytes as the list pages, then the `BOOKMARK`
 * annotated `k8s.io/initial-events-end` at the list's resourceVersion, then goes on as the mode's
 * watch from there. A watch whose options contradict (`resourceVersionMatch` without
 * `sendInitialEvents`, and so on) is the 422 kube-apiserver answers.
 */
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { watchRequestOf } from "../../src/internal/simulator/requests.ts"
import { InitialEventsEndAnnotation } from "../../src/WatchEvent.ts"
import {
  type DataShape,
  eventTarget,
  evolve,
  Group,
  listResourceVersion,
  makeSandbox,
  nameOf,
  Plural,
  Salt,
  SentAnnotation,
  Version
} from "./data.ts"

/** Every event line of a stream in one buffer; `offsets[i]` is where event `i + 1` starts. */
interface EventStream {
  readonly bytes: Buffer
  readonly offsets: Float64Array
}

const BookmarkEvery = 1_000
const WriteSlice = 64 * 1024
/** The objects' own namespace: clients key on names, and no client checks it against the URL's. */
const ObjectNamespace = "bench"

const bookmarkLine = (resourceVersion: number) =>
  JSON.stringify({
    type: "BOOKMARK",
    object: {
      kind: "Sandbox",
      apiVersion: `${Group}/${Version}`,
      metadata: { resourceVersion: String(resourceVersion) }
    }
  }) + "\n"

/** The end of a streaming list's initial events: a bookmark at the list's resourceVersion, annotated. */
const initialEventsEndLine = (resourceVersion: number) =>
  JSON.stringify({
    type: "BOOKMARK",
    object: {
      kind: "Sandbox",
      apiVersion: `${Group}/${Version}`,
      metadata: { resourceVersion: String(resourceVersion), annotations: { [InitialEventsEndAnnotation]: "true" } }
    }
  }) + "\n"

/**
 * What kube-apiserver says of a watch's list options (`ValidateListOptions` for a watch), as the
 * project's simulator words it: the 422 for contradictory options; none when they are allowed.
 */
const watchOptionsProblem = (query: URLSearchParams) => {
  const request = watchRequestOf(query)
  return request._tag === "Left" && request.left.code === 422 ? request.left : undefined
}

/** Listed states by index, the bases events evolve from. */
const bases = new Map<number, Record<string, unknown>>()
const eventLine = (index: number, variant: number, resourceVersion: number, sent = false) => {
  let base = bases.get(index)
  if (base === undefined) bases.set(index, base = makeSandbox(index, 0, index + 1, ObjectNamespace))
  return JSON.stringify({ type: "MODIFIED", object: evolve(base, index, variant, resourceVersion, sent) }) + "\n"
}

/** `count` events over the first `names` names, with a bookmark after every 1,000th. */
const buildStream = (shape: DataShape, count: number, names: number, salt: number): EventStream => {
  const base = listResourceVersion(shape.n)
  const parts: Array<Buffer> = []
  const offsets = new Float64Array(count + 1)
  let size = 0
  let batch: Array<string> = []
  let batchBytes = 0
  const add = (line: string) => {
    batch.push(line)
    batchBytes += Buffer.byteLength(line)
  }
  for (let k = 1; k <= count; k++) {
    offsets[k - 1] = size + batchBytes
    add(eventLine(eventTarget(k, names, salt), k, base + k))
    if (k % BookmarkEvery === 0) add(bookmarkLine(base + k))
    if (batchBytes > 4 * 1024 * 1024 || k === count) {
      parts.push(Buffer.from(batch.join("")))
      size += batchBytes
      batch = []
      batchBytes = 0
    }
  }
  offsets[count] = size
  return { bytes: Buffer.concat(parts, size), offsets }
}

interface NamespaceState {
  gateOpen: boolean
  readonly gateWaiters: Array<() => void>
  watches: number
}

export interface ReplayServer {
  /** `http://127.0.0.1:<port>` */
  readonly url: string
  /** Builds the bytes of a stream now, so the first round does not pay for it. */
  readonly prepare: (mode: "tp" | "hot" | "lat") => void
  readonly close: () => Promise<void>
}

export const start = async (shape: DataShape): Promise<ReplayServer> => {
  const listRv = listResourceVersion(shape.n)
  const items: Array<string> = []
  const seen = new Set<string>()
  for (let i = 0; i < shape.n; i++) {
    const name = nameOf(i)
    if (seen.has(name)) throw new Error(`data set: two Sandboxes named ${name}; change the seed`)
    seen.add(name)
    items.push(JSON.stringify(makeSandbox(i, 0, i + 1, ObjectNamespace)))
  }
  const pages = new Map<string, Buffer>()
  const page = (offset: number, limit: number): Buffer => {
    const key = `${offset}:${limit}`
    let body = pages.get(key)
    if (body === undefined) {
      const end = Math.min(shape.n, offset + limit)
      const metadata: Record<string, unknown> = { resourceVersion: String(listRv) }
      if (end < shape.n) {
        metadata.continue = Buffer.from(JSON.stringify({ rv: listRv, start: end })).toString("base64url")
        metadata.remainingItemCount = shape.n - end
      }
      body = Buffer.from(
        `{"apiVersion":"${Group}/${Version}","kind":"SandboxList","metadata":${JSON.stringify(metadata)},"items":[` +
          items.slice(offset, end).join(",") +
          "]}"
      )
      pages.set(key, body)
    }
    return body
  }
  page(0, shape.n)
  for (let offset = 0; offset < shape.n; offset += 500) page(offset, 500)
  /**
   * A streaming list's body up to and with its end bookmark: each object's bytes exactly as a list
   * page has them, one `ADDED` line each. Built up front, as the pages are, so no child times it.
   */
  const initialEvents = (() => {
    const parts: Array<Buffer> = []
    for (let at = 0; at < shape.n; at += 500) {
      parts.push(
        Buffer.from(
          items.slice(at, at + 500).map((item) => `{"type":"ADDED","object":${item}}\n`).join("") +
            (at + 500 >= shape.n ? initialEventsEndLine(listRv) : "")
        )
      )
    }
    if (shape.n === 0) parts.push(Buffer.from(initialEventsEndLine(listRv)))
    return Buffer.concat(parts)
  })()

  const streams = new Map<string, EventStream>()
  const stream = (mode: "tp" | "hot"): EventStream => {
    let s = streams.get(mode)
    if (s === undefined) {
      s = mode === "tp"
        ? buildStream(shape, shape.m, shape.n, Salt.throughput)
        : buildStream(shape, shape.m, Math.min(shape.hot, shape.n), Salt.hot)
      streams.set(mode, s)
    }
    return s
  }
  let latencyLines: Array<{ readonly line: Buffer; readonly stampAt: number }> | undefined
  const latency = () => {
    if (latencyLines === undefined) {
      latencyLines = []
      for (let k = 1; k <= shape.latencyEvents; k++) {
        const line = Buffer.from(
          eventLine(eventTarget(k, Math.min(shape.hot, shape.n), Salt.latency), k, listRv + k, true)
        )
        const marker = `"${SentAnnotation}":"`
        latencyLines.push({ line, stampAt: line.indexOf(marker) + Buffer.byteLength(marker) })
      }
    }
    return latencyLines
  }

  const states = new Map<string, NamespaceState>()
  const state = (ns: string) => {
    let s = states.get(ns)
    if (s === undefined) states.set(ns, s = { gateOpen: false, gateWaiters: [], watches: 0 })
    return s
  }
  const gate = (s: NamespaceState) =>
    s.gateOpen ? Promise.resolve() : new Promise<void>((resolve) => s.gateWaiters.push(resolve))

  const json = (res: Http.ServerResponse, code: number, body: Buffer | string) => {
    res.writeHead(code, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body) })
    res.end(body)
  }
  const status = (res: Http.ServerResponse, code: number, reason: string, message: string) =>
    json(
      res,
      code,
      JSON.stringify({ kind: "Status", apiVersion: "v1", metadata: {}, status: "Failure", message, reason, code })
    )

  /** Resolves once the client took the bytes, or went away. */
  const write = (res: Http.ServerResponse, bytes: Buffer) =>
    new Promise<void>((resolve) => {
      if (res.write(bytes)) return resolve()
      const done = () => {
        res.off("drain", done)
        res.off("close", done)
        resolve()
      }
      res.on("drain", done)
      res.on("close", done)
    })

  const writeRange = async (res: Http.ServerResponse, bytes: Buffer, start: number, end: number) => {
    for (let at = start; at < end && !res.destroyed; at += WriteSlice) {
      await write(res, bytes.subarray(at, Math.min(end, at + WriteSlice)))
    }
  }

  const openWatch = (res: Http.ServerResponse) => {
    res.writeHead(200, { "Content-Type": "application/json", "Cache-Control": "no-cache, private" })
    res.flushHeaders()
  }

  const watch = async (mode: string, s: NamespaceState, query: URLSearchParams, res: Http.ServerResponse) => {
    const problem = watchOptionsProblem(query)
    if (problem !== undefined) {
      return json(
        res,
        problem.code,
        JSON.stringify({ kind: "Status", apiVersion: "v1", metadata: {}, status: "Failure", ...problem })
      )
    }
    const streamingList = query.get("sendInitialEvents") === "true" || query.get("sendInitialEvents") === "1"
    // A streaming list goes on from the list's resourceVersion, as a watch from it would.
    const rv = streamingList ? listRv : Number(query.get("resourceVersion") ?? "") || listRv
    openWatch(res)
    // In one write, as a list page is answered (`res.end` of its bytes): the socket takes it as fast
    // as the client reads, with no turn of this process's event loop per slice, which on a loaded
    // machine delayed a sliced stream (64 KB, `drain` each) by a scheduling wait per slice.
    if (streamingList) await write(res, initialEvents)
    switch (mode) {
      case "tp":
      case "hot": {
        const events = stream(mode)
        const from = Math.max(0, rv - listRv)
        if (from >= shape.m) return // caught up: held open, silent
        await gate(s)
        await writeRange(res, events.bytes, events.offsets[from]!, events.offsets[shape.m]!)
        res.end()
        return
      }
      case "storm": {
        if (s.watches >= shape.storm) return
        await gate(s)
        s.watches++
        const k = s.watches
        res.end(eventLine(eventTarget(k, Math.min(shape.hot, shape.n), Salt.storm), k, listRv + k))
        return
      }
      case "lat": {
        const lines = latency()
        if (rv - listRv >= lines.length) return
        await gate(s)
        const rate = shape.latencyRate
        const began = performance.now()
        let next = Math.max(0, rv - listRv)
        const tick = () => {
          if (res.destroyed) return
          const due = Math.min(lines.length, Math.floor(((performance.now() - began) * rate) / 1000) + 1)
          for (; next < due; next++) {
            const { line, stampAt } = lines[next]!
            const copy = Buffer.from(line)
            copy.write(String(process.hrtime.bigint()).padStart(20, "0"), stampAt, "latin1")
            res.write(copy)
          }
          if (next < lines.length) setTimeout(tick, 1)
        }
        tick()
        return
      }
      default:
        return // sync, heap, scale: held open, silent
    }
  }

  const prefix = `/apis/${Group}/${Version}/namespaces/`
  const trace = process.env.BENCH_TRACE === "1"
  const server = Http.createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://127.0.0.1")
    if (trace) {
      process.stderr.write(
        `[replay] ${
          (performance.timeOrigin + performance.now()).toFixed(1)
        } ${req.method} ${url.pathname}${url.search}\n`
      )
    }
    if (url.pathname.startsWith("/bench/go/")) {
      const s = state(decodeURIComponent(url.pathname.slice("/bench/go/".length)))
      s.gateOpen = true
      for (const resolve of s.gateWaiters.splice(0)) resolve()
      return json(res, 200, "{}")
    }
    const match = url.pathname.startsWith(prefix) ? url.pathname.slice(prefix.length).split("/") : []
    if (match.length !== 2 || match[1] !== Plural) {
      return status(res, 404, "NotFound", `the server could not find ${url.pathname}`)
    }
    const ns = decodeURIComponent(match[0]!)
    const mode = ns.split("-")[0]!
    const watching = url.searchParams.get("watch")
    if (watching === "true" || watching === "1") {
      void watch(mode, state(ns), url.searchParams, res)
      return
    }
    const limit = Number(url.searchParams.get("limit") ?? "0")
    const token = url.searchParams.get("continue")
    let offset = 0
    if (token !== null && token !== "") {
      try {
        offset = (JSON.parse(Buffer.from(token, "base64url").toString()) as { start: number }).start
      } catch {
        return status(res, 400, "BadRequest", "continue key is not valid")
      }
    }
    json(res, 200, page(offset, limit > 0 ? limit : shape.n))
  })
  server.keepAliveTimeout = 60_000
  server.requestTimeout = 0
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    prepare: (mode) => void (mode === "lat" ? latency() : stream(mode)),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      })
  }
}
