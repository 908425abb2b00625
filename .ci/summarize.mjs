// Prints each vitest JSON report's counts, then one closing "vitest: N passed, N failed, N skipped" line
// over them all, and fails when a report is missing (a suite that did not run is not a suite that passed).
import { existsSync, readFileSync } from "node:fs"
import { basename } from "node:path"

let passed = 0, failed = 0, skipped = 0, missing = 0
for (const file of process.argv.slice(2)) {
  if (!existsSync(file)) {
    console.error(`no test report at ${file}: that suite did not run`)
    missing++
    continue
  }
  const report = JSON.parse(readFileSync(file, "utf8"))
  const its = {
    passed: report.numPassedTests,
    failed: report.numFailedTests,
    skipped: report.numPendingTests + report.numTodoTests
  }
  // Worded apart from the closing line, which alone must read as the run's count.
  console.log(`${basename(file, ".json")} (${its.passed} passed, ${its.failed} failed, ${its.skipped} skipped)`)
  passed += its.passed
  failed += its.failed
  skipped += its.skipped
}
console.log(`vitest: ${passed} passed, ${failed} failed, ${skipped} skipped`)
process.exit(failed > 0 || missing > 0 ? 1 : 0)
