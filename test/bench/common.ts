/**
 * What every benchmark child needs: a heap after a full collection, the server's go signal, the
 * clock, and percentiles.
 */
import { readFileSync, writeFileSync } from "node:fs"
import * as Http from "node:http"
import * as V8 from "node:v8"

declare const gc: undefined | (() => void)

/** Writes a heap snapshot where the runner asked (`BENCH_HEAPSNAPSHOT=<file>`); else nothing. */
export const snapshotIfAsked = async (suffix = ""): Promise<void> => {
  const file = process.env.BENCH_HEAPSNAPSHOT
  if (file === undefined || file === "") return
  const { writeHeapSnapshot } = await import("node:v8")
  writeHeapSnapshot(suffix === "" ? file : file.replace(/\.heapsnapshot$/, `-${suffix}.heapsnapshot`))
}

/** `heapUsed` after collecting until it stops shrinking; needs `--expose-gc`. */
export const settledHeap = async (): Promise<number> => {
  if (typeof gc !== "function") throw new Error("run the child with --expose-gc: heap figures need a full collection")
  // Let timers and pending I/O callbacks drop what they hold before collecting.
  await new Promise((resolve) => setTimeout(resolve, 50))
  let last = Number.POSITIVE_INFINITY
  for (let i = 0; i < 6; i++) {
    gc()
    await new Promise((resolve) => setImmediate(resolve))
    const used = process.memoryUsage().heapUsed
    if (used >= last - 1024) return Math.min(used, last)
    last = used
  }
  return last
}

/** Opens the server's gate for this namespace: its watch starts streaming. */
export const go = (url: string, namespace: string): Promise<void> =>
  new Promise((resolve, reject) => {
    const req = Http.request(`${url}/bench/go/${encodeURIComponent(namespace)}`, { method: "POST" }, (res) => {
      res.resume()
      res.on("end", () => resolve())
    })
    req.on("error", reject)
    req.end()
  })

export const now = (): number => performance.now()

/** CPU milliseconds (user + system) this process has used: what a figure cost, contention aside. */
export const cpuMs = (): number => {
  const { user, system } = process.cpuUsage()
  return (user + system) / 1000
}

/** Nanoseconds on the clock every process of this machine shares (CLOCK_MONOTONIC). */
export const hrtimeNs = (): bigint => process.hrtime.bigint()

export const percentile = (sorted: ReadonlyArray<number>, p: number): number => {
  if (sorted.length === 0) return Number.NaN
  const at = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))
  return sorted[at]!
}

/** p50/p99/max in milliseconds of latencies recorded in nanoseconds. */
export const latencyFigures = (samplesNs: ReadonlyArray<number>): Record<string, number> => {
  const ms = samplesNs.map((ns) => ns / 1e6)
  // For a look at the series (spikes, drift): BENCH_DUMP=<file> writes every sample, in order.
  // Written at once: the child may exit as soon as its figures are sent.
  if (process.env.BENCH_DUMP !== undefined && process.env.BENCH_DUMP !== "") {
    writeFileSync(process.env.BENCH_DUMP.replace("%p", String(process.pid)), JSON.stringify(ms))
  }
  const sorted = [...ms].sort((a, b) => a - b)
  // The second half alone: past the JIT's warm-up and the first collections after the list.
  const late = ms.slice(Math.floor(ms.length / 2)).sort((a, b) => a - b)
  return {
    samples: sorted.length,
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    max: sorted[sorted.length - 1] ?? Number.NaN,
    p50SecondHalf: percentile(late, 50),
    p99SecondHalf: percentile(late, 99),
    /** Where the worst one came, as a fraction of the run (0 = first event). */
    maxAt: ms.length === 0 ? Number.NaN : ms.indexOf(sorted[sorted.length - 1]!) / ms.length
  }
}

/** Garbage collections while it runs: how many, how many full (mark-compact), the longest pause. */
export const gcWatch = async () => {
  const { PerformanceObserver, constants } = await import("node:perf_hooks")
  let count = 0
  let major = 0
  let longest = 0
  let total = 0
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      count++
      total += entry.duration
      longest = Math.max(longest, entry.duration)
      if (
        (entry as { readonly detail?: { readonly kind?: number } }).detail?.kind === constants.NODE_PERFORMANCE_GC_MAJOR
      ) major++
    }
  })
  observer.observe({ entryTypes: ["gc"] })
  return {
    stop: async (): Promise<Record<string, number>> => {
      // Entries are delivered asynchronously: let the last ones arrive.
      await new Promise((resolve) => setTimeout(resolve, 10))
      observer.disconnect()
      return { gcs: count, gcMajor: major, gcLongestMs: longest, gcTotalMs: total }
    }
  }
}

