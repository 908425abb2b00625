/**
 * Where the cluster is and how to prove who we are: resolved like kubectl resolves it.
 */
import * as CommandExecutor from "@effect/platform/CommandExecutor"
import * as FileSystem from "@effect/platform/FileSystem"
import * as Path from "@effect/platform/Path"
import { Context, Data, Duration, Effect, Either, Layer, Option, Redacted } from "effect"
import * as os from "node:os"
import * as Credentials from "./internal/credentials.ts"
import * as KubeConfigFile from "./internal/kubeconfigFile.ts"
import { proxyUrlProblem } from "./internal/proxy.ts"
import { withoutUserInfo } from "./internal/urlUserInfo.ts"

/** TLS material for the connection, already read from files or decoded from `-data` fields. */
export interface ClusterTls {
  /** PEM bundle of the cluster's CA; none means the system's roots. */
  readonly ca: Option.Option<string>
  readonly clientCertificate: Option.Option<string>
  /** Secret: never logged, never in an error. */
  readonly clientKey: Option.Option<Redacted.Redacted<string>>
  /** Only ever true when the kubeconfig said `insecure-skip-tls-verify: true`. */
  readonly insecureSkipTlsVerify: boolean
  readonly serverName: Option.Option<string>
}

/** TLS with nothing set: the system's roots, the server's certificate checked, no client certificate. */
export const defaultTls: ClusterTls = {
  ca: Option.none(),
  clientCertificate: Option.none(),
  clientKey: Option.none(),
  insecureSkipTlsVerify: false,
  serverName: Option.none()
}

/** A resolved cluster: the one value `KubeClient` needs. */
export interface ClusterConnection {
  /**
   * `https://host:port` (or `http://` for a loopback simulator), no trailing slash. Shown in
   * messages without any user info (`internal/urlUserInfo.ts`); none is ever sent.
   */
  readonly server: string
  /** The context's namespace, or the service account's. */
  readonly namespace: Option.Option<string>
  readonly tls: ClusterTls
  /**
   * The `Authorization` header value for the next request (`Bearer ...`), read afresh when due: a
   * rotated service-account token, an exec plugin's credential past its expiry.
   */
  readonly authorization: Effect.Effect<Option.Option<Redacted.Redacted<string>>, KubeConfigError>
  /** The server said 401: whatever is cached is stale; the next `authorization` reads anew. */
  readonly invalidate: Effect.Effect<void>
  /** Where this came from, for a person: `kubeconfig /home/me/.kube/config, context kind-kind`. */
  readonly source: string
  /**
   * What `authorization` reads, for a person (`exec plugin "aws-iam-authenticator" for user "u"`,
   * `tokenFile /path`); never a credential. Without it, messages name `source`.
   */
  readonly credentials?: string | undefined
  /**
   * The kubeconfig cluster's `proxy-url`, when it names one; else the client follows `HTTPS_PROXY`,
   * `HTTP_PROXY` and `NO_PROXY`, as kubectl does. May carry credentials: never log it.
   */
  readonly proxyUrl?: string | undefined
}

/** A kubeconfig (or in-cluster file) that is missing, unreadable or does not make sense. */
export class KubeConfigError extends Data.TaggedError("KubeConfigError")<{
  /** The file at fault, when there is one. */
  readonly file: Option.Option<string>
  readonly message: string
}> {}

export class KubeConfig extends Context.Tag("sandbox-watch/KubeConfig")<KubeConfig, ClusterConnection>() {}

/**
 * A fixed connection: a loopback simulator, a test. A user name or password in `server` is
 * dropped: never sent (only `token` is), never shown.
 */
export const layerStatic = (options: {
  readonly server: string
  readonly token?: string
  readonly namespace?: string
}): Layer.Layer<KubeConfig> =>
  Layer.succeed(KubeConfig, {
    server: withoutUserInfo(options.server).replace(/\/+$/, ""),
    namespace: Option.fromNullable(options.namespace),
    tls: defaultTls,
    authorization: Effect.succeed(
      options.token === undefined ? Option.none() : Option.some(Redacted.make(`Bearer ${options.token}`))
    ),
    invalidate: Effect.void,
    source: `static ${withoutUserInfo(options.server)}`
  })

