/**
 * Reaching the cluster through a proxy, as kubectl does: the kubeconfig's `proxy-url`, else
 * `HTTPS_PROXY`/`HTTP_PROXY` minus `NO_PROXY`; through a real CONNECT proxy on loopback.
 */
import { NodeContext } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, Layer, Option } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { stringify } from "yaml"
import { excludedBy, proxyFor } from "../src/internal/proxy.ts"
import * as KubeClient from "../src/KubeClient.ts"
import * as KubeConfig from "../src/KubeConfig.ts"
import { Sandbox, SandboxResource } from "../src/Sandbox.ts"
import * as SimulatedApiServer from "../src/SimulatedApiServer.ts"
import * as ConnectProxy from "./support/ConnectProxy.ts"

describe("proxyFor", () => {
  const env = {
    HTTPS_PROXY: "http://proxy.corp:3128",
    http_proxy: "http://plain.corp:8080",
    NO_PROXY: ".internal,10.0.0.5,api.corp:6443"
  }
  it.each([
    {
      what: "the kubeconfig's proxy-url wins over the environment",
      server: "https://api.example",
      proxyUrl: "http://kp:1",
      proxy: "http://kp:1"
    },
    {
      what: "the kubeconfig's proxy-url is used even for loopback",
      server: "https://127.0.0.1:6443",
      proxyUrl: "http://kp:1",
      proxy: "http://kp:1"
    },
    { what: "https: HTTPS_PROXY", server: "https://api.example:6443", proxy: "http://proxy.corp:3128" },
    { what: "http: http_proxy (lower case too)", server: "http://api.example", proxy: "http://plain.corp:8080" },
    { what: "NO_PROXY by domain suffix", server: "https://k8s.internal", proxy: undefined },
    { what: "NO_PROXY by IP", server: "https://10.0.0.5:6443", proxy: undefined },
    { what: "NO_PROXY with a port matches only that port", server: "https://api.corp:6443", proxy: undefined },
    {
      what: "NO_PROXY with another port does not match",
      server: "https://api.corp:443",
      proxy: "http://proxy.corp:3128"
    },
    { what: "the environment never proxies loopback", server: "https://127.0.0.1:6443", proxy: undefined },
    { what: "nor localhost", server: "https://localhost:6443", proxy: undefined }
  ])("$what", ({ proxy, proxyUrl, server }) => {
    expect(Option.getOrUndefined(proxyFor(server, proxyUrl, env))).toBe(proxy)
  })

  it("a proxy in the environment named without a scheme is an HTTP proxy, as Go reads it", () => {
    expect(Option.getOrUndefined(proxyFor("https://api.example", undefined, { HTTPS_PROXY: "proxy.corp:3128" })))
      .toBe("http://proxy.corp:3128")
  })

  it("NO_PROXY=* excludes everything; no proxy set means direct", () => {
    expect(excludedBy("*", "anything", "443")).toBe(true)
    expect(Option.isNone(proxyFor("https://api.example", undefined, {}))).toBe(true)
  })
})

describe("a kubeconfig proxy-url that cannot be used is refused at start, in one line", () => {
  const refusalOf = (proxyUrl: string) =>
    Effect.gen(function*() {
      const dir = yield* Effect.acquireRelease(
        Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "sw-proxy-"))),
        (d) => Effect.sync(() => Fs.rmSync(d, { recursive: true, force: true }))
      )
      const file = Path.join(dir, "config")
      Fs.writeFileSync(
        file,
        stringify({
          apiVersion: "v1",
          kind: "Config",
          "current-context": "c",
          clusters: [{ name: "c", cluster: { server: "https://api.example:6443", "proxy-url": proxyUrl } }],
          contexts: [{ name: "c", context: { cluster: "c" } }],
          users: []
        })
      )
      const resolved = yield* Effect.either(
        KubeConfig.resolve({ path: file, env: {}, home: dir, serviceAccountDir: Path.join(dir, "none") })
      )
      return Either.match(resolved, {
        onLeft: (error) => error.message.slice(error.message.indexOf("cluster \"c\"")),
        onRight: () => "accepted"
      })
    }).pipe(Effect.provide(NodeContext.layer))

  it.scoped.each([
    [
      "proxy.corp:3128",
      `cluster "c": proxy-url "proxy.corp:3128" has no scheme: write it as http://host:port (or https://host:port)`
    ],
    [
      "http://[::1",
      `cluster "c": proxy-url "http://[::1" is not a URL: write it as http://host:port (or https://host:port)`
    ],
    [
      "socks5://alice:s3cret@proxy.corp:1080",
      `cluster "c": proxy-url "socks5://***@proxy.corp:1080" is a SOCKS proxy, which sandbox-watch does not speak: use an HTTP CONNECT proxy (http:// or https://), or run it where it can reach the apiserver directly`
    ],
    [
      "ftp://proxy.corp",
      `cluster "c": proxy-url "ftp://proxy.corp" has the unsupported scheme "ftp": it must be http:// or https://`
    ],
    ["http://alice:s3cret@proxy.corp:3128", "accepted"],
    ["https://proxy.corp", "accepted"]
  ] as ReadonlyArray<readonly [string, string]>)("%s", ([proxyUrl, expected]) =>
    Effect.gen(function*() {
      const said = yield* refusalOf(proxyUrl)
      expect(said).toBe(expected)
      expect(said).not.toContain("s3cret")
    }))
})

describe("KubeClient through a CONNECT proxy", () => {
  it.scoped("a kubeconfig's proxy-url sends every request through the proxy's tunnel", () =>
    Effect.gen(function*() {
      const server = yield* SimulatedApiServer.SimulatedApiServer
      yield* server.create({
        apiVersion: "jr2.dev/v1alpha1",
        kind: "Sandbox",
        metadata: { name: "s1", labels: { "jr2.dev/run": "r" } }
      })
      const proxy = yield* ConnectProxy.make
      const dir = yield* Effect.acquireRelease(
        Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "sw-proxy-"))),
        (d) => Effect.sync(() => Fs.rmSync(d, { recursive: true, force: true }))
      )
      const file = Path.join(dir, "config")
      Fs.writeFileSync(
        file,
        stringify({
          apiVersion: "v1",
          kind: "Config",
          "current-context": "sim",
          clusters: [{ name: "sim", cluster: { server: server.url, "proxy-url": proxy.url } }],
          contexts: [{ name: "sim", context: { cluster: "sim", namespace: "ns" } }],
          users: []
        })
      )
      const connection = yield* KubeConfig.resolve({
        path: file,
        env: {},
        home: dir,
        serviceAccountDir: Path.join(dir, "none")
      })
      expect(connection.proxyUrl).toBe(proxy.url)
      const client = yield* KubeClient.make().pipe(Effect.provide(Layer.succeed(KubeConfig.KubeConfig, connection)))
      const list = yield* client.list(SandboxResource, Sandbox, { namespace: "ns" })
      expect(list.items.map((s) => s.metadata.name)).toEqual(["s1"])
      expect(yield* proxy.tunnels).toEqual([new URL(server.url).host])
    }).pipe(
      Effect.provide(SimulatedApiServer.layer({ resource: SandboxResource, namespace: "ns" })),
      Effect.provide(NodeContext.layer)
    ))
})
