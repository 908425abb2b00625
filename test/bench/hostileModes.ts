/**
 * The hostile bench's modes (`hostile.ts`): what each server sends, on each list path it applies
 * to, and what the program must do about it. A mode's paged list answers a list request
 * (`--list-mode paged`); its streaming list answers a watch with `sendInitialEvents=true` as
 * kube-apiserver 1.27+ does (the objects as `ADDED`, then the bookmark annotated
 * `k8s.io/initial-events-end`, then the same connection goes on as the watch), so the hostile
 * payload is what the program receives on either path, never a silence it waits out.
 */
import type * as Http from "node:http"
import { apiVersion } from "../../src/KubeResource.ts"
import { SandboxResource } from "../../src/Sandbox.ts"
import { InitialEventsEndAnnotation } from "../../src/WatchEvent.ts"
import type { Expectation, ListKind } from "./hostileVerdict.ts"

export const Namespace = "ns"
const ApiVersion = apiVersion(SandboxResource)

/**
 * The RSS no hostile server may push the program past (the README's bound): one refused page
 * (128 MiB of chunks and the read's copy) or a list's worth of held objects (100,000) over the
 * program's own ~250–300 MiB (tsx, Effect, the metrics exporter).
 */
export const HostileRssBoundMiB = 512
/** A small honest namespace: the program's own memory and little else. */
const QuietRssBoundMiB = 384

/** What the server saw, counted per request kind. */
export interface Served {
  pagedLists: number
  streamingLists: number
  watches: number
  bytes: number
}

export type Handler = (req: Http.IncomingMessage, res: Http.ServerResponse, served: Served) => void

export interface Mode {
  readonly id: string
  readonly what: string
  /** A list request (a page); none when the mode has no paged form. */
  readonly list?: Handler
  /** A watch with `sendInitialEvents=true`; none when the mode has no streaming form. */
  readonly streamingList?: Handler
  /** A plain watch, after a list. */
  readonly watch: Handler
  /** What the program must do, per list path the mode applies to. */
  readonly expect: Partial<Record<ListKind, Expectation>>
  /** More program flags. */
  readonly args?: ReadonlyArray<string>
  /** The least `--duration` that lets the program do what the row names (on 2 shared cores). */
  readonly minDurationS?: number
  /** Run only when `--only` names it, and why: too long or too large for every run. */
  readonly onlyWhenNamed?: string
}

// -------------------------------------------------------------------------------------------------
// What the servers send
// -------------------------------------------------------------------------------------------------

export const sandboxJson = (name: string, status = `{"phase":"Pending"}`, resourceVersion = "1") =>
  `{"apiVersion":"${ApiVersion}","kind":"Sandbox","metadata":{"name":"${name}","namespace":"${Namespace}",` +
  `"uid":"uid-${name}","resourceVersion":"${resourceVersion}","labels":{"jr2.dev/run":"r1"}},` +
  `"spec":{"resources":{"limits":{"memory":"256Mi"}}},"status":${status}}`

const listJson = (items: ReadonlyArray<string>, resourceVersion = "1", continueToken?: string) =>
  `{"kind":"SandboxList","apiVersion":"${ApiVersion}","metadata":{"resourceVersion":"${resourceVersion}"` +
  `${continueToken === undefined ? "" : `,"continue":"${continueToken}"`}},"items":[${items.join(",")}]}`

const added = (object: string) => `{"type":"ADDED","object":${object}}\n`

const initialEventsEnd = (resourceVersion = "1") =>
  `{"type":"BOOKMARK","object":{"kind":"Sandbox","apiVersion":"${ApiVersion}","metadata":{"resourceVersion":` +
  `"${resourceVersion}","annotations":{"${InitialEventsEndAnnotation}":"true"}}}}\n`

/** The next chunk to write; undefined once there is no more. */
type Next = () => string | Buffer | undefined

/**
 * Writes what `next` gives, minding backpressure, until it gives undefined or the client goes; then
 * ends the response, or holds it open and silent (`hold`), as a watch with nothing more to say.
 */
const pump = (res: Http.ServerResponse, served: Served, next: Next, then: "end" | "hold" = "end") => {
  const go = () => {
    while (!res.destroyed && !res.writableEnded) {
      const chunk = next()
      if (chunk === undefined) {
        if (then === "end") res.end()
        return
      }
      served.bytes += chunk.length
      if (!res.write(chunk)) {
        res.once("drain", go)
        return
      }
    }
  }
  go()
}

