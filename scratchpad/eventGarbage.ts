/**
 * Where the garbage of one watch event comes from, stage by stage: issue 31's latency set-up (10k
 * Sandboxes listed, then 10,000 MODIFIED events at 1,000 a second over the 100 hot names, one
 * `changes(name)` subscriber per name run by `Stream.runForEach`), from the benchmark's replay
 * server (`test/bench/server.ts`, in a child process so its own garbage is not counted).
 *
 *   npx tsx scratchpad/eventGarbage.ts profile   # bytes per event by stage, top allocating functions
 *   npx tsx scratchpad/eventGarbage.ts gc        # collections, GC time and latency, no profiler
 *   node --max-semi-space-size=1024 --min-semi-space-size=1024 --import tsx scratchpad/eventGarbage.ts gc
 *                                                # the same, but no collection in the window: the
 *                                                # heap's growth is every byte allocated (exact)
 *
 * `SUBS=1` keeps only the subscriber of the last event's name (as `BENCH_LAT_ONLY_TARGET=1`): the
 * watch's own cost. Every event wakes one subscriber with `SUBS=100` and almost none with `SUBS=1`, so
 * the difference of the two totals, times 100/99, is what one subscriber's wake costs, Effect runtime
 * included. `EVENTS`, `RATE` and `N` change the set-up; `TOP` the number of functions listed;
 * `DUMP=<file.heapprofile>` keeps the profile (DevTools, or `npx tsx test/bench/profile.ts <file>`).
 * `WAITS=1` makes each subscriber a `waitFor` whose step never answers (the bench's `/waits` rows);
 * `SAMPLES=<file.json>` writes every latency in the order sent; `GC_AT_SYNC=1` (with
 * `node --expose-gc`) collects the whole heap once the list is in, before the first event.
 * `READER=forEachChunk|toPull|viaPull` reads `changes` another way than `Stream.runForEach`.
 * `MARK=1` prints when the window opens (to line it up with `--trace-gc`); `SNAPSHOT=<file>` writes a
 * heap snapshot at event `AT` (default: half the events).
 *
 *   PROMOTED=1 npx tsx scratchpad/eventGarbage.ts profile
 *       # only what no young collection took back (promoted, allocated old by V8's pretenuring, or
 *       # still young at the end), by tenth of the window and by innermost frames
 *   AT=1000 node --expose-gc --import tsx scratchpad/eventGarbage.ts survivors
 *       # at event AT: what two young collections kept that a full one then took (a dead old
 *       # object's hold on young ones); `DEPTH` frames per stack, one sample per `INTERVAL` bytes
 *
 * `profile` runs V8's sampling heap profiler (one sample per 512 bytes on average, objects collected
 * since counted too) over the window from the gate's opening to the last event told. A sample goes
 * to the stage of the innermost frame on its stack that belongs to one: `src/` files by file (and
 * `KubeClient.ts` by the function's lines), effect's Stream/Channel, Schema,
 * HashMap and SubscriptionRef/PubSub modules, undici and node's sockets. The fiber runtime (`core`,
 * `fiberRuntime`, ...) is transparent: what it allocates goes to the frame that called into it, or,
 * when it runs a fiber's loop on its own (no stage on the stack), to "Effect runtime, unattributed";
 * `SUBS=1` against `SUBS=100` says how much of that is the subscribers'.
 * Lines are the `.ts` source's (through tsx's source maps); effect's are its `dist/esm` files'.
 */
import { Chunk, Effect, Layer, Option, Stream } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import { Session as SyncSession } from "node:inspector"
import { Session } from "node:inspector/promises"
import { SourceMap } from "node:module"
import * as path from "node:path"
import { constants, PerformanceObserver } from "node:perf_hooks"
import { createInterface } from "node:readline"
import * as v8 from "node:v8"
import * as KubeClient from "../src/KubeClient.ts"
import * as KubeConfig from "../src/KubeConfig.ts"
import type { Sandbox } from "../src/Sandbox.ts"
import * as SandboxWatch from "../src/SandboxWatch.ts"
import { type DataShape, finalEvent, nameOf, Salt, SentAnnotation } from "../test/bench/data.ts"
import { frameLabel } from "./heapSampling.ts"

