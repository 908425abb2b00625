/**
 * `deploy/rbac/` grants exactly what the watch needs and nothing else, and names no namespace, so
 * it works in whichever namespace it is applied to. (That it is enough is proven against both real
 * servers: test/apiserver/permissions.test.ts.)
 */
import { describe, expect, it } from "@effect/vitest"
import { manifestOf, readManifests } from "./support/rbacManifests.ts"

describe("deploy/rbac", () => {
  const manifests = readManifests()

  it("holds a ServiceAccount, a Role and a RoleBinding, all named sandbox-watch, none naming a namespace", () => {
    expect(manifests.map((m) => `${m.apiVersion} ${m.kind} ${m.metadata.name}`)).toEqual([
      "v1 ServiceAccount sandbox-watch",
      "rbac.authorization.k8s.io/v1 Role sandbox-watch",
      "rbac.authorization.k8s.io/v1 RoleBinding sandbox-watch"
    ])
    expect(manifests.filter((m) => m.metadata.namespace !== undefined)).toEqual([])
  })

  it("the Role grants get, list and watch on sandboxes in jr2.dev, and nothing else", () => {
    expect(manifestOf(manifests, "Role").rules).toEqual([
      { apiGroups: ["jr2.dev"], resources: ["sandboxes"], verbs: ["get", "list", "watch"] }
    ])
  })

  it("the RoleBinding gives that Role to that ServiceAccount, in the binding's own namespace", () => {
    const binding = manifestOf(manifests, "RoleBinding")
    expect(binding.roleRef).toEqual({ apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "sandbox-watch" })
    // No namespace on the subject: RBAC reads a ServiceAccount subject without one as the binding's.
    expect(binding.subjects).toEqual([{ kind: "ServiceAccount", name: "sandbox-watch" }])
  })
})
