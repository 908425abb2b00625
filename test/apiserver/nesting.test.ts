/**
 * How deep a real kube-apiserver lets a Sandbox's JSON nest, and what the watch makes of the
 * deepest it stores (issue 30: a value nested past ~2,200 once overflowed the schema error's
 * formatter). Writes go as raw text: JSON.stringify itself recurses.
 */
import { fetch } from "@effect/platform-node/Undici"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as KubeClient from "../../src/KubeClient.ts"
import { Sandbox, SandboxResource } from "../../src/Sandbox.ts"
import * as Facts from "./ApiServerFacts.ts"

const facts = Facts.load()
const ns = facts.namespace
const sandboxes = `/apis/jr2.dev/v1alpha1/namespaces/${ns}/sandboxes`
const run = "nesting"

const clientLayer = KubeClient.layer.pipe(Layer.provide(Facts.layerKubeConfig(facts)))

/** `{"status":{"phase":[[…]]}}` with `depth` arrays, as text. */
const deepStatus = (depth: number) => `{"status":{"phase":${"[".repeat(depth)}${"]".repeat(depth)}}}`

describe("real kube-apiserver: deeply nested JSON", () => {
  it.live(
    "stores a status nested 9,000 deep and refuses 10,001 (1.37: 400, 1.20: 500); the list keeps what it stored as undecodable, briefly",
    () =>
      Effect.scoped(
        Effect.gen(function*() {
          const agent = yield* Facts.agent(facts)
          const http: Facts.Http = { agent, base: facts.url }
          const send = (method: string, path: string, body: string, contentType: string) =>
            Effect.promise(async () => {
              const response = await fetch(`${facts.url}${path}`, {
                method,
                dispatcher: agent,
                headers: {
                  authorization: `Bearer ${facts.adminToken}`,
                  "content-type": contentType,
                  accept: "application/json"
                },
                body
              })
              const text = await response.text()
              return { status: response.status, text }
            })
          const answers: Record<number, string> = {}
          for (const depth of [2_000, 9_000, 10_001, 100_000]) {
            const name = `deep-${depth}`
            const created = yield* Facts.request(http, "POST", sandboxes, {
              token: facts.adminToken,
              body: {
                apiVersion: "jr2.dev/v1alpha1",
                kind: "Sandbox",
                metadata: { name, labels: { "jr2.dev/run": run } }
              }
            })
            expect(created.status).toBe(201)
            // Other files share the namespace: a deep Sandbox left behind would be in their lists.
            yield* Effect.addFinalizer(() =>
              Effect.asVoid(Facts.request(http, "DELETE", `${sandboxes}/${name}`, { token: facts.adminToken }))
            )
            const patched = yield* send(
              "PATCH",
              `${sandboxes}/${name}/status`,
              deepStatus(depth),
              "application/merge-patch+json"
            )
            answers[depth] = patched.status < 300 ? "stored" : `${patched.status}: ${patched.text.slice(0, 200)}`
          }
          const kube = yield* KubeClient.KubeClient
          const listed = yield* kube.listAll(SandboxResource, Sandbox, {
            namespace: ns,
            labelSelector: `jr2.dev/run=${run}`
          })
          const stored = Object.entries(answers).filter(([, a]) => a === "stored").map(([d]) => `deep-${d}`)
          // Only a stored deep status is undecodable; one refused left its Sandbox as created.
          expect(listed.undecodable.map((u) => u.name).sort()).toEqual([...stored].sort())
          for (const bad of listed.undecodable) expect(bad.problem.length).toBeLessThan(400)
          // apimachinery's JSON depth limit is 10,000: a merge patch past it is refused whole. 1.20 calls
          // that a 500 with no reason; 1.37 a 400 BadRequest.
          const refused = facts.minor > 20
            ? `400: {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"invalid JSON patch","reason":"BadRequest","code":400}\n`
            : `500: {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Invalid JSON Patch","code":500}\n`
          expect(answers).toEqual({ 2000: "stored", 9000: "stored", 10001: refused, 100000: refused })
        }).pipe(Effect.provide(clientLayer))
      ),
    120_000
  )
})