const events = Number(process.env.EVENTS ?? 10_000)
const shape: DataShape = {
  n: Number(process.env.N ?? 10_000),
  m: 0,
  hot: 100,
  storm: 0,
  latencyEvents: events,
  latencyRate: Number(process.env.RATE ?? 1_000)
}
const namespace = "lat-probe"
const root = path.resolve(new URL(".", import.meta.url).pathname, "..")

// ---------------------------------------------------------------------------------------------
// Stages
// ---------------------------------------------------------------------------------------------

const Stage = {
  read: "read: socket → bytes (undici, undiciExchange, KubeClient's read)",
  lines: "line split: bytes → text (ndjsonLines, managedFields cut)",
  parse: "parse: JSON.parse + the event (KubeClient.watchLines)",
  decode: "decode (plainDecoder, Schema)",
  loop: "watch loop (watchRounds: applyEveryChunk, applyChunk; watchMetrics: countEvents)",
  publish: "SubscriptionRef.modify + tell + wake (cacheSteps.applyToCache)",
  cache: "cache update (sandboxCache, overlayMap, HashMap)",
  hub: "hub + mailbox (subscriberHub, latestMailbox: store, wake, drain)",
  stream: "subscriber stream (subscriptions.subscription, Stream/Channel internals)",
  harness: "harness: the subscriber's own callback (latency sample)",
  runtime: "Effect runtime, unattributed (fiber loops, scheduler)",
  other: "other"
} as const
type Stage = (typeof Stage)[keyof typeof Stage]

interface Frame {
  readonly functionName: string
  readonly url: string
  readonly lineNumber: number
  readonly columnNumber: number
  readonly scriptId: string
}
interface ProfileNode {
  readonly callFrame: Frame
  readonly selfSize: number
  readonly id: number
  readonly children: ReadonlyArray<ProfileNode>
}

/** The original (1-based) line of a frame in a tsx-transformed file, and the text of that line. */
type Locate = (frame: Frame) => { readonly file: string; readonly line: number; readonly text: string }

const inRange = (line: number, from: number, to: number) => line >= from && line <= to

