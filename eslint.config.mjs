// Lint as Effect's own repositories do: typescript-eslint's recommended rules and Effect's dprint
// formatting (2 spaces, 120 columns, no semicolons, double quotes), which also sorts imports.
// (eslint-plugin-simple-import-sort was tried beside it: the two sorters' fixes fight each other.)
import * as effectEslint from "@effect/eslint-plugin"
import tseslint from "typescript-eslint"

export default tseslint.config(
  {
    ignores: ["**/dist", "**/node_modules", "**/.cache", "test/apiserver/.work", "test/consumer/fixture/dist"]
  },
  ...tseslint.configs.recommended,
  ...effectEslint.configs.dprint,
  {
    rules: {
      "@typescript-eslint/no-unused-vars": ["error", {
        argsIgnorePattern: "^_",
        varsIgnorePattern: "^_",
        caughtErrors: "none"
      }],
      // Test doubles and wire-level fixtures hand-write JSON of any shape.
      "@typescript-eslint/no-explicit-any": "off",
      "@typescript-eslint/no-namespace": "off",
      "@typescript-eslint/no-empty-object-type": "off",
      "@effect/dprint": ["error", {
        config: {
          indentWidth: 2,
          lineWidth: 120,
          semiColons: "asi",
          quoteStyle: "alwaysDouble",
          trailingCommas: "never",
          operatorPosition: "maintain",
          "arrowFunction.useParentheses": "force"
        }
      }]
    }
  },
  {
    // A constructor is wiring; a part that grows past a screenful or two becomes a function or an
    // internal module of its own, given what it may change (issue 29).
    files: ["src/**"],
    rules: {
      "max-lines-per-function": ["error", { max: 200, skipBlankLines: false, skipComments: false, IIFEs: true }]
    }
  },
  {
    // An internal module gets what it needs as arguments and types from internal modules, never
    // from a service module that wires it. (The value and error modules, `KubeError.ts` and the
    // like, are still imported by several internal modules, so they are not forbidden yet.)
    files: ["src/internal/**"],
    rules: {
      "no-restricted-imports": ["error", {
        patterns: [{
          group: [
            "../KubeClient*",
            "../SandboxWatch*",
            "../Orchestrator*",
            "../SimulatedApiServer*",
            "../SandboxEvidence*",
            "../index*"
          ],
          message: "an internal module must not import a service module; move what it needs into src/internal/"
        }]
      }]
    }
  }
)