/** The chunks of each source in turn. */
const concat = (...sources: ReadonlyArray<Next>): Next => {
  let at = 0
  return () => {
    while (at < sources.length) {
      const chunk = sources[at]!()
      if (chunk !== undefined) return chunk
      at++
    }
    return undefined
  }
}

const once = (chunk: string | Buffer): Next => {
  let done = false
  return () => {
    if (done) return undefined
    done = true
    return chunk
  }
}

/** `count` chunks made by `make(i)` (for ever when `count` is infinite), `per` of them joined a chunk. */
const each = (count: number, make: (i: number) => string, per = 256): Next => {
  let i = 0
  return () => {
    if (i >= count) return undefined
    const parts: Array<string> = []
    for (const end = Math.min(count, i + per); i < end; i++) parts.push(make(i))
    return parts.join("")
  }
}

const json200 = (res: Http.ServerResponse) => {
  res.writeHead(200, { "content-type": "application/json" })
  res.flushHeaders()
}

const sendJson = (res: Http.ServerResponse, served: Served, body: string, status = 200) => {
  served.bytes += Buffer.byteLength(body)
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) })
  res.end(body)
}

/** A watch that says these lines (if any), then nothing, until the client goes. */
const watchSaying = (lines: () => ReadonlyArray<string> = () => []): Handler => (_req, res, served) => {
  json200(res)
  pump(res, served, concat(...lines().map(once)), "hold")
}

/**
 * A streaming list: 200, then what `body` makes (its objects as `ADDED` lines), then, unless the
 * body never ends, the end bookmark and `after`'s lines on the same connection, then silence.
 */
const streamingList =
  (body: () => Next, after: () => ReadonlyArray<string> = () => []): Handler => (_req, res, served) => {
    json200(res)
    pump(res, served, concat(body(), once(initialEventsEnd()), ...after().map(once)), "hold")
  }

/** The same objects as a paged list's one page and as a streaming list's `ADDED` lines. */
const listed = (objects: () => ReadonlyArray<string>, after: () => ReadonlyArray<string> = () => []) => ({
  list: ((_req, res, served) => sendJson(res, served, listJson(objects()))) satisfies Handler,
  streamingList: streamingList(() => concat(...objects().map((o) => once(added(o)))), after),
  watch: watchSaying(after)
})

const tenSandboxes = () => Array.from({ length: 10 }, (_, i) => sandboxJson(`s-${i}`))

const continueOf = (req: Http.IncomingMessage) => new URL(req.url ?? "/", "http://x").searchParams.get("continue")

const Spaces = Buffer.alloc(64 * 1024, " ")
const Xs = Buffer.alloc(64 * 1024, "x")

const Deep = 100_000
const deepValue = () => "[".repeat(Deep) + "]".repeat(Deep)

const GiB = 1024 * 1024 * 1024
const TwoMillion = 2_000_000
const PageOf = 500
const smallSandbox = (i: number) =>
  `{"apiVersion":"${ApiVersion}","kind":"Sandbox","metadata":{"name":"m-${i}","namespace":"${Namespace}",` +
  `"resourceVersion":"1","labels":{"jr2.dev/run":"r1"}}}`

/** A condition message of 256 KB: an operator that writes a whole log into its status. */
const BigMessage = "x".repeat(256 * 1024)
const bigSandbox = (i: number) =>
  sandboxJson(
    `big-${i}`,
    `{"phase":"Pending","conditions":[{"type":"Ready","status":"False","reason":"Big","message":"${BigMessage}"}]}`
  )

/** Lines of `"managedFields":[` repeated to 8 MiB and never closed: under the 16 MiB line cap, not JSON. */
const managedFieldsLine = () => {
  const head =
    `{"type":"ADDED","object":{"apiVersion":"${ApiVersion}","kind":"Sandbox","metadata":{"name":"mf","namespace":"${Namespace}",`
  const key = `"managedFields":[`
  return head + key.repeat(Math.floor((8 * 1024 * 1024 - head.length) / key.length)) + "\n"
}

// -------------------------------------------------------------------------------------------------
// The modes
// -------------------------------------------------------------------------------------------------

const refused = (reason: string, rssCeilingMiB = HostileRssBoundMiB): Expectation => ({
  outcome: { _tag: "Refused", reason },
  rssCeilingMiB
})

