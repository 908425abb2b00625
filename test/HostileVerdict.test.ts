import { describe, expect, it } from "@effect/vitest"
import { modes } from "./bench/hostileModes.ts"
import { type Expectation, judge, type Observation, type WatchFigures, watchFiguresOf } from "./bench/hostileVerdict.ts"

/** A run that lived to its duration on the path it names, under any ceiling; `watch` as given. */
const observed = (watch: Partial<WatchFigures> | undefined, more: Partial<Observation> = {}): Observation => ({
  kind: "stream",
  exit: { code: 0, signal: null, killed: false },
  peakRssMiB: 300,
  defect: false,
  served: { pagedLists: 0, streamingLists: 1 },
  healthy: 40,
  watch: watch === undefined
    ? undefined
    : { initialLists: 0, cached: 0, decodeFailures: 0, restarts: {}, ...watch },
  landed: undefined,
  told: 0,
  ...more
})

const syncedTen: Expectation = { outcome: { _tag: "Synced", cached: 10 }, rssCeilingMiB: 384 }
const tooLarge: Expectation = { outcome: { _tag: "Refused", reason: "too-large" }, rssCeilingMiB: 512 }

describe("the hostile bench's checker", () => {
  it("passes a row that did what it names", () => {
    expect(judge(syncedTen, observed({ initialLists: 1, cached: 10 }, { told: 10 }))).toEqual({
      pass: true,
      failures: []
    })
    expect(judge(tooLarge, observed({ restarts: { "too-large": 3 } }, { peakRssMiB: 350 })).pass).toBe(true)
  })

  it("fails a row that never listed: the old bench's baseline, a streaming list answered with a silent 200", () => {
    const verdict = judge(syncedTen, observed({}))
    expect(verdict.pass).toBe(false)
    expect(verdict.failures).toEqual(["never synced"])
  })

  it("takes the log's word for a landing the last scrape missed, and holds it to the count", () => {
    expect(judge(syncedTen, observed({}, { landed: 10 })).pass).toBe(true)
    expect(judge(syncedTen, observed({}, { landed: 9 })).failures).toEqual(["synced with 9 cached, not 10"])
    expect(judge(tooLarge, observed({ restarts: { "too-large": 1 } }, { landed: 3 })).failures).toEqual([
      "synced (3 cached) instead of refusing"
    ])
  })

  it("fails a row that synced with other than the Sandboxes it names", () => {
    expect(judge(syncedTen, observed({ initialLists: 1, cached: 9 })).failures).toEqual([
      "synced with 9 cached, not 10"
    ])
  })

  it("fails a refusal that did not happen: the 256 KB objects read on, past the ceiling", () => {
    const verdict = judge(tooLarge, observed({}, { peakRssMiB: 873 }))
    expect(verdict.pass).toBe(false)
    expect(verdict.failures).toEqual([
      "peak RSS 873 MiB over the 512 MiB ceiling",
      "never refused as too-large"
    ])
  })

  it("fails a refusal for another reason, or one that synced anyway", () => {
    expect(judge(tooLarge, observed({ restarts: { "line-too-long": 2 } })).failures).toEqual([
      "never refused as too-large",
      "restarted for line-too-long ×2"
    ])
    expect(judge(tooLarge, observed({ initialLists: 1, cached: 4, restarts: { "too-large": 1 } })).failures)
      .toEqual(["synced (4 cached) instead of refusing"])
  })

  it("fails a row whose program did not live to its duration, hung, or reported a defect", () => {
    const refusedOnce = { restarts: { "too-large": 1 } }
    expect(judge(tooLarge, observed(refusedOnce, { exit: { code: 134, signal: null, killed: false } })).failures)
      .toEqual(["did not live to its --duration: exit 134"])
    expect(judge(tooLarge, observed(refusedOnce, { exit: { code: null, signal: "SIGABRT", killed: false } })).pass)
      .toBe(false)
    expect(judge(tooLarge, observed(refusedOnce, { exit: { code: null, signal: "SIGKILL", killed: true } })).failures)
      .toEqual(["hung: killed by the bench past its duration"])
    expect(judge(tooLarge, observed(refusedOnce, { defect: true })).failures).toEqual(["stderr reports a defect"])
  })

  it("fails a row whose hostile payload was not received on the path it names", () => {
    const done = { initialLists: 1, cached: 10 }
    expect(judge(syncedTen, observed(done, { served: { pagedLists: 0, streamingLists: 0 } })).failures).toEqual([
      "not the streaming path: 0 streaming lists, 0 paged list requests"
    ])
    expect(judge(syncedTen, observed(done, { kind: "paged", served: { pagedLists: 1, streamingLists: 1 } })).failures)
      .toEqual(["not the paged path: 1 paged list requests, 1 streaming lists"])
  })

  it("fails a row it cannot see: no /metrics, no /healthz", () => {
    expect(judge(syncedTen, observed(undefined, { healthy: 0 })).failures).toEqual([
      "/healthz never answered 200",
      "/metrics never answered: what the watch did is unknown"
    ])
  })

  it("holds a synced row to its restarts and decode failures, both ways", () => {
    const malformed: Expectation = {
      outcome: { _tag: "Synced", cached: 1, restarts: ["malformed"] },
      rssCeilingMiB: 384
    }
    expect(judge(malformed, observed({ initialLists: 1, cached: 1 })).failures).toEqual(["no restart for malformed"])
    expect(judge(malformed, observed({ initialLists: 1, cached: 1, restarts: { malformed: 2, "500": 1 } })).failures)
      .toEqual(["restarted for 500 ×1"])
    const decoded: Expectation = {
      outcome: { _tag: "Synced", cached: 1, decodeFailures: "some" },
      rssCeilingMiB: 384
    }
    expect(judge(decoded, observed({ initialLists: 1, cached: 1 })).failures).toEqual(["no decode failure counted"])
    expect(judge(syncedTen, observed({ initialLists: 1, cached: 10, decodeFailures: 2 })).failures).toEqual([
      "2 decode failures counted"
    ])
  })

  it("fails a list that never ends if it synced, told, or restarted for a reason not allowed", () => {
    const endless: Expectation = {
      outcome: { _tag: "Unfinished", allowedRestarts: ["too-large"] },
      rssCeilingMiB: 512
    }
    expect(judge(endless, observed({})).pass).toBe(true)
    expect(judge(endless, observed({ restarts: { "too-large": 2 } })).pass).toBe(true)
    expect(judge(endless, observed({ initialLists: 1, cached: 1 }, { told: 1 })).failures).toEqual([
      "synced (1 cached) a list that never ends",
      "told 1 changes"
    ])
    expect(judge(endless, observed({ restarts: { idle: 1 } })).failures).toEqual(["restarted for idle ×1"])
  })
})

