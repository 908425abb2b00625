/**
 * The latency row's samples, part by part: where in the run the slow events came. Reads the files
 * `BENCH_DUMP` writes (one JSON array of milliseconds per program and round, in the order the
 * events were sent) and prints, for each consecutive part of the run, its p50 and p99 and how many
 * stalls it had (runs of events over 0.8 ms, however many events each held up).
 *
 *   BENCH_DUMP=/tmp/lat-%p.json npm run bench -- --only lat --programs sw@22,cn2@22 --rounds 1 --latency-events 20000
 *   npx tsx test/bench/latencyParts.ts /tmp/lat-*.json [--parts 4]
 *
 * Which program a file is: the runner prints the children's process ids only with `--verbose`, so
 * the files come in the order they were written (`ls -tr`), programs in the order asked for.
 */
import * as fs from "node:fs"
import { percentile } from "./common.ts"

const StallMs = 0.8

const args = process.argv.slice(2)
const partsAt = args.indexOf("--parts")
const parts = partsAt === -1 ? 4 : Number(args[partsAt + 1])
const files = partsAt === -1 ? args : args.filter((_, i) => i !== partsAt && i !== partsAt + 1)
if (files.length === 0 || !Number.isInteger(parts) || parts < 1) {
  console.error("usage: npx tsx test/bench/latencyParts.ts <dump.json>... [--parts N]")
  process.exit(2)
}

/** Runs of consecutive samples over the threshold: one stall holds up the events that queue behind it. */
const stalls = (samples: ReadonlyArray<number>): number => {
  let count = 0
  let inStall = false
  for (const ms of samples) {
    if (ms > StallMs) {
      if (!inStall) count++
      inStall = true
    } else inStall = false
  }
  return count
}

const byTime = files
  .map((file) => ({ file, written: fs.statSync(file).mtimeMs }))
  .sort((a, b) => a.written - b.written)
for (const { file } of byTime) {
  const samples: Array<number> = JSON.parse(fs.readFileSync(file, "utf8"))
  console.log(`${file}: ${samples.length} events`)
  const size = Math.floor(samples.length / parts)
  console.log("| part | events | p50 ms | p99 ms | stalls over 0.8 ms |")
  console.log("|---|---:|---:|---:|---:|")
  for (let k = 0; k < parts; k++) {
    const part = samples.slice(k * size, k === parts - 1 ? samples.length : (k + 1) * size)
    const sorted = [...part].sort((a, b) => a - b)
    console.log(
      `| ${k + 1} of ${parts} | ${part.length} | ${percentile(sorted, 50).toFixed(3)} | ${
        percentile(sorted, 99).toFixed(2)
      } | ${stalls(part)} |`
    )
  }
}