/**
 * Nowhere kubectl would look holds a configuration: no explicit file, no `KUBECONFIG`, no
 * `~/.kube/config`, not inside a pod. Distinct from {@link KubeConfigError} so that a program can
 * fall back (to a demo, a simulator) instead of failing.
 */
export class KubeConfigNotFound extends Data.TaggedError("KubeConfigNotFound")<{
  /** Each place tried, with why it did not count: `/home/me/.kube/config (no such file)`. */
  readonly looked: ReadonlyArray<string>
  readonly message: string
}> {}

/** Where a pod's service-account token, CA and namespace are mounted. */
export const DefaultServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

/** How long a token read from a file is trusted before the file is read again (client-go's value). */
export const TokenRereadInterval: Duration.Duration = Duration.minutes(1)

/** Where to find the in-cluster configuration; both injectable so tests need no pod. */
export interface InClusterOptions {
  /** Default `process.env`: `KUBERNETES_SERVICE_HOST`, `KUBERNETES_SERVICE_PORT`, `POD_NAMESPACE`. */
  readonly env?: Readonly<Record<string, string | undefined>> | undefined
  /** Default {@link DefaultServiceAccountDir}: holds `token`, `ca.crt`, `namespace`. */
  readonly serviceAccountDir?: string | undefined
}

/** What `resolve` is asked, and the environment it reads (injectable for tests). */
export interface ResolveOptions extends InClusterOptions {
  /** A kubeconfig named explicitly (`--kubeconfig`): the only file read; it must exist. */
  readonly path?: string | undefined
  /** The context to use instead of the file's `current-context` (`--context`). */
  readonly context?: string | undefined
  /** Default `process.env`: `KUBECONFIG`, `HOME`, and the in-cluster variables. */
  readonly env?: Readonly<Record<string, string | undefined>> | undefined
  /** Default `$HOME`, else `os.homedir()`: where `.kube/config` is looked for. */
  readonly home?: string | undefined
}

type Env = Readonly<Record<string, string | undefined>>

const kubeconfigError = (file: string, problem: string): KubeConfigError =>
  new KubeConfigError({ file: Option.some(file), message: `kubeconfig ${file}: ${problem}` })

const notFound = (looked: ReadonlyArray<string>): KubeConfigNotFound =>
  new KubeConfigNotFound({
    looked,
    message: `no Kubernetes configuration found; looked at: ${looked.join("; ")}. ` +
      "Point KUBECONFIG or --kubeconfig at a kubeconfig, or run inside a pod with a service account."
  })

interface Entry<A> {
  readonly name: string
  readonly value: A
  /** The file that defined it: its relative paths are relative to this file. */
  readonly file: string
}

/** Several kubeconfig files as one, by kubectl's rule: the first file to name an entry wins. */
interface Merged {
  readonly files: ReadonlyArray<string>
  readonly currentContext: Option.Option<string>
  readonly clusters: ReadonlyMap<string, Entry<KubeConfigFile.Cluster>>
  readonly contexts: ReadonlyMap<string, Entry<KubeConfigFile.Context>>
  readonly users: ReadonlyMap<string, Entry<KubeConfigFile.User>>
}

interface Loaded {
  readonly file: string
  readonly config: KubeConfigFile.KubeConfigFile
}

interface Services {
  readonly fs: FileSystem.FileSystem
  readonly path: Path.Path
  readonly executor: CommandExecutor.CommandExecutor
}

/** Read and parse one file; `None` when there is no such file (a missing entry of KUBECONFIG is skipped). */
const loadFile = (fs: FileSystem.FileSystem, file: string): Effect.Effect<Option.Option<Loaded>, KubeConfigError> =>
  fs.readFileString(file).pipe(
    Effect.map(Option.some),
    Effect.catchAll((error) =>
      Credentials.isNotFound(error)
        ? Effect.succeed(Option.none<string>())
        : Effect.fail(kubeconfigError(file, `cannot be read: ${Credentials.describePlatformError(error)}`))
    ),
    Effect.flatMap(
      Option.match({
        onNone: () => Effect.succeedNone,
        onSome: (text) =>
          Either.match(KubeConfigFile.parse(text), {
            onLeft: (problem) => Effect.fail(kubeconfigError(file, problem)),
            onRight: ({ config }): Effect.Effect<Option.Option<Loaded>> => Effect.succeed(Option.some({ file, config }))
          })
      })
    )
  )

