/**
 * sandbox-watch as an application uses it: `SandboxWatch.layer` on `KubeClient.layer` on
 * `KubeConfig.layerStatic`, subscribers as `Stream.runForEach(watch.changes(name), ...)` fibers
 * (or, where a row says so, `watch.waitFor(name, ...)` waits).
 * In the storm, every fiber the watch and its subscribers start runs under one `Supervisor.track`,
 * so it can count the live ones.
 */
import { Context, Effect, Layer, Metric, Option, Stream, Supervisor } from "effect"
import type { Scope } from "effect"
import * as KubeClient from "../../../src/KubeClient.ts"
import * as KubeConfig from "../../../src/KubeConfig.ts"
import type { Sandbox } from "../../../src/Sandbox.ts"
import * as SandboxWatch from "../../../src/SandboxWatch.ts"
import { verifiedConnection } from "../../apiserver/RealApiServer.ts"
import {
  codeSpaceBytes,
  cpuMs,
  gcWatch,
  go,
  heapPartWay,
  hrtimeNs,
  latencyFigures,
  now,
  rssMB,
  scaleFigures,
  sentNs,
  settledHeap,
  snapshotIfAsked,
  stormHeapFigures,
  syncFigures,
  warmResumesPerSec,
  window
} from "../common.ts"
import { finalEvent, nameOf, Salt, SentAnnotation } from "../data.ts"
import type { ChildParams, ChildResult } from "../protocol.ts"
import { apiServerSecrets } from "../protocol.ts"

type Service = SandboxWatch.SandboxWatchService

/**
 * Forks one subscriber of `name`; `onValue` runs in the subscriber's fiber for every value. The
 * subscriber is a `changes` stream run by a fiber, or (`waits`) a `waitFor` whose step never answers.
 */
const subscribe = (
  watch: Service,
  name: string,
  onValue: (value: Option.Option<Sandbox>) => void,
  waits = false
): Effect.Effect<void, never, Scope.Scope> =>
  Effect.asVoid(
    Effect.forkScoped(
      waits
        ? watch.waitFor(name, (value) => Effect.sync(() => (onValue(value), Option.none<never>())))
        : Stream.runForEach(watch.changes(name), (value) => Effect.sync(() => onValue(value)))
    )
  )

const rvOf = (
  value: Option.Option<Sandbox>
) => (Option.isSome(value) ? value.value.metadata.resourceVersion : undefined)

/** Polls the cache every millisecond until `name` holds `resourceVersion`. */
const untilCached = (watch: Service, name: string, resourceVersion: string) =>
  Effect.gen(function*() {
    for (;;) {
      const value = yield* watch.get(name)
      if (rvOf(value) === resourceVersion) return
      yield* Effect.sleep("1 millis")
    }
  })

/**
 * Open subscriptions, from the watch's own gauge (`SandboxWatch.metrics.subscribers`, outside the
 * service's contract, so read only when it is there); NaN when it is not.
 */
const subscriptions: Effect.Effect<number> = (() => {
  const gauge = (SandboxWatch as { readonly metrics?: { readonly subscribers?: Metric.Metric.Gauge<number> } }).metrics
    ?.subscribers
  return gauge === undefined ? Effect.succeed(Number.NaN) : Effect.map(Metric.value(gauge), (state) => state.value)
})()

