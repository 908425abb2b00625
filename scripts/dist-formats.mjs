/**
 * Says which module format each build under dist/ is, for Node and TypeScript, which read the
 * nearest package.json's `type`: the package's own is `module` (dist/esm), so dist/cjs says
 * `commonjs`. dist/dts says `commonjs` too, as Effect's declarations are: one set of types that a
 * CommonJS app may `require` on any TypeScript with NodeNext, and an ES-module app import by name.
 * `sideEffects` is repeated where a bundler finds the nearer file.
 */
import * as Fs from "node:fs"

const marks = {
  "dist/cjs/package.json": { type: "commonjs", sideEffects: false },
  "dist/dts/package.json": { type: "commonjs" }
}
for (const [path, content] of Object.entries(marks)) Fs.writeFileSync(path, JSON.stringify(content, null, 2) + "\n")