const merge = (loaded: ReadonlyArray<Loaded>): Either.Either<Merged, KubeConfigError> => {
  const clusters = new Map<string, Entry<KubeConfigFile.Cluster>>()
  const contexts = new Map<string, Entry<KubeConfigFile.Context>>()
  const users = new Map<string, Entry<KubeConfigFile.User>>()
  let currentContext = Option.none<string>()
  const add = <A>(
    file: string,
    kind: string,
    into: Map<string, Entry<A>>,
    entries: ReadonlyArray<{ readonly name: string; readonly value: A }>
  ): Option.Option<KubeConfigError> => {
    const seen = new Set<string>()
    for (const { name, value } of entries) {
      // kubectl refuses a name listed twice in one file rather than guess which one is meant.
      if (seen.has(name)) return Option.some(kubeconfigError(file, `${kind} "${name}" is listed twice`))
      seen.add(name)
      if (!into.has(name)) into.set(name, { name, value, file })
    }
    return Option.none()
  }
  for (const { file, config } of loaded) {
    const problem = Option.orElse(
      add(file, "cluster", clusters, (config.clusters ?? []).map((e) => ({ name: e.name, value: e.cluster ?? {} }))),
      () =>
        Option.orElse(
          add(
            file,
            "context",
            contexts,
            (config.contexts ?? []).map((e) => ({ name: e.name, value: e.context ?? {} }))
          ),
          () => add(file, "user", users, (config.users ?? []).map((e) => ({ name: e.name, value: e.user ?? {} })))
        )
    )
    if (Option.isSome(problem)) return Either.left(problem.value)
    const current = config["current-context"]
    if (Option.isNone(currentContext) && current !== undefined && current.length > 0) {
      currentContext = Option.some(current)
    }
  }
  return Either.right({ files: loaded.map((l) => l.file), currentContext, clusters, contexts, users })
}

/** What a kubeconfig that names nothing (an empty file, `clusters: []`) is said to be, wherever it was named. */
const NothingInIt = "no clusters, contexts or users in it"

const isEmpty = (merged: Merged): boolean =>
  Option.isNone(merged.currentContext) &&
  merged.clusters.size === 0 &&
  merged.contexts.size === 0 &&
  merged.users.size === 0

const listNames = (map: ReadonlyMap<string, unknown>): string => map.size === 0 ? "none" : [...map.keys()].join(", ")

const CERTIFICATE = /-----BEGIN (TRUSTED )?CERTIFICATE-----/
const PRIVATE_KEY = /-----BEGIN ([A-Z0-9]+ )*PRIVATE KEY-----/

/**
 * PEM material from a `-data` field (base64, wins when both are set, as in kubectl) or from a file
 * (relative to the kubeconfig that named it). Problems never quote the material.
 */
const pem = (
  services: Services,
  options: {
    readonly entryFile: string
    readonly label: string
    readonly field: string
    readonly data: string | undefined
    readonly file: string | undefined
    readonly kind: "certificate" | "private key"
  }
): Effect.Effect<Option.Option<string>, KubeConfigError> => {
  const fail = (problem: string) => Effect.fail(kubeconfigError(options.entryFile, `${options.label}: ${problem}`))
  const check = (where: string) => (text: string) =>
    (options.kind === "certificate" ? CERTIFICATE : PRIVATE_KEY).test(text)
      ? Effect.succeed(Option.some(text))
      : fail(`${where} does not hold a PEM ${options.kind}`)
  if (options.data !== undefined && options.data.length > 0) {
    const compact = options.data.replace(/\s+/g, "")
    if (!/^[A-Za-z0-9+/]+={0,2}$/.test(compact)) return fail(`${options.field}-data is not valid base64`)
    return check(`${options.field}-data`)(Buffer.from(compact, "base64").toString("utf8"))
  }
  if (options.file !== undefined && options.file.length > 0) {
    const file = resolveIn(services.path, options.entryFile, options.file)
    return services.fs.readFileString(file).pipe(
      Effect.catchAll((error) =>
        fail(`${options.field} file ${file} cannot be read: ${Credentials.describePlatformError(error)}`)
      ),
      Effect.flatMap(check(`${options.field} file ${file}`))
    )
  }
  return Effect.succeedNone
}

