/**
 * What an operator does with the running program: scrape /metrics, probe /healthz and /readyz,
 * read JSON logs, and get told at once about a selector that cannot work or a KUBECONFIG that names
 * nothing. Over the real process and real HTTP; /readyz's silence limit is tested in the process'
 * place with TestClock (a real process would need minutes of silence).
 */
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Layer, Option, TestClock } from "effect"
import * as Fs from "node:fs"
import * as Http from "node:http"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Telemetry from "../src/cli/Telemetry.ts"
import * as KubeClient from "../src/KubeClient.ts"
import { SandboxResource } from "../src/Sandbox.ts"
import * as SandboxWatch from "../src/SandboxWatch.ts"
import * as SimulatedApiServer from "../src/SimulatedApiServer.ts"
import * as Program from "./support/ProgramProcess.ts"
import { eventually } from "./support/waiting.ts"

const ProcessTimeout = 90_000

/** A GET on loopback: status and body. */
const get = (url: string) =>
  Effect.async<{ readonly status: number; readonly body: string }, Error>((resume) => {
    Http.get(url, (response) => {
      let body = ""
      response.setEncoding("utf8").on("data", (chunk: string) => (body += chunk))
      response.on("end", () => resume(Effect.succeed({ status: response.statusCode ?? 0, body })))
    }).on("error", (error) => resume(Effect.fail(error)))
  })

const tempHome = Effect.acquireRelease(
  Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "sw-ops-"))),
  (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
)

describe("the program, operated", () => {
  it.scopedLive(
    "--metrics-address serves /metrics with the watch's events by type, /healthz, and /readyz once synced; --log-format json writes one JSON object a line",
    () =>
      Effect.gen(function*() {
        const home = yield* tempHome
        const program = yield* Program.start(
          [
            "--demo",
            "--output",
            "ndjson",
            "--metrics-address",
            "127.0.0.1:0",
            "--log-format",
            "json",
            "--duration",
            "20s"
          ],
          Program.noClusterEnv(home)
        )
        const at = yield* program.awaitStderr((line) => line.includes("metrics at http://"))
        const url = /metrics at (http:\/\/127\.0\.0\.1:\d+)/.exec((yield* program.stderr)[at]!)![1]!
        yield* program.awaitStdout((line) => line === `{"event":"synced","demo":true}`)
        expect((yield* get(`${url}/healthz`)).status).toBe(200)
        const ready = yield* eventually(get(`${url}/readyz`), (r) => r.status === 200)
        expect(ready.body.trim()).toBe("ok")
        // The demo's first round changes Sandboxes after the first list: events by type appear.
        const metrics = yield* eventually(get(`${url}/metrics`), (r) =>
          /sandbox_watch_events_total\{type="MODIFIED"/.test(r.body))
        expect(metrics.body).toContain("# TYPE sandbox_watch_events_total counter")
        expect(metrics.body).toMatch(/sandbox_watch_relists_total\{reason="initial"[^}]*\} 1/)
        expect(metrics.body).toMatch(/process_resident_memory_bytes\{[^}]*\} \d+/)
        expect((yield* get(`${url}/nothing`)).status).toBe(404)
        yield* program.kill("SIGTERM")
        expect((yield* program.exited).code).toBe(0)
        const stderr = yield* program.stderr
        expect(stderr.length).toBeGreaterThan(2)
        for (const line of stderr) {
          const parsed = JSON.parse(line) as {
            message: unknown
            logLevel: unknown
            annotations: Record<string, unknown>
          }
          expect(typeof parsed.logLevel).toBe("string")
        }
        // Annotations are fields: the list line (the demo streams it: --list-mode auto) carries its
        // namespace and resourceVersion.
        const listed = stderr.map((l) =>
          JSON.parse(l) as { message: string; annotations: Record<string, unknown> }
        )
          .find((l) => String(l.message).startsWith("streamed "))
        expect(listed?.annotations).toMatchObject({ namespace: "demo", reason: "initial" })
        expect(typeof listed?.annotations.resourceVersion).toBe("string")
      }),
    ProcessTimeout
  )

  it.scopedLive(
    "a selector that does not parse is a usage error before any request: exit 2 with the parser's words",
    () =>
      Effect.gen(function*() {
        const home = yield* tempHome
        const program = yield* Program.start(["--demo", "--selector", "a in (b"], Program.noClusterEnv(home))
        expect((yield* program.exited).code).toBe(2)
        const said = (yield* program.stderr).join("\n")
        expect(said).toContain("--selector \"a in (b\": not a label selector")
        expect(said).toContain("see sandbox-watch --help")
      }),
    ProcessTimeout
  )

  it.scopedLive("--log-level works first or anywhere else on the command line", () =>
    Effect.gen(function*() {
      const home = yield* tempHome
      for (const args of [["--log-level", "warning", "--demo"], ["--demo", "--log-level", "warning"]]) {
        const program = yield* Program.start(
          [...args, "--output", "ndjson", "--duration", "2s"],
          Program.noClusterEnv(home)
        )
        expect((yield* program.exited).code).toBe(0)
        const stderr = yield* program.stderr
        expect(stderr.filter((line) => / INFO /.test(line))).toEqual([])
        expect(stderr.length).toBeGreaterThan(0) // the first line still says what is watched
      }
      const chatty = yield* Program.start(
        ["--demo", "--output", "ndjson", "--duration", "2s"],
        Program.noClusterEnv(home)
      )
      expect((yield* chatty.exited).code).toBe(0)
      expect((yield* chatty.stderr).some((line) => / INFO /.test(line))).toBe(true)
    }), ProcessTimeout)
})

