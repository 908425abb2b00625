import { NodeContext } from "@effect/platform-node"
import type * as CommandExecutor from "@effect/platform/CommandExecutor"
import * as FileSystem from "@effect/platform/FileSystem"
import * as Path from "@effect/platform/Path"
import { describe, expect, it } from "@effect/vitest"
import type { Scope } from "effect"
import { Chunk, Effect, Fiber, Logger, LogLevel, Option, Redacted, TestClock } from "effect"
import { fileURLToPath } from "node:url"
import { stringify } from "yaml"
import * as KubeClient from "../src/KubeClient.ts"
import * as KubeConfig from "../src/KubeConfig.ts"
import { Sandbox, SandboxResource } from "../src/Sandbox.ts"
import { eventually } from "./support/waiting.ts"

const fixtures = fileURLToPath(new URL("./fixtures/kubeconfig/", import.meta.url))
const plugin = `${fixtures}exec-plugin.mjs`
const pki = {
  ca: `${fixtures}pki/ca.pem`,
  cert: `${fixtures}pki/client.crt`,
  key: `${fixtures}pki/client.key`
}
const CA_PEM = "-----BEGIN CERTIFICATE-----\nZml4dHVyZS1jYQ==\n-----END CERTIFICATE-----\n"
const CERT_PEM = "-----BEGIN CERTIFICATE-----\nZml4dHVyZS1jbGllbnQ=\n-----END CERTIFICATE-----\n"
const KEY_PEM = "-----BEGIN PRIVATE KEY-----\nZml4dHVyZS1rZXktbWF0ZXJpYWw=\n-----END PRIVATE KEY-----\n"
const b64 = (text: string) => Buffer.from(text).toString("base64")

/** A kubeconfig document from maps keyed by name. */
const kubeconfig = (config: {
  readonly currentContext?: string
  readonly clusters?: Record<string, object>
  readonly contexts?: Record<string, object>
  readonly users?: Record<string, object>
}) =>
  stringify({
    apiVersion: "v1",
    kind: "Config",
    ...(config.currentContext === undefined ? {} : { "current-context": config.currentContext }),
    clusters: Object.entries(config.clusters ?? {}).map(([name, cluster]) => ({ name, cluster })),
    contexts: Object.entries(config.contexts ?? {}).map(([name, context]) => ({ name, context })),
    users: Object.entries(config.users ?? {}).map(([name, user]) => ({ name, user }))
  })

/** A temp directory, gone after the test, with a `write` that creates parent directories. */
const sandbox = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const dir = yield* fs.makeTempDirectoryScoped({ prefix: "kubeconfig-test-" })
  const at = (name: string) => path.join(dir, name)
  const write = (name: string, content: string) =>
    fs
      .makeDirectory(path.dirname(at(name)), { recursive: true })
      .pipe(Effect.zipRight(fs.writeFileString(at(name), content)), Effect.as(at(name)))
  const remove = (name: string) => fs.remove(at(name))
  const lines = (name: string) =>
    fs.readFileString(at(name)).pipe(
      Effect.map((text) => text.split("\n").filter((line) => line.length > 0).length),
      Effect.orElseSucceed(() => 0)
    )
  /** Nothing of the real machine leaks in: no env, an empty home, no service account. */
  const isolated = {
    env: {} as Record<string, string | undefined>,
    home: at("home"),
    serviceAccountDir: at("no-service-account")
  }
  return { dir, at, write, remove, lines, isolated, fs }
})

const header = (connection: KubeConfig.ClusterConnection) =>
  connection.authorization.pipe(Effect.map(Option.map(Redacted.value)))

const run = <A, E>(
  effect: Effect.Effect<A, E, FileSystem.FileSystem | Path.Path | CommandExecutor.CommandExecutor | Scope.Scope>
) => effect.pipe(Effect.provide(NodeContext.layer))

/** A test body given a fresh temporary directory `t` (and nothing of the real machine), run on Node's platform. */
const inSandbox = <A, E>(
  body: (
    t: Effect.Effect.Success<typeof sandbox>
  ) => Effect.Effect<A, E, FileSystem.FileSystem | Path.Path | CommandExecutor.CommandExecutor | Scope.Scope>
) =>
() => run(Effect.flatMap(sandbox, body))

const simpleCluster = (server: string) => ({ server })

/** Whether a process is running (signal 0 checks without sending anything). */
const isRunning = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

