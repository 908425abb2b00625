/**
 * Why a subscriber's mailbox empties its `Map` with `delete`, not `clear`: V8's `Map.prototype.clear`
 * gives the map a new table in the generation the old one was in, and leaves the old table's entries
 * where they were (a live iterator may still walk it). A mailbox lives long, so its table is in the
 * old generation; each `clear` then leaves there a dead table that still points at the last value
 * put, and a young collection keeps whatever such garbage points to until a full one: every
 * Sandbox ever told to a subscriber outlived young collections. `delete` empties the entries.
 *
 * Run: node --expose-gc --trace-gc-nvp --import tsx scratchpad/mapClearSurvivors.ts clear|delete
 * and read `new_space_survived` and `promoted` of the last scavenges. Seen here (Node 20), with 100
 * old maps each given a fresh ~0.5 KB object and emptied, round after round: `clear` 2.2–2.6 MB
 * survived a young collection and all of it was promoted; `delete` 0.34–0.39 MB, next to none
 * promoted.
 */
const mode = process.argv[2] === "delete" ? "delete" : "clear"
const collect = (globalThis as { gc?: () => void }).gc
if (collect === undefined) throw new Error("run with node --expose-gc")
const maps = Array.from({ length: 100 }, () => new Map<string, unknown>())
for (const map of maps) {
  map.set("k", {})
  map.clear()
}
// Two collections: the maps and their tables are in the old generation, as a long-lived mailbox's.
collect()
collect()
const make = (i: number) => ({
  name: `n${i}`,
  pad: new Array(60).fill(i),
  more: { a: [1, 2, 3], b: "x".repeat(40) + i }
})
let i = 0
const started = Date.now()
while (Date.now() - started < 3000) {
  const map = maps[i % maps.length]!
  map.set("k", make(i++))
  for (let j = 0; j < 30; j++) new Array(10) // the other garbage a step makes
  if (mode === "clear") map.clear()
  else for (const [key] of map) map.delete(key)
}