/** The stage a frame belongs to, or undefined when it is transparent (runtime, builtins). */
const stageOfFrame = (frame: Frame, locate: Locate): Stage | undefined => {
  const url = frame.url
  if (url === "") return undefined
  if (url.includes("/scratchpad/eventGarbage.ts")) return Stage.harness
  if (url.includes("/src/")) {
    const { file, line } = locate(frame)
    if (file.endsWith("src/internal/undiciExchange.ts") || file.endsWith("src/internal/deadlineTimer.ts")) {
      return Stage.read
    }
    if (file.endsWith("src/internal/ndjsonLines.ts") || file.endsWith("src/internal/managedFields.ts")) {
      return Stage.lines
    }
    if (file.endsWith("src/internal/plainDecoder.ts")) return Stage.decode
    if (file.endsWith("src/internal/sandboxCache.ts") || file.endsWith("src/internal/overlayMap.ts")) {
      return Stage.cache
    }
    if (file.endsWith("src/internal/subscriberHub.ts") || file.endsWith("src/internal/latestMailbox.ts")) {
      return Stage.hub
    }
    if (file.endsWith("src/KubeClient.ts")) return inRange(line, 300, 440) ? Stage.parse : Stage.read
    if (file.endsWith("src/internal/cacheSteps.ts")) return Stage.publish
    if (file.endsWith("src/internal/subscriptions.ts")) return Stage.stream
    if (file.endsWith("src/internal/watchRounds.ts") || file.endsWith("src/internal/watchMetrics.ts")) {
      return Stage.loop
    }
    return Stage.other
  }
  if (url.includes("/undici/") || /^node:(net|stream|internal\/stream|internal\/streams)/.test(url)) {
    return Stage.read
  }
  if (url.includes("/effect/dist/")) {
    const file = url.slice(url.indexOf("/effect/dist/") + "/effect/dist/".length)
    if (/internal\/(channel|stream|sink|core-stream|take)|\/(Stream|Channel|Sink)\.js$/.test(file)) {
      return Stage.stream
    }
    if (/\/(Schema|ParseResult|SchemaAST)\.js$|internal\/schema\//.test(file)) return Stage.decode
    if (/internal\/(hashMap|hashSet)|\/(HashMap|HashSet)\.js$/.test(file)) return Stage.cache
    if (/internal\/(subscriptionRef|pubsub|ref)\.js$|\/(SubscriptionRef|PubSub|Ref)\.js$/.test(file)) {
      return Stage.publish
    }
    return undefined
  }
  return undefined
}

// ---------------------------------------------------------------------------------------------
// The probe
// ---------------------------------------------------------------------------------------------

const percentile = (sorted: ReadonlyArray<number>, p: number) =>
  sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? Number.NaN

const serve = async () => {
  const { start } = await import("../test/bench/server.ts")
  const server = await start(shape)
  server.prepare("lat")
  console.log(server.url)
}

const measure = async (mode: "profile" | "gc" | "survivors") => {
  const child = spawn(process.execPath, ["--import", "tsx", new URL(import.meta.url).pathname, "serve"], {
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, NODE_OPTIONS: "" }
  })
  const url = await new Promise<string>((resolve) => createInterface({ input: child.stdout }).once("line", resolve))
  const subs = Math.min(100, Number(process.env.SUBS ?? 100))
  const waits = process.env.WAITS === "1"
  // `READER=forEachChunk|toPull|viaPull`: the `changes` subscribers read another way than `runForEach`.
  const reader = process.env.READER ?? "forEach"
  const target = finalEvent(events, shape.hot, Salt.latency, shape.n)
  const names = Array.from({ length: shape.hot }, (_, i) => nameOf(i))
  const subscribed = subs >= shape.hot ? names : [target.name, ...names.filter((n) => n !== target.name)].slice(0, subs)

  const samples: Array<number> = []
  const survivors = mode === "survivors" ? survivorsAtMidpoint() : () => undefined
  let firstValues = 0
  let toldFinal: () => void = () => undefined
  const finalTold = new Promise<void>((resolve) => (toldFinal = resolve))
  const onValue = (value: Option.Option<Sandbox>) => {
    if (Option.isNone(value)) return
    const metadata = value.value.metadata
    // Listed states carry no stamp; every event does.
    const stamp = metadata.annotations?.[SentAnnotation]
    if (stamp !== undefined) {
      samples.push(Number(process.hrtime.bigint() - BigInt(stamp)))
      if (mode === "survivors" && samples.length === Number(process.env.AT ?? events / 2)) survivors()
      if (process.env.SNAPSHOT !== undefined && samples.length === Number(process.env.AT ?? events / 2)) {
        v8.writeHeapSnapshot(process.env.SNAPSHOT)
      }
    }
    if (metadata.name === target.name && metadata.resourceVersion === target.resourceVersion) toldFinal()
  }

  // Paged: the replay server answers no streaming list (the default `auto` would wait out its term).
  const layer = SandboxWatch.layer({ namespace, pageSize: 500, listMode: "paged" }).pipe(
    Layer.provide(KubeClient.layer),
    Layer.provide(KubeConfig.layerStatic({ server: url, namespace }))
  )
  const session = new Session()
  session.connect()

  const figures = await Effect.runPromise(
    Effect.gen(function*() {
      const watch = yield* SandboxWatch.SandboxWatch
      for (const name of subscribed) {
        let first = true
        const told = (value: Option.Option<Sandbox>) => {
          if (first) {
            first = false
            firstValues++
          }
          onValue(value)
        }
        yield* Effect.forkScoped(
          waits
            ? watch.waitFor(name, (value) => Effect.sync(() => (told(value), Option.none<never>())))
            : reader === "forEachChunk"
            ? Stream.runForEachChunk(watch.changes(name), (values) => Effect.sync(() => Chunk.forEach(values, told)))
            : reader === "toPull"
            ? Effect.scoped(
              Effect.flatMap(
                Stream.toPull(watch.changes(name)),
                (pull) => Effect.forever(Effect.map(pull, (values) => Chunk.forEach(values, told)))
              )
            )
            : reader === "viaPull"
            ? Stream.runForEach(
              Stream.unwrapScoped(Effect.map(Stream.toPull(watch.changes(name)), Stream.repeatEffectChunkOption)),
              (value) => Effect.sync(() => told(value))
            )
            : Stream.runForEach(watch.changes(name), (value) => Effect.sync(() => told(value)))
        )
      }
      yield* watch.synced
      while (firstValues < subscribed.length) yield* Effect.sleep("1 millis")
      return yield* Effect.promise(() => measuredWindow(mode === "survivors" ? "gc" : mode, url, session, finalTold))
    }).pipe(Effect.scoped, Effect.provide(layer))
  )
  child.kill()
  session.disconnect()

  const perTenK = 10_000 / events
  // In the order sent, in ms: `npx tsx test/bench/latencyParts.ts <file> --parts 10` reads them part by part.
  if (process.env.SAMPLES !== undefined) {
    fs.writeFileSync(
      process.env.SAMPLES,
      JSON.stringify(samples.map((ns) => ns / 1e6))
    )
  }
  const sorted = [...samples].sort((a, b) => a - b)
  const second = samples.slice(Math.floor(samples.length / 2)).sort((a, b) => a - b)
  const ms = (ns: number) => (ns / 1e6).toFixed(2)
  console.log(
    `${mode}, ${subscribed.length} ${
      waits ? "waitFor" : "changes"
    } subscriber(s), ${events} events at ${shape.latencyRate}/s over ${shape.hot} names, ` +
      `${shape.n} listed; load ${figures.load}`
  )
  console.log(
    `  latency: p50 ${ms(percentile(sorted, 50))} ms, p99 ${ms(percentile(sorted, 99))} ms, ` +
      `p99 second half ${ms(percentile(second, 99))} ms (${samples.length} samples)`
  )
  console.log(
    `  per 10k events: ${(figures.gcs * perTenK).toFixed(1)} collections (${figures.major} major), ` +
      `${(figures.gcMs * perTenK).toFixed(1)} ms GC, longest ${figures.longest.toFixed(2)} ms`
  )
  if (figures.gcs === 0) {
    console.log(`  no collection in the window: heap growth ${(figures.heapGrowth / events).toFixed(0)} B/event`)
  }
  if (figures.profile !== undefined) report(figures.profile, figures.locate)
  if (figures.profile !== undefined && figures.samples !== undefined && process.env.PROMOTED === "1") {
    promotedOverTime(figures.profile, figures.samples, figures.locate)
  }
}

