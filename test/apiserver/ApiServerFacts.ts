/**
 * The test side of the real-apiserver suite: the connection facts `globalSetup` provides, a
 * `KubeConfig` built from them (the server's CA included, TLS verified), plain HTTP helpers over
 * undici with that CA, a line-by-line watch reader, RBAC grants, and the restart control.
 */
import { Agent, fetch } from "@effect/platform-node/Undici"
import { Effect, Layer } from "effect"
import type { Scope } from "effect"
import { inject } from "vitest"
import type { ClusterConnection } from "../../src/KubeConfig.ts"
import { KubeConfig } from "../../src/KubeConfig.ts"
import type { ApiServerFacts } from "./RealApiServer.ts"
import { jsonOrText, LimitedUser, verifiedConnection } from "./RealApiServer.ts"

/** What the suite's tests get: the server's facts and how to ask `globalSetup` for a restart. */
export interface SuiteFacts extends ApiServerFacts {
  readonly controlUrl: string
  /** Secret of the control endpoint. */
  readonly controlToken: string
}

declare module "vitest" {
  export interface ProvidedContext {
    apiserver: SuiteFacts
  }
}

/** The facts of the server `globalSetup` started. */
export const load = (): SuiteFacts => inject("apiserver")

/**
 * A `ClusterConnection` to the real server (or to a fault proxy in front of it: `server`), as a
 * kubeconfig with `certificate-authority-data` would resolve: the CA given, TLS verified.
 */
export const connection = (
  facts: ApiServerFacts,
  options: { readonly server?: string; readonly token?: string; readonly namespace?: string } = {}
): ClusterConnection =>
  verifiedConnection({
    server: options.server ?? facts.url,
    caPem: facts.caPem,
    token: options.token ?? facts.adminToken,
    namespace: options.namespace ?? facts.namespace,
    about: `real kube-apiserver ${facts.version}`
  })

/** {@link connection} as the `KubeConfig` layer `KubeClient.layer` needs. */
export const layerKubeConfig = (
  facts: ApiServerFacts,
  options?: { readonly server?: string; readonly token?: string; readonly namespace?: string }
): Layer.Layer<KubeConfig> => Layer.succeed(KubeConfig, connection(facts, options))

/** An undici Agent that trusts the server's CA (and nothing is disabled), closed with the scope. */
export const agent = (facts: ApiServerFacts): Effect.Effect<Agent, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.sync(() => new Agent({ connect: { ca: facts.caPem } })),
    (a) => Effect.promise(() => a.close().catch(() => {}))
  )

export interface Http {
  readonly agent: Agent
  /** Base URL requests go to: the server, or a proxy in front of it. */
  readonly base: string
}

export interface JsonResponse {
  readonly status: number
  readonly json: any
  /** Lower-case names. */
  readonly headers: Readonly<Record<string, string>>
}

/** One request; the body parsed as JSON when it is JSON. `token: null` sends no Authorization. */
export const request = (
  http: Http,
  method: string,
  path: string,
  options: { readonly token: string | null; readonly body?: unknown; readonly contentType?: string }
): Effect.Effect<JsonResponse> =>
  Effect.promise(async () => {
    const headers: Record<string, string> = { accept: "application/json" }
    if (options.token !== null) headers.authorization = `Bearer ${options.token}`
    if (options.body !== undefined) headers["content-type"] = options.contentType ?? "application/json"
    const response = await fetch(`${http.base}${path}`, {
      method,
      dispatcher: http.agent,
      headers,
      ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) })
    })
    const answered = Object.fromEntries(response.headers)
    return { ...(await jsonOrText(response)), headers: answered }
  })

/** What a watch reader returns for each step: a parsed line, the end of the body, or a broken body. */
export type WatchStep =
  | { readonly _tag: "Line"; readonly event: any }
  | { readonly _tag: "End" }
  | { readonly _tag: "Broken"; readonly error: string }

export interface WatchReader {
  readonly status: number
  /** The next line, or how the body ended. */
  readonly next: Effect.Effect<WatchStep>
}