/** A path named in a kubeconfig is relative to that kubeconfig's directory. */
const resolveIn = (path: Path.Path, kubeconfig: string, file: string): string =>
  path.isAbsolute(file) ? file : path.resolve(path.dirname(kubeconfig), file)

/**
 * `host:6443` means `https://host:6443`, as in kubectl; no trailing slash. A user name or password
 * in it is refused: kubectl would send them as basic auth in place of the user's token (Go's HTTP
 * client does so for a URL with user info, and client-go's bearer token then steps aside), which
 * kube-apiserver has not accepted since 1.19, and `users[].user.username`/`password` are refused
 * here for the same reason. Every problem shows the server without them.
 */
const normalizeServer = (server: string): Either.Either<string, string> => {
  const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(server) ? server : `https://${server}`
  const shown = withoutUserInfo(withScheme).replace(/\/+$/, "")
  let url: URL
  try {
    url = new URL(withScheme)
  } catch {
    // A password with a `/` in it breaks the URL where no pattern can find where it ends.
    return Either.left(
      server.includes("@")
        ? "server is not a URL (not shown: it has an @, perhaps a password in it)"
        : `server ${server} is not a URL`
    )
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") {
    return Either.left(`server ${shown} should be an https:// (or http://) URL`)
  }
  if (url.username !== "" || url.password !== "") {
    return Either.left(
      `its server URL carries a user name${url.password === "" ? "" : " and password"}; basic auth is not ` +
        `supported (kube-apiserver removed it in 1.19): write the server as ${shown}, and sign in with the ` +
        "user's token, client certificate or exec plugin"
    )
  }
  return Either.right(withScheme.replace(/\/+$/, ""))
}

const SupportedExecVersions = ["client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"]

const noAuthorization: Credentials.CredentialSource<KubeConfigError> = {
  authorization: Effect.succeedNone,
  invalidate: Effect.void,
  what: "no credentials"
}

/** What a context names, found in the merged kubeconfig. */
interface Chosen {
  readonly contextName: string
  readonly context: Entry<KubeConfigFile.Context>
  readonly cluster: Entry<KubeConfigFile.Cluster>
  readonly user: Entry<KubeConfigFile.User> | undefined
}

/** The cluster's address and how to trust it. */
interface ClusterAddress {
  readonly server: string
  readonly ca: Option.Option<string>
  readonly insecureSkipTlsVerify: boolean
  readonly serverName: Option.Option<string>
}

/** Who we are to the cluster. */
interface UserCredentials {
  readonly clientCertificate: Option.Option<string>
  readonly clientKey: Option.Option<Redacted.Redacted<string>>
  readonly credentials: Credentials.CredentialSource<KubeConfigError>
}

/** The context's cluster and user, made into a connection. */
const connect = (
  services: Services,
  merged: Merged,
  requestedContext: string | undefined
): Effect.Effect<ClusterConnection, KubeConfigError> =>
  Effect.gen(function*() {
    const where = merged.files.join(services.path.sep === "\\" ? ";" : ":")
    const chosen = yield* chooseContext(merged, requestedContext, where)
    const address = yield* clusterAddress(services, chosen.cluster)
    const user = chosen.user === undefined
      ? { clientCertificate: Option.none(), clientKey: Option.none(), credentials: noAuthorization }
      : yield* userCredentials(services, chosen.user, chosen.cluster, address)
    const source = `kubeconfig ${where}, context ${chosen.contextName}`
    yield* Effect.logDebug(`kubeconfig: using ${source} (${address.server})`)
    return {
      server: address.server,
      namespace: Option.fromNullable(chosen.context.value.namespace).pipe(Option.filter((ns) => ns.length > 0)),
      tls: {
        ca: address.ca,
        clientCertificate: user.clientCertificate,
        clientKey: user.clientKey,
        insecureSkipTlsVerify: address.insecureSkipTlsVerify,
        serverName: address.serverName
      },
      authorization: user.credentials.authorization,
      invalidate: user.credentials.invalidate,
      source,
      credentials: user.credentials.what,
      proxyUrl: chosen.cluster.value["proxy-url"]
    } satisfies ClusterConnection
  })