/**
 * `survivors`: what young collections keep only because a dead old object points at it (nepotism).
 * At event `AT` (mid-window by default), two young collections, then the sampler's live samples (objects collected are not
 * kept); then a full collection, and the samples again. What the first set holds and the second
 * does not was garbage that the young collections could not take back. Returns the hook to call at
 * the midpoint; sampling starts now (the list's samples are in both sets, so they cancel).
 */
const survivorsAtMidpoint = () => {
  const collect = (globalThis as { gc?: (options?: { type: "minor" | "major" }) => void }).gc
  if (collect === undefined) throw new Error("survivors needs node --expose-gc")
  const sync = new SyncSession()
  sync.connect()
  const post = (method: string, params?: object): unknown => {
    let result: unknown
    sync.post(method, params ?? {}, (error, answer) => {
      if (error !== null) throw error
      result = answer
    })
    return result
  }
  post("HeapProfiler.enable")
  post("HeapProfiler.startSampling", { samplingInterval: Number(process.env.INTERVAL ?? 256) })
  const byStack = (): Map<string, number> => {
    const { profile } = post("HeapProfiler.getSamplingProfile") as { profile: { head: ProfileNode } }
    const bytes = new Map<string, number>()
    const depth = Number(process.env.DEPTH ?? 4)
    const walk = (node: ProfileNode, stack: Array<string>) => {
      stack.push(frameLabel(node.callFrame))
      if (node.selfSize > 0) {
        const key = stack.slice(-depth).reverse().join("\n        < ")
        bytes.set(key, (bytes.get(key) ?? 0) + node.selfSize)
      }
      for (const child of node.children) walk(child, stack)
      stack.pop()
    }
    walk(profile.head, [])
    return bytes
  }
  return () => {
    collect({ type: "minor" })
    collect({ type: "minor" })
    const heapYoung = v8.getHeapStatistics().used_heap_size
    const kept = byStack()
    collect({ type: "major" })
    const heapFull = v8.getHeapStatistics().used_heap_size
    const live = byStack()
    post("HeapProfiler.stopSampling")
    const dead = [...kept].map(([key, bytes]) => [key, bytes - (live.get(key) ?? 0)] as const)
      .filter(([, bytes]) => bytes > 0).sort((a, b) => b[1] - a[1])
    const total = dead.reduce((sum, [, bytes]) => sum + bytes, 0)
    console.log(
      `survivors at event ${process.env.AT ?? events / 2}: heap after two young collections ${
        (heapYoung / 1e6).toFixed(1)
      } MB, ` +
        `after a full one ${(heapFull / 1e6).toFixed(1)} MB; sampled garbage kept by young collections ${
          (total / 1e3).toFixed(0)
        } KB`
    )
    for (const [key, bytes] of dead.slice(0, Number(process.env.TOP ?? 15))) {
      console.log(`  ${(bytes / 1e3).toFixed(1).padStart(8)} KB  ${key}`)
    }
  }
}

