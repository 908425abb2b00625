import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // The real-apiserver suite has its own config and command (`npm run test:apiserver`).
    exclude: ["test/apiserver/**", "test/bench/**", "**/node_modules/**"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // The JSON report lets .ci/run print one "N passed, N failed" line for the whole run.
    reporters: ["default", ["json", { outputFile: ".cache/vitest/fast.json" }]]
  }
})
