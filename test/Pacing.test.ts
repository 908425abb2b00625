/**
 * Every pause's length (`src/internal/pacing.ts`): the counted back-off, the reconnect pace, the
 * beat, and the one rule that forgets them. Pure: a record in, a delay and the next record out.
 */
import { Duration, FastCheck } from "effect"
import { describe, expect, it } from "vitest"
import * as Pacing from "../src/internal/pacing.ts"

const { Pause } = Pacing

const settings: Pacing.PacingSettings = {
  floor: Duration.millis(500),
  cap: Duration.seconds(30),
  reconnectCap: Duration.seconds(1),
  resetAfter: Duration.minutes(2),
  jitter: false
}

/** Takes `pauses` one after another, each retry going as soon as its pause ends; their delays. */
const delaysOf = (pauses: ReadonlyArray<Pacing.Pause>, from: Pacing.Pacer = Pacing.fresh, start = 0) => {
  let pacer = from
  let now = start
  const delays: Array<number> = []
  for (const pause of pauses) {
    const decision = Pacing.decide(pacer, pause, now, settings, 0.5)
    pacer = decision.pacer
    delays.push(Duration.toMillis(decision.delay))
    now += Duration.toMillis(decision.delay)
  }
  return { delays, pacer, now }
}

const times = <A>(n: number, a: A): Array<A> => Array.from({ length: n }, () => a)