const program = (p: ChildParams, supervisor: Supervisor.Supervisor<ReadonlyArray<unknown>>) =>
  Effect.gen(function*() {
    const { shape } = p
    const hot = Math.min(shape.hot, shape.n)
    const secrets = apiServerSecrets(p)
    // Paged unless the row streams: the replay server streams a list only when asked, and the
    // figures of every row before streaming lists (listMode "auto" since) are of paged lists.
    const layer = SandboxWatch.layer({
      namespace: p.namespace,
      pageSize: p.pageSize > 0 ? p.pageSize : 500,
      listMode: p.listMode ?? "paged",
      gzipStreamingLists: p.gzip === true
    }).pipe(
      Layer.provide(KubeClient.layer),
      Layer.provide(
        secrets === undefined
          ? KubeConfig.layerStatic({ server: p.url, namespace: p.namespace })
          : Layer.succeed(
            KubeConfig.KubeConfig,
            verifiedConnection({
              server: p.url,
              caPem: secrets.caPem,
              token: secrets.token,
              namespace: p.namespace,
              about: "real kube-apiserver"
            })
          )
      )
    )
    const heapBefore = p.scenario === "heap" || p.scenario === "scale" ? yield* Effect.promise(settledHeap) : 0
    if (p.scenario === "sync" || p.scenario === "scale") yield* Effect.promise(window.start)
    const rssStart = rssMB()
    const started = now()
    const c0 = cpuMs()
    const context = yield* Layer.build(layer)
    const watch = Context.get(context, SandboxWatch.SandboxWatch)

    /** Subscribers that must have had their first value before the stream starts. */
    let firstValues = 0
    let subscribers = 0
    const subscribeCounted = (
      name: string,
      onValue: (value: Option.Option<Sandbox>) => void,
      waits = p.waits === true
    ) => {
      subscribers++
      let first = true
      return subscribe(watch, name, (value) => {
        if (first) {
          first = false
          firstValues++
        }
        onValue(value)
      }, waits)
    }
    /** A promise that resolves when a subscriber of `target.name` has been told `target`. */
    const toldOf = (
      target: { name: string; resourceVersion: string },
      also?: (value: Option.Option<Sandbox>) => void
    ) => {
      let resolve: () => void = () => undefined
      const told = new Promise<void>((r) => (resolve = r))
      return {
        told,
        onValue: (value: Option.Option<Sandbox>) => {
          also?.(value)
          if (rvOf(value) === target.resourceVersion) resolve()
        }
      }
    }
    const allSubscribed = Effect.gen(function*() {
      const deadline = now() + 60_000
      while (firstValues < subscribers) {
        if (now() > deadline) {
          return yield* Effect.dieMessage(
            `only ${firstValues} of ${subscribers} subscribers heard their first value in 60 s`
          )
        }
        yield* Effect.sleep("1 millis")
      }
    })

    switch (p.scenario) {
      case "sync": {
        yield* watch.synced
        const synced = syncFigures(now() - started, cpuMs() - c0, rssStart)
        yield* Effect.promise(window.stop)
        return { figures: { ...synced } }
      }
      case "scale": {
        yield* watch.synced
        const synced = syncFigures(now() - started, cpuMs() - c0, rssStart)
        yield* Effect.promise(window.stop)
        const figures = yield* Effect.promise(() => scaleFigures(shape.n, synced, heapBefore))
        const health = yield* watch.health
        return { figures, ...(health.cached === shape.n ? {} : { note: `cached ${health.cached} of ${shape.n}` }) }
      }
      case "heap": {
        yield* watch.synced
        const heapAfter = yield* Effect.promise(settledHeap)
        yield* Effect.promise(() => snapshotIfAsked())
        const health = yield* watch.health
        return {
          figures: { perObject: (heapAfter - heapBefore) / shape.n, heapMB: (heapAfter - heapBefore) / 1048576 },
          ...(health.cached === shape.n ? {} : { note: `cached ${health.cached} of ${shape.n}` })
        }
      }
      case "tp": {
        const target = finalEvent(shape.m, shape.n, Salt.throughput, shape.n)
        const { told, onValue } = toldOf(target)
        yield* subscribeCounted(target.name, onValue)
        yield* watch.synced
        yield* allSubscribed
        yield* Effect.promise(window.start)
        const t0 = now()
        const c0 = cpuMs()
        yield* Effect.promise(() => go(p.url, p.namespace))
        yield* Effect.promise(() => told)
        const ms = now() - t0
        const cpu = cpuMs() - c0
        yield* Effect.promise(window.stop)
        return { figures: { ms, eventsPerSec: (shape.m / ms) * 1000, cpuUsPerEvent: (cpu * 1000) / shape.m } }
      }
      case "fanout": {
        const target = finalEvent(shape.m, hot, Salt.hot, shape.n)
        let told: Promise<void> = Promise.resolve()
        let deliveries = 0
        // What the subscribers themselves weigh: the heap with and without them, once synced.
        yield* watch.synced
        const heapUnsubscribed = yield* Effect.promise(settledHeap)
        yield* Effect.promise(() => snapshotIfAsked("unsubscribed"))
        if (p.fanout === "idle" || p.fanout === "waits") {
          const count = p.idleSubscribers ?? 10_000
          for (let i = 0; i < count; i++) {
            // Names no event touches: the cold ones, then names that are not there at all.
            const name = hot + i < shape.n ? nameOf(hot + i) : `absent-${i}`
            yield* subscribeCounted(name, () => void deliveries++, p.fanout === "waits")
          }
        } else if (p.fanout === "hot") {
          for (let i = 0; i < hot; i++) {
            const name = nameOf(i)
            if (name === target.name) {
              const final = toldOf(target, () => void deliveries++)
              told = final.told
              yield* subscribeCounted(name, final.onValue)
            } else yield* subscribeCounted(name, () => void deliveries++)
          }
        }
        yield* allSubscribed
        const heapSubscribed = yield* Effect.promise(settledHeap)
        yield* Effect.promise(() => snapshotIfAsked("subscribed"))
        const before = deliveries
        yield* Effect.promise(window.start)
        const t0 = now()
        const c0 = cpuMs()
        yield* Effect.promise(() => go(p.url, p.namespace))
        yield* untilCached(watch, target.name, target.resourceVersion)
        yield* Effect.promise(() => told)
        const ms = now() - t0
        const cpu = cpuMs() - c0
        yield* Effect.promise(window.stop)
        return {
          figures: {
            ms,
            eventsPerSec: (shape.m / ms) * 1000,
            cpuUsPerEvent: (cpu * 1000) / shape.m,
            subscribers,
            deliveries: deliveries - before,
            bytesPerSubscriber: subscribers === 0 ? 0 : (heapSubscribed - heapUnsubscribed) / subscribers
          }
        }
      }
      case "storm": {
        const target = finalEvent(shape.storm, hot, Salt.storm, shape.n)
        let told: Promise<void> = Promise.resolve()
        let newest = 0
        const seen = (value: Option.Option<Sandbox>) => void (newest = Math.max(newest, Number(rvOf(value) ?? 0)))
        for (let i = 0; i < hot; i++) {
          const name = nameOf(i)
          if (name === target.name) {
            const final = toldOf(target, seen)
            told = final.told
            yield* subscribeCounted(name, final.onValue)
          } else yield* subscribeCounted(name, seen)
        }
        yield* watch.synced
        yield* allSubscribed
        const heapBefore = yield* Effect.promise(settledHeap)
        const codeBefore = codeSpaceBytes()
        const fibersBefore = (yield* supervisor.value).length
        const subsBefore = yield* subscriptions
        const healthBefore = yield* watch.health
        yield* Effect.promise(window.start)
        const t0 = now()
        const c0 = cpuMs()
        yield* Effect.promise(() => go(p.url, p.namespace))
        const warm = Math.ceil(shape.storm / 10)
        const partWay = yield* Effect.promise(() => heapPartWay(() => newest, shape.n + warm))
        yield* Effect.promise(() => told)
        const ms = now() - t0
        const cpu = cpuMs() - c0
        yield* Effect.promise(window.stop)
        const heapAfter = yield* Effect.promise(settledHeap)
        const codeAfter = codeSpaceBytes()
        yield* Effect.promise(() => snapshotIfAsked("after"))
        const fibersAfter = (yield* supervisor.value).length
        const subsAfter = yield* subscriptions
        const healthAfter = yield* watch.health
        return {
          figures: {
            ms,
            reconnectsPerSec: (shape.storm / ms) * 1000,
            warmResumesPerSec: warmResumesPerSec(shape, partWay, t0 + ms),
            cpuMsPerResume: cpu / shape.storm,
            ...stormHeapFigures(heapBefore, partWay, heapAfter, shape.storm - warm, {
              before: codeBefore,
              after: codeAfter
            }),
            fibersBefore,
            fibersAfter,
            subsBefore,
            subsAfter,
            restarts: healthAfter.watchRestarts - healthBefore.watchRestarts,
            relists: healthAfter.relists - healthBefore.relists
          }
        }
      }
      case "lat": {
        const target = finalEvent(shape.latencyEvents, hot, Salt.latency, shape.n)
        const samples: Array<number> = []
        const sample = (value: Option.Option<Sandbox>) => {
          if (Option.isNone(value)) return
          const sent = sentNs(value.value.metadata.annotations, SentAnnotation)
          if (sent !== undefined) samples.push(Number(hrtimeNs() - sent))
        }
        let told: Promise<void> = Promise.resolve()
        for (let i = 0; i < hot; i++) {
          const name = nameOf(i)
          if (name === target.name) {
            const final = toldOf(target, sample)
            told = final.told
            yield* subscribeCounted(name, final.onValue)
          } else if (process.env.BENCH_LAT_ONLY_TARGET !== "1") yield* subscribeCounted(name, sample)
        }
        yield* watch.synced
        yield* allSubscribed
        yield* Effect.promise(window.start)
        const gcs = yield* Effect.promise(gcWatch)
        yield* Effect.promise(() => go(p.url, p.namespace))
        yield* Effect.promise(() => told)
        yield* Effect.promise(window.stop)
        return { figures: { ...latencyFigures(samples), ...(yield* Effect.promise(gcs.stop)) } }
      }
    }
  })

export const run = (p: ChildParams): Promise<ChildResult> =>
  new Promise((resolve, reject) => {
    // The scope stays open: the child prints and exits, so closing the watch is not timed or awaited.
    Effect.runFork(
      Effect.gen(function*() {
        // Only the storm counts fibers: a supervisor's bookkeeping on every fiber start would be
        // charged to the watch in the other scenarios.
        const supervisor = yield* Supervisor.track
        const result = yield* (p.scenario === "storm"
          ? Effect.supervised(program(p, supervisor), supervisor)
          : program(p, supervisor))
        resolve(result)
        return yield* Effect.never
      }).pipe(
        Effect.scoped,
        Effect.catchAllCause((cause) => Effect.sync(() => reject(new Error(String(cause)))))
      )
    )
  })