// -- the context -------------------------------------------------------------------------------

/** The context asked for (else the current one), and the cluster and user it names. */
const chooseContext = (
  merged: Merged,
  requestedContext: string | undefined,
  where: string
): Effect.Effect<Chosen, KubeConfigError> =>
  Effect.gen(function*() {
    const contextName = requestedContext !== undefined && requestedContext.length > 0
      ? requestedContext
      : Option.getOrUndefined(merged.currentContext)
    if (contextName === undefined) {
      return yield* kubeconfigError(
        where,
        `no current-context is set and no context was asked for (contexts: ${listNames(merged.contexts)}); ` +
          "pick one with --context or `kubectl config use-context`"
      )
    }
    const context = merged.contexts.get(contextName)
    if (context === undefined) {
      return yield* kubeconfigError(
        where,
        `context "${contextName}" not found (contexts: ${listNames(merged.contexts)})`
      )
    }
    const clusterName = context.value.cluster
    if (clusterName === undefined || clusterName.length === 0) {
      return yield* kubeconfigError(context.file, `context "${contextName}" names no cluster`)
    }
    const cluster = merged.clusters.get(clusterName)
    if (cluster === undefined) {
      return yield* kubeconfigError(
        context.file,
        `context "${contextName}": cluster "${clusterName}" not found (clusters: ${listNames(merged.clusters)})`
      )
    }
    const userName = context.value.user
    const user = userName === undefined || userName.length === 0 ? undefined : merged.users.get(userName)
    if (userName !== undefined && userName.length > 0 && user === undefined) {
      return yield* kubeconfigError(
        context.file,
        `context "${contextName}": user "${userName}" not found (users: ${listNames(merged.users)})`
      )
    }
    return { contextName, context, cluster, user }
  })

// -- the cluster's TLS -------------------------------------------------------------------------

const clusterAddress = (
  services: Services,
  cluster: Entry<KubeConfigFile.Cluster>
): Effect.Effect<ClusterAddress, KubeConfigError> =>
  Effect.gen(function*() {
    const clusterLabel = `cluster "${cluster.name}"`
    const c = cluster.value
    if (c.server === undefined || c.server.length === 0) {
      return yield* kubeconfigError(cluster.file, `${clusterLabel} has no server`)
    }
    const server = yield* Either.match(normalizeServer(c.server), {
      onLeft: (problem) => Effect.fail(kubeconfigError(cluster.file, `${clusterLabel}: ${problem}`)),
      onRight: Effect.succeed
    })
    const proxyProblem = c["proxy-url"] === undefined || c["proxy-url"] === ""
      ? undefined
      : proxyUrlProblem(c["proxy-url"])
    if (proxyProblem !== undefined) return yield* kubeconfigError(cluster.file, `${clusterLabel}: ${proxyProblem}`)
    const ca = yield* pem(services, {
      entryFile: cluster.file,
      label: clusterLabel,
      field: "certificate-authority",
      data: c["certificate-authority-data"],
      file: c["certificate-authority"],
      kind: "certificate"
    })
    const insecureSkipTlsVerify = c["insecure-skip-tls-verify"] === true
    if (insecureSkipTlsVerify && Option.isSome(ca)) {
      // client-go refuses this too: a CA that is never checked is a mistake, not a setting.
      return yield* kubeconfigError(
        cluster.file,
        `${clusterLabel}: insecure-skip-tls-verify is set together with a certificate authority; remove one of them`
      )
    }
    const serverName = Option.fromNullable(c["tls-server-name"]).pipe(Option.filter((name) => name.length > 0))
    return { server, ca, insecureSkipTlsVerify, serverName }
  })

// -- the user's credentials --------------------------------------------------------------------