describe("the watch's figures from /metrics", () => {
  it("reads the list, cache, decode and restart series, ignoring the others", () => {
    const scrape = [
      "# HELP sandbox_watch_restarts_total Watch rounds that ended in a failure, by reason",
      `sandbox_watch_restarts_total{reason="too-large",otel_scope_name="@effect/opentelemetry/Metrics"} 3`,
      `sandbox_watch_restarts_total{reason="500",otel_scope_name="@effect/opentelemetry/Metrics"} 1`,
      `sandbox_watch_relists_total{reason="initial",otel_scope_name="@effect/opentelemetry/Metrics"} 1`,
      `sandbox_watch_relists_total{reason="expired",otel_scope_name="@effect/opentelemetry/Metrics"} 2`,
      `sandbox_watch_cached_sandboxes{otel_scope_name="@effect/opentelemetry/Metrics"} 4`,
      `sandbox_watch_decode_failures_total{otel_scope_name="@effect/opentelemetry/Metrics"} 5`,
      `process_resident_memory_bytes{otel_scope_name="@effect/opentelemetry/Metrics"} 294821888`
    ].join("\n")
    expect(watchFiguresOf(scrape)).toEqual({
      initialLists: 1,
      cached: 4,
      decodeFailures: 5,
      restarts: { "too-large": 3, "500": 1 }
    })
  })

  it("reads a scrape before anything was counted as nothing done", () => {
    expect(watchFiguresOf(`target_info{service_name="sandbox-watch"} 1\n`)).toEqual({
      initialLists: 0,
      cached: 0,
      decodeFailures: 0,
      restarts: {}
    })
  })
})

describe("the hostile modes", () => {
  it("are each checked on every list path they serve, and only those", () => {
    for (const mode of modes) {
      expect({ id: mode.id, paged: mode.expect.paged !== undefined }).toEqual({
        id: mode.id,
        paged: mode.list !== undefined
      })
      expect({ id: mode.id, stream: mode.expect.stream !== undefined }).toEqual({
        id: mode.id,
        stream: mode.streamingList !== undefined
      })
    }
  })
})
