/**
 * The cache's rules (10–14 of `src/internal/watchMachine.ts`) as plain functions: what a list or a
 * batch of events makes of the cache, and whom it tells, collected into an array.
 */
import { Chunk, HashMap, Option } from "effect"
import { describe, expect, it } from "vitest"
import * as SandboxCache from "../src/internal/sandboxCache.ts"
import type { FullList } from "../src/KubeClient.ts"
import type { Sandbox } from "../src/Sandbox.ts"
import type { UndecodableEvent, WatchEvent } from "../src/WatchEvent.ts"
import { added, bookmark, deleted, modified, sandbox } from "./support/ScriptedKubeClient.ts"

const collector = () => {
  const told: Array<string> = []
  const tell: SandboxCache.Tell = (name, value) =>
    told.push(
      Option.match(value, { onNone: () => `${name}:gone`, onSome: (s) => `${name}@${s.metadata.resourceVersion}` })
    )
  return { told, tell }
}

const list = (
  resourceVersion: string,
  items: ReadonlyArray<Sandbox>,
  undecodable: ReadonlyArray<UndecodableEvent> = []
): FullList<Sandbox> => ({
  items,
  undecodable,
  resourceVersion,
  pages: 1,
  restarts: 0
})

const undecodableItem = (
  name: string,
  resourceVersion: string,
  eventType: UndecodableEvent["eventType"] = "ADDED"
): UndecodableEvent => ({
  type: "UNDECODABLE",
  eventType,
  name,
  resourceVersion,
  problem: "status.phase: expected string, got 42"
})

const cached = (cache: SandboxCache.SandboxCache) =>
  Array.from(cache.objects).map(([name, s]) => `${name}@${s.metadata.resourceVersion}`).sort()

/** A cache that has listed `items` at `resourceVersion`. */
const listed = (resourceVersion: string, ...items: ReadonlyArray<Sandbox>) =>
  SandboxCache.applyList(SandboxCache.empty, list(resourceVersion, items), [], () => {}).cache

const events = (cache: SandboxCache.SandboxCache, batch: ReadonlyArray<WatchEvent<Sandbox>>, from = "10") => {
  const { tell, told } = collector()
  const applied = SandboxCache.applyEvents(cache, batch, from, tell)
  return { applied, told }
}

