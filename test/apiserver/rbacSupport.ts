/**
 * `deploy/rbac/` as the real-server tests use it: applied to a fresh namespace as
 * `kubectl apply -k deploy/rbac -n <namespace>` would (there is no kubectl here: the kustomization's
 * resources are read, parsed and POSTed with the admin token), its ServiceAccount's token minted
 * with the TokenRequest API, and its Role's verbs changed while a watch runs.
 *
 * Only the set-up is done as admin. Every watch under test runs with the minted token alone.
 */
import { Effect } from "effect"
import type { Scope } from "effect"
import { randomBytes } from "node:crypto"
import { collectionPath } from "../../src/KubeResource.ts"
import { SandboxResource } from "../../src/Sandbox.ts"
import type { Manifest } from "../support/rbacManifests.ts"
import { manifestOf, readManifests } from "../support/rbacManifests.ts"
import type { SuiteFacts } from "./ApiServerFacts.ts"
import * as Facts from "./ApiServerFacts.ts"
import type { Http } from "./ApiServerFacts.ts"
import { clientOn, poll, sandboxBody, versionOf } from "./watchSupport.ts"

/** Where each kind the manifests may hold is created, in a namespace. */
const collections: Record<string, (namespace: string) => string> = {
  "v1/ServiceAccount": (ns) => `/api/v1/namespaces/${ns}/serviceaccounts`,
  "rbac.authorization.k8s.io/v1/Role": (ns) => `/apis/rbac.authorization.k8s.io/v1/namespaces/${ns}/roles`,
  "rbac.authorization.k8s.io/v1/RoleBinding": (ns) => `/apis/rbac.authorization.k8s.io/v1/namespaces/${ns}/rolebindings`
}

/** The set-up side: admin on the server, and the manifests applied in `namespace`. */
export interface Applied {
  readonly http: Http
  readonly namespace: string
  readonly manifests: ReadonlyArray<Manifest>
  readonly serviceAccount: string
  readonly role: Manifest
}

const admin = (facts: SuiteFacts) => ({ token: facts.adminToken })

const mustAnswer = (what: string, expected: ReadonlyArray<number>) => (response: Facts.JsonResponse) =>
  expected.includes(response.status)
    ? Effect.succeed(response)
    : Effect.dieMessage(`${what} answered ${response.status}: ${JSON.stringify(response.json)}`)

/**
 * A namespace of its own (`<prefix>-<random>`), and `deploy/rbac/` applied to it as
 * `kubectl apply -k deploy/rbac -n <namespace>` does: each object gets the namespace, nothing else
 * changes. The namespace is deleted with the scope (without a controller manager it stays
 * Terminating, which no other test looks at).
 */
export const applyToFreshNamespace = (
  facts: SuiteFacts,
  prefix: string
): Effect.Effect<Applied, never, Scope.Scope> =>
  Effect.gen(function*() {
    const http: Http = { agent: yield* Facts.agent(facts), base: facts.url }
    const namespace = `${prefix}-${randomBytes(3).toString("hex")}`
    yield* Effect.acquireRelease(
      Facts.request(http, "POST", "/api/v1/namespaces", {
        ...admin(facts),
        body: { apiVersion: "v1", kind: "Namespace", metadata: { name: namespace } }
      }).pipe(Effect.flatMap(mustAnswer(`creating namespace ${namespace}`, [201]))),
      () => Facts.request(http, "DELETE", `/api/v1/namespaces/${namespace}`, admin(facts))
    )
    const manifests = readManifests()
    for (const manifest of manifests) {
      const collection = collections[`${manifest.apiVersion}/${manifest.kind}`]
      if (collection === undefined) {
        return yield* Effect.dieMessage(
          `deploy/rbac holds a ${manifest.apiVersion} ${manifest.kind}: teach rbacSupport.ts where it goes`
        )
      }
      yield* Facts.request(http, "POST", collection(namespace), {
        ...admin(facts),
        body: { ...manifest, metadata: { ...manifest.metadata, namespace } }
      }).pipe(Effect.flatMap(mustAnswer(`creating ${manifest.kind} ${manifest.metadata.name}`, [201])))
    }
    return {
      http,
      namespace,
      manifests,
      serviceAccount: manifestOf(manifests, "ServiceAccount").metadata.name,
      role: manifestOf(manifests, "Role")
    }
  })

/**
 * A token for the ServiceAccount from the TokenRequest API. `boundToSecret` binds it to a Secret
 * (created here): deleting that Secret revokes the token, which is how a test makes one "expire"
 * within seconds (a TokenRequest may not ask for less than 10 minutes). Secret: never log it.
 */
