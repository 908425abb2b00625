import { describe, expect, it } from "@effect/vitest"
import { isOlder } from "../src/internal/resourceVersion.ts"

/** A decimal of 1–25 digits, sometimes with leading zeros (big enough to pass 2^53). */
const randomDecimal = (random: () => number): string => {
  const zeros = random() < 0.2 ? "0".repeat(1 + Math.floor(random() * 3)) : ""
  const length = 1 + Math.floor(random() * 25)
  let digits = ""
  for (let i = 0; i < length; i++) digits += String(Math.floor(random() * 10))
  return zeros + digits
}

/** A small seeded generator, so a failure can be replayed. */
const seeded = (seed: number) => () => {
  seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648
  return seed / 2_147_483_648
}

describe("resourceVersion ordering", () => {
  it("orders decimals as the numbers they are, leading zeros and all, past 2^53", () => {
    const random = seeded(20_261_204)
    for (let i = 0; i < 5_000; i++) {
      const a = randomDecimal(random)
      // Half the time a neighbour of `a`, so equal and adjacent values are tried too.
      const b = random() < 0.5 ? randomDecimal(random) : String(BigInt(a) + BigInt(Math.floor(random() * 3) - 1))
      if (b.startsWith("-")) continue
      expect([a, b, isOlder(a, b)]).toEqual([a, b, BigInt(a) < BigInt(b)])
    }
  })

  it("says not older whenever either side is not a decimal: the cluster's word is taken", () => {
    for (const [a, b] of [["", "5"], ["5", ""], ["12a", "13"], ["13", "1e9"], ["-1", "2"], [" 1", "2"], ["１", "2"]]) {
      expect([a, b, isOlder(a!, b!)]).toEqual([a, b, false])
    }
  })

  it("is strict: a version is not older than itself or a zero-padded copy of itself", () => {
    expect(isOlder("42", "42")).toBe(false)
    expect(isOlder("0042", "42")).toBe(false)
    expect(isOlder("0", "000")).toBe(false)
    expect(isOlder("9", "10")).toBe(true)
    expect(isOlder("10", "9")).toBe(false)
  })
})