describe("traces over OTLP/HTTP", () => {
  it.scopedLive(
    "with OTEL_EXPORTER_OTLP_ENDPOINT set, the list and watch spans reach a receiver, under OTEL_SERVICE_NAME",
    () =>
      Effect.gen(function*() {
        const received: Array<{ readonly path: string; readonly body: string }> = []
        const receiver = Http.createServer((request, response) => {
          let body = ""
          request.setEncoding("utf8").on("data", (chunk: string) => (body += chunk))
          request.on("end", () => {
            received.push({ path: request.url ?? "", body })
            response.writeHead(200, { "content-type": "application/json" })
            response.end("{}")
          })
        })
        const port = yield* Effect.acquireRelease(
          Effect.async<number>((resume) => {
            receiver.listen(0, "127.0.0.1", () => resume(Effect.succeed((receiver.address() as { port: number }).port)))
          }),
          () => Effect.async<void>((resume) => void receiver.close(() => resume(Effect.void)))
        )
        const home = yield* tempHome
        // Paged, for the list's own span: a streaming list is one watch, traced as KubeClient.watch.
        const program = yield* Program.start([
          "--demo",
          "--output",
          "ndjson",
          "--duration",
          "4s",
          "--list-mode",
          "paged"
        ], {
          ...Program.noClusterEnv(home),
          OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`,
          OTEL_SERVICE_NAME: "sandbox-watch-under-test"
        })
        expect((yield* program.exited).code).toBe(0)
        const traces = received.filter((r) => r.path === "/v1/traces")
        expect(traces.length).toBeGreaterThan(0)
        const all = traces.map((t) => t.body).join("\n")
        expect(all).toContain("\"SandboxWatch.list\"")
        expect(all).toContain("\"KubeClient.watch\"")
        expect(all).toContain("sandbox-watch-under-test")
      }),
    ProcessTimeout
  )
})

describe("Telemetry.readiness", () => {
  const limit = Duration.seconds(270)
  const health = (synced: boolean, lastHeard: Option.Option<number>): SandboxWatch.SandboxWatchHealth => ({
    synced,
    lastHeard,
    answered: Option.isSome(lastHeard),
    relists: 0,
    watchRestarts: 0,
    cached: 0,
    unknown: 0,
    resourceVersion: Option.none(),
    subscribers: 0
  })
  it.each([
    { what: "before the first list", h: health(false, Option.none()), now: 0, ready: false, reason: "first list" },
    {
      what: "synced and heard a second ago",
      h: health(true, Option.some(1_000)),
      now: 2_000,
      ready: true,
      reason: "recently"
    },
    {
      what: "silent for longer than the limit",
      h: health(true, Option.some(0)),
      now: 271_000,
      ready: false,
      reason: "4m 31s"
    }
  ])("$what", ({ h, now, ready, reason }) => {
    const verdict = Telemetry.readiness(h, now, limit)
    expect(verdict.ready).toBe(ready)
    expect(verdict.reason).toContain(reason)
  })
})

describe("Telemetry.serve /readyz against a stalled watch", () => {
  it.scoped("is 200 once synced, and 503 with the reason when the watch has been silent too long", () =>
    Effect.gen(function*() {
      const server = yield* SimulatedApiServer.SimulatedApiServer
      yield* server.create({
        apiVersion: "jr2.dev/v1alpha1",
        kind: "Sandbox",
        metadata: { name: "s1", labels: { "jr2.dev/run": "r" } }
      })
      const watch = yield* SandboxWatch.make({ namespace: "ns", timeoutSeconds: 60, idleMargin: "10 seconds" })
      yield* watch.synced
      const url = yield* Telemetry.serve({ host: "127.0.0.1", port: 0 }, watch, {
        silenceLimit: Duration.seconds(70),
        serviceName: "test",
        serviceVersion: "0"
      })
      expect((yield* get(`${url}/readyz`)).status).toBe(200)
      // The connection stalls: nothing more is heard.
      yield* server.stallWatches
      yield* TestClock.adjust("65 seconds")
      expect((yield* get(`${url}/readyz`)).status).toBe(200)
      yield* TestClock.adjust("10 seconds")
      const notReady = yield* get(`${url}/readyz`)
      expect(notReady.status).toBe(503)
      expect(notReady.body).toContain("not ready: the watch has heard nothing from the cluster for 1m 15s")
    }).pipe(
      Effect.provide(
        KubeClient.layerWith({ headersTimeout: "1 hour", bodyTimeout: "1 hour" }).pipe(
          Layer.provideMerge(SimulatedApiServer.layerWithKubeConfig({ resource: SandboxResource, namespace: "ns" }))
        )
      )
    ))
})