describe("KubeConfig.resolve: where the configuration comes from", () => {
  it.scoped(
    "merges the KUBECONFIG files, the first to name an entry or a current-context winning",
    inSandbox((t) =>
      Effect.gen(function*() {
        const a = yield* t.write(
          "a/config",
          kubeconfig({
            currentContext: "a-ctx",
            clusters: { shared: simpleCluster("https://a.example:6443/") },
            contexts: { "a-ctx": { cluster: "shared", user: "user-a" } },
            users: { "user-a": { token: "token-from-a" } }
          })
        )
        const b = yield* t.write(
          "b/config",
          kubeconfig({
            currentContext: "b-ctx",
            clusters: {
              shared: simpleCluster("https://b.example"),
              "only-b": simpleCluster("https://only-b.example:443")
            },
            contexts: {
              "a-ctx": { cluster: "only-b" },
              "b-ctx": { cluster: "only-b", user: "user-a", namespace: "from-b" },
              "mixed": { cluster: "shared", user: "user-b" }
            },
            users: { "user-a": { token: "token-from-b" }, "user-b": { token: "token-b" } }
          })
        )
        const env = { KUBECONFIG: `${a}:${t.at("missing/config")}:${b}` }
        const current = yield* KubeConfig.resolve({ ...t.isolated, env })
        expect(current.server).toBe("https://a.example:6443")
        // The files that were there, in order; the missing one is skipped.
        expect(current.source).toBe(`kubeconfig ${a}:${b}, context a-ctx`)
        expect(current.namespace).toEqual(Option.none())
        expect(yield* header(current)).toEqual(Option.some("Bearer token-from-a"))

        // b's context, but user-a is a's; b's own user-a and cluster `shared` are shadowed.
        const fromB = yield* KubeConfig.resolve({ ...t.isolated, env, context: "b-ctx" })
        expect(fromB.server).toBe("https://only-b.example:443")
        expect(fromB.namespace).toEqual(Option.some("from-b"))
        expect(yield* header(fromB)).toEqual(Option.some("Bearer token-from-a"))

        const mixed = yield* KubeConfig.resolve({ ...t.isolated, env, context: "mixed" })
        expect(mixed.server).toBe("https://a.example:6443")
        expect(yield* header(mixed)).toEqual(Option.some("Bearer token-b"))
      })
    )
  )

  it.scoped(
    "takes an explicit path over KUBECONFIG, and refuses an explicit path that does not exist",
    inSandbox((t) =>
      Effect.gen(function*() {
        const fromEnv = yield* t.write(
          "env/config",
          kubeconfig({
            currentContext: "x",
            clusters: { c: simpleCluster("https://env.example") },
            contexts: { x: { cluster: "c" } }
          })
        )
        const explicit = yield* t.write(
          "explicit/config",
          kubeconfig({
            currentContext: "x",
            clusters: { c: simpleCluster("explicit.example:6443") },
            contexts: { x: { cluster: "c" } }
          })
        )
        const env = { KUBECONFIG: fromEnv }
        const connection = yield* KubeConfig.resolve({ ...t.isolated, env, path: explicit })
        // A server without a scheme is https, as kubectl reads it.
        expect(connection.server).toBe("https://explicit.example:6443")
        expect(connection.source).toBe(`kubeconfig ${explicit}, context x`)
        expect(yield* header(connection)).toEqual(Option.none())

        const error = yield* Effect.flip(KubeConfig.resolve({ ...t.isolated, env, path: t.at("nope/config") }))
        expect(error._tag).toBe("KubeConfigError")
        expect(error.message).toBe(`kubeconfig ${t.at("nope/config")}: does not exist`)
      })
    )
  )

  it.scoped(
    "falls back to ~/.kube/config when KUBECONFIG is not set, before in-cluster",
    inSandbox((t) =>
      Effect.gen(function*() {
        yield* t.write(
          "home/.kube/config",
          kubeconfig({
            currentContext: "home",
            clusters: { c: simpleCluster("https://home.example") },
            contexts: { home: { cluster: "c", namespace: "home-ns" } }
          })
        )
        yield* t.write("sa/token", "sa-token")
        const env = { KUBERNETES_SERVICE_HOST: "10.0.0.1", KUBERNETES_SERVICE_PORT: "443" }
        const connection = yield* KubeConfig.resolve({ ...t.isolated, env, serviceAccountDir: t.at("sa") })
        expect(connection.server).toBe("https://home.example")
        expect(connection.namespace).toEqual(Option.some("home-ns"))
        expect(connection.source).toBe(`kubeconfig ${t.at("home/.kube/config")}, context home`)

        // KUBECONFIG set (even to nothing that exists) means ~/.kube/config is not read: kubectl's rule.
        const error = yield* Effect.flip(KubeConfig.resolve({ ...t.isolated, env: { KUBECONFIG: t.at("gone") } }))
        expect(error._tag).toBe("KubeConfigNotFound")
        if (error._tag !== "KubeConfigNotFound") return
        expect(error.looked).toEqual([
          `KUBECONFIG=${t.at("gone")} (no such file)`,
          "in-cluster (KUBERNETES_SERVICE_HOST is not set)"
        ])
      })
    )
  )

  it.scoped(
    "says where it looked when there is no configuration anywhere",
    inSandbox((t) =>
      Effect.gen(function*() {
        const error = yield* Effect.flip(KubeConfig.resolve(t.isolated))
        expect(error._tag).toBe("KubeConfigNotFound")
        if (error._tag !== "KubeConfigNotFound") return
        expect(error.looked).toEqual([
          "KUBECONFIG (not set)",
          `${t.at("home/.kube/config")} (no such file)`,
          "in-cluster (KUBERNETES_SERVICE_HOST is not set)"
        ])
        expect(error.message).toBe(
          `no Kubernetes configuration found; looked at: KUBECONFIG (not set); ${
            t.at("home/.kube/config")
          } (no such file); ` +
            "in-cluster (KUBERNETES_SERVICE_HOST is not set). " +
            "Point KUBECONFIG or --kubeconfig at a kubeconfig, or run inside a pod with a service account."
        )

        // An empty ~/.kube/config counts as none; the service-account env without its token is no pod.
        yield* t.write("home/.kube/config", "")
        const env = { KUBERNETES_SERVICE_HOST: "10.0.0.1", KUBERNETES_SERVICE_PORT: "443" }
        const second = yield* Effect.flip(KubeConfig.resolve({ ...t.isolated, env }))
        expect(second._tag).toBe("KubeConfigNotFound")
        if (second._tag !== "KubeConfigNotFound") return
        expect(second.looked).toEqual([
          "KUBECONFIG (not set)",
          `${t.at("home/.kube/config")} (no clusters, contexts or users in it)`,
          `in-cluster (10.0.0.1:443 is set, but ${t.at("no-service-account/token")} does not exist)`
        ])
      })
    )
  )
})

