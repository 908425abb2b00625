/**
 * Bundles the program (`src/cli/main.ts`) for plain `node`: `dist/bin/sandbox-watch.js` and its
 * chunks under `dist/bin/chunks/`. Everything it runs is bundled in, `effect` too: the program
 * shares nothing with a library user (its own process), and one bundle starts in a third of the
 * CPU that resolving effect's hundreds of files through Node's ES-module loader takes (issue 43 §4;
 * `npm run bench -- --only startup`). Split into chunks so that what is loaded only when asked
 * stays unread until then: the program behind `--help`/`--version` (`main.ts` answers those from
 * `Usage.ts` alone), and OpenTelemetry behind `--metrics-address` and `OTEL_EXPORTER_OTLP_*`.
 *
 * Whitespace and syntax are minified, identifiers kept: a little faster to load, and a stack trace
 * still names its functions (the source maps give the lines, `node --enable-source-maps`).
 */
import { build } from "esbuild"

await build({
  entryPoints: { "sandbox-watch": "src/cli/main.ts" },
  outdir: "dist/bin",
  chunkNames: "chunks/[name]-[hash]",
  bundle: true,
  splitting: true,
  platform: "node",
  format: "esm",
  target: "node20",
  minifyWhitespace: true,
  minifySyntax: true,
  sourcemap: true,
  // Positions only: the sources are the shipped src/ and the peers' own files, not copied in.
  sourcesContent: false,
  // Bundled CommonJS dependencies call `require`; an ES module has none of its own.
  banner: {
    js:
      "#!/usr/bin/env node\nimport { createRequire as __createRequire } from \"node:module\"\nconst require = __createRequire(import.meta.url)"
  },
  logLevel: "warning"
})
