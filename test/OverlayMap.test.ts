import { describe, expect, it } from "@effect/vitest"
import { type OverlayDraft, OverlayMap } from "../src/internal/overlayMap.ts"

/** Writes in one step, as the cache makes them: a draft, then its version. */
const edit = <V>(map: OverlayMap<V>, write: (draft: OverlayDraft<V>) => void): OverlayMap<V> => {
  const draft = map.beginEdit()
  write(draft)
  return draft.done()
}
const set = <V>(map: OverlayMap<V>, key: string, value: V) => edit(map, (draft) => draft.set(key, value))
const remove = <V>(map: OverlayMap<V>, key: string) => edit(map, (draft) => draft.remove(key))

/** A small seeded generator, so a failure names the run that found it. */
const random = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}

const contents = <V>(map: Iterable<[string, V]>) => Array.from(map).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))

const expectSame = (map: OverlayMap<number>, reference: ReadonlyMap<string, number>, keys: ReadonlyArray<string>) => {
  expect(map.size).toBe(reference.size)
  expect(contents(map)).toEqual(contents(reference))
  for (const key of keys) {
    expect(map.get(key)).toBe(reference.get(key))
    expect(map.has(key)).toBe(reference.has(key))
  }
}

describe("OverlayMap", () => {
  it("answers as a Map would through every write, and every earlier version stays as it was", () => {
    for (const [seed, baseSize, keySpace, steps] of [[1, 0, 40, 400], [2, 10, 30, 600], [3, 500, 900, 3000]] as const) {
      const next = random(seed)
      const keys = Array.from({ length: keySpace }, (_, i) => `k${i}`)
      const reference = new Map<string, number>()
      for (let i = 0; i < baseSize; i++) reference.set(keys[i]!, i)
      let map = OverlayMap.fromMap(new Map(reference))
      const versions: Array<[OverlayMap<number>, Map<string, number>]> = [[map, new Map(reference)]]
      for (let step = 0; step < steps; step++) {
        const key = keys[Math.floor(next() * keySpace)]!
        const roll = next()
        if (roll < 0.55) {
          map = set(map, key, step)
          reference.set(key, step)
        } else if (roll < 0.85) {
          map = remove(map, key)
          reference.delete(key)
        } else {
          // A batch in one draft: its reads see its own writes.
          map = edit(map, (draft) => {
            for (let i = 0; i < 5; i++) {
              const k = keys[Math.floor(next() * keySpace)]!
              if (next() < 0.6) {
                draft.set(k, -step)
                reference.set(k, -step)
              } else {
                draft.remove(k)
                reference.delete(k)
              }
              expect(draft.get(k)).toBe(reference.get(k))
            }
          })
        }
        if (step % 50 === 0) versions.push([map, new Map(reference)])
      }
      expectSame(map, reference, keys)
      for (const [version, then] of versions) expectSame(version, then, keys)
    }
  })

  it("set makes the version a draft's set then done would: same answers, same layout, earlier versions whole", () => {
    for (
      const [seed, baseSize, keySpace, steps] of [[4, 0, 40, 300], [5, 400, 600, 400], [6, 1000, 1200, 600]] as const
    ) {
      const next = random(seed)
      const keys = Array.from({ length: keySpace }, (_, i) => `k${i}`)
      const reference = new Map<string, number>()
      for (let i = 0; i < baseSize; i++) reference.set(keys[i]!, i)
      let drafted = OverlayMap.fromMap(new Map(reference))
      let direct = OverlayMap.fromMap(new Map(reference))
      const versions: Array<[OverlayMap<number>, Map<string, number>]> = []
      for (let step = 0; step < steps; step++) {
        const key = keys[Math.floor(next() * keySpace)]!
        if (next() < 0.8) {
          drafted = set(drafted, key, step)
          direct = direct.set(key, step)
          reference.set(key, step)
        } else {
          drafted = remove(drafted, key)
          direct = remove(direct, key)
          reference.delete(key)
        }
        expect([direct.baseNames, direct.overlayNames, direct.size]).toEqual([
          drafted.baseNames,
          drafted.overlayNames,
          drafted.size
        ])
        if (step % 50 === 0) versions.push([direct, new Map(reference)])
      }
      expectSame(direct, reference, keys)
      for (const [version, then] of versions) expectSame(version, then, keys)
    }
  })

  it("moves the list's entries into the overlay once the changes are a quarter of them, keeping the old version whole", () => {
    const base = new Map(Array.from({ length: 1000 }, (_, i) => [`k${i}`, i] as [string, number]))
    const listed = OverlayMap.fromMap(base)
    let map = listed
    const layouts: Array<readonly [number, number]> = []
    for (let i = 0; i < 300; i++) {
      map = i % 3 === 0 ? remove(map, `k${i}`) : set(map, `k${i}`, -i)
      layouts.push([map.baseNames, map.overlayNames])
    }
    // 250 changes are a quarter of the base: the 251st write moves the rest in (the 84 removed
    // names leave), and the overlay is the whole map from then on.
    expect(layouts[249]).toEqual([1000, 250])
    expect(layouts[250]).toEqual([0, 1000 - 84])
    expect(layouts[299]).toEqual([0, 900])
    // The list's Map itself is never written: the first version still reads it as it came.
    expect(base.size).toBe(1000)
    expect(base.get("k0")).toBe(0)
    expect(listed.get("k0")).toBe(0)
    expect(listed.size).toBe(1000)
    expect(map.size).toBe(900)
    expect(map.get("k0")).toBeUndefined()
    expect(map.get("k1")).toBe(-1)
    expect(map.get("k999")).toBe(999)
  })

  it("a name the base never had leaves the overlay when removed; a name removed twice counts once", () => {
    const map = OverlayMap.fromMap(new Map([["a", 1]]))
    const added = set(map, "b", 2)
    expect(added.size).toBe(2)
    const gone = ["b", "b", "a", "a"].reduce((m, key) => remove(m, key), added)
    expect(gone.size).toBe(0)
    expect(contents(gone)).toEqual([])
    expect(contents(added)).toEqual([["a", 1], ["b", 2]])
    expect(gone.getOption("a")._tag).toBe("None")
    expect(added.getOption("b")._tag).toBe("Some")
  })
})
