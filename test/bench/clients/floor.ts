/**
 * The floor: the least any JSON client of a watch must do. Fetch the bytes (node:http, one
 * keep-alive agent; node:https with the CA and a bearer token against the real kube-apiserver),
 * `JSON.parse` each list or each event line, `Map.set` the object by name, keep the
 * resourceVersion, resume a watch the server closed. No schema, no retries, no subscribers beyond
 * one direct callback.
 *
 * With `listMode: "stream"` it lists as a streaming list: one watch with `sendInitialEvents=true`,
 * each `ADDED` line parsed and set as it comes, synced at the bookmark annotated
 * `k8s.io/initial-events-end`; the same connection goes on as the watch.
 */
import * as Http from "node:http"
import * as Https from "node:https"
import {
  cpuMs,
  gcWatch,
  go,
  hrtimeNs,
  latencyFigures,
  measureEvents,
  measureStorm,
  now,
  rssMB,
  scaleFigures,
  sentNs,
  settledHeap,
  snapshotIfAsked,
  syncFigures,
  window
} from "../common.ts"
import { finalEvent, Group, Plural, Salt, SentAnnotation, Version } from "../data.ts"
import type { ApiServerSecrets, ChildParams, ChildResult } from "../protocol.ts"
import { apiServerSecrets } from "../protocol.ts"

interface KubeObject {
  readonly metadata: {
    readonly name: string
    readonly resourceVersion: string
    readonly annotations?: Record<string, string>
    managedFields?: unknown
  }
}

const Newline = 0x0a
const InitialEventsEnd = "k8s.io/initial-events-end"

class Floor {
  readonly cache = new Map<string, KubeObject>()
  resourceVersion = ""
  /** Drop `managedFields` before caching (the slim floor of the heap table). */
  slim = false
  /** Called after each object event is in the cache. */
  onObject: ((object: KubeObject) => void) | undefined = undefined
  /** Called at a bookmark annotated `k8s.io/initial-events-end`: a streaming list's end. */
  onInitialEventsEnd: (() => void) | undefined = undefined
  private readonly agent: Http.Agent
  private readonly get: typeof Http.get
  private readonly headers: Http.OutgoingHttpHeaders
  private readonly path: string
  private stopped = false

  private readonly server: string

  constructor(server: string, namespace: string, secrets?: ApiServerSecrets) {
    this.server = server
    this.path = `/apis/${Group}/${Version}/namespaces/${encodeURIComponent(namespace)}/${Plural}`
    if (secrets === undefined) {
      this.agent = new Http.Agent({ keepAlive: true })
      this.get = Http.get
      this.headers = {}
    } else {
      this.agent = new Https.Agent({ keepAlive: true, ca: secrets.caPem })
      this.get = Https.get
      this.headers = { authorization: `Bearer ${secrets.token}` }
    }
  }

  private body(url: string): Promise<string> {
    return new Promise((resolve, reject) => {
      this.get(url, { agent: this.agent, headers: this.headers }, (res) => {
        const chunks: Array<Buffer> = []
        res.on("data", (chunk: Buffer) => chunks.push(chunk))
        res.on(
          "end",
          () =>
            res.statusCode === 200
              ? resolve(Buffer.concat(chunks).toString())
              : reject(new Error(`list: HTTP ${res.statusCode}`))
        )
        res.on("error", reject)
      }).on("error", reject)
    })
  }

  /** One list, paged when `pageSize` > 0. */
  async list(pageSize: number): Promise<void> {
    let token = ""
    let first = true
    do {
      const query = new URLSearchParams()
      if (pageSize > 0) query.set("limit", String(pageSize))
      if (token !== "") query.set("continue", token)
      const list = JSON.parse(await this.body(`${this.server}${this.path}?${query}`)) as {
        metadata: { resourceVersion: string; continue?: string }
        items: Array<KubeObject>
      }
      for (const item of list.items) {
        if (this.slim) delete item.metadata.managedFields
        this.cache.set(item.metadata.name, item)
      }
      if (first) this.resourceVersion = list.metadata.resourceVersion
      first = false
      token = list.metadata.continue ?? ""
    } while (token !== "")
  }

  private line(text: string): void {
    const event = JSON.parse(text) as { type: string; object: KubeObject }
    const object = event.object
    switch (event.type) {
      case "BOOKMARK":
        this.resourceVersion = object.metadata.resourceVersion
        if (object.metadata.annotations?.[InitialEventsEnd] === "true") this.onInitialEventsEnd?.()
        return
      case "DELETED":
        this.cache.delete(object.metadata.name)
        break
      case "ERROR":
        throw new Error(`watch: ERROR event ${text.slice(0, 200)}`)
      default:
        this.cache.set(object.metadata.name, object)
    }
    this.resourceVersion = object.metadata.resourceVersion
    this.onObject?.(object)
  }

  /** One watch from the last resourceVersion; resolves when the server ends it. */
  private watchOnce(): Promise<void> {
    return this.watchRequest(
      new URLSearchParams({
        watch: "true",
        resourceVersion: this.resourceVersion,
        allowWatchBookmarks: "true"
      })
    )
  }