/** Resolves when `check` returns true; polls every millisecond, fails after `ms`. */
export const until = (check: () => boolean, ms: number, what: string): Promise<void> =>
  new Promise((resolve, reject) => {
    const deadline = now() + ms
    const poll = () => {
      if (check()) return resolve()
      if (now() > deadline) return reject(new Error(`gave up after ${ms} ms waiting for ${what}`))
      setTimeout(poll, 1)
    }
    poll()
  })

/**
 * The heap once the storm is a tenth of the way through (the newest resourceVersion seen has
 * reached `resourceVersion`): growth after this point is what each resume keeps, not warm-up
 * (compiled code, lazily built state). Measured while the storm goes on.
 */
export const heapPartWay = async (
  newestSeen: () => number,
  resourceVersion: number
): Promise<{ readonly heap: number; readonly at: number; readonly seen: number }> => {
  await until(() => newestSeen() >= resourceVersion, 600_000, `resourceVersion ${resourceVersion}`)
  const heap = await settledHeap()
  await snapshotIfAsked("partway")
  // Where the storm stands once the collections are over: the rate from here on is the warm one.
  return { heap, at: now(), seen: newestSeen() }
}

/**
 * Resumes per second from a tenth of the way (after the collections there) to the end: the storm
 * once the JIT has warmed up. `endAt` on the clock of `now`; the last resourceVersion is `n + storm`.
 */
export const warmResumesPerSec = (
  shape: { readonly storm: number; readonly n: number },
  partWay: { readonly at: number; readonly seen: number },
  endAt: number
): number => ((shape.n + shape.storm - partWay.seen) / (endAt - partWay.at)) * 1000

/** Bytes of V8's code space in use: machine code the JIT made, which grows while a program warms up. */
export const codeSpaceBytes = (): number =>
  V8.getHeapSpaceStatistics().find((space) => space.space_name === "code_space")?.space_used_size ?? 0

/**
 * The storm's heap figures, in MB and bytes per resume after warm-up. The first tenth of the storm
 * warms the JIT (heap snapshots show its growth is nearly all `code`: bytecode and machine code),
 * so what the storm leaves behind is judged from a tenth of the way to the end.
 */
export const stormHeapFigures = (
  before: number,
  partWay: { readonly heap: number },
  after: number,
  resumesAfterPartWay: number,
  code: { readonly before: number; readonly after: number }
) => ({
  heapBeforeMB: before / 1048576,
  heapGrowthMB: (after - before) / 1048576,
  codeGrowthMB: (code.after - code.before) / 1048576,
  heapGrowthAfterWarmupMB: (after - partWay.heap) / 1048576,
  keptBytesPerResume: (after - partWay.heap) / Math.max(1, resumesAfterPartWay)
})

/** Parses the `bench.jr2.dev/sent` stamp; undefined when the object has none. */
export const sentNs = (annotations: Readonly<Record<string, string>> | undefined, key: string): bigint | undefined => {
  const stamp = annotations?.[key]
  return stamp === undefined || /^0+$/.test(stamp) ? undefined : BigInt(stamp)
}

/**
 * The measured window, profiled when the runner asks (`BENCH_PROFILE=<file>`): V8's CPU sampler
 * (or, for a `.heapprofile` file, its allocation sampler) runs from `start` to `stop` only, so
 * start-up and set-up do not dilute the figures.
 */
export const window = (() => {
  const file = process.env.BENCH_PROFILE
  const allocations = file?.endsWith(".heapprofile") === true
  let session: import("node:inspector/promises").Session | undefined
  return {
    start: async (): Promise<void> => {
      if (file === undefined || file === "") return
      const { Session } = await import("node:inspector/promises")
      session = new Session()
      session.connect()
      if (allocations) {
        await session.post("HeapProfiler.enable")
        // Every 4 KB allocated on average; objects collected before `stop` are kept in the profile.
        await session.post("HeapProfiler.startSampling", {
          samplingInterval: 4096,
          includeObjectsCollectedByMajorGC: true,
          includeObjectsCollectedByMinorGC: process.env.BENCH_PROMOTED !== "1"
        })
      } else {
        await session.post("Profiler.enable")
        await session.post("Profiler.setSamplingInterval", { interval: 200 })
        await session.post("Profiler.start")
      }
    },
    stop: async (): Promise<void> => {
      if (session === undefined || file === undefined) return
      const { profile } = allocations
        ? await session.post("HeapProfiler.stopSampling")
        : await session.post("Profiler.stop")
      writeFileSync(file, JSON.stringify(profile))
      session.disconnect()
      session = undefined
    }
  }
})()