describe("KubeConfig.resolve: contexts, clusters, users", () => {
  const twoContexts = kubeconfig({
    currentContext: "kind-kind",
    clusters: { kind: simpleCluster("https://127.0.0.1:6443"), dev: simpleCluster("https://dev.example") },
    contexts: { "kind-kind": { cluster: "kind" }, dev: { cluster: "dev", namespace: "dev-ns" } }
  })

  it.scoped(
    "selects the asked context, and names the ones there are when it is missing",
    inSandbox((t) =>
      Effect.gen(function*() {
        const file = yield* t.write("config", twoContexts)
        expect((yield* KubeConfig.resolve({ ...t.isolated, path: file })).server).toBe("https://127.0.0.1:6443")
        const dev = yield* KubeConfig.resolve({ ...t.isolated, path: file, context: "dev" })
        expect([dev.server, dev.namespace, dev.source]).toEqual([
          "https://dev.example",
          Option.some("dev-ns"),
          `kubeconfig ${file}, context dev`
        ])

        const missing = yield* Effect.flip(KubeConfig.resolve({ ...t.isolated, path: file, context: "prod" }))
        expect(missing._tag).toBe("KubeConfigError")
        if (missing._tag !== "KubeConfigError") return
        expect(missing.message).toBe(`kubeconfig ${file}: context "prod" not found (contexts: kind-kind, dev)`)
        expect(missing.file).toEqual(Option.some(file))
      })
    )
  )

  it.scoped(
    "names the missing cluster, user, server and current-context",
    inSandbox((t) =>
      Effect.gen(function*() {
        const file = yield* t.write(
          "config",
          kubeconfig({
            clusters: { ok: simpleCluster("https://ok.example"), empty: {} },
            contexts: {
              "no-cluster": { cluster: "gone" },
              "no-user": { cluster: "ok", user: "ghost" },
              "no-server": { cluster: "empty" }
            },
            users: { real: { token: "t" } }
          })
        )
        const message = (context?: string) =>
          Effect.flip(KubeConfig.resolve({ ...t.isolated, path: file, context })).pipe(Effect.map((e) => e.message))
        expect(yield* message()).toBe(
          `kubeconfig ${file}: no current-context is set and no context was asked for (contexts: no-cluster, no-user, no-server); ` +
            "pick one with --context or `kubectl config use-context`"
        )
        expect(yield* message("no-cluster")).toBe(
          `kubeconfig ${file}: context "no-cluster": cluster "gone" not found (clusters: ok, empty)`
        )
        expect(yield* message("no-user")).toBe(
          `kubeconfig ${file}: context "no-user": user "ghost" not found (users: real)`
        )
        expect(yield* message("no-server")).toBe(`kubeconfig ${file}: cluster "empty" has no server`)
      })
    )
  )

  it.scoped(
    "refuses a user name or password in the server's URL, and shows the server without them",
    inSandbox((t) =>
      Effect.gen(function*() {
        const Password = "s3cretPW"
        const file = yield* t.write(
          "config",
          kubeconfig({
            clusters: {
              both: simpleCluster(`https://admin:${Password}@kube.example:6443/`),
              name: simpleCluster(`https://${Password}@kube.example:6443`),
              bare: simpleCluster(`admin:${Password}@kube.example:6443`),
              broken: simpleCluster(`https://admin:${Password}/x@kube.example:6443`)
            },
            contexts: {
              both: { cluster: "both", user: "u" },
              name: { cluster: "name", user: "u" },
              bare: { cluster: "bare", user: "u" },
              broken: { cluster: "broken", user: "u" }
            },
            users: { u: { token: "a-token-for-this-test" } }
          })
        )
        const message = (context: string) =>
          Effect.flip(KubeConfig.resolve({ ...t.isolated, path: file, context })).pipe(Effect.map((e) => e.message))
        const refused = (cluster: string, what: string) =>
          `kubeconfig ${file}: cluster "${cluster}": its server URL carries ${what}; basic auth is not supported ` +
          "(kube-apiserver removed it in 1.19): write the server as https://kube.example:6443, and sign in " +
          "with the user's token, client certificate or exec plugin"
        expect(yield* message("both")).toBe(refused("both", "a user name and password"))
        expect(yield* message("name")).toBe(refused("name", "a user name"))
        expect(yield* message("bare")).toBe(refused("bare", "a user name and password"))
        expect(yield* message("broken")).toBe(
          `kubeconfig ${file}: cluster "broken": server is not a URL (not shown: it has an @, perhaps a password in it)`
        )
        for (const context of ["both", "name", "bare", "broken"]) {
          expect(yield* message(context)).not.toContain(Password)
        }
      })
    )
  )

  it.effect("layerStatic drops a user name and password from the server: never sent, never shown", () =>
    Effect.gen(function*() {
      const connection = yield* KubeConfig.KubeConfig
      expect(connection.server).toBe("http://127.0.0.1:8080")
      expect(connection.source).toBe("static http://127.0.0.1:8080/")
    }).pipe(Effect.provide(KubeConfig.layerStatic({ server: "http://admin:s3cretPW@127.0.0.1:8080/" }))))

  it.scoped(
    "an empty file named explicitly says it holds nothing, as KUBECONFIG's does",
    inSandbox((t) =>
      Effect.gen(function*() {
        const file = yield* t.write("empty", "")
        const error = yield* Effect.flip(KubeConfig.resolve({ ...t.isolated, path: file, context: "any" }))
        expect(error.message).toBe(`kubeconfig ${file}: no clusters, contexts or users in it`)
        const viaEnv = yield* Effect.flip(KubeConfig.resolve({ ...t.isolated, env: { KUBECONFIG: file } }))
        expect(viaEnv.message).toContain(`KUBECONFIG=${file} (no clusters, contexts or users in it)`)
      })
    )
  )

  it.scoped(
    "reads CA, client certificate and key from -data fields and from files; -data wins",
    inSandbox((t) =>
      Effect.gen(function*() {
        const file = yield* t.write(
          "config",
          kubeconfig({
            currentContext: "data",
            clusters: {
              data: { server: "https://data.example", "certificate-authority-data": b64(CA_PEM) },
              files: {
                server: "https://files.example",
                "certificate-authority": pki.ca,
                "tls-server-name": "api.files"
              },
              both: {
                server: "https://both.example",
                "certificate-authority-data": b64(CA_PEM.replace("Zml4dHVyZS1jYQ==", "ZGF0YS13aW5z")),
                "certificate-authority": pki.ca
              }
            },
            contexts: {
              data: { cluster: "data", user: "data" },
              files: { cluster: "files", user: "files" },
              both: { cluster: "both" }
            },
            users: {
              data: { "client-certificate-data": b64(CERT_PEM), "client-key-data": b64(KEY_PEM) },
              files: { "client-certificate": pki.cert, "client-key": pki.key }
            }
          })
        )
        for (const context of ["data", "files"]) {
          const connection = yield* KubeConfig.resolve({ ...t.isolated, path: file, context })
          expect(connection.tls.ca).toEqual(Option.some(CA_PEM))
          expect(connection.tls.clientCertificate).toEqual(Option.some(CERT_PEM))
          expect(Option.map(connection.tls.clientKey, Redacted.value)).toEqual(Option.some(KEY_PEM))
          expect(connection.tls.insecureSkipTlsVerify).toBe(false)
          expect(connection.tls.serverName).toEqual(context === "files" ? Option.some("api.files") : Option.none())
          // The key never shows through the connection's own printing.
          expect(JSON.stringify(connection.tls)).not.toContain("ZmlxdHVyZS1rZXk")
          expect(JSON.stringify(connection.tls)).not.toContain("PRIVATE KEY")
        }
        const both = yield* KubeConfig.resolve({ ...t.isolated, path: file, context: "both" })
        expect(both.tls.ca).toEqual(Option.some(CA_PEM.replace("Zml4dHVyZS1jYQ==", "ZGF0YS13aW5z")))
        expect(both.tls.clientKey).toEqual(Option.none())
      })
    )
  )

  it.scoped(
    "resolves relative paths against the kubeconfig that named them",
    inSandbox((t) =>
      Effect.gen(function*() {
        // A checked-in file whose paths are all relative (../pki/ca.pem, token); the cwd is elsewhere.
        const nested = yield* KubeConfig.resolve({ ...t.isolated, path: `${fixtures}nested/config` })
        expect(nested.tls.ca).toEqual(Option.some(CA_PEM))
        expect(nested.tls.clientCertificate).toEqual(Option.some(CERT_PEM))
        expect(Option.map(nested.tls.clientKey, Redacted.value)).toEqual(Option.some(KEY_PEM))
        expect(nested.tls.serverName).toEqual(Option.some("api.nested.example"))
        expect(nested.namespace).toEqual(Option.some("nested-ns"))
        expect(yield* header(nested)).toEqual(Option.some("Bearer nested-file-token"))

        // Merged: the second file's relative CA is found next to the second file, not the first.
        const first = yield* t.write(
          "one/config",
          kubeconfig({ currentContext: "two", contexts: { two: { cluster: "two", user: "two" } } })
        )
        yield* t.write("two/certs/ca.pem", CA_PEM)
        yield* t.write("two/token", "relative-token\n")
        const second = yield* t.write(
          "two/config",
          kubeconfig({
            clusters: { two: { server: "https://two.example", "certificate-authority": "certs/ca.pem" } },
            users: { two: { tokenFile: "./token" } }
          })
        )
        const merged = yield* KubeConfig.resolve({ ...t.isolated, env: { KUBECONFIG: `${first}:${second}` } })
        expect(merged.tls.ca).toEqual(Option.some(CA_PEM))
        expect(yield* header(merged)).toEqual(Option.some("Bearer relative-token"))

        yield* t.remove("two/certs/ca.pem")
        const error = yield* Effect.flip(
          KubeConfig.resolve({ ...t.isolated, env: { KUBECONFIG: `${first}:${second}` } })
        )
        expect(error.message).toBe(
          `kubeconfig ${second}: cluster "two": certificate-authority file ${
            t.at("two/certs/ca.pem")
          } cannot be read: ENOENT (no such file)`
        )
      })
    )
  )

  it.scoped(
    "skips TLS verification only when the kubeconfig says insecure-skip-tls-verify: true",
    inSandbox((t) =>
      Effect.gen(function*() {
        const file = yield* t.write(
          "config",
          kubeconfig({
            clusters: {
              yes: { server: "https://yes.example", "insecure-skip-tls-verify": true },
              no: { server: "https://no.example", "insecure-skip-tls-verify": false },
              unsaid: { server: "https://unsaid.example" },
              contradiction: {
                server: "https://c.example",
                "insecure-skip-tls-verify": true,
                "certificate-authority": pki.ca
              }
            },
            contexts: {
              yes: { cluster: "yes" },
              no: { cluster: "no" },
              unsaid: { cluster: "unsaid" },
              contradiction: { cluster: "contradiction" }
            }
          })
        )
        const insecure = (context: string) =>
          KubeConfig.resolve({ ...t.isolated, path: file, context }).pipe(
            Effect.map((c) => c.tls.insecureSkipTlsVerify)
          )
        expect([yield* insecure("yes"), yield* insecure("no"), yield* insecure("unsaid")]).toEqual([true, false, false])
        const error = yield* Effect.flip(insecure("contradiction"))
        expect(error.message).toBe(
          `kubeconfig ${file}: cluster "contradiction": insecure-skip-tls-verify is set together with a certificate authority; remove one of them`
        )
      })
    )
  )

  it.scoped(
    "reports broken YAML by line, and a wrong shape by entry, naming the file",
    inSandbox((t) =>
      Effect.gen(function*() {
        const broken = `${fixtures}broken.yaml`
        const error = yield* Effect.flip(KubeConfig.resolve({ ...t.isolated, path: broken }))
        expect(error._tag).toBe("KubeConfigError")
        expect(error.message).toBe(
          `kubeconfig ${broken}: is not valid YAML at line 3, column 11: Nested mappings are not allowed in compact mappings`
        )

        const shape = yield* t.write(
          "shape/config",
          [
            "clusters:",
            "- name: c",
            "  cluster:",
            "    server: https://c.example",
            "    insecure-skip-tls-verify: \"yes\"",
            "users:",
            "- name: u",
            "  user:",
            "    exec: {args: [one]}"
          ].join("\n")
        )
        const shapeError = yield* Effect.flip(KubeConfig.resolve({ ...t.isolated, env: { KUBECONFIG: shape } }))
        expect(shapeError.message).toBe(
          `kubeconfig ${shape}: is not a valid kubeconfig: cluster "c": insecure-skip-tls-verify should be true or false; ` +
            "user \"u\": exec.command is required"
        )
      })
    )
  )
})