const userCredentials = (
  services: Services,
  user: Entry<KubeConfigFile.User>,
  cluster: Entry<KubeConfigFile.Cluster>,
  address: ClusterAddress
): Effect.Effect<UserCredentials, KubeConfigError> =>
  Effect.gen(function*() {
    const label = `user "${user.name}"`
    const u = user.value
    const fail = (problem: string) => kubeconfigError(user.file, `${label}: ${problem}`)
    if (u["auth-provider"] !== undefined) {
      return yield* fail(
        `auth-provider${
          u["auth-provider"].name === undefined ? "" : ` "${u["auth-provider"].name}"`
        } is not supported; ` +
          "use an exec credential plugin instead (kubectl itself dropped the built-in providers)"
      )
    }
    if (u.username !== undefined || u.password !== undefined) {
      return yield* fail(
        "username/password (basic auth) is not supported; the apiserver removed it in Kubernetes 1.19"
      )
    }
    const clientCertificate = yield* pem(services, {
      entryFile: user.file,
      label,
      field: "client-certificate",
      data: u["client-certificate-data"],
      file: u["client-certificate"],
      kind: "certificate"
    })
    const key = yield* pem(services, {
      entryFile: user.file,
      label,
      field: "client-key",
      data: u["client-key-data"],
      file: u["client-key"],
      kind: "private key"
    })
    const clientKey = Option.map(key, Redacted.make)
    if (Option.isSome(clientCertificate) !== Option.isSome(clientKey)) {
      return yield* fail(
        Option.isSome(clientCertificate)
          ? "has a client certificate but no client-key or client-key-data"
          : "has a client key but no client-certificate or client-certificate-data"
      )
    }
    const token = Option.fromNullable(u.token).pipe(Option.filter((t) => t.length > 0))
    let credentials = noAuthorization
    if (u.tokenFile !== undefined && u.tokenFile.length > 0) {
      const file = resolveIn(services.path, user.file, u.tokenFile)
      credentials = yield* Credentials.fileToken({
        fs: services.fs,
        file,
        fallback: token,
        what: `tokenFile ${file}`,
        period: TokenRereadInterval,
        fail
      })
    } else if (Option.isSome(token)) {
      const header = Option.some(Redacted.make(`Bearer ${token.value}`))
      credentials = {
        authorization: Effect.succeed(header),
        invalidate: Effect.void,
        what: `the token of user "${user.name}"`
      }
    } else if (u.exec !== undefined) {
      // A token in the kubeconfig wins over exec, as in client-go (the header is already set).
      credentials = yield* execCredentials(services, user, u.exec, cluster, address, fail)
    }
    return { clientCertificate, clientKey, credentials }
  })

// -- exec credential plugins -------------------------------------------------------------------

const execCredentials = (
  services: Services,
  user: Entry<KubeConfigFile.User>,
  exec: KubeConfigFile.ExecConfig,
  cluster: Entry<KubeConfigFile.Cluster>,
  address: ClusterAddress,
  fail: (problem: string) => KubeConfigError
): Effect.Effect<Credentials.CredentialSource<KubeConfigError>, KubeConfigError> =>
  Effect.gen(function*() {
    if (exec.command.length === 0) return yield* fail("exec has no command")
    if (exec.apiVersion === undefined || exec.apiVersion.length === 0) {
      return yield* fail(`exec needs an apiVersion (${SupportedExecVersions.join(" or ")})`)
    }
    if (!SupportedExecVersions.includes(exec.apiVersion)) {
      return yield* fail(
        `exec apiVersion "${exec.apiVersion}" is not supported (use ${SupportedExecVersions.join(" or ")})`
      )
    }
    // A bare name is looked up on PATH; a relative path is relative to the kubeconfig (client-go).
    const command = exec.command.includes("/") || exec.command.includes(services.path.sep)
      ? resolveIn(services.path, user.file, exec.command)
      : exec.command
    const clusterInfo: Record<string, unknown> = { server: address.server }
    if (Option.isSome(address.serverName)) clusterInfo["tls-server-name"] = address.serverName.value
    if (address.insecureSkipTlsVerify) clusterInfo["insecure-skip-tls-verify"] = true
    if (Option.isSome(address.ca)) {
      clusterInfo["certificate-authority-data"] = Buffer.from(address.ca.value).toString("base64")
    }
    if (cluster.value["proxy-url"] !== undefined) clusterInfo["proxy-url"] = cluster.value["proxy-url"]
    return yield* Credentials.execCredential({
      executor: services.executor,
      spec: {
        command,
        args: exec.args ?? [],
        env: exec.env ?? [],
        apiVersion: exec.apiVersion,
        installHint: Option.fromNullable(exec.installHint),
        cluster: exec.provideClusterInfo === true ? Option.some(clusterInfo) : Option.none(),
        what: `user "${user.name}"`
      },
      fail
    })
  })