export const mintToken = (
  facts: SuiteFacts,
  applied: Applied,
  options: { readonly expirationSeconds?: number; readonly boundToSecret?: string } = {}
): Effect.Effect<string> =>
  Effect.gen(function*() {
    const ns = applied.namespace
    let boundObjectRef: Record<string, string> | undefined
    if (options.boundToSecret !== undefined) {
      const secret = yield* Facts.request(applied.http, "POST", `/api/v1/namespaces/${ns}/secrets`, {
        ...admin(facts),
        body: { apiVersion: "v1", kind: "Secret", metadata: { name: options.boundToSecret }, type: "Opaque" }
      }).pipe(Effect.flatMap(mustAnswer(`creating Secret ${options.boundToSecret}`, [201])))
      boundObjectRef = { apiVersion: "v1", kind: "Secret", name: options.boundToSecret, uid: secret.json.metadata.uid }
    }
    const answer = yield* Facts.request(
      applied.http,
      "POST",
      `/api/v1/namespaces/${ns}/serviceaccounts/${applied.serviceAccount}/token`,
      {
        ...admin(facts),
        body: {
          apiVersion: "authentication.k8s.io/v1",
          kind: "TokenRequest",
          spec: {
            expirationSeconds: options.expirationSeconds ?? 3600,
            ...(boundObjectRef === undefined ? {} : { boundObjectRef })
          }
        }
      }
    ).pipe(Effect.flatMap(mustAnswer(`a TokenRequest for ${applied.serviceAccount}`, [200, 201])))
    const token = answer.json?.status?.token
    if (typeof token !== "string" || token === "") return yield* Effect.dieMessage("the TokenRequest answered no token")
    return token
  })

/** Deletes the Secret a token was bound to: the server refuses that token from then on. */
export const revokeBoundSecret = (facts: SuiteFacts, applied: Applied, secret: string): Effect.Effect<void> =>
  Facts.request(applied.http, "DELETE", `/api/v1/namespaces/${applied.namespace}/secrets/${secret}`, admin(facts))
    .pipe(Effect.flatMap(mustAnswer(`deleting Secret ${secret}`, [200, 202])), Effect.asVoid)

export type Verb = "get" | "list" | "watch"

/** The manifest's Role with `verb` taken out of its rule (or as it is, with `verb` undefined), written to the server. */
export const setRoleWithout = (facts: SuiteFacts, applied: Applied, verb: Verb | undefined): Effect.Effect<void> =>
  Effect.gen(function*() {
    const url = `/apis/rbac.authorization.k8s.io/v1/namespaces/${applied.namespace}/roles/${applied.role.metadata.name}`
    const current = yield* Facts.request(applied.http, "GET", url, admin(facts)).pipe(
      Effect.flatMap(mustAnswer("reading the Role", [200]))
    )
    const rules = (applied.role.rules as ReadonlyArray<{ readonly verbs: ReadonlyArray<string> }>).map((rule) => ({
      ...rule,
      verbs: rule.verbs.filter((v) => v !== verb)
    }))
    yield* Facts.request(applied.http, "PUT", url, {
      ...admin(facts),
      body: { ...current.json, rules }
    }).pipe(Effect.flatMap(mustAnswer("writing the Role", [200])))
  })

/**
 * Waits until the server answers `verb` on sandboxes for `token` as `allowed` says: RBAC takes a
 * Role's change in from an informer, a moment after the write. The probe is the request itself.
 */
export const awaitPermission = (
  applied: Applied,
  token: string,
  verb: "list" | "watch",
  allowed: boolean
): Effect.Effect<void> => {
  const sandboxes = collectionPath(SandboxResource, applied.namespace)
  const probe = verb === "watch" ? `${sandboxes}?watch=true&timeoutSeconds=1` : `${sandboxes}?limit=1`
  return poll(
    Facts.request(applied.http, "GET", probe, { token }),
    (r) => (allowed ? r.status === 200 : r.status === 403),
    `${verb} on sandboxes to be ${allowed ? "allowed" : "refused"} for the ServiceAccount`
  ).pipe(Effect.asVoid)
}

/** The admin's client in `namespace` (set-up and writes only), and its create and phase setter (each returns the resourceVersion). */
export const adminIn = (facts: SuiteFacts, namespace: string) =>
  Effect.gen(function*() {
    const admin = yield* clientOn(Facts.connection(facts, { namespace }))
    const create = (name: string, run: string) =>
      Effect.map(admin.create(SandboxResource, namespace, sandboxBody(namespace, name, run)), versionOf)
    const setPhase = (name: string, phase: string) =>
      Effect.map(
        admin.mergePatch(SandboxResource, namespace, name, { status: { phase } }, { subresource: "status" }),
        versionOf
      )
    return { admin, create, setPhase }
  })

interface NdjsonLine {
  readonly event: string
  readonly name?: string
  readonly sandbox?: { readonly status?: { readonly phase?: string } } | null
}

/** A line of the program's ndjson, short: `name phase`, `name -` without a phase, `name gone`; or the event. */
export const shortLine = (line: string): string => {
  const l = JSON.parse(line) as NdjsonLine
  return l.event !== "change" ? l.event : `${l.name} ${l.sandbox === null ? "gone" : (l.sandbox?.status?.phase ?? "-")}`
}