describe("KubeConfig: credentials that change", () => {
  it.scoped(
    "re-reads a tokenFile once a minute (by the Clock) and at once after invalidate",
    inSandbox((t) =>
      Effect.gen(function*() {
        const tokenFile = yield* t.write("token", "first\n")
        const file = yield* t.write(
          "config",
          kubeconfig({
            currentContext: "x",
            clusters: { c: simpleCluster("https://c.example") },
            contexts: { x: { cluster: "c", user: "u" }, both: { cluster: "c", user: "both" } },
            users: { u: { tokenFile }, both: { token: "inline", tokenFile: t.at("absent") } }
          })
        )
        const connection = yield* KubeConfig.resolve({ ...t.isolated, path: file })
        expect(yield* header(connection)).toEqual(Option.some("Bearer first"))
        yield* t.write("token", "second")
        yield* TestClock.adjust("59 seconds")
        expect(yield* header(connection)).toEqual(Option.some("Bearer first"))
        yield* TestClock.adjust("1 second")
        expect(yield* header(connection)).toEqual(Option.some("Bearer second"))
        yield* t.write("token", "third")
        expect(yield* header(connection)).toEqual(Option.some("Bearer second"))
        yield* connection.invalidate
        expect(yield* header(connection)).toEqual(Option.some("Bearer third"))

        // The inline token stands in while the tokenFile cannot be read (client-go's order).
        const both = yield* KubeConfig.resolve({ ...t.isolated, path: file, context: "both" })
        expect(yield* header(both)).toEqual(Option.some("Bearer inline"))
        yield* t.write("absent", "from-file")
        yield* both.invalidate
        expect(yield* header(both)).toEqual(Option.some("Bearer from-file"))

        yield* t.remove("token")
        const unreadable = yield* Effect.flip(KubeConfig.resolve({ ...t.isolated, path: file }))
        expect(unreadable.message).toBe(
          `kubeconfig ${file}: user "u": tokenFile ${tokenFile} cannot be read: ENOENT (no such file)`
        )
      })
    )
  )

  const execConfig = (
    t: Effect.Effect.Success<typeof sandbox>,
    exec: Record<string, unknown>,
    env: Record<string, string>
  ) =>
    t.write(
      "exec/config",
      kubeconfig({
        currentContext: "x",
        clusters: { c: { server: "https://exec.example:6443", "certificate-authority-data": b64(CA_PEM) } },
        contexts: { x: { cluster: "c", user: "plugin" } },
        users: {
          plugin: {
            exec: {
              command: "node",
              args: [plugin],
              env: Object.entries({ COUNT_FILE: t.at("runs"), INFO_FILE: t.at("info.json"), ...env }).map(
                ([name, value]) => ({ name, value })
              ),
              ...exec
            }
          }
        }
      })
    )

  it.scoped(
    "runs a v1 exec plugin once, keeps its token until expirationTimestamp, then runs it again",
    inSandbox((t) =>
      Effect.gen(function*() {
        const file = yield* execConfig(
          t,
          { apiVersion: "client.authentication.k8s.io/v1", interactiveMode: "Never" },
          { EXPIRES: "1970-01-01T00:10:00Z" }
        )
        const connection = yield* KubeConfig.resolve({ ...t.isolated, path: file })
        expect(yield* t.lines("runs")).toBe(0) // nothing runs before a credential is asked for
        expect(yield* header(connection)).toEqual(Option.some("Bearer exec-token-1"))
        expect(JSON.parse(yield* t.fs.readFileString(t.at("info.json")))).toEqual({
          apiVersion: "client.authentication.k8s.io/v1",
          kind: "ExecCredential",
          spec: { interactive: false }
        })
        expect(yield* header(connection)).toEqual(Option.some("Bearer exec-token-1"))
        yield* TestClock.adjust("9 minutes")
        expect(yield* header(connection)).toEqual(Option.some("Bearer exec-token-1"))
        expect(yield* t.lines("runs")).toBe(1)
        yield* TestClock.adjust("1 minute")
        expect(yield* header(connection)).toEqual(Option.some("Bearer exec-token-2"))
        expect(yield* t.lines("runs")).toBe(2)
        // Its new token has the same (now past) expiry: every ask runs it again — the plugin's fault.
        yield* connection.invalidate
        expect(yield* header(connection)).toEqual(Option.some("Bearer exec-token-3"))
      })
    )
  )

  it.scoped(
    "keeps a v1beta1 token without expiry until invalidated, and passes the cluster when asked",
    inSandbox((t) =>
      Effect.gen(function*() {
        const file = yield* execConfig(
          t,
          { apiVersion: "client.authentication.k8s.io/v1beta1", provideClusterInfo: true },
          { TOKEN_PREFIX: "beta" }
        )
        const connection = yield* KubeConfig.resolve({ ...t.isolated, path: file })
        const [first, second] = yield* Effect.all([header(connection), header(connection)], { concurrency: 2 })
        expect([first, second]).toEqual([Option.some("Bearer beta-1"), Option.some("Bearer beta-1")])
        yield* TestClock.adjust("1 day")
        expect(yield* header(connection)).toEqual(Option.some("Bearer beta-1"))
        expect(yield* t.lines("runs")).toBe(1)
        yield* connection.invalidate
        expect(yield* header(connection)).toEqual(Option.some("Bearer beta-2"))
        expect(yield* t.lines("runs")).toBe(2)
        expect(JSON.parse(yield* t.fs.readFileString(t.at("info.json")))).toEqual({
          apiVersion: "client.authentication.k8s.io/v1beta1",
          kind: "ExecCredential",
          spec: {
            interactive: false,
            cluster: { server: "https://exec.example:6443", "certificate-authority-data": b64(CA_PEM) }
          }
        })
      })
    )
  )

  it.scoped(
    "says which plugin failed, with its exit code and a shortened stderr, never its stdout",
    inSandbox((t) =>
      Effect.gen(function*() {
        const failing = yield* execConfig(t, { apiVersion: "client.authentication.k8s.io/v1" }, { PLUGIN_MODE: "fail" })
        const connection = yield* KubeConfig.resolve({ ...t.isolated, path: failing })
        const error = yield* Effect.flip(connection.authorization)
        const stderr = `error: could not refresh the session: ${"the identity provider said no. ".repeat(30).trim()}`
        expect(error.message).toBe(
          `kubeconfig ${failing}: user "plugin": exec plugin "node" exited with code 3; stderr: ${
            stderr.slice(0, 300)
          }…`
        )
        expect(error.message).not.toContain("stdout-secret")
        expect(yield* t.lines("runs")).toBe(1)

        const missing = yield* t.write(
          "missing/config",
          kubeconfig({
            currentContext: "x",
            clusters: { c: simpleCluster("https://c.example") },
            contexts: { x: { cluster: "c", user: "m" } },
            users: {
              m: {
                exec: {
                  apiVersion: "client.authentication.k8s.io/v1beta1",
                  command: "kubectl-plugin-that-is-not-installed",
                  installHint: "Install it with: brew install not-installed\n"
                }
              }
            }
          })
        )
        const notInstalled = yield* Effect.flip(
          Effect.flatMap(KubeConfig.resolve({ ...t.isolated, path: missing }), (c) => c.authorization)
        )
        expect(notInstalled.message).toBe(
          `kubeconfig ${missing}: user "m": exec plugin "kubectl-plugin-that-is-not-installed" was not found. ` +
            "Install it with: brew install not-installed"
        )

        const noToken = yield* execConfig(t, { apiVersion: "client.authentication.k8s.io/v1" }, {
          PLUGIN_MODE: "no-token"
        })
        const noTokenError = yield* Effect.flip(
          Effect.flatMap(KubeConfig.resolve({ ...t.isolated, path: noToken }), (c) => c.authorization)
        )
        expect(noTokenError.message).toBe(`kubeconfig ${noToken}: user "plugin": exec plugin "node" returned no token`)

        const unsupported = yield* execConfig(t, { apiVersion: "client.authentication.k8s.io/v1alpha1" }, {})
        const unsupportedError = yield* Effect.flip(KubeConfig.resolve({ ...t.isolated, path: unsupported }))
        expect(unsupportedError.message).toBe(
          `kubeconfig ${unsupported}: user "plugin": exec apiVersion "client.authentication.k8s.io/v1alpha1" is not supported ` +
            "(use client.authentication.k8s.io/v1 or client.authentication.k8s.io/v1beta1)"
        )
      })
    )
  )

  /**
   * A list whose credentials come from the exec plugin of `file`, at an address no request reaches
   * (none is sent), under a 5 s headers deadline: the request's fiber, and the plugin's pid once it runs.
   */
  const listWithPlugin = (t: Parameters<Parameters<typeof inSandbox>[0]>[0], file: string) =>
    Effect.gen(function*() {
      const resolved = yield* KubeConfig.resolve({ ...t.isolated, path: file })
      const connection = { ...resolved, server: "https://127.0.0.1:1", tls: KubeConfig.defaultTls }
      const client = yield* KubeClient.make({ headersTimeout: "5 seconds" }).pipe(
        Effect.provideService(KubeConfig.KubeConfig, connection)
      )
      const request = yield* Effect.fork(Effect.flip(client.list(SandboxResource, Sandbox, { namespace: "ns" })))
      const pid = Number(
        yield* eventually(t.fs.readFileString(t.at("pid")).pipe(Effect.orElseSucceed(() => "")), (text) =>
          text.length > 0)
      )
      return { pid, request }
    })

  // A plugin that never ends (waiting for a browser login) is stopped when the request's
  // deadline passes (which covers reading its credentials), not left running or waited on.
  it.scoped(
    "a plugin that hangs is stopped when its request's deadline passes, and the request fails as not sent",
    inSandbox((t) =>
      Effect.gen(function*() {
        const file = yield* execConfig(t, { apiVersion: "client.authentication.k8s.io/v1" }, {
          PLUGIN_MODE: "hang",
          PID_FILE: t.at("pid")
        })
        const { pid, request } = yield* listWithPlugin(t, file)
        expect(isRunning(pid)).toBe(true)
        yield* TestClock.adjust("5 seconds")
        const error = yield* Fiber.join(request)
        expect(error._tag === "KubeTransportError" && error.reached).toBe("not-sent")
        expect(error.message).toContain(
          `was not sent: reading its credentials (exec plugin "node" for user "plugin") took longer than 5s`
        )
        yield* eventually(
          Effect.sync(() => isRunning(pid)),
          (running) => !running
        )
      })
    )
  )

  it.scoped(
    "a plugin deaf to SIGTERM is sent SIGKILL 2 s after, and the request fails at once, not waiting for it",
    inSandbox((t) =>
      Effect.gen(function*() {
        const file = yield* execConfig(t, { apiVersion: "client.authentication.k8s.io/v1" }, {
          PLUGIN_MODE: "hang",
          IGNORE_SIGTERM: "1",
          PID_FILE: t.at("pid")
        })
        const { pid, request } = yield* listWithPlugin(t, file)
        yield* TestClock.adjust("5 seconds")
        const error = yield* Fiber.join(request)
        expect(error._tag === "KubeTransportError" && error.reached).toBe("not-sent")
        // SIGTERM was ignored: the plugin is given its grace, on the test clock, then SIGKILL.
        yield* eventually(TestClock.sleeps(), (sleeps) => Chunk.some(sleeps, (at) => at === 7_000))
        expect(isRunning(pid)).toBe(true)
        yield* TestClock.adjust("2 seconds")
        yield* eventually(Effect.sync(() => isRunning(pid)), (running) => !running)
      })
    )
  )
})