/** The pod's service account, or `KubeConfigNotFound` when this is not a pod. */
const inClusterWith = (
  fs: FileSystem.FileSystem,
  path: Path.Path,
  options: InClusterOptions
): Effect.Effect<ClusterConnection, KubeConfigError | KubeConfigNotFound> =>
  Effect.gen(function*() {
    const env: Env = options.env ?? process.env
    const dir = options.serviceAccountDir ?? DefaultServiceAccountDir
    const host = env["KUBERNETES_SERVICE_HOST"] ?? ""
    const port = env["KUBERNETES_SERVICE_PORT"] ?? ""
    if (host.length === 0 || port.length === 0) {
      const missing = host.length === 0 ? "KUBERNETES_SERVICE_HOST" : "KUBERNETES_SERVICE_PORT"
      return yield* notFound([`in-cluster (${missing} is not set)`])
    }
    const fail = (file: string, problem: string) =>
      new KubeConfigError({ file: Option.some(file), message: `in-cluster config: ${problem}` })
    const tokenFile = path.join(dir, "token")
    const hasToken = yield* fs
      .exists(tokenFile)
      .pipe(Effect.mapError((error) =>
        fail(tokenFile, `${tokenFile} cannot be checked: ${Credentials.describePlatformError(error)}`)
      ))
    if (!hasToken) {
      return yield* notFound([`in-cluster (${host}:${port} is set, but ${tokenFile} does not exist)`])
    }
    const credentials = yield* Credentials.fileToken({
      fs,
      file: tokenFile,
      fallback: Option.none(),
      what: `service-account token ${tokenFile}`,
      period: TokenRereadInterval,
      fail: (problem) =>
        fail(tokenFile, problem)
    })
    const caFile = path.join(dir, "ca.crt")
    const ca = yield* fs.readFileString(caFile).pipe(
      Effect.map(Option.some),
      Effect.catchAll((error) =>
        Credentials.isNotFound(error)
          // client-go goes on with the system's roots; say so, since TLS will likely fail next.
          ? Effect.logWarning(`kubeconfig: in-cluster CA ${caFile} does not exist; using the system's roots`).pipe(
            Effect.as(Option.none<string>())
          )
          : Effect.fail(fail(caFile, `CA ${caFile} cannot be read: ${Credentials.describePlatformError(error)}`))
      ),
      Effect.filterOrFail(
        (text) => Option.match(text, { onNone: () => true, onSome: (pemText) => CERTIFICATE.test(pemText) }),
        () => fail(caFile, `CA ${caFile} does not hold a PEM certificate`)
      )
    )
    const namespaceFile = path.join(dir, "namespace")
    const podNamespace = env["POD_NAMESPACE"] ?? ""
    const namespace = podNamespace.length > 0
      ? Option.some(podNamespace)
      : yield* fs.readFileString(namespaceFile).pipe(
        Effect.map((text) => Option.some(text.trim()).pipe(Option.filter((ns) => ns.length > 0))),
        Effect.orElseSucceed(() => Option.none<string>())
      )
    const server = `https://${host.includes(":") ? `[${host}]` : host}:${port}`
    const source = `in-cluster service account ${dir} (${server})`
    yield* Effect.logDebug(`kubeconfig: using ${source}`)
    return {
      server,
      namespace,
      tls: { ...defaultTls, ca },
      authorization: credentials.authorization,
      invalidate: credentials.invalidate,
      source,
      credentials: credentials.what
    } satisfies ClusterConnection
  })

/**
 * The pod's own service account: `KUBERNETES_SERVICE_HOST`/`_PORT`, and `token`, `ca.crt`,
 * `namespace` under the service-account directory. The token is re-read at most once a minute
 * (by `Clock`), and at once after `invalidate`. Outside a pod: `KubeConfigNotFound`.
 */