describe("pacing", () => {
  it("answered failures: the floor, doubling to the cap", () => {
    expect(delaysOf(times(9, Pause.Backoff())).delays).toEqual([
      500,
      1_000,
      2_000,
      4_000,
      8_000,
      16_000,
      30_000,
      30_000,
      30_000
    ])
  })

  it("5. re-lists: the first at once, then the same doubling", () => {
    expect(delaysOf(times(8, Pause.Relist())).delays).toEqual([0, 1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000])
  })

  it("re-lists and answered failures share one count: the first re-list goes at once, the next waits the count's step", () => {
    expect(
      delaysOf([Pause.Backoff(), Pause.Backoff(), Pause.Backoff(), Pause.Relist(), Pause.Backoff(), Pause.Relist()])
        .delays
    ).toEqual([500, 1_000, 2_000, 0, 8_000, 16_000])
  })

  it("7. a watch that spoke and broke off: the first resume at once, then the shared count's steps", () => {
    expect(delaysOf(times(7, Pause.Resume())).delays).toEqual([0, 500, 1_000, 2_000, 4_000, 8_000, 16_000])
    // The first counts nothing: the failures after it pause as if the watch had not been cut.
    expect(delaysOf([Pause.Resume(), Pause.Backoff(), Pause.Backoff()]).delays).toEqual([0, 500, 1_000])
    // Its own first-at-once: a re-list after it still goes at once, and the count is shared.
    expect(delaysOf([Pause.Resume(), Pause.Relist(), Pause.Resume(), Pause.Backoff()]).delays).toEqual([
      0,
      0,
      1_000,
      2_000
    ])
    // Once it has gone at once, again at once only once the counts are forgotten.
    const resumed = delaysOf([Pause.Resume(), Pause.Resume()])
    expect(delaysOf([Pause.Resume()], resumed.pacer, resumed.now + 119_999).delays).toEqual([1_000])
    expect(delaysOf([Pause.Resume()], resumed.pacer, resumed.now + 120_000).delays).toEqual([0])
  })

  it("6. Retry-After: what the server asked, or the back-off when that is longer", () => {
    const asked = Pause.RetryAfter({ delay: Duration.seconds(3) })
    expect(delaysOf([asked, asked, asked, asked, asked]).delays).toEqual([3_000, 3_000, 3_000, 4_000, 8_000])
  })

  it("7. no answer: the floor doubling to reconnectCap, and it does not grow the back-off", () => {
    const { delays, pacer } = delaysOf(times(5, Pause.Reconnect()))
    expect(delays).toEqual([500, 1_000, 1_000, 1_000, 1_000])
    expect(pacer.counted).toBe(0)
    // The next answered failure pauses as the first.
    expect(delaysOf([Pause.Backoff()], pacer).delays).toEqual([500])
  })

  it("7. an answer that is a failure ends a row of no answers; hearing alone does not exist here", () => {
    const { delays } = delaysOf([Pause.Reconnect(), Pause.Reconnect(), Pause.Backoff(), Pause.Reconnect()])
    expect(delays).toEqual([500, 1_000, 500, 500])
  })

  it("3. a beat is one floor, and changes no count and no clock of the reset", () => {
    const before = delaysOf([Pause.Backoff(), Pause.Backoff()])
    const beat = Pacing.decide(before.pacer, Pause.Beat(), before.now, settings, 0.5)
    expect(Duration.toMillis(beat.delay)).toBe(500)
    expect(beat.pacer).toEqual(before.pacer)
  })

  it("the counts are forgotten once resetAfter passed since the last paused retry, and not a millisecond sooner", () => {
    const { now, pacer } = delaysOf(times(6, Pause.Backoff()))
    const justBefore = Pacing.decide(pacer, Pause.Backoff(), now + 120_000 - 1, settings, 0.5)
    expect(Duration.toMillis(justBefore.delay)).toBe(30_000)
    const after = Pacing.decide(pacer, Pause.Backoff(), now + 120_000, settings, 0.5)
    expect(Duration.toMillis(after.delay)).toBe(500)
    expect(after.pacer.counted).toBe(1)
    // A re-list, once it has gone at once, goes at once again only once the counts are forgotten.
    const relisted = delaysOf([Pause.Relist(), Pause.Relist()])
    expect(relisted.delays).toEqual([0, 1_000])
    expect(delaysOf([Pause.Relist()], relisted.pacer, relisted.now + 120_000).delays).toEqual([0])
  })

  it("a row of no answers is forgotten by the same rule", () => {
    const { now, pacer } = delaysOf(times(4, Pause.Reconnect()))
    expect(Duration.toMillis(Pacing.decide(pacer, Pause.Reconnect(), now + 60_000, settings, 0.5).delay)).toBe(1_000)
    expect(Duration.toMillis(Pacing.decide(pacer, Pause.Reconnect(), now + 120_000, settings, 0.5).delay)).toBe(500)
  })

  it("jitter: an answered failure never waits under the floor nor over the cap; no answer is spread upward only", () => {
    const jittered = { ...settings, jitter: true }
    FastCheck.assert(
      FastCheck.property(
        FastCheck.array(
          FastCheck.constantFrom<Pacing.Pause>(Pause.Backoff(), Pause.Relist(), Pause.Resume(), Pause.Reconnect()),
          { maxLength: 20 }
        ),
        FastCheck.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        (pauses, unit) => {
          let pacer = Pacing.fresh
          let now = 0
          for (const pause of pauses) {
            const decision = Pacing.decide(pacer, pause, now, jittered, unit)
            const millis = Duration.toMillis(decision.delay)
            if (pause._tag === "Backoff") expect(millis).toBeGreaterThanOrEqual(500)
            if (pause._tag === "Relist" && Pacing.current(pacer, now, jittered).relisted) {
              expect(millis).toBeGreaterThanOrEqual(500)
            }
            if (pause._tag === "Resume" && Pacing.current(pacer, now, jittered).resumed) {
              expect(millis).toBeGreaterThanOrEqual(500)
            }
            if (pause._tag === "Reconnect") {
              expect(millis).toBeGreaterThanOrEqual(500)
              expect(millis).toBeLessThanOrEqual(1_250)
            }
            expect(millis).toBeLessThanOrEqual(30_000)
            pacer = decision.pacer
            now += millis
          }
        }
      )
    )
  })

  /**
   * The ceiling against any server: whatever pauses it calls for and however long its rounds run
   * (a round long enough lets the counts be forgotten), at most about 30 counted retries go in any
   * 10 minutes. With jitter at its lowest the cap's pause is 24 s: 7 retries in the first ~49 s,
   * then one every 24 s, 30 in all, one more where a window's edge falls, and one first resume
   * (at once and uncounted, rule 7).
   */
  it("over any 10 minutes, at most 32 retries of the counted kinds, whatever the server does", () => {
    const Ceiling = 32
    FastCheck.assert(
      FastCheck.property(
        FastCheck.array(
          FastCheck.record({
            pause: FastCheck.constantFrom<Pacing.Pause>(
              Pause.Backoff(),
              Pause.Relist(),
              Pause.Resume(),
              Pause.Reconnect(),
              Pause.Beat(),
              Pause.RetryAfter({ delay: Duration.millis(500) })
            ),
            // How long the round ran before it called for the pause: often nothing, sometimes long
            // enough to be forgotten.
            ranMillis: FastCheck.oneof(
              { arbitrary: FastCheck.constant(0), weight: 12 },
              { arbitrary: FastCheck.integer({ min: 0, max: 5_000 }), weight: 4 },
              { arbitrary: FastCheck.integer({ min: 100_000, max: 200_000 }), weight: 1 }
            ),
            unit: FastCheck.double({ min: 0, max: 1, maxExcluded: true, noNaN: true })
          }),
          { minLength: 100, maxLength: 600, size: "max" }
        ),
        (rounds) => {
          const jittered = { ...settings, jitter: true }
          let pacer = Pacing.fresh
          let now = 0
          const counted: Array<number> = []
          for (const round of rounds) {
            now += round.ranMillis
            const decision = Pacing.decide(pacer, round.pause, now, jittered, round.unit)
            now += Duration.toMillis(decision.delay)
            if (round.pause._tag !== "Reconnect" && round.pause._tag !== "Beat") {
              counted.push(now)
            }
            pacer = decision.pacer
          }
          let start = 0
          for (let end = 0; end < counted.length; end++) {
            while (counted[end]! - counted[start]! >= 600_000) start++
            expect(end - start + 1).toBeLessThanOrEqual(Ceiling)
          }
        }
      ),
      { numRuns: 100 }
    )
  })
})
