/**
 * A real kube-apiserver (1.20.2 or 1.37.2, built by `build.sh`) and its etcd on loopback, in a temp directory,
 * bootstrapped with the Sandbox CRD, a namespace, an admin token and a limited user. Promise-based
 * so that vitest's `globalSetup` can own it; `scoped` wraps it for a test that wants its own.
 *
 * Every child runs under `lifeline.sh`: it dies with the harness even if the harness is killed.
 * A later start also reaps what a crashed earlier run left in the temp directory.
 */
import { Agent, fetch } from "@effect/platform-node/Undici"
import { Data, Effect, Option, Redacted } from "effect"
import type { Scope } from "effect"
import { spawn, spawnSync } from "node:child_process"
import type { ChildProcess } from "node:child_process"
import { randomBytes } from "node:crypto"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { type ClusterConnection, defaultTls } from "../../src/KubeConfig.ts"

/** The versions `build.sh` builds: the oldest we support, and the release our users run. */
export const KubeVersions = ["1.20.2", "1.37.2"] as const
export type KubeVersion = typeof KubeVersions[number]

/**
 * The version this process runs against: `KUBE_APISERVER_VERSION`, else the oldest (the suite's
 * runner sets the variable for each version in turn).
 */
export const selectedVersion = (env: NodeJS.ProcessEnv = process.env): KubeVersion => {
  const asked = env.KUBE_APISERVER_VERSION
  if (asked === undefined || asked === "") return KubeVersions[0]
  const known = KubeVersions.find((v) => v === asked)
  if (known === undefined) {
    throw new Error(`KUBE_APISERVER_VERSION=${asked}: the suite knows ${KubeVersions.join(" and ")}`)
  }
  return known
}

/** The minor version (20, 37): what a test branches on where the two servers answer differently. */
export const minorOf = (version: string): number => Number(/^v?1\.(\d+)/.exec(version)?.[1] ?? NaN)

const cacheDir = (env: NodeJS.ProcessEnv) => env.SANDBOX_WATCH_CACHE ?? "/var/cache/sandbox-watch"

const here = path.dirname(fileURLToPath(import.meta.url))
const lifeline = path.join(here, "lifeline.sh")
const tempPrefix = "sandbox-watch-apiserver-"

/** Where the binary is: `SANDBOX_WATCH_KUBE_APISERVER`, else the cache `build.sh` fills. */
export const binaryPath = (version: KubeVersion = selectedVersion(), env: NodeJS.ProcessEnv = process.env): string =>
  env.SANDBOX_WATCH_KUBE_APISERVER ?? path.join(cacheDir(env), `kube-apiserver-${version}`)

/** The etcd built (1.37: 3.6 from the module proxy) or linked (1.20: Debian's 3.4) for that version. */
export const etcdPath = (version: KubeVersion = selectedVersion(), env: NodeJS.ProcessEnv = process.env): string =>
  path.join(cacheDir(env), `etcd-${version}`)

/** What a test needs to talk to the server: plain data, so it can cross into vitest's workers. */
export interface ApiServerFacts {
  /** `https://127.0.0.1:<port>`, no trailing slash. */
  readonly url: string
  readonly port: number
  /** The PEM bundle to trust (the apiserver's self-signed serving certificate and its CA). */
  readonly caPem: string
  /** A bearer token of a `system:masters` user. Secret: never log it. */
  readonly adminToken: string
  /** A bearer token of {@link LimitedUser}: get and list on sandboxes, no watch. Secret. */
  readonly limitedUserToken: string
  /** The namespace made for the tests. */
  readonly namespace: string
  readonly etcdUrl: string
  /** The temp directory: `etcd.log`, `kube-apiserver.log`, certificates. */
  readonly dir: string
  /** The server's `/version` `gitVersion`. */
  readonly version: string
  /** Its minor version (20, 37). */
  readonly minor: number
}

/**
 * A `ClusterConnection` as a kubeconfig with `certificate-authority-data` and a token would
 * resolve: the CA given, TLS verified. Here rather than in ApiServerFacts.ts so the benchmarks,
 * which run outside vitest, can use it too.
 */
export const verifiedConnection = (target: {
  readonly server: string
  readonly caPem: string
  /** Secret. */
  readonly token: string
  readonly namespace: string
  /** What `source` says the server is. */
  readonly about: string
}): ClusterConnection => {
  const server = target.server.replace(/\/+$/, "")
  return {
    server,
    namespace: Option.some(target.namespace),
    tls: { ...defaultTls, ca: Option.some(target.caPem) },
    authorization: Effect.succeed(Option.some(Redacted.make(`Bearer ${target.token}`))),
    invalidate: Effect.void,
    source: `${target.about} at ${server}`
  }
}