export const inCluster = (
  options: InClusterOptions = {}
): Effect.Effect<ClusterConnection, KubeConfigError | KubeConfigNotFound, FileSystem.FileSystem | Path.Path> =>
  Effect.flatMap(Effect.all([FileSystem.FileSystem, Path.Path]), ([fs, path]) => inClusterWith(fs, path, options))

/**
 * Resolve the cluster as kubectl does; the first that applies wins:
 * 1. `options.path` (with `options.context`): that file alone, which must exist and name something;
 * 2. `KUBECONFIG`: its files merged, the first to name an entry (or set `current-context`) winning,
 *    missing files skipped — when it is set, `~/.kube/config` is not read (as in kubectl);
 * 3. `~/.kube/config`;
 * 4. the pod's service account.
 * Files that exist but hold nothing (no clusters, contexts, users) count as absent, as in kubectl.
 * When nothing applies: `KubeConfigNotFound`, saying where it looked.
 */
export const resolve = (
  options: ResolveOptions = {}
): Effect.Effect<
  ClusterConnection,
  KubeConfigError | KubeConfigNotFound,
  FileSystem.FileSystem | Path.Path | CommandExecutor.CommandExecutor
> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const executor = yield* CommandExecutor.CommandExecutor
    const services: Services = { fs, path, executor }
    const env: Env = options.env ?? process.env
    // An Either is an Effect: a merge conflict fails the resolution.
    const fromFiles = (loaded: ReadonlyArray<Loaded>) => merge(loaded)

    if (options.path !== undefined && options.path.length > 0) {
      const file = path.resolve(options.path)
      const loaded = yield* loadFile(fs, file)
      if (Option.isNone(loaded)) return yield* kubeconfigError(file, "does not exist")
      const merged = yield* fromFiles([loaded.value])
      // Said as KUBECONFIG's empty file is, not as a context to pick among none.
      if (isEmpty(merged)) return yield* kubeconfigError(file, NothingInIt)
      return yield* connect(services, merged, options.context)
    }

    const looked: Array<string> = []
    const delimiter = path.sep === "\\" ? ";" : ":"
    const listed = (env["KUBECONFIG"] ?? "").split(delimiter).filter((entry) => entry.length > 0)
    if (listed.length > 0) {
      const files = [...new Set(listed.map((entry) => path.resolve(entry)))]
      const loaded = (yield* Effect.forEach(files, (file) => loadFile(fs, file))).flatMap(Option.toArray)
      const merged = yield* fromFiles(loaded)
      if (!isEmpty(merged)) return yield* connect(services, merged, options.context)
      looked.push(
        loaded.length === 0
          ? `KUBECONFIG=${files.join(delimiter)} (no such file)`
          : `KUBECONFIG=${files.join(delimiter)} (${NothingInIt})`
      )
    } else {
      const home = options.home ?? env["HOME"] ?? os.homedir()
      const file = path.join(home, ".kube", "config")
      looked.push("KUBECONFIG (not set)")
      const loaded = yield* loadFile(fs, file)
      if (Option.isSome(loaded)) {
        const merged = yield* fromFiles([loaded.value])
        if (!isEmpty(merged)) return yield* connect(services, merged, options.context)
      }
      looked.push(`${file} (${Option.isSome(loaded) ? NothingInIt : "no such file"})`)
    }

    return yield* inClusterWith(fs, path, options).pipe(
      Effect.catchTag("KubeConfigNotFound", (error) => Effect.fail(notFound([...looked, ...error.looked])))
    )
  })

/** {@link resolve} as the `KubeConfig` service. */
export const layer = (
  options: ResolveOptions = {}
): Layer.Layer<
  KubeConfig,
  KubeConfigError | KubeConfigNotFound,
  FileSystem.FileSystem | Path.Path | CommandExecutor.CommandExecutor
> => Layer.effect(KubeConfig, resolve(options))

/** {@link inCluster} as the `KubeConfig` service: for a program that only ever runs in a pod. */
export const layerInCluster = (
  options: InClusterOptions = {}
): Layer.Layer<KubeConfig, KubeConfigError | KubeConfigNotFound, FileSystem.FileSystem | Path.Path> =>
  Layer.effect(KubeConfig, inCluster(options))
