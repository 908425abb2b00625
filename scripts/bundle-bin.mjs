/**
 * Bundles the program (`src/cli/main.ts`) into one file, `dist/bin/sandbox-watch.js`, run by plain
 * `node`. The program's own dependencies (@effect/cli, and what the program loads for metrics and
 * traces) are bundled in, so they never reach a library user's install; the peers and `yaml` stay
 * imports, so the program shares the one copy of `effect` the consumer installed.
 */
import { build } from "esbuild"

const external = ["effect", "@effect/platform", "@effect/platform-node", "yaml"].flatMap((name) => [name, `${name}/*`])

await build({
  entryPoints: ["src/cli/main.ts"],
  outfile: "dist/bin/sandbox-watch.js",
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  sourcemap: true,
  external,
  // Bundled CommonJS dependencies call `require`; an ES module has none of its own.
  banner: {
    js:
      "#!/usr/bin/env node\nimport { createRequire as __createRequire } from \"node:module\"\nconst require = __createRequire(import.meta.url)"
  },
  logLevel: "warning"
})