interface WindowFigures {
  readonly gcs: number
  readonly major: number
  readonly gcMs: number
  readonly longest: number
  readonly heapGrowth: number
  readonly load: string
  readonly profile?: ProfileNode
  readonly samples?: ReadonlyArray<AllocationSample>
  readonly locate: Locate
}

/** From the gate's opening to the last event told: the measured window. */
const measuredWindow = async (
  mode: "profile" | "gc",
  url: string,
  session: Session,
  finalTold: Promise<void>
): Promise<WindowFigures> => {
  const { loadavg } = await import("node:os")
  const load = loadavg().map((l) => l.toFixed(2)).join(" ")
  // Scripts are known to the debugger only once it is enabled; their sources give the source maps.
  const scripts = new Map<string, string>()
  session.on("Debugger.scriptParsed", (message) => {
    const { scriptId, url: scriptUrl } = message.params
    if (scriptUrl.includes(root)) scripts.set(scriptId, scriptUrl)
  })
  let gcs = 0
  let major = 0
  let gcMs = 0
  let longest = 0
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      gcs++
      gcMs += entry.duration
      longest = Math.max(longest, entry.duration)
      if (
        (entry as { readonly detail?: { readonly kind?: number } }).detail?.kind === constants.NODE_PERFORMANCE_GC_MAJOR
      ) {
        major++
      }
    }
  })
  if (mode === "profile") {
    await session.post("HeapProfiler.enable")
    await session.post("HeapProfiler.startSampling", {
      samplingInterval: 512,
      includeObjectsCollectedByMajorGC: true,
      // `PROMOTED=1`: only what no young collection took back (promoted, allocated old, or still young)
      includeObjectsCollectedByMinorGC: process.env.PROMOTED !== "1"
    })
  }
  // An experiment, not what a user's process does: is the heap the list left behind what slows the
  // first seconds of events, or the code's warm-up? (`test/bench/results/2026-12-07-warm-up.md`)
  if (process.env.GC_AT_SYNC === "1") {
    const collect = (globalThis as { gc?: () => void }).gc
    if (collect === undefined) throw new Error("GC_AT_SYNC=1 needs node --expose-gc")
    collect()
  }
  observer.observe({ entryTypes: ["gc"] })
  const heapBefore = v8.getHeapStatistics().used_heap_size
  if (process.env.MARK === "1") console.log(`window opens at ${performance.now().toFixed(0)} ms`)
  await go(url)
  await finalTold
  const heapGrowth = v8.getHeapStatistics().used_heap_size - heapBefore
  const sampled = mode === "profile" ? (await session.post("HeapProfiler.stopSampling")).profile : undefined
  if (sampled !== undefined && process.env.DUMP !== undefined) {
    fs.writeFileSync(process.env.DUMP, JSON.stringify(sampled))
  }
  const profile = sampled?.head as unknown as ProfileNode | undefined
  // The protocol gives `samples` (with `ordinal`s) beside the tree; node's types do not list them yet.
  const allocationSamples = (sampled as { readonly samples?: ReadonlyArray<AllocationSample> } | undefined)?.samples
  await new Promise((resolve) => setTimeout(resolve, 10)) // the last gc entries arrive asynchronously
  observer.disconnect()
  await session.post("Debugger.enable")
  const maps = new Map<string, { readonly map: SourceMap | undefined; readonly lines: ReadonlyArray<string> }>()
  const locate: Locate = (frame) => {
    let entry = maps.get(frame.scriptId)
    if (entry === undefined) {
      entry = { map: sourceMapOf(frame.url), lines: sourceLines(frame.url) }
      maps.set(frame.scriptId, entry)
    }
    const found = entry.map?.findEntry(frame.lineNumber, frame.columnNumber) as
      | { readonly originalLine?: number; readonly originalSource?: string }
      | undefined
    const line = found?.originalLine === undefined ? frame.lineNumber + 1 : found.originalLine + 1
    return { file: frame.url.replace(/^file:\/\//, ""), line, text: entry.lines[line - 1]?.trim() ?? "" }
  }
  const sources = new Map<string, string>()
  for (const [scriptId, scriptUrl] of scripts) {
    const { scriptSource } = await session.post("Debugger.getScriptSource", { scriptId })
    sources.set(scriptUrl, scriptSource)
  }
  const sourceMapOf = (scriptUrl: string): SourceMap | undefined => {
    const text = sources.get(scriptUrl)
    const inline = text?.match(/\/\/# sourceMappingURL=data:application\/json;base64,([A-Za-z0-9+/=]+)\s*$/)
    return inline === null || inline === undefined
      ? undefined
      : new SourceMap(JSON.parse(Buffer.from(inline[1]!, "base64").toString("utf8")))
  }
  await session.post("Debugger.disable")
  return {
    gcs,
    major,
    gcMs,
    longest,
    heapGrowth,
    load,
    locate,
    ...(profile === undefined ? {} : { profile }),
    ...(allocationSamples === undefined ? {} : { samples: allocationSamples })
  }
}

const sourceLines = (scriptUrl: string): ReadonlyArray<string> => {
  try {
    return fs.readFileSync(scriptUrl.replace(/^file:\/\//, ""), "utf8").split("\n")
  } catch {
    return []
  }
}

const go = (url: string) =>
  fetch(`${url}/bench/go/${encodeURIComponent(namespace)}`, { method: "POST" }).then((res) => res.text())

/** A name for a frame: its function's, or for an arrow function the `const` it is assigned to. */
const frameName = (frame: Frame, locate: Locate): string => {
  if (!frame.url.includes(root) || frame.url.includes("node_modules")) {
    const file = frame.url.includes("/node_modules/")
      ? frame.url.slice(frame.url.lastIndexOf("/node_modules/") + "/node_modules/".length)
      : frame.url
    return `${frame.functionName || "(anonymous)"} ${file}:${frame.lineNumber + 1}`
  }
  const { file, line, text } = locate(frame)
  const named = frame.functionName !== "" ? frame.functionName : /(?:const|let)\s+(\w+)/.exec(text)?.[1]
  return `${named ?? `(anonymous: ${text.slice(0, 50)})`} ${path.relative(root, file)}:${line}`
}

/** One sample of the sampling heap profiler: its node, its size, and its place in allocation order. */
interface AllocationSample {
  readonly nodeId: number
  readonly size: number
  readonly ordinal: number
}

/**
 * `PROMOTED=1`: what no young collection took back, by tenth of the window (in allocation order),
 * then the innermost frames of what the middle tenths kept. The last tenth also holds what was
 * still young at the end, never collected at all, so it reads high.
 */
const promotedOverTime = (head: ProfileNode, samples: ReadonlyArray<AllocationSample>, locate: Locate) => {
  const stackOf = new Map<number, ReadonlyArray<Frame>>()
  const walk = (node: ProfileNode, stack: ReadonlyArray<Frame>) => {
    const here = [...stack, node.callFrame]
    stackOf.set(node.id, here)
    for (const child of node.children) walk(child, here)
  }
  walk(head, [])
  if (samples.length === 0) return
  const ordered = [...samples].sort((a, b) => a.ordinal - b.ordinal)
  const first = ordered[0]!.ordinal
  const span = ordered[ordered.length - 1]!.ordinal - first + 1
  const tenthOf = (sample: AllocationSample) => Math.min(9, Math.floor(((sample.ordinal - first) / span) * 10))
  const perTenth = Array.from({ length: 10 }, () => 0)
  const middle = new Map<string, number>()
  let middleBytes = 0
  for (const sample of ordered) {
    const tenth = tenthOf(sample)
    perTenth[tenth]! += sample.size
    if (tenth === 0 || tenth === 9) continue
    const key = (stackOf.get(sample.nodeId) ?? []).slice(-3).reverse().map((frame) => frameName(frame, locate)).join(
      " < "
    )
    middle.set(key, (middle.get(key) ?? 0) + sample.size)
    middleBytes += sample.size
  }
  const perEvent = (bytes: number, tenths: number) => ((bytes / events) * (10 / tenths)).toFixed(0)
  console.log(
    `  kept past the young collections, B/event by tenth of the window: ${
      perTenth.map((bytes) => perEvent(bytes, 1)).join(", ")
    }`
  )
  console.log(`  tenths 2-9: ${perEvent(middleBytes, 8)} B/event; by innermost frames:`)
  for (const [key, bytes] of [...middle].sort((a, b) => b[1] - a[1]).slice(0, Number(process.env.TOP ?? 10))) {
    console.log(`    ${perEvent(bytes, 8).padStart(6)} B  ${key}`)
  }
}

const report = (head: ProfileNode, locate: Locate) => {
  const byStage = new Map<Stage, number>()
  const byFunction = new Map<string, { bytes: number; stage: Stage }>()
  let total = 0
  const walk = (node: ProfileNode, stack: Array<Frame>) => {
    stack.push(node.callFrame)
    if (node.selfSize > 0) {
      let stage: Stage | undefined
      for (let i = stack.length - 1; i >= 0 && stage === undefined; i--) stage = stageOfFrame(stack[i]!, locate)
      stage ??= stack.some((f) => f.url.includes("/effect/dist/")) ? Stage.runtime : Stage.other
      total += node.selfSize
      byStage.set(stage, (byStage.get(stage) ?? 0) + node.selfSize)
      const key = frameName(node.callFrame, locate)
      const entry = byFunction.get(key) ?? { bytes: 0, stage }
      entry.bytes += node.selfSize
      byFunction.set(key, entry)
    }
    for (const child of node.children) walk(child, stack)
    stack.pop()
  }
  walk(head, [])
  const pad = (text: string, width: number) => text.padEnd(width)
  console.log(`  sampled: ${(total / events).toFixed(0)} B/event in all`)
  for (const stage of Object.values(Stage)) {
    const bytes = byStage.get(stage) ?? 0
    console.log(
      `    ${pad(stage, 72)} ${(bytes / events).toFixed(0).padStart(7)} B ${
        ((100 * bytes) / total).toFixed(1).padStart(5)
      } %`
    )
  }
  const top = Number(process.env.TOP ?? 10)
  console.log(`  top ${top} allocating functions (self):`)
  for (const [name, { bytes, stage }] of [...byFunction].sort((a, b) => b[1].bytes - a[1].bytes).slice(0, top)) {
    console.log(
      `    ${(bytes / events).toFixed(0).padStart(7)} B ${
        ((100 * bytes) / total).toFixed(1).padStart(5)
      } %  ${name}  [${stage.split(" ")[0]}]`
    )
  }
}

const mode = process.argv[2]
if (mode === "serve") await serve()
else if (mode === "profile" || mode === "gc" || mode === "survivors") await measure(mode)
else throw new Error("usage: npx tsx scratchpad/eventGarbage.ts profile|gc (see the header)")