/** The user behind `limitedUserToken`. */
export const LimitedUser = "sandbox-limited"
/** The Role (in the tests' namespace) that gives the limited user get and list on sandboxes. */
export const LimitedRole = "sandbox-reader"

/** How long the steps took, in milliseconds of real time. */
export interface StartTimings {
  readonly etcdReadyMs: number
  /** From spawning kube-apiserver to `/readyz` answering `ok`. */
  readonly apiServerReadyMs: number
  /** CRD established and served, namespace and RBAC applied. */
  readonly bootstrapMs: number
  readonly totalMs: number
}

export interface RealApiServer extends ApiServerFacts {
  readonly timings: StartTimings
  /**
   * Kills kube-apiserver (`SIGTERM`, or `SIGKILL` for a crash) and starts it again on the same
   * port against the same etcd, with the same certificates; resolves once `/readyz` says ok.
   */
  readonly restartApiServer: (
    options?: { readonly signal?: "SIGTERM" | "SIGKILL" }
  ) => Promise<{ readonly readyMs: number }>
  /** Kills kube-apiserver and etcd, waits for both to exit, removes the temp directory (unless kept). */
  readonly stop: () => Promise<void>
}

export interface StartOptions {
  /** Which server; {@link selectedVersion} unless told. */
  readonly version?: KubeVersion
  /** The binary; {@link binaryPath} of the version unless told. */
  readonly binary?: string
  /** Extra kube-apiserver flags (a feature gate, `--max-requests-inflight`). */
  readonly extraArgs?: ReadonlyArray<string>
  /** `--watch-cache` (default true). 1.20's watch cache sizes itself (100 events, growing while its
   * events are younger than 75 s), so `--watch-cache-sizes` can only switch it off per resource. */
  readonly watchCache?: boolean
  /** `--etcd-compaction-interval` (default the server's, 5m). Without a watch cache, a compaction is
   * what makes an old resourceVersion expire. */
  readonly etcdCompactionInterval?: string
  /** Keep the temp directory after `stop` (logs for a post-mortem). */
  readonly keepDir?: boolean
  /** How long to wait for each process to get ready (default 60 s). */
  readonly readyTimeoutMs?: number
}

/** The real server could not be had: no binary, no etcd, or it did not get ready. */
export class ApiServerUnavailable extends Data.TaggedError("ApiServerUnavailable")<{
  readonly message: string
}> {}

/** The CRD under test, as the operator's chart would install it. */
export const sandboxCrd = {
  apiVersion: "apiextensions.k8s.io/v1",
  kind: "CustomResourceDefinition",
  metadata: { name: "sandboxes.jr2.dev" },
  spec: {
    group: "jr2.dev",
    scope: "Namespaced",
    names: { plural: "sandboxes", singular: "sandbox", kind: "Sandbox", listKind: "SandboxList" },
    versions: [
      {
        name: "v1alpha1",
        served: true,
        storage: true,
        subresources: { status: {} },
        schema: {
          openAPIV3Schema: {
            type: "object",
            properties: {
              spec: { type: "object", "x-kubernetes-preserve-unknown-fields": true },
              status: { type: "object", "x-kubernetes-preserve-unknown-fields": true }
            }
          }
        }
      }
    ]
  }
} as const

// ---------------------------------------------------------------------------------------------
// Processes

interface Child {
  readonly name: string
  readonly process: ChildProcess
  readonly exited: Promise<void>
  readonly log: string
}

const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as net.AddressInfo).port
      server.close(() => resolve(port))
    })
  })

/** Spawns `command` under the lifeline, its output appended to `log`. */
const spawnChild = (name: string, command: string, args: ReadonlyArray<string>, log: string): Child => {
  const fd = fs.openSync(log, "a")
  const child = spawn("bash", [lifeline, command, ...args], { stdio: ["pipe", fd, fd] })
  fs.closeSync(fd)
  // stdin stays open (never written): its closing is the lifeline's signal that we are gone.
  child.stdin?.on("error", () => {})
  const exited = new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve()
    else child.once("exit", () => resolve())
  })
  return { name, process: child, exited, log }
}

const tail = (file: string, lines = 25): string => {
  try {
    return fs.readFileSync(file, "utf8").trimEnd().split("\n").slice(-lines).join("\n")
  } catch {
    return "(no log)"
  }
}

