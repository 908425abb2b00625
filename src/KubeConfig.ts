/**
 * Where the cluster is and how to prove who we are: resolved like kubectl resolves it.
 *
 * @since 0.1.0
 */
import { Context, Data, Effect, Layer, Option, Redacted } from "effect"

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

/** A resolved cluster: the one value `KubeClient` needs. */
export interface ClusterConnection {
  /** `https://host:port` (or `http://` for a loopback simulator), no trailing slash. */
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
}

/** A kubeconfig (or in-cluster file) that is missing, unreadable or does not make sense. */
export class KubeConfigError extends Data.TaggedError("KubeConfigError")<{
  /** The file at fault, when there is one. */
  readonly file: Option.Option<string>
  readonly message: string
}> {}

/** @since 0.1.0 */
export class KubeConfig extends Context.Tag("sandbox-watch/KubeConfig")<KubeConfig, ClusterConnection>() {}

/** A fixed connection: a loopback simulator, a test. */
export const layerStatic = (options: {
  readonly server: string
  readonly token?: string
  readonly namespace?: string
}): Layer.Layer<KubeConfig> =>
  Layer.succeed(KubeConfig, {
    server: options.server.replace(/\/+$/, ""),
    namespace: Option.fromNullable(options.namespace),
    tls: {
      ca: Option.none(),
      clientCertificate: Option.none(),
      clientKey: Option.none(),
      insecureSkipTlsVerify: false,
      serverName: Option.none()
    },
    authorization: Effect.succeed(
      options.token === undefined ? Option.none() : Option.some(Redacted.make(`Bearer ${options.token}`))
    ),
    invalidate: Effect.void,
    source: `static ${options.server}`
  })