/** What a plain client (the floor, client-node) offers the shared measurements below. */
type Reached = (
  target: { readonly name: string; readonly resourceVersion: string },
  also?: (object: { readonly metadata: { readonly resourceVersion: string } }) => void
) => Promise<void>

/**
 * The throughput and fan-out measurement of a plain client: `events` events after `go`, until the
 * last one (`target`) is cached. Events per second and CPU µs per event.
 */
export const measureEvents = async (
  p: { readonly url: string; readonly namespace: string },
  events: number,
  target: { readonly name: string; readonly resourceVersion: string },
  reached: Reached
) => {
  const done = reached(target)
  await window.start()
  const t0 = now()
  const c0 = cpuMs()
  await go(p.url, p.namespace)
  await done
  await window.stop()
  const ms = now() - t0
  const cpu = cpuMs() - c0
  return { figures: { ms, eventsPerSec: (events / ms) * 1000, cpuUsPerEvent: (cpu * 1000) / events } }
}

/**
 * The reconnect storm of a plain client: `storm` resumes after `go`, until the last event
 * (`target`) is cached; resumes per second, CPU per resume, and what the heap kept (from a tenth of
 * the way, after the JIT has warmed up).
 */
export const measureStorm = async (
  p: { readonly url: string; readonly namespace: string },
  shape: { readonly storm: number; readonly n: number },
  target: { readonly name: string; readonly resourceVersion: string },
  reached: Reached
) => {
  let newest = 0
  const done = reached(target, (object) => void (newest = Math.max(newest, Number(object.metadata.resourceVersion))))
  const before = await settledHeap()
  const codeBefore = codeSpaceBytes()
  await window.start()
  const t0 = now()
  const c0 = cpuMs()
  await go(p.url, p.namespace)
  const warm = Math.ceil(shape.storm / 10)
  const partWay = await heapPartWay(() => newest, shape.n + warm)
  await done
  await window.stop()
  const ms = now() - t0
  const cpu = cpuMs() - c0
  const after = await settledHeap()
  const codeAfter = codeSpaceBytes()
  await snapshotIfAsked("after")
  return {
    figures: {
      ms,
      reconnectsPerSec: (shape.storm / ms) * 1000,
      warmResumesPerSec: warmResumesPerSec(shape, partWay, t0 + ms),
      cpuMsPerResume: cpu / shape.storm,
      ...stormHeapFigures(before, partWay, after, shape.storm - warm, { before: codeBefore, after: codeAfter })
    }
  }
}

/**
 * The most resident memory this process has had, in MB: Linux's `VmHWM`, which starts afresh at
 * exec. (`process.resourceUsage().maxRSS` does not: a child spawned by the runner reports the
 * runner's own high-water mark, which holds the serialized data of the whole run.)
 */
export const peakRssMB = (): number => {
  try {
    const match = /^VmHWM:\s+(\d+) kB$/m.exec(readFileSync("/proc/self/status", "utf8"))
    if (match !== null) return Number(match[1]) / 1024
  } catch {
    // Not Linux: the best there is.
  }
  return process.resourceUsage().maxRSS / 1024
}

/** The resident memory now, in MB: where a sync starts from, to set its peak against. */
export const rssMB = (): number => process.memoryUsage.rss() / 1048576

/**
 * The figures of a sync, taken the moment it is synced: time and CPU to synced, the peak RSS up to
 * then (`VmHWM`: the process's own high-water mark, exact, not sampled, which starts afresh at exec
 * and so includes the child's start-up, whose peak is below the sync's) and the RSS the sync
 * started from (`rssStartMB`, runtime and loaded modules), so `peakRssMB - rssStartMB` is what the
 * list itself raised the peak by.
 */
export const syncFigures = (
  ms: number,
  cpu: number,
  rssStartMB: number
): { readonly ms: number; readonly cpuMs: number; readonly peakRssMB: number; readonly rssStartMB: number } => ({
  ms,
  cpuMs: cpu,
  peakRssMB: peakRssMB(),
  rssStartMB
})

/**
 * The scale scenario's figures: time and CPU to synced, heap per cached object (after a full
 * collection, less the heap before the start), and the peak RSS, which includes the list's bytes
 * and parse garbage that the settled heap no longer shows (as of synced when `timed` has it, from
 * {@link syncFigures}; else now, after the collections).
 */
export const scaleFigures = async (
  n: number,
  timed: { readonly ms: number; readonly cpuMs: number; readonly peakRssMB?: number; readonly rssStartMB?: number },
  heapBefore: number
): Promise<Record<string, number>> => {
  const heapAfter = await settledHeap()
  return { peakRssMB: peakRssMB(), ...timed, perObject: (heapAfter - heapBefore) / n }
}
