/**
 * What an operator scrapes from the running program (`--metrics-address HOST:PORT`): `/metrics`
 * (the watch's metrics and the process's own, in Prometheus' text format, written by the
 * OpenTelemetry Prometheus exporter from Effect's metrics through `@effect/opentelemetry`),
 * `/healthz` (200 while the process runs) and `/readyz` (200 once the watch has synced and heard
 * the cluster recently, else 503 with the reason). The exporter is loaded only when asked for.
 */
import { Clock, Data, Duration, Effect, Layer, Metric, Option, Runtime } from "effect"
import type { Scope } from "effect"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import type { SandboxWatchHealth, SandboxWatchService } from "../SandboxWatch.ts"

type PrometheusModule = typeof import("@opentelemetry/exporter-prometheus")

/** Where to listen: a host and a port (0: any free one). */
export interface Address {
  readonly host: string
  readonly port: number
}

/** `HOST:PORT`, `:PORT` (every interface) or `[::1]:PORT`; none when it is not one. */
export const parseAddress = (text: string): Option.Option<Address> => {
  const match = /^(?:\[([^\]]+)\]|([^:]*)):(\d{1,5})$/.exec(text.trim())
  if (match === null) return Option.none()
  const port = Number(match[3])
  if (port > 65535) return Option.none()
  const host = match[1] ?? match[2] ?? ""
  return Option.some({ host: host === "" ? "0.0.0.0" : host, port })
}

/** Whether the watch can be relied on now, and if not, why, in words. */
export const readiness = (
  health: SandboxWatchHealth,
  nowMillis: number,
  silenceLimit: Duration.Duration
): { readonly ready: boolean; readonly reason: string } => {
  if (!health.synced) return { ready: false, reason: "the watch has not finished its first list" }
  if (Option.isNone(health.lastHeard)) return { ready: false, reason: "the watch has heard nothing from the cluster" }
  const silent = nowMillis - health.lastHeard.value
  if (silent > Duration.toMillis(silenceLimit)) {
    return {
      ready: false,
      reason: `the watch has heard nothing from the cluster for ${Duration.format(Duration.millis(silent))} ` +
        `(more than ${Duration.format(silenceLimit)}): it is reconnecting or cut off`
    }
  }
  return { ready: true, reason: "synced, and heard from the cluster recently" }
}

export class TelemetryError extends Data.TaggedError("TelemetryError")<{ readonly message: string }> {}

// The process's own metrics, set at each scrape.
const processMetrics = {
  residentMemory: Metric.gauge("process_resident_memory_bytes", { description: "Resident memory size in bytes" }),
  heapUsed: Metric.gauge("nodejs_heap_used_bytes", { description: "V8 heap in use, in bytes" }),
  cpuSeconds: Metric.gauge("process_cpu_seconds", { description: "User and system CPU time spent so far, in seconds" }),
  uptime: Metric.gauge("process_uptime_seconds", { description: "Seconds since the process started" })
}

const refreshProcessMetrics = Effect.suspend(() => {
  const memory = process.memoryUsage()
  const cpu = process.cpuUsage()
  return Effect.all([
    Metric.set(processMetrics.residentMemory, memory.rss),
    Metric.set(processMetrics.heapUsed, memory.heapUsed),
    Metric.set(processMetrics.cpuSeconds, (cpu.user + cpu.system) / 1e6),
    Metric.set(processMetrics.uptime, process.uptime())
  ], { discard: true })
})

/**
 * Serves `/metrics`, `/healthz` and `/readyz` at `address` for as long as the scope lives; returns
 * the URL it listens at. `silenceLimit`: how long the watch may go without hearing the cluster
 * before it is not ready (its `timeoutSeconds` plus its idle margin).
 */
export const serve = (
  address: Address,
  watch: SandboxWatchService,
  options: { readonly silenceLimit: Duration.Duration; readonly serviceName: string; readonly serviceVersion: string }
): Effect.Effect<string, TelemetryError, Scope.Scope> =>
  Effect.gen(function*() {
    const [{ PrometheusExporter }, OtelMetrics, OtelResource] = yield* Effect.promise(() =>
      Promise.all([
        // A CommonJS package: Node (and tsx) give its exports as named ones, the bundled bin's
        // split chunk only as the default export.
        import("@opentelemetry/exporter-prometheus").then((module) => {
          const either = module as PrometheusModule | { readonly default: PrometheusModule }
          return "PrometheusExporter" in either ? either : either.default
        }),
        import("@effect/opentelemetry/Metrics"),
        import("@effect/opentelemetry/Resource")
      ])
    )
    const exporter = new PrometheusExporter({ preventServerStart: true })
    yield* Layer.build(
      OtelMetrics.layer(() => exporter).pipe(
        Layer.provide(OtelResource.layer({ serviceName: options.serviceName, serviceVersion: options.serviceVersion }))
      )
    )
    const runtime = yield* Effect.runtime<never>()
    const run = <A>(effect: Effect.Effect<A>) => Runtime.runPromise(runtime)(effect)

    const server = Http.createServer((request, response) => {
      const path = (request.url ?? "/").split("?")[0]
      const answer = (status: number, text: string) => {
        response.writeHead(status, { "content-type": "text/plain; charset=utf-8" })
        response.end(`${text}\n`)
      }
      if (request.method !== "GET" && request.method !== "HEAD") return answer(405, "only GET")
      switch (path) {
        case "/metrics":
          // `health` also sets the seconds-since-last-heard gauge.
          return void run(Effect.zipRight(watch.health, refreshProcessMetrics)).then(
            () => exporter.getMetricsRequestHandler(request, response),
            (error: unknown) => answer(500, `metrics could not be read: ${String(error)}`)
          )
        case "/healthz":
          return answer(200, "ok")
        case "/readyz":
          return void run(Effect.zip(watch.health, Clock.currentTimeMillis)).then(
            ([health, now]) => {
              const verdict = readiness(health, now, options.silenceLimit)
              answer(verdict.ready ? 200 : 503, verdict.ready ? "ok" : `not ready: ${verdict.reason}`)
            },
            (error: unknown) => answer(500, `health could not be read: ${String(error)}`)
          )
        default:
          return answer(404, "not found: try /metrics, /healthz or /readyz")
      }
    })
    const port = yield* Effect.acquireRelease(
      Effect.async<number, TelemetryError>((resume) => {
        server.once("error", (error) =>
          resume(
            Effect.fail(
              new TelemetryError({
                message: `cannot serve metrics at ${address.host}:${address.port}: ${error.message}`
              })
            )
          ))
        server.listen(address.port, address.host, () => resume(Effect.succeed((server.address() as AddressInfo).port)))
      }),
      () =>
        Effect.async<void>((resume) => {
          server.closeAllConnections()
          server.close(() => resume(Effect.void))
        })
    )
    const host = address.host.includes(":") ? `[${address.host}]` : address.host
    return `http://${host}:${port}`
  })