describe("sandboxCache.applyList", () => {
  it("10. the first list tells every name it holds and every waited-on name it does not, gone", () => {
    const { tell, told } = collector()
    const { cache } = SandboxCache.applyList(SandboxCache.empty, list("10", [sandbox("a", "5")]), ["a", "b"], tell)
    expect(told.sort()).toEqual(["a@5", "b:gone"])
    expect(cache.synced).toBe(true)
  })

  it("13. bug 1: a waited-on name the first list holds only undecodable is not told gone; it is unknown", () => {
    const { tell, told } = collector()
    const { cache } = SandboxCache.applyList(
      SandboxCache.empty,
      list("10", [sandbox("a", "5")], [undecodableItem("b", "7")]),
      ["a", "b", "c"],
      tell
    )
    expect(told.sort()).toEqual(["a@5", "c:gone"])
    expect(HashMap.has(cache.unknown, "b")).toBe(true)
    expect(cache.objects.has("b")).toBe(false)
  })

  it("11. a later list tells exactly the names that changed or went", () => {
    const before = listed("10", sandbox("a", "5"), sandbox("b", "6"), sandbox("c", "7"))
    const { tell, told } = collector()
    const { cache } = SandboxCache.applyList(before, list("20", [sandbox("a", "5"), sandbox("b", "16")]), ["a"], tell)
    expect(told.sort()).toEqual(["b@16", "c:gone"])
    expect(cached(cache)).toEqual(["a@5", "b@16"])
  })

  it("13. a cached object the list carries undecodable keeps its value, untold", () => {
    const before = listed("10", sandbox("a", "5"))
    const { tell, told } = collector()
    const { cache } = SandboxCache.applyList(before, list("20", [], [undecodableItem("a", "15")]), [], tell)
    expect(told).toEqual([])
    expect(cached(cache)).toEqual(["a@5"])
  })

  it("14. a stale cached copy in the list is not told: the newer cached object is kept", () => {
    const before = events(listed("10", sandbox("a", "5")), [modified(sandbox("a", "30"))]).applied.cache
    const { tell, told } = collector()
    const { cache } = SandboxCache.applyList(before, list("25", [sandbox("a", "20")]), [], tell)
    expect(told).toEqual([])
    expect(cached(cache)).toEqual(["a@30"])
  })

  it("14. a list older than a cached object cannot prove it gone", () => {
    const before = events(listed("10"), [added(sandbox("a", "30"))]).applied.cache
    const { tell, told } = collector()
    const { cache } = SandboxCache.applyList(before, list("25", []), [], tell)
    expect(told).toEqual([])
    expect(cached(cache)).toEqual(["a@30"])
    // ... while a list at or past it can.
    const after = collector()
    SandboxCache.applyList(cache, list("31", []), [], after.tell)
    expect(after.told).toEqual(["a:gone"])
  })

  it("14. tombstones: a lagging list cannot bring back an older state of a name told deleted", () => {
    const { applied, told } = events(listed("10", sandbox("a", "5")), [deleted(sandbox("a", "30"))])
    expect(told).toEqual(["a:gone"])
    const lagging = collector()
    const { cache } = SandboxCache.applyList(applied.cache, list("25", [sandbox("a", "20")]), [], lagging.tell)
    expect(lagging.told).toEqual([])
    expect(cached(cache)).toEqual([])
    // A re-creation after the deletion is news.
    const recreated = collector()
    const later = SandboxCache.applyList(cache, list("45", [sandbox("a", "40")]), [], recreated.tell)
    expect(recreated.told).toEqual(["a@40"])
    expect(HashMap.has(later.cache.tombstones, "a")).toBe(false)
  })

  it("14. a name a list proves gone gets a tombstone too", () => {
    const before = listed("10", sandbox("a", "5"))
    const { cache } = SandboxCache.applyList(before, list("20", []), [], () => {})
    expect(Option.getOrUndefined(HashMap.get(cache.tombstones, "a"))).toBe("20")
    const lagging = collector()
    SandboxCache.applyList(cache, list("15", [sandbox("a", "5")]), [], lagging.tell)
    expect(lagging.told).toEqual([])
  })

  it("tombstones are bounded: past the limit a list keeps the newest", () => {
    let cache = listed("1")
    const deletions = Array.from(
      { length: SandboxCache.MaxTombstones + 10 },
      (_, i) => deleted(sandbox(`s${i}`, String(100 + i)))
    )
    cache = events(cache, deletions).applied.cache
    expect(HashMap.size(cache.tombstones)).toBe(SandboxCache.MaxTombstones + 10)
    cache = SandboxCache.applyList(cache, list("99999", []), [], () => {}).cache
    expect(HashMap.size(cache.tombstones)).toBe(SandboxCache.MaxTombstones)
    expect(HashMap.has(cache.tombstones, "s0")).toBe(false)
    expect(HashMap.has(cache.tombstones, `s${SandboxCache.MaxTombstones + 9}`)).toBe(true)
  })

  it("13. an unknown name a later list does not carry at all is told gone; one it carries decodable is told present", () => {
    const first = SandboxCache.applyList(
      SandboxCache.empty,
      list("10", [], [undecodableItem("b", "7"), undecodableItem("c", "8")]),
      ["b", "c"],
      () => {}
    ).cache
    const { tell, told } = collector()
    const { cache } = SandboxCache.applyList(first, list("20", [sandbox("c", "18")]), [], tell)
    expect(told.sort()).toEqual(["b:gone", "c@18"])
    expect(HashMap.size(cache.unknown)).toBe(0)
  })

  it("13, 14. an unknown name a lagging list does not carry stays unknown, untold; a list at or past where it was heard tells it gone", () => {
    const first = listed("10")
    // Heard undecodable at 30, then at an older 25 (a stale event): 30 is kept.
    const heard = events(first, [undecodableItem("b", "30"), undecodableItem("b", "25", "MODIFIED")]).applied.cache
    expect(HashMap.get(heard.unknown, "b")).toEqual(Option.some("30"))
    const lagging = collector()
    const kept = SandboxCache.applyList(heard, list("29", []), [], lagging.tell).cache
    expect(lagging.told).toEqual([])
    expect(HashMap.get(kept.unknown, "b")).toEqual(Option.some("30"))
    for (const at of ["30", "31"]) {
      const current = collector()
      const { cache } = SandboxCache.applyList(kept, list(at, []), [], current.tell)
      expect(current.told).toEqual(["b:gone"])
      expect(HashMap.size(cache.unknown)).toBe(0)
    }
  })

  // Review 2 (of the review 46 fixes): rule 14 says a list older than where an unknown name was
  // heard "is not told ... which leaves it unknown". A lagging list that carries an older state of
  // the name that does decode (the name was modified into a shape we cannot read at 30) tells that
  // older state as the name's present and forgets that a newer one was heard, as it would not for a
  // cached object (a cached b@30 is kept over the list's b@8).
  it("13, 14. a lagging list older than where an unknown name was heard does not tell the list's older decodable copy", () => {
    const heard = events(listed("10"), [undecodableItem("b", "30", "MODIFIED")]).applied.cache
    expect(HashMap.get(heard.unknown, "b")).toEqual(Option.some("30"))
    const lagging = collector()
    const kept = SandboxCache.applyList(heard, list("29", [sandbox("b", "8")]), [], lagging.tell).cache
    expect(lagging.told).toEqual([])
    expect(HashMap.get(kept.unknown, "b")).toEqual(Option.some("30"))
    expect(kept.objects.has("b")).toBe(false)
  })
})