  /** The watch that ended a streaming list, while it goes on; then none. */
  private streamed: Promise<void> | undefined

  /**
   * A streaming list: resolves at its end bookmark, every object cached; the watch goes on on the
   * same connection (`watch` waits for it to end before it resumes).
   */
  streamList(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.onInitialEventsEnd = () => {
        this.onInitialEventsEnd = undefined
        resolve()
      }
      this.streamed = this.watchRequest(
        new URLSearchParams({
          watch: "1",
          sendInitialEvents: "true",
          resourceVersionMatch: "NotOlderThan",
          allowWatchBookmarks: "true"
        })
      )
      this.streamed.then(() => reject(new Error("the streaming list ended before its end bookmark")), reject)
    })
  }

  /** One watch request; resolves when the server ends it. */
  private watchRequest(query: URLSearchParams): Promise<void> {
    return new Promise((resolve, reject) => {
      this.get(`${this.server}${this.path}?${query}`, { agent: this.agent, headers: this.headers }, (res) => {
        if (res.statusCode !== 200) return reject(new Error(`watch: HTTP ${res.statusCode}`))
        let rest: Buffer | undefined
        res.on("data", (chunk: Buffer) => {
          let start = 0
          if (rest !== undefined) {
            const nl = chunk.indexOf(Newline)
            if (nl < 0) {
              rest = Buffer.concat([rest, chunk])
              return
            }
            this.line(Buffer.concat([rest, chunk.subarray(0, nl)]).toString())
            rest = undefined
            start = nl + 1
          }
          for (;;) {
            const nl = chunk.indexOf(Newline, start)
            if (nl < 0) break
            if (nl > start) this.line(chunk.toString("utf8", start, nl))
            start = nl + 1
          }
          if (start < chunk.length) rest = chunk.subarray(start)
        })
        res.on("end", () => resolve())
        res.on("error", reject)
      }).on("error", reject)
    })
  }

  /** Watches, resuming each time the server ends a watch, until stopped. */
  async watch(): Promise<void> {
    if (this.streamed !== undefined) await this.streamed
    this.streamed = undefined
    while (!this.stopped) await this.watchOnce()
  }
}

/** Resolves when the object event with this name and resourceVersion is in the cache. */
const reached = (
  floor: Floor,
  target: { name: string; resourceVersion: string },
  also?: (object: KubeObject) => void
) =>
  new Promise<void>((resolve) => {
    floor.onObject = (object) => {
      also?.(object)
      if (object.metadata.name === target.name && object.metadata.resourceVersion === target.resourceVersion) resolve()
    }
  })

export const run = async (p: ChildParams): Promise<ChildResult> => {
  const { shape } = p
  const secrets = apiServerSecrets(p)
  const heapBefore = p.scenario === "heap" || p.scenario === "scale" ? await settledHeap() : 0
  const timedWindow = p.scenario === "sync" || p.scenario === "scale"
  if (timedWindow) await window.start()
  const rssStart = rssMB()
  const started = now()
  const c0 = cpuMs()
  const floor = new Floor(p.url, p.namespace, secrets)
  floor.slim = p.slim === true
  await (p.listMode === "stream" ? floor.streamList() : floor.list(p.pageSize))
  const synced = syncFigures(now() - started, cpuMs() - c0, rssStart)
  if (timedWindow) await window.stop()
  if (floor.cache.size !== shape.n) throw new Error(`listed ${floor.cache.size} Sandboxes, expected ${shape.n}`)
  const watching = floor.watch()
  watching.catch((error: unknown) => {
    console.error(String(error))
    process.exit(2)
  })
  switch (p.scenario) {
    case "sync":
      return { figures: { ...synced } }
    case "scale":
      return { figures: await scaleFigures(shape.n, synced, heapBefore) }
    case "heap": {
      const heapAfter = await settledHeap()
      await snapshotIfAsked()
      return { figures: { perObject: (heapAfter - heapBefore) / shape.n, heapMB: (heapAfter - heapBefore) / 1048576 } }
    }
    case "tp":
    case "fanout": {
      const hot = p.scenario === "fanout"
      const target = finalEvent(
        shape.m,
        hot ? Math.min(shape.hot, shape.n) : shape.n,
        hot ? Salt.hot : Salt.throughput,
        shape.n
      )
      return measureEvents(p, shape.m, target, (target, also) => reached(floor, target, also))
    }
    case "storm":
      return measureStorm(
        p,
        shape,
        finalEvent(shape.storm, Math.min(shape.hot, shape.n), Salt.storm, shape.n),
        (target, also) => reached(floor, target, also)
      )
    case "lat": {
      const samples: Array<number> = []
      const target = finalEvent(shape.latencyEvents, Math.min(shape.hot, shape.n), Salt.latency, shape.n)
      const done = reached(floor, target, (object) => {
        const sent = sentNs(object.metadata.annotations, SentAnnotation)
        if (sent !== undefined) samples.push(Number(hrtimeNs() - sent))
      })
      await window.start()
      const gcs = await gcWatch()
      await go(p.url, p.namespace)
      await done
      await window.stop()
      return { figures: { ...latencyFigures(samples), ...(await gcs.stop()) } }
    }
  }
}
