/**
 * A cluster connection whose bearer token rotates: `token-generation-<n>`, where `n` counts the
 * invalidations so far, as a token file re-read after a 401 would give the next token.
 */
import { Effect, Option, Redacted, Ref } from "effect"
import { type ClusterConnection, defaultTls } from "../../src/KubeConfig.ts"

export const rotatingTokenConnection = (server: string, generation: Ref.Ref<number>): ClusterConnection => ({
  server,
  namespace: Option.some("ns"),
  tls: defaultTls,
  authorization: Effect.map(Ref.get(generation), (n) => Option.some(Redacted.make(`Bearer token-generation-${n}`))),
  invalidate: Ref.update(generation, (n) => n + 1),
  source: "a rotating token (test)"
})