describe("KubeConfig: in-cluster", () => {
  it.scoped(
    "reads the service account, and its rotated token only after a minute or after invalidate",
    inSandbox((t) =>
      Effect.gen(function*() {
        yield* t.write("sa/token", "sa-token-1\n")
        yield* t.write("sa/ca.crt", CA_PEM)
        yield* t.write("sa/namespace", "team-a\n")
        const env = { KUBERNETES_SERVICE_HOST: "10.96.0.1", KUBERNETES_SERVICE_PORT: "443" }
        const connection = yield* KubeConfig.resolve({ ...t.isolated, env, serviceAccountDir: t.at("sa") })
        expect(connection.server).toBe("https://10.96.0.1:443")
        expect(connection.namespace).toEqual(Option.some("team-a"))
        expect(connection.tls.ca).toEqual(Option.some(CA_PEM))
        expect(connection.source).toBe(`in-cluster service account ${t.at("sa")} (https://10.96.0.1:443)`)
        expect(yield* header(connection)).toEqual(Option.some("Bearer sa-token-1"))

        yield* t.write("sa/token", "sa-token-2")
        yield* TestClock.adjust("30 seconds")
        expect(yield* header(connection)).toEqual(Option.some("Bearer sa-token-1"))
        yield* TestClock.adjust("30 seconds")
        expect(yield* header(connection)).toEqual(Option.some("Bearer sa-token-2"))
        yield* t.write("sa/token", "sa-token-3")
        yield* TestClock.adjust("10 seconds")
        expect(yield* header(connection)).toEqual(Option.some("Bearer sa-token-2"))
        yield* connection.invalidate
        expect(yield* header(connection)).toEqual(Option.some("Bearer sa-token-3"))
      })
    )
  )

  it.scoped(
    "follows the kubelet's rotation: token is a link into ..data, swapped to a new directory in one rename",
    inSandbox((t) =>
      Effect.gen(function*() {
        // The layout of a projected volume: each file a link through ..data to a timestamped directory.
        const sa = t.at("sa")
        yield* t.write("sa/..2026_12_07_10_00_00.1/token", "rotated-token-1")
        yield* t.write("sa/..2026_12_07_10_00_00.1/ca.crt", CA_PEM)
        yield* t.write("sa/..2026_12_07_10_00_00.1/namespace", "team-pod")
        yield* t.fs.symlink("..2026_12_07_10_00_00.1", `${sa}/..data`)
        for (const file of ["token", "ca.crt", "namespace"]) yield* t.fs.symlink(`..data/${file}`, `${sa}/${file}`)
        const env = { KUBERNETES_SERVICE_HOST: "10.96.0.1", KUBERNETES_SERVICE_PORT: "443" }
        const connection = yield* KubeConfig.inCluster({ env, serviceAccountDir: sa })
        expect([connection.namespace, connection.tls.ca]).toEqual([Option.some("team-pod"), Option.some(CA_PEM)])
        expect(yield* header(connection)).toEqual(Option.some("Bearer rotated-token-1"))

        // The kubelet writes the new files beside the old, points ..data_tmp at them, renames it
        // over ..data (atomic), and removes the old directory.
        yield* t.write("sa/..2026_12_07_10_50_00.2/token", "rotated-token-2")
        yield* t.fs.symlink("..2026_12_07_10_50_00.2", `${sa}/..data_tmp`)
        yield* t.fs.rename(`${sa}/..data_tmp`, `${sa}/..data`)
        yield* t.fs.remove(`${sa}/..2026_12_07_10_00_00.1`, { recursive: true })
        yield* TestClock.adjust(KubeConfig.TokenRereadInterval)
        expect(yield* header(connection)).toEqual(Option.some("Bearer rotated-token-2"))
      })
    )
  )

  it.scoped(
    "the service-account directory defaults to the standard mount",
    inSandbox(() =>
      Effect.gen(function*() {
        expect(KubeConfig.DefaultServiceAccountDir).toBe("/var/run/secrets/kubernetes.io/serviceaccount")
        // (This machine is no pod: nothing is mounted there.)
        const error = yield* Effect.flip(
          KubeConfig.inCluster({ env: { KUBERNETES_SERVICE_HOST: "10.0.0.1", KUBERNETES_SERVICE_PORT: "443" } })
        )
        expect(error.message).toContain(
          "in-cluster (10.0.0.1:443 is set, but /var/run/secrets/kubernetes.io/serviceaccount/token does not exist)"
        )
      })
    )
  )

  it.scoped(
    "layerInCluster: IPv6 host, POD_NAMESPACE, and not-found outside a pod",
    inSandbox((t) =>
      Effect.gen(function*() {
        yield* t.write("sa/token", "v6-token")
        const env = { KUBERNETES_SERVICE_HOST: "fd00::1", KUBERNETES_SERVICE_PORT: "6443", POD_NAMESPACE: "from-env" }
        const connection = yield* Effect.provide(
          KubeConfig.KubeConfig,
          KubeConfig.layerInCluster({ env, serviceAccountDir: t.at("sa") })
        )
        expect([connection.server, connection.namespace, connection.tls.ca]).toEqual([
          "https://[fd00::1]:6443",
          Option.some("from-env"),
          Option.none()
        ])
        const error = yield* Effect.flip(KubeConfig.inCluster({ env: { KUBERNETES_SERVICE_HOST: "10.0.0.1" } }))
        expect(error._tag).toBe("KubeConfigNotFound")
        expect(error.message).toContain("in-cluster (KUBERNETES_SERVICE_PORT is not set)")
      })
    )
  )
})