/** Opens a watch (any GET really) and reads its body a line at a time; cancelled with the scope. */
export const openWatch = (
  http: Http,
  path: string,
  token: string | null
): Effect.Effect<WatchReader, never, Scope.Scope> =>
  Effect.gen(function*() {
    const controller = new AbortController()
    yield* Effect.addFinalizer(() => Effect.sync(() => controller.abort()))
    const response = yield* Effect.promise(() =>
      fetch(`${http.base}${path}`, {
        dispatcher: http.agent,
        signal: controller.signal,
        headers: { accept: "application/json", ...(token === null ? {} : { authorization: `Bearer ${token}` }) }
      })
    )
    const reader = response.body!.getReader()
    const decoder = new TextDecoder()
    let buffer = ""
    let done = false
    const next = Effect.promise(async (): Promise<WatchStep> => {
      for (;;) {
        const newline = buffer.indexOf("\n")
        if (newline >= 0) {
          const line = buffer.slice(0, newline)
          buffer = buffer.slice(newline + 1)
          if (line.trim() === "") continue
          return { _tag: "Line", event: JSON.parse(line) }
        }
        if (done) {
          if (buffer.trim() !== "") {
            const line = buffer
            buffer = ""
            return { _tag: "Line", event: JSON.parse(line) }
          }
          return { _tag: "End" }
        }
        try {
          const chunk = await reader.read()
          if (chunk.done) {
            done = true
            buffer += decoder.decode()
          } else {
            buffer += decoder.decode(chunk.value, { stream: true })
          }
        } catch (error) {
          const cause = (error as { cause?: { code?: string } }).cause
          return { _tag: "Broken", error: cause?.code ?? String(error) }
        }
      }
    })
    return { status: response.status, next }
  })

/** Reads lines until `count` events arrived or the body ended; the body's end is included. */
export const take = (watch: WatchReader, count: number): Effect.Effect<ReadonlyArray<WatchStep>> =>
  Effect.gen(function*() {
    const steps: Array<WatchStep> = []
    while (steps.length < count) {
      const step = yield* watch.next
      steps.push(step)
      if (step._tag !== "Line") break
    }
    return steps
  })

const rbac = "/apis/rbac.authorization.k8s.io/v1"
const watcherRole = "sandbox-watcher"

/**
 * Gives the limited user `watch` on sandboxes in the test namespace, and takes it back when the
 * scope closes (the server lives for the whole run: no grant may leak into another test).
 */
export const grantWatch = (http: Http, facts: ApiServerFacts): Effect.Effect<void, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.gen(function*() {
      const ns = facts.namespace
      const role = yield* request(http, "POST", `${rbac}/namespaces/${ns}/roles`, {
        token: facts.adminToken,
        body: {
          apiVersion: "rbac.authorization.k8s.io/v1",
          kind: "Role",
          metadata: { name: watcherRole, namespace: ns },
          rules: [{ apiGroups: ["jr2.dev"], resources: ["sandboxes"], verbs: ["watch"] }]
        }
      })
      const binding = yield* request(http, "POST", `${rbac}/namespaces/${ns}/rolebindings`, {
        token: facts.adminToken,
        body: {
          apiVersion: "rbac.authorization.k8s.io/v1",
          kind: "RoleBinding",
          metadata: { name: watcherRole, namespace: ns },
          roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: watcherRole },
          subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "User", name: LimitedUser }]
        }
      })
      if (role.status !== 201 || binding.status !== 201) {
        return yield* Effect.dieMessage(`granting watch failed: role ${role.status}, binding ${binding.status}`)
      }
    }),
    () =>
      Effect.all([
        request(http, "DELETE", `${rbac}/namespaces/${facts.namespace}/rolebindings/${watcherRole}`, {
          token: facts.adminToken
        }),
        request(http, "DELETE", `${rbac}/namespaces/${facts.namespace}/roles/${watcherRole}`, {
          token: facts.adminToken
        })
      ])
  )

/**
 * Asks `globalSetup` to kill kube-apiserver (`SIGTERM`, or `SIGKILL` for a crash) and start it
 * again on the same port and etcd; resolves when it is ready, with how long that took.
 */
export const restartApiServer = (
  facts: SuiteFacts,
  signal: "SIGTERM" | "SIGKILL" = "SIGTERM"
): Effect.Effect<{ readonly readyMs: number }> =>
  Effect.promise(async () => {
    const response = await globalThis.fetch(`${facts.controlUrl}/restart-apiserver?signal=${signal}`, {
      method: "POST",
      headers: { "x-control-token": facts.controlToken }
    })
    const body = (await response.json()) as { readyMs?: number; error?: string }
    if (response.status !== 200 || body.readyMs === undefined) {
      throw new Error(`restarting kube-apiserver failed (${response.status}): ${body.error ?? "no reason given"}`)
    }
    return { readyMs: body.readyMs }
  })
