import { fileURLToPath } from "node:url"
import { defineConfig } from "vitest/config"

/** Each Node's run keeps its own report (`npm run test:node` runs several). */
const nodeMajor = process.versions.node.split(".")[0]

// The bundled program (`npm run build` makes dist/bin/sandbox-watch.js) on the Node that runs vitest:
// `npm run test:node -- <major>` builds it and runs this config on each Node it tests.
export default defineConfig({
  test: {
    root: fileURLToPath(new URL("../..", import.meta.url)),
    include: ["test/bin/**/*.test.ts"],
    testTimeout: 60_000,
    reporters: ["default", ["json", { outputFile: `.cache/vitest/bin-node${nodeMajor}.json` }]]
  }
})