describe("KubeConfig: secrets", () => {
  it.scoped(
    "no token, key or exec output appears in an error message or a log line",
    inSandbox((t) =>
      Effect.gen(function*() {
        const logs: Array<string> = []
        const capture = Logger.make((options) => {
          logs.push(Logger.logfmtLogger.log(options))
        })
        const messages: Array<string> = []
        const failWith = <A, R>(
          effect: Effect.Effect<A, KubeConfig.KubeConfigError | KubeConfig.KubeConfigNotFound, R>
        ) =>
          Effect.flip(effect).pipe(
            Effect.tap((error) => {
              messages.push(error.message, String(error), JSON.stringify(error))
            })
          )
        const secrets = [
          "yaml-secret-1",
          "424242424242",
          "key-secret-material",
          "stdout-secret",
          "garbage-secret",
          "exec-secret",
          "file-secret"
        ]

        yield* Effect.gen(function*() {
          // YAML broken on the line that holds the token.
          const yamlBroken = yield* t.write("a/config", "users:\n- name: u\n  user:\n    token: yaml-secret-1: oops\n")
          yield* failWith(KubeConfig.resolve({ ...t.isolated, path: yamlBroken }))
          // A token of the wrong type: the schema error names the field, not the value.
          const numeric = yield* t.write("b/config", "users:\n- name: u\n  user:\n    token: 424242424242\n")
          yield* failWith(KubeConfig.resolve({ ...t.isolated, path: numeric }))
          // A key that is not PEM.
          const badKey = yield* t.write(
            "c/config",
            kubeconfig({
              currentContext: "x",
              clusters: { c: simpleCluster("https://c.example") },
              contexts: { x: { cluster: "c", user: "u" } },
              users: { u: { "client-certificate-data": b64(CERT_PEM), "client-key-data": b64("key-secret-material") } }
            })
          )
          yield* failWith(KubeConfig.resolve({ ...t.isolated, path: badKey }))
          // Exec plugins: a failing one with a secret on stdout; one printing non-JSON; a good one.
          for (const mode of ["fail", "garbage"]) {
            const file = yield* t.write(
              `${mode}/config`,
              kubeconfig({
                currentContext: "x",
                clusters: { c: simpleCluster("https://c.example") },
                contexts: { x: { cluster: "c", user: "u" } },
                users: {
                  u: {
                    exec: {
                      apiVersion: "client.authentication.k8s.io/v1",
                      command: "node",
                      args: [plugin],
                      env: [{ name: "PLUGIN_MODE", value: mode }]
                    }
                  }
                }
              })
            )
            yield* failWith(Effect.flatMap(KubeConfig.resolve({ ...t.isolated, path: file }), (c) => c.authorization))
          }
          const good = yield* t.write(
            "good/config",
            kubeconfig({
              currentContext: "x",
              clusters: { c: simpleCluster("https://c.example") },
              contexts: { x: { cluster: "c", user: "u" } },
              users: {
                u: {
                  exec: {
                    apiVersion: "client.authentication.k8s.io/v1",
                    command: "node",
                    args: [plugin],
                    env: [
                      { name: "TOKEN_PREFIX", value: "exec-secret" },
                      { name: "EXPIRES", value: "1970-01-01T00:01:00Z" }
                    ]
                  }
                }
              }
            })
          )
          const goodConnection = yield* KubeConfig.resolve({ ...t.isolated, path: good })
          expect(yield* header(goodConnection)).toEqual(Option.some("Bearer exec-secret-1"))
          // A token file that disappears after it was read: a warning, and the old token kept.
          yield* t.write("sa/token", "file-secret-token")
          const inCluster = yield* KubeConfig.inCluster({
            env: { KUBERNETES_SERVICE_HOST: "10.0.0.1", KUBERNETES_SERVICE_PORT: "443" },
            serviceAccountDir: t.at("sa")
          })
          yield* t.remove("sa/token")
          yield* TestClock.adjust("1 minute")
          expect(yield* header(inCluster)).toEqual(Option.some("Bearer file-secret-token"))
        }).pipe(Effect.provide(Logger.add(capture)), Logger.withMinimumLogLevel(LogLevel.All))

        // The errors and the logs are the ones expected, so the check below is not vacuous.
        expect(messages.filter((_, i) => i % 3 === 0)).toEqual([
          `kubeconfig ${
            t.at("a/config")
          }: is not valid YAML at line 4, column 12: Nested mappings are not allowed in compact mappings`,
          `kubeconfig ${t.at("b/config")}: is not a valid kubeconfig: user "u": token should be a string`,
          `kubeconfig ${t.at("c/config")}: user "u": client-key-data does not hold a PEM private key`,
          `kubeconfig ${t.at("fail/config")}: user "u": exec plugin "node" exited with code 3; stderr: ${
            `error: could not refresh the session: ${"the identity provider said no. ".repeat(30).trim()}`.slice(0, 300)
          }…`,
          `kubeconfig ${
            t.at("garbage/config")
          }: user "u": exec plugin "node" did not print an ExecCredential (its output is not JSON)`
        ])
        expect(logs.some((line) => line.includes("running exec plugin"))).toBe(true)
        expect(logs.some((line) => line.includes("valid until 1970-01-01T00:01:00.000Z"))).toBe(true)
        expect(logs.some((line) => line.includes("level=WARN") && line.includes("still using the token read before")))
          .toBe(true)
        for (const text of [...messages, ...logs]) {
          for (const secret of secrets) expect(text).not.toContain(secret)
        }
      })
    )
  )
})