const synced = (
  cached: number,
  more: { readonly restarts?: ReadonlyArray<string>; readonly decodeFailures?: "some" } = {},
  rssCeilingMiB = QuietRssBoundMiB
): Expectation => ({ outcome: { _tag: "Synced", cached, ...more }, rssCeilingMiB })

export const modes: ReadonlyArray<Mode> = [
  {
    id: "endless-page",
    what: "a list that never ends: a page of the JSON opening then spaces for ever; streamed, an ADDED line " +
      "that never ends (spaces, no newline)",
    list: (_req, res, served) => {
      json200(res)
      pump(
        res,
        served,
        concat(
          once(`{"kind":"SandboxList","apiVersion":"${ApiVersion}","metadata":{"resourceVersion":"1"},"items":[`),
          () => Spaces
        )
      )
    },
    streamingList: (_req, res, served) => {
      json200(res)
      pump(res, served, concat(once(`{"type":"ADDED","object":{"apiVersion":"${ApiVersion}",`), () => Spaces))
    },
    watch: watchSaying(),
    // The page budget (128 MiB) refuses the page; the line cap (16 MiB) the streamed line.
    expect: { paged: refused("too-large"), stream: refused("line-too-long") }
  },
  {
    id: "endless-500",
    what: "a 500 whose body never ends (a Status opening, then `x` for ever), to the list and to the streaming list",
    ...(() => {
      const endless500: Handler = (_req, res, served) => {
        res.writeHead(500, { "content-type": "application/json" })
        pump(
          res,
          served,
          concat(
            once(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","code":500,"message":"`),
            () => Xs
          )
        )
      }
      return { list: endless500, streamingList: endless500 }
    })(),
    watch: watchSaying(),
    // The error body budget (64 KiB) reads what it may; the 500 is what the restart is counted as.
    expect: { paged: refused("500"), stream: refused("500") }
  },
  {
    id: "endless-continue",
    what: "a paged list whose `continue` never ends (a fresh token on every page, one new item a page)",
    list: (req, res, served) => {
      const n = served.pagedLists
      sendJson(
        res,
        served,
        listJson([sandboxJson(`c-${n}`)], "1", `token-${n + 1}-${continueOf(req)?.length ?? 0}`)
      )
    },
    watch: watchSaying(),
    // Past 10,000 pages the list is abandoned (KubeBodyTooLargeError). They take ~3 s on idle
    // cores and up to ~25 s on 2 busy ones.
    minDurationS: 45,
    expect: { paged: refused("too-large") }
  },
  {
    id: "endless-stream-repeat",
    what: "a streaming list that sends the same Sandbox as ADDED for ever, never its end bookmark " +
      "(issue 42: ~15 MB/s before)",
    streamingList: (_req, res, served) => {
      json200(res)
      const line = Buffer.from(added(sandboxJson("same")).repeat(256))
      pump(res, served, () => line)
    },
    watch: watchSaying(),
    // Held once by name, so the draft never grows: the list is still being read at the end, unless
    // a byte budget on lists refuses it first.
    expect: {
      stream: { outcome: { _tag: "Unfinished", allowedRestarts: ["too-large"] }, rssCeilingMiB: HostileRssBoundMiB }
    }
  },
  {
    id: "endless-stream-new",
    what: "a streaming list that sends a new Sandbox as ADDED for ever, never its end bookmark",
    streamingList: (_req, res, served) => {
      json200(res)
      pump(res, served, each(Infinity, (i) => added(sandboxJson(`n-${i}`))))
    },
    watch: watchSaying(),
    // Past maxListItems (100,000) objects the list is abandoned (KubeBodyTooLargeError). Reading
    // them took 10–15 s on 2 busy cores (load 16).
    minDurationS: 30,
    expect: { stream: refused("too-large") }
  },
  {
    id: "endless-stream-big",
    what: "a streaming list that sends a new Sandbox as ADDED for ever, each with a 256 KB condition message, " +
      "never its end bookmark",
    streamingList: (_req, res, served) => {
      json200(res)
      pump(res, served, each(Infinity, (i) => added(bigSandbox(i)), 4))
    },
    watch: watchSaying(),
    // 100,000 such objects are 25 GB: only a byte budget on lists refuses it in time.
    expect: { stream: refused("too-large") }
  },
  {
    id: "gigabyte-page",
    what: "a 1 GiB list of distinct Sandboxes: one page, or one streaming list (then its end bookmark)",
    list: (_req, res, served) => {
      json200(res)
      const opening = `{"kind":"SandboxList","apiVersion":"${ApiVersion}","metadata":{"resourceVersion":"1"},"items":[`
      let bytes = opening.length
      let i = 0
      pump(
        res,
        served,
        concat(once(opening), () => {
          if (bytes >= GiB) return undefined
          const parts: Array<string> = []
          for (let k = 0; k < 256; k++) parts.push(sandboxJson(`g-${i++}`) + ",")
          const chunk = parts.join("")
          bytes += chunk.length
          return chunk
        }, once(sandboxJson("last") + "]}"))
      )
    },
    streamingList: streamingList(() => {
      let bytes = 0
      let i = 0
      return () => {
        if (bytes >= GiB) return undefined
        const parts: Array<string> = []
        for (let k = 0; k < 256; k++) parts.push(added(sandboxJson(`g-${i++}`)))
        const chunk = parts.join("")
        bytes += chunk.length
        return chunk
      }
    }),
    watch: watchSaying(),
    // The page budget (128 MiB) refuses the page; the streamed list is refused past maxListItems
    // (about 3.5 million objects are sent; 100,000 are held at most) or a byte budget: as for
    // endless-stream-new, 10–15 s on 2 busy cores.
    minDurationS: 30,
    expect: { paged: refused("too-large"), stream: refused("too-large") }
  },
  {
    id: "deep-list-item",
    what: "a list item nested 100,000 deep (`status.phase`) beside a normal item, then a quiet watch",
    ...listed(() => [sandboxJson("deep", `{"phase":${deepValue()}}`), sandboxJson("normal")]),
    // The deep one does not fit the schema (counted, not cached); the normal one is cached.
    expect: { paged: synced(1, { decodeFailures: "some" }), stream: synced(1, { decodeFailures: "some" }) }
  },
  {
    id: "deep-watch-event",
    what: "a normal list, then a watch event nested 100,000 deep (`status.phase`), then quiet",
    ...listed(() => [sandboxJson("normal")], () => [
      added(sandboxJson("deep", `{"phase":${deepValue()}}`, "2"))
    ]),
    expect: { paged: synced(1, { decodeFailures: "some" }), stream: synced(1, { decodeFailures: "some" }) }
  },
  {
    id: "managed-fields-line",
    what: "a normal list, then a watch line of `\"managedFields\":[` repeated to 8 MiB, never closed (then a newline)",
    ...listed(() => [sandboxJson("normal")], () => [managedFieldsLine()]),
    // Not JSON: the watch resumes from the list's resourceVersion after the back-off, and is sent it again.
    expect: {
      paged: synced(1, { restarts: ["malformed"] }),
      stream: synced(1, { restarts: ["malformed"] })
    }
  },
  {
    id: "two-million",
    what: "a list of 2,000,000 small Sandboxes, in pages of 500 or streamed, then a quiet watch " +
      "(honest but huge: the cache's memory; --max-list-items 2000000)",
    list: (req, res, served) => {
      const page = Number(continueOf(req)?.replace("page-", "") ?? "0")
      const from = page * PageOf
      const items = Array.from({ length: Math.min(PageOf, TwoMillion - from) }, (_, i) => smallSandbox(from + i))
      const last = from + PageOf >= TwoMillion
      sendJson(res, served, listJson(items, "1", last ? undefined : `page-${page + 1}`))
    },
    streamingList: streamingList(() => each(TwoMillion, (i) => added(smallSandbox(i)), 500)),
    watch: watchSaying(),
    args: ["--max-list-items", String(TwoMillion)],
    // Listing 2,000,000 took about 20 s on 2 idle cores (2026-12-06); on 2 busy ones (load 16),
    // 127 s paged and more than 120 s streamed.
    minDurationS: 180,
    onlyWhenNamed: "2 rows of at least 180 s, up to 3 GiB of RSS",
    expect: { paged: synced(TwoMillion, {}, 3072), stream: synced(TwoMillion, {}, 3072) }
  },
  {
    id: "baseline",
    what: "a normal list of 10 Sandboxes and a quiet watch",
    ...listed(tenSandboxes),
    expect: { paged: synced(10), stream: synced(10) }
  }
]
