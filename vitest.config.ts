import { defineConfig } from "vitest/config"

/** Each Node's run keeps its own report (`npm run test:node` runs several). */
const nodeMajor = process.versions.node.split(".")[0]

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // The real-apiserver suite and the built bin's smoke test have their own configs and commands
    // (`npm run test:apiserver`, `npm run test:node`).
    exclude: ["test/apiserver/**", "test/bench/**", "test/bin/**", "**/node_modules/**"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // The JSON report, one per Node (`npm run test:node`), lets .ci/run print one "N passed, N failed" line.
    reporters: ["default", ["json", { outputFile: `.cache/vitest/fast-node${nodeMajor}.json` }]]
  }
})