/** Ends a child politely, then abruptly after `graceMs`; resolves when it has exited. */
const stopChild = async (child: Child, signal: "SIGTERM" | "SIGKILL" = "SIGTERM", graceMs = 20_000) => {
  if (child.process.exitCode !== null || child.process.signalCode !== null) return
  // The lifeline turns SIGUSR1 into SIGKILL for its child (a SIGKILL to bash would orphan it).
  child.process.kill(signal === "SIGKILL" ? "SIGUSR1" : "SIGTERM")
  const timer = setTimeout(() => child.process.kill("SIGUSR1"), graceMs)
  await child.exited
  clearTimeout(timer)
}

const isAlive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

/** Kills what an earlier harness that died without cleaning up left running, and its directory. */
const reapStale = () => {
  for (const entry of fs.readdirSync(os.tmpdir())) {
    if (!entry.startsWith(tempPrefix)) continue
    const dir = path.join(os.tmpdir(), entry)
    let owner: { ownerPid?: number } = {}
    try {
      owner = JSON.parse(fs.readFileSync(path.join(dir, "owner.json"), "utf8"))
    } catch {
      continue
    }
    if (typeof owner.ownerPid === "number" && isAlive(owner.ownerPid)) continue
    for (const pid of fs.readdirSync("/proc").filter((p) => /^\d+$/.test(p)).map(Number)) {
      try {
        // Only a process started with this directory in its arguments: never a reused pid.
        if (fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(dir)) process.kill(pid, "SIGKILL")
      } catch {
        // gone meanwhile, or not ours to read
      }
    }
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

const waitUntil = async (what: string, probe: () => Promise<boolean>, child: Child, timeoutMs: number) => {
  const started = Date.now()
  let exited = false
  void child.exited.then(() => {
    exited = true
  })
  for (;;) {
    if (exited) {
      throw new ApiServerUnavailable({
        message: `${child.name} exited before ${what}. Last lines of ${child.log}:\n${tail(child.log)}`
      })
    }
    if (await probe().catch(() => false)) return Date.now() - started
    if (Date.now() - started > timeoutMs) {
      throw new ApiServerUnavailable({
        message: `${what} did not happen within ${timeoutMs} ms. Last lines of ${child.log}:\n${tail(child.log)}`
      })
    }
    // Polling a process we started: a real pause between probes is the point here (harness, not test).
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

// ---------------------------------------------------------------------------------------------
// Talking to the server during bootstrap

type Api = (method: string, urlPath: string, body?: unknown) => Promise<{ readonly status: number; readonly json: any }>

const makeApi = (url: string, agent: Agent, token: string): Api => async (method, urlPath, body) => {
  const response = await fetch(`${url}${urlPath}`, {
    method,
    dispatcher: agent,
    headers: { authorization: `Bearer ${token}`, accept: "application/json", "content-type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) })
  })
  return jsonOrText(response)
}

/** An answer's status and body: parsed JSON, or the text as it was (`ok` from /readyz, an HTML page). */
export const jsonOrText = async (
  response: { readonly status: number; readonly text: () => Promise<string> }
): Promise<{ readonly status: number; readonly json: any }> => {
  const text = await response.text()
  try {
    return { status: response.status, json: JSON.parse(text) }
  } catch {
    return { status: response.status, json: text }
  }
}

const mustCreate = async (api: Api, urlPath: string, body: unknown) => {
  const { status, json } = await api("POST", urlPath, body)
  if (status !== 201 && status !== 409) {
    throw new ApiServerUnavailable({
      message: `bootstrap: POST ${urlPath} answered ${status}: ${JSON.stringify(json)}`
    })
  }
}

const bootstrap = async (api: Api, namespace: string, child: Child, timeoutMs: number) => {
  await mustCreate(api, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", sandboxCrd)
  await mustCreate(api, "/api/v1/namespaces", { apiVersion: "v1", kind: "Namespace", metadata: { name: namespace } })
  await mustCreate(api, `/apis/rbac.authorization.k8s.io/v1/namespaces/${namespace}/roles`, {
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "Role",
    metadata: { name: LimitedRole, namespace },
    rules: [{ apiGroups: ["jr2.dev"], resources: ["sandboxes"], verbs: ["get", "list"] }]
  })
  await mustCreate(api, `/apis/rbac.authorization.k8s.io/v1/namespaces/${namespace}/rolebindings`, {
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "RoleBinding",
    metadata: { name: LimitedRole, namespace },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: LimitedRole },
    subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "User", name: LimitedUser }]
  })
  // Established, and actually served (discovery and the CRD handler can lag the condition).
  await waitUntil(
    "the Sandbox CRD being served",
    async () => {
      const crd = await api("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/sandboxes.jr2.dev")
      const established = (crd.json?.status?.conditions ?? []).some((c: any) =>
        c.type === "Established" && c.status === "True"
      )
      if (!established) return false
      const list = await api("GET", `/apis/jr2.dev/v1alpha1/namespaces/${namespace}/sandboxes?limit=1`)
      return list.status === 200
    },
    child,
    timeoutMs
  )
}

// ---------------------------------------------------------------------------------------------

/** Starts etcd and kube-apiserver; rejects with {@link ApiServerUnavailable} saying what to do. */
export const start = async (options: StartOptions = {}): Promise<RealApiServer> => {
  const startedAt = Date.now()
  reapStale()
  const kubeVersion = options.version ?? selectedVersion()
  const binary = options.binary ?? binaryPath(kubeVersion)
  const etcdBinary = etcdPath(kubeVersion)
  const timeoutMs = options.readyTimeoutMs ?? 60_000
  if (!fs.existsSync(binary)) {
    throw new ApiServerUnavailable({
      message: `no kube-apiserver at ${binary}. Build it with \`bash test/apiserver/build.sh ${kubeVersion}\` ` +
        "(or run `npm run test:apiserver`, which does), or point SANDBOX_WATCH_KUBE_APISERVER at one."
    })
  }
  if (spawnSync(etcdBinary, ["--version"]).status !== 0) {
    throw new ApiServerUnavailable({
      message: `no etcd at ${etcdBinary}. \`bash test/apiserver/build.sh ${kubeVersion}\` provides it.`
    })
  }
  if (spawnSync("openssl", ["version"]).status !== 0) {
    throw new ApiServerUnavailable({ message: "no openssl on PATH (`apt-get install openssl`)." })
  }

  const dir = fs.mkdtempSync(path.join(os.tmpdir(), tempPrefix))
  fs.chmodSync(dir, 0o700)
  const children: Array<Child> = []
  fs.writeFileSync(path.join(dir, "owner.json"), JSON.stringify({ ownerPid: process.pid }))
  const killAllSync = () => {
    for (const child of children) child.process.kill("SIGUSR1")
  }
  process.once("exit", killAllSync)

  let apiServer: Child | undefined
  let etcd: Child | undefined
  const stopAll = async () => {
    process.off("exit", killAllSync)
    await Promise.all([apiServer, etcd].filter((c): c is Child => c !== undefined).map((c) => stopChild(c)))
    if (options.keepDir !== true) fs.rmSync(dir, { recursive: true, force: true })
  }

  try {
    // Secrets: random per run, written only to the token file (mode 0600) and handed to the tests.
    const adminToken = randomBytes(24).toString("hex")
    const limitedUserToken = randomBytes(24).toString("hex")
    const tokenFile = path.join(dir, "tokens.csv")
    fs.writeFileSync(
      tokenFile,
      `${adminToken},sandbox-admin,uid-admin,"system:masters"\n${limitedUserToken},${LimitedUser},uid-limited,"sandbox-testers"\n`,
      { mode: 0o600 }
    )
    const saKey = path.join(dir, "sa.key")
    const openssl = spawnSync("openssl", ["genrsa", "-out", saKey, "2048"], { encoding: "utf8" })
    if (openssl.status !== 0) throw new ApiServerUnavailable({ message: `openssl genrsa failed: ${openssl.stderr}` })

    const [etcdClientPort, etcdPeerPort, port] = [await freePort(), await freePort(), await freePort()]
    const etcdUrl = `http://127.0.0.1:${etcdClientPort}`
    const peerUrl = `http://127.0.0.1:${etcdPeerPort}`
    etcd = spawnChild("etcd", etcdBinary, [
      "--name",
      "sandbox-watch",
      "--data-dir",
      path.join(dir, "etcd"),
      "--listen-client-urls",
      etcdUrl,
      "--advertise-client-urls",
      etcdUrl,
      "--listen-peer-urls",
      peerUrl,
      "--initial-advertise-peer-urls",
      peerUrl,
      "--initial-cluster",
      `sandbox-watch=${peerUrl}`,
      "--logger",
      "zap",
      "--log-level",
      "warn"
    ], path.join(dir, "etcd.log"))
    children.push(etcd)
    const etcdChild = etcd
    const etcdReadyMs = await waitUntil(
      "etcd answering /health",
      async () => {
        const response = await globalThis.fetch(`${etcdUrl}/health`)
        return response.ok
      },
      etcdChild,
      timeoutMs
    )

    const url = `https://127.0.0.1:${port}`
    const certDir = path.join(dir, "certs")
    const args = [
      "--etcd-servers",
      etcdUrl,
      // 1.20 still serves plain HTTP on 8080 unless told not to; the flag is gone since 1.24.
      ...(minorOf(kubeVersion) < 24 ? ["--insecure-port", "0"] : []),
      "--bind-address",
      "127.0.0.1",
      "--advertise-address",
      "127.0.0.1",
      "--secure-port",
      String(port),
      "--cert-dir",
      certDir,
      "--token-auth-file",
      tokenFile,
      "--authorization-mode",
      "RBAC",
      "--service-account-issuer",
      "https://kubernetes.default.svc.cluster.local",
      "--service-account-key-file",
      saKey,
      "--service-account-signing-key-file",
      saKey,
      "--service-cluster-ip-range",
      "10.0.0.0/24",
      // No controller manager here: nothing else should write Endpoints for 127.0.0.1.
      "--endpoint-reconciler-type",
      "none",
      "--profiling=false",
      `--watch-cache=${options.watchCache ?? true}`,
      ...(options.etcdCompactionInterval === undefined
        ? []
        : ["--etcd-compaction-interval", options.etcdCompactionInterval]),
      ...(options.extraArgs ?? [])
    ]
    const apiLog = path.join(dir, "kube-apiserver.log")
    const certFile = path.join(certDir, "apiserver.crt")
    let agent: Agent | undefined
    const startApiServer = async () => {
      const child = spawnChild("kube-apiserver", binary, args, apiLog)
      apiServer = child
      children.push(child)
      const readyMs = await waitUntil(
        "kube-apiserver answering /readyz with ok",
        async () => {
          if (agent === undefined) {
            if (!fs.existsSync(certFile)) return false
            agent = new Agent({ connect: { ca: fs.readFileSync(certFile, "utf8") } })
          }
          const { status, json } = await makeApi(url, agent, adminToken)("GET", "/readyz")
          return status === 200 && json === "ok"
        },
        child,
        timeoutMs
      )
      return readyMs
    }
    const apiServerReadyMs = await startApiServer()
    const caPem = fs.readFileSync(certFile, "utf8")
    const api = makeApi(url, agent!, adminToken)

    const bootstrapStarted = Date.now()
    const namespace = "sandbox-watch-test"
    await bootstrap(api, namespace, apiServer!, timeoutMs)
    const version = String((await api("GET", "/version")).json?.gitVersion)
    const bootstrapMs = Date.now() - bootstrapStarted

    let stopping: Promise<void> | undefined
    return {
      url,
      port,
      caPem,
      adminToken,
      limitedUserToken,
      namespace,
      etcdUrl,
      dir,
      version,
      minor: minorOf(version),
      timings: { etcdReadyMs, apiServerReadyMs, bootstrapMs, totalMs: Date.now() - startedAt },
      restartApiServer: async (restart) => {
        if (apiServer !== undefined) await stopChild(apiServer, restart?.signal ?? "SIGTERM")
        // Connections pooled to the old process are dead: start afresh.
        await agent?.close().catch(() => {})
        agent = new Agent({ connect: { ca: caPem } })
        return { readyMs: await startApiServer() }
      },
      stop: () => {
        stopping ??= Promise.all([agent?.close().catch(() => {})]).then(stopAll)
        return stopping
      }
    }
  } catch (error) {
    await stopAll()
    throw error instanceof ApiServerUnavailable
      ? error
      : new ApiServerUnavailable({ message: `starting etcd + kube-apiserver failed: ${String(error)}` })
  }
}

/** {@link start} as a scoped resource: stopped when the scope closes. */
export const scoped = (options?: StartOptions): Effect.Effect<RealApiServer, ApiServerUnavailable, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.tryPromise({
      try: () => start(options),
      catch: (error) =>
        error instanceof ApiServerUnavailable ? error : new ApiServerUnavailable({ message: String(error) })
    }),
    (server) => Effect.promise(() => server.stop())
  )

/** Just the facts (for a JSON file or vitest's `provide`): no functions. */
export const facts = (server: RealApiServer): ApiServerFacts => ({
  url: server.url,
  port: server.port,
  caPem: server.caPem,
  adminToken: server.adminToken,
  limitedUserToken: server.limitedUserToken,
  namespace: server.namespace,
  etcdUrl: server.etcdUrl,
  dir: server.dir,
  version: server.version,
  minor: server.minor
})