describe("sandboxCache.applyEvents", () => {
  it("tombstones stay bounded on a watch that never lists again: its events prune back to the newest", () => {
    // One deletion per batch, as a watch applies them, for far longer than the limit.
    let cache = listed("1")
    let largest = 0
    const deletions = 3 * SandboxCache.MaxTombstones
    for (let i = 0; i < deletions; i++) {
      cache = events(cache, [deleted(sandbox(`s${i}`, String(100 + i)))], String(99 + i)).applied.cache
      largest = Math.max(largest, HashMap.size(cache.tombstones))
    }
    expect(largest).toBe(2 * SandboxCache.MaxTombstones)
    expect(HashMap.size(cache.tombstones)).toBeLessThanOrEqual(2 * SandboxCache.MaxTombstones)
    expect(HashMap.has(cache.tombstones, "s0")).toBe(false)
    // The newest deletion is still remembered: a replay of an older state of it is not a re-creation.
    const newest = `s${deletions - 1}`
    expect(HashMap.has(cache.tombstones, newest)).toBe(true)
    const replay = events(cache, [added(sandbox(newest, "50"))], String(99 + deletions))
    expect(replay.told).toEqual([])
    expect(replay.applied.stale).toBe(1)
  })

  it("a one-event chunk (the steady state's, applied without a draft) makes what the loop makes of it", () => {
    const base = SandboxCache.applyList(
      listed("10", sandbox("a", "5"), sandbox("b", "6")),
      list("12", [sandbox("a", "5"), sandbox("b", "6"), sandbox("c", "7")], [undecodableItem("u", "8")]),
      [],
      () => {}
    ).cache
    const withTombstone = events(base, [deleted(sandbox("d", "13"))], "12").applied.cache
    const cases: ReadonlyArray<readonly [SandboxCache.SandboxCache, WatchEvent<Sandbox>]> = [
      [base, modified(sandbox("a", "20"))],
      [base, added(sandbox("b", "20"))],
      [base, modified(sandbox("a", ""))],
      [base, modified(sandbox("a", "3"))], // stale
      [base, modified(sandbox("new", "20"))], // not cached
      [base, deleted(sandbox("a", "20"))],
      [withTombstone, modified(sandbox("c", "20"))],
      [withTombstone, modified(sandbox("d", "12"))] // no newer than its deletion
    ]
    for (const [cache, event] of cases) {
      const one = collector()
      const viaChunk = SandboxCache.applyEvents(cache, Chunk.of(event), "12", one.tell)
      const loop = collector()
      const viaLoop = SandboxCache.applyEvents(cache, [event], "12", loop.tell)
      expect(one.told).toEqual(loop.told)
      expect(cached(viaChunk.cache)).toEqual(cached(viaLoop.cache))
      expect(viaChunk.cache.objects.size).toBe(viaLoop.cache.objects.size)
      expect([...viaChunk.cache.unknown].sort()).toEqual([...viaLoop.cache.unknown].sort())
      expect([...viaChunk.cache.tombstones].sort()).toEqual([...viaLoop.cache.tombstones].sort())
      const { cache: _chunkCache, ...chunkRest } = viaChunk
      const { cache: _loopCache, ...loopRest } = viaLoop
      expect(chunkRest).toEqual(loopRest)
    }
  })

  it("2. keeps the newest resourceVersion of events and bookmarks alike", () => {
    const { applied, told } = events(listed("10"), [added(sandbox("a", "11")), bookmark("15")])
    expect(applied.resourceVersion).toBe("15")
    expect(applied.heard).toBe(true)
    expect(told).toEqual(["a@11"])
  })

  it("2. bug 6: an empty resourceVersion (bookmark or event) is never the resume point", () => {
    const { applied } = events(listed("10"), [bookmark("12"), bookmark(""), added(sandbox("a", ""))])
    expect(applied.resourceVersion).toBe("12")
  })

  it("5. stops at an ERROR: events after it are not applied", () => {
    const { applied, told } = events(listed("10"), [
      added(sandbox("a", "11")),
      { type: "ERROR", status: { code: 410, reason: "Expired" } },
      added(sandbox("b", "12"))
    ])
    expect(applied.error?.code).toBe(410)
    expect(told).toEqual(["a@11"])
    expect(applied.resourceVersion).toBe("11")
  })

  it("12. DELETED tells the name gone", () => {
    const { applied, told } = events(listed("10", sandbox("a", "5")), [deleted(sandbox("a", "12"))])
    expect(told).toEqual(["a:gone"])
    expect(cached(applied.cache)).toEqual([])
  })

  it("13. an undecodable MODIFIED keeps the cached value and tells nobody", () => {
    const { applied, told } = events(listed("10", sandbox("a", "5")), [undecodableItem("a", "13", "MODIFIED")])
    expect(told).toEqual([])
    expect(cached(applied.cache)).toEqual(["a@5"])
    expect(applied.undecodable.length).toBe(1)
    expect(applied.resourceVersion).toBe("13")
  })

  it("13. an undecodable ADDED of a new name makes it unknown; a later state that decodes makes it known", () => {
    const first = events(listed("10"), [undecodableItem("b", "13")])
    expect(first.told).toEqual([])
    expect(HashMap.has(first.applied.cache.unknown, "b")).toBe(true)
    const second = events(first.applied.cache, [modified(sandbox("b", "14"))])
    expect(second.told).toEqual(["b@14"])
    expect(HashMap.has(second.applied.cache.unknown, "b")).toBe(false)
  })

  it("12. an undecodable DELETED that names the Sandbox is still the cluster saying it went", () => {
    const { applied, told } = events(listed("10", sandbox("a", "5")), [undecodableItem("a", "13", "DELETED")])
    expect(told).toEqual(["a:gone"])
    expect(cached(applied.cache)).toEqual([])
  })

  it("14. an event older than the cached object is not applied, and counted", () => {
    const { applied, told } = events(listed("10", sandbox("a", "20")), [modified(sandbox("a", "15"))])
    expect(told).toEqual([])
    expect(applied.stale).toBe(1)
    expect(cached(applied.cache)).toEqual(["a@20"])
  })

  it("14. an event no newer than a name's deletion does not bring it back", () => {
    const afterDelete = events(listed("10", sandbox("a", "5")), [deleted(sandbox("a", "30"))]).applied.cache
    const { applied, told } = events(afterDelete, [modified(sandbox("a", "25"))], "30")
    expect(told).toEqual([])
    expect(applied.stale).toBe(1)
  })
})
