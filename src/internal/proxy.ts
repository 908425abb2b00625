/**
 * Which proxy, if any, a request to the cluster goes through, as kubectl decides it: the
 * kubeconfig's `proxy-url` for that cluster, else `HTTPS_PROXY` (for an `https://` server) or
 * `HTTP_PROXY` (for `http://`), in either case, unless `NO_PROXY` names the host. As Go's
 * `ProxyFromEnvironment` does, the environment never sends a loopback address through a proxy.
 *
 * @internal
 */
import { Option } from "effect"

type Env = Readonly<Record<string, string | undefined>>

const fromEnv = (env: Env, name: string): string | undefined => {
  const value = env[name.toUpperCase()] ?? env[name.toLowerCase()]
  return value === undefined || value.trim() === "" ? undefined : value.trim()
}

const isLoopback = (host: string): boolean =>
  host === "localhost" || host.endsWith(".localhost") || /^127\.\d+\.\d+\.\d+$/.test(host) || host === "::1" ||
  host === "[::1]"

/** Whether `NO_PROXY` (a comma list of hosts, domains, `.domain`s, IPs, `host:port`s, or `*`) names it. */
export const excludedBy = (noProxy: string, host: string, port: string): boolean =>
  noProxy.split(",").map((entry) => entry.trim().toLowerCase()).filter((entry) => entry !== "").some((entry) => {
    if (entry === "*") return true
    const [name, entryPort] = entry.startsWith("[")
      ? [entry.slice(0, entry.indexOf("]") + 1), entry.slice(entry.indexOf("]") + 2) || undefined]
      : (entry.split(":") as [string, string | undefined])
    if (entryPort !== undefined && entryPort !== port) return false
    const bare = name.startsWith(".") ? name.slice(1) : name.startsWith("*.") ? name.slice(2) : name
    return host === bare || host.endsWith(`.${bare}`)
  })

/** A proxy URL with any user and password hidden, to be named in a message. */
export const proxyShown = (text: string): string =>
  text.replace(/^([^/]*\/\/)?[^@/]*@/, (_, scheme) => `${scheme ?? ""}***@`)

/**
 * Why a kubeconfig's `proxy-url` cannot be used, or undefined when it can. kubectl takes http,
 * https and socks5 (client-go's `parseProxyURL`); the client here speaks HTTP CONNECT only, so
 * SOCKS is refused at start rather than tried as if it were HTTP.
 */
export const proxyUrlProblem = (text: string): string | undefined => {
  const shown = JSON.stringify(proxyShown(text))
  if (!/^[A-Za-z][A-Za-z0-9+.-]*:\/\//.test(text)) {
    return `proxy-url ${shown} has no scheme: write it as http://host:port (or https://host:port)`
  }
  let url: URL
  try {
    url = new URL(text)
  } catch {
    return `proxy-url ${shown} is not a URL: write it as http://host:port (or https://host:port)`
  }
  if (url.protocol === "http:" || url.protocol === "https:") {
    return url.hostname === "" ? `proxy-url ${shown} names no host: write it as http://host:port` : undefined
  }
  if (url.protocol === "socks5:" || url.protocol === "socks5h:" || url.protocol === "socks:") {
    return `proxy-url ${shown} is a SOCKS proxy, which sandbox-watch does not speak: use an HTTP CONNECT proxy ` +
      "(http:// or https://), or run it where it can reach the apiserver directly"
  }
  return `proxy-url ${shown} has the unsupported scheme "${url.protocol.slice(0, -1)}": it must be http:// or https://`
}

/** The proxy URL for requests to `server`, or none for a direct connection. */
export const proxyFor = (server: string, kubeconfigProxyUrl: string | undefined, env: Env): Option.Option<string> => {
  if (kubeconfigProxyUrl !== undefined && kubeconfigProxyUrl !== "") return Option.some(kubeconfigProxyUrl)
  const url = new URL(server)
  const host = url.hostname.toLowerCase()
  if (isLoopback(host)) return Option.none()
  const proxy = url.protocol === "https:" ? fromEnv(env, "HTTPS_PROXY") : fromEnv(env, "HTTP_PROXY")
  if (proxy === undefined) return Option.none()
  // As Go's ProxyFromEnvironment: a proxy named without a scheme is an HTTP one.
  const withScheme = /^[A-Za-z][A-Za-z0-9+.-]*:\/\//.test(proxy) ? proxy : `http://${proxy}`
  const port = url.port !== "" ? url.port : url.protocol === "https:" ? "443" : "80"
  const noProxy = fromEnv(env, "NO_PROXY")
  return noProxy !== undefined && excludedBy(noProxy, host, port) ? Option.none() : Option.some(withScheme)
}
