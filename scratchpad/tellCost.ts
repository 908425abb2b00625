/**
 * Bytes one watch event costs from the cache step on: `cacheSteps.applyEvents` on a one-event chunk
 * (the steady state's chunk), the tells, and each woken `changes(name)` subscriber run by
 * `Stream.runForEach` — issue 31's latency set-up without the network, the line split and the parse,
 * so the figure is exact and does not depend on the machine's load (`eventGarbage.ts` measures the
 * whole path, but its chunks grow when the process lags, which moves its totals by kilobytes).
 *
 *   node --expose-gc --max-semi-space-size=512 --min-semi-space-size=512 --import tsx scratchpad/tellCost.ts
 *
 * 10k Sandboxes listed, then events MODIFIED round-robin over 100 names, each fed to the applying
 * fiber from outside (as a socket would) once the previous one was told. Prints bytes per event with
 * 100 subscribers (every event wakes one), with 1 (the watch alone: almost no wake), and the
 * difference per wake. A row is valid only if no collection ran in its window (it says so).
 */
import { Chunk, Effect, Fiber, Option, Stream, SubscriptionRef } from "effect"
import { PerformanceObserver } from "node:perf_hooks"
import * as v8 from "node:v8"
import { makeCacheSteps, type SandboxHub } from "../src/internal/cacheSteps.ts"
import * as SandboxCache from "../src/internal/sandboxCache.ts"
import { SubscriberHub } from "../src/internal/subscriberHub.ts"
import { makeSubscriptions } from "../src/internal/subscriptions.ts"
import type { Sandbox } from "../src/Sandbox.ts"
import type { WatchEvent } from "../src/WatchEvent.ts"
import { printTopAllocators, startHeapSampling } from "./heapSampling.ts"

const listed = 10_000
const hot = 100
const warmUp = 3_000
const measured = Number(process.env.EVENTS ?? 5_000)
const harnessOnly = process.env.HARNESS === "1"
const collectGarbage = (globalThis as { gc?: () => void }).gc
if (collectGarbage === undefined) throw new Error("run with --expose-gc (see the header)")

const sandbox = (name: string, resourceVersion: number): Sandbox =>
  ({
    apiVersion: "jr2.dev/v1alpha1",
    kind: "Sandbox",
    metadata: { name, namespace: "probe", resourceVersion: String(resourceVersion) },
    spec: {},
    status: {}
  }) as unknown as Sandbox

// `TOP=n`: also the n functions that allocate most in the 100 subscribers' window (self bytes per
// event; the sampler's view, so a function the JIT inlined counts in its caller).
const top = Number(process.env.TOP ?? 0)

const run = async (subscribers: number) => {
  const cache = await Effect.runPromise(SubscriptionRef.make(SandboxCache.empty))
  const hub: SandboxHub = new SubscriberHub()
  const steps = makeCacheSteps(cache, hub)
  const subscriptions = makeSubscriptions(cache, hub)
  const items = Array.from({ length: listed }, (_, i) => sandbox(`s${i}`, i + 1))
  await Effect.runPromise(
    steps.applyList({ items, undecodable: [], resourceVersion: String(listed), pages: 1, restarts: 0 })
  )

  let told = 0
  let onTold: (() => void) | undefined
  const fibers = []
  for (let i = 0; i < subscribers; i++) {
    fibers.push(Effect.runFork(Stream.runForEach(subscriptions.changes(`s${hot - 1 - i}`), () =>
      Effect.sync(() => {
        told++
        onTold?.()
      }))))
  }
  while (told < subscribers) await new Promise((resolve) => setImmediate(resolve))

  // The applying fiber: a pull resumed from outside, then the cache step, as the watch loop's.
  let feed: ((event: WatchEvent<Sandbox>) => void) | undefined
  const pull = Effect.async<Chunk.Chunk<WatchEvent<Sandbox>>>((resume) => {
    feed = (event) => {
      feed = undefined
      resume(Effect.succeed(Chunk.of(event)))
    }
  })
  let resourceVersion = listed
  const applier: Effect.Effect<never> = Effect.flatMap(
    Effect.flatMap(pull, (chunk) => harnessOnly ? Effect.void : steps.applyEvents(chunk, String(resourceVersion))),
    () => applier
  )
  const applying = Effect.runFork(applier)
  const step = (k: number) =>
    new Promise<void>((resolve) => {
      const name = `s${k % hot}`
      resourceVersion++
      const event: WatchEvent<Sandbox> = {
        type: "MODIFIED",
        name,
        resourceVersion: String(resourceVersion),
        object: sandbox(name, resourceVersion)
      }
      // Told when the subscriber of the name (if any) ran its callback; else when the step ran.
      const subscribed = !harnessOnly && hot - 1 - (k % hot) < subscribers
      const before = told
      onTold = subscribed ? () => told > before && resolve() : undefined
      const go = () => (feed === undefined ? setImmediate(go) : feed(event))
      go()
      if (!subscribed) setImmediate(() => setImmediate(resolve))
    })
  for (let k = 0; k < warmUp; k++) await step(k)
  collectGarbage()
  let collections = 0
  const observer = new PerformanceObserver((list) => (collections += list.getEntries().length))
  observer.observe({ entryTypes: ["gc"] })
  const sampling = top > 0 && subscribers === hot ? await startHeapSampling(128) : undefined
  const before = v8.getHeapStatistics().used_heap_size
  for (let k = warmUp; k < warmUp + measured; k++) await step(k)
  const perEvent = (v8.getHeapStatistics().used_heap_size - before) / measured
  if (sampling !== undefined) printTopAllocators(await sampling.stop(), measured, top)
  await new Promise((resolve) => setTimeout(resolve, 10))
  observer.disconnect()
  await Effect.runPromise(Fiber.interrupt(applying))
  for (const fiber of fibers) await Effect.runPromise(Fiber.interrupt(fiber))
  return { perEvent, collections, cached: Option.isSome(Option.fromNullable(cache)) }
}

const main = async () => {
  const all = await run(hot)
  const alone = await run(1)
  const row = (label: string, { collections, perEvent }: { perEvent: number; collections: number }) =>
    console.log(
      `${label.padEnd(44)} ${perEvent.toFixed(0).padStart(7)} B/event${
        collections > 0 ? `  (INVALID: ${collections} collections)` : ""
      }`
    )
  row(`${hot} subscribers (each event wakes one)`, all)
  row("1 subscriber (the cache step alone)", alone)
  console.log(
    `${"one wake (difference × 100/99)".padEnd(44)} ${
      ((all.perEvent - alone.perEvent) * hot / (hot - 1)).toFixed(0).padStart(7)
    } B`
  )
}

void main()
