/**
 * The real kube-apiserver the sync scenario also runs against, once `bash test/apiserver/build.sh`
 * has built it: etcd and kube-apiserver started by test/apiserver/RealApiServer.ts, seeded with the
 * N Sandboxes the replay server lists, from the same generator.
 */
import { Agent, fetch } from "@effect/platform-node/Undici"
import { spawnSync } from "node:child_process"
import * as Fs from "node:fs"
import * as RealApiServer from "../apiserver/RealApiServer.ts"
import { Group, makeSandbox, Plural, Version } from "./data.ts"

/** The server the real rows use: `KUBE_APISERVER_VERSION`, else the newest (what users run). */
export const KubeVersion = process.env.KUBE_APISERVER_VERSION === undefined || process.env.KUBE_APISERVER_VERSION === ""
  ? RealApiServer.KubeVersions[RealApiServer.KubeVersions.length - 1]!
  : RealApiServer.selectedVersion()

/** Whether the binary is there; `bash test/apiserver/build.sh` builds it. */
export const available = (): boolean => Fs.existsSync(RealApiServer.binaryPath(KubeVersion))

/** Where a child finds the server. `caPem` and `token` reach a child by environment only. */
export interface RealTarget {
  readonly url: string
  readonly namespace: string
  readonly caPem: string
  /** Secret: never printed, never in a result. */
  readonly token: string
}

export interface SeededServer {
  readonly target: RealTarget
  /** What the server is and how it was seeded, for the line under the table. */
  readonly about: string
  readonly stop: () => Promise<void>
}

const SeedConcurrency = 8

/**
 * Sandbox `index` as the replay server lists it, less what a client may not set on create; its
 * status goes in a second write, since the CRD's status subresource drops it from a create.
 */
const createBody = (index: number, namespace: string) => {
  const { status, metadata, ...rest } = makeSandbox(index, 0, index + 1, namespace) as {
    status: unknown
    metadata: Record<string, unknown>
  }
  const {
    resourceVersion: _rv,
    uid: _uid,
    creationTimestamp: _ct,
    managedFields: _mf,
    generation: _g,
    selfLink: _sl,
    ...settable
  } = metadata
  return { object: { ...rest, metadata: settable }, status }
}

const call = async (agent: Agent, token: string, method: string, url: string, body?: unknown) => {
  const response = await fetch(url, {
    method,
    dispatcher: agent,
    headers: { authorization: `Bearer ${token}`, accept: "application/json", "content-type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) })
  })
  const text = await response.text()
  if (response.status >= 300) {
    throw new Error(`${method} ${new URL(url).pathname}: HTTP ${response.status}: ${text.slice(0, 300)}`)
  }
  return text
}

/** Creates the N Sandboxes, eight writes in flight; resolves with the mean size of one as served. */
const seed = async (agent: Agent, target: RealTarget, n: number): Promise<number> => {
  const collection = `${target.url}/apis/${Group}/${Version}/namespaces/${
    encodeURIComponent(target.namespace)
  }/${Plural}`
  let next = 0
  let bytes = 0
  const worker = async () => {
    for (let index = next++; index < n; index = next++) {
      const { object, status } = createBody(index, target.namespace)
      const created = JSON.parse(await call(agent, target.token, "POST", collection, object)) as {
        metadata: { name: string }
      }
      // The created object carries its resourceVersion: the status write is a plain update of it.
      const served = await call(
        agent,
        target.token,
        "PUT",
        `${collection}/${encodeURIComponent(created.metadata.name)}/status`,
        { ...created, status }
      )
      bytes += Buffer.byteLength(served)
    }
  }
  await Promise.all(Array.from({ length: SeedConcurrency }, worker))
  return bytes / n
}

/** One paged and one whole list, so the first measured child does not pay for a cold server. */
const warm = async (agent: Agent, target: RealTarget, n: number) => {
  const collection = `${target.url}/apis/${Group}/${Version}/namespaces/${
    encodeURIComponent(target.namespace)
  }/${Plural}`
  let token = ""
  let listed = 0
  do {
    const query = new URLSearchParams({ limit: "500", ...(token === "" ? {} : { continue: token }) })
    const page = JSON.parse(await call(agent, target.token, "GET", `${collection}?${query}`)) as {
      metadata: { continue?: string }
      items: Array<unknown>
    }
    listed += page.items.length
    token = page.metadata.continue ?? ""
  } while (token !== "")
  const whole = JSON.parse(await call(agent, target.token, "GET", collection)) as { items: Array<unknown> }
  if (listed !== n || whole.items.length !== n) {
    throw new Error(`seeded ${n} Sandboxes, but lists hold ${listed} (paged) and ${whole.items.length} (whole)`)
  }
}

const etcdVersion = () =>
  /etcd Version: (\S+)/.exec(
    spawnSync(RealApiServer.etcdPath(KubeVersion), ["--version"], { encoding: "utf8" }).stdout ?? ""
  )?.[1] ?? "?"

/**
 * Starts etcd and kube-apiserver and seeds N Sandboxes; `onStarted` gets the stop as soon as there
 * is something to stop, so an interrupt during seeding still stops the server. Progress goes to
 * `log` (never a secret).
 */
export const startSeeded = async (
  n: number,
  onStarted: (stop: () => Promise<void>) => void,
  log: (line: string) => void
): Promise<SeededServer> => {
  const server = await RealApiServer.start({ version: KubeVersion })
  onStarted(server.stop)
  try {
    const facts = RealApiServer.facts(server)
    const target: RealTarget = {
      url: facts.url,
      namespace: facts.namespace,
      caPem: facts.caPem,
      token: facts.adminToken
    }
    log(
      `kube-apiserver ${facts.version} + etcd ${etcdVersion()} ready in ${
        (server.timings.totalMs / 1000).toFixed(1)
      } s; seeding ${n.toLocaleString("en")} Sandboxes`
    )
    const agent = new Agent({ connect: { ca: facts.caPem } })
    try {
      const t0 = Date.now()
      const size = await seed(agent, target, n)
      const seedSeconds = (Date.now() - t0) / 1000
      log(
        `seeded ${n.toLocaleString("en")} Sandboxes in ${
          seedSeconds.toFixed(1)
        } s (create + status, ${SeedConcurrency} at a time), ~${(size / 1024).toFixed(1)} KB of JSON each as served`
      )
      await warm(agent, target, n)
      const about =
        `Real-server rows: kube-apiserver ${facts.version} (built by \`test/apiserver/build.sh ${KubeVersion}\`) ` +
        `on etcd ${etcdVersion()}, watch cache on, HTTPS on loopback (CA verified, bearer token), ` +
        `${n.toLocaleString("en")} Sandboxes seeded in ${seedSeconds.toFixed(1)} s (~${
          (size / 1024).toFixed(1)
        } KB each as served: ` +
        `the server writes its own managedFields), one paged and one whole list as warm-up. ` +
        (Number(KubeVersion.split(".")[1]) >= 34
          ? `Every client lists without a resourceVersion: a consistent list, which this server answers from its watch cache once etcd has confirmed the current revision (ConsistentListFromCache, GA in 1.34). `
          : `Every client lists without a resourceVersion, so each list is read from etcd (the watch cache serves only watches). `) +
        `Unlike the replay rows, these figures include the server's own work (etcd reads, decoding, serialization, TLS), ` +
        `on the same CPUs as the client; × floor compares with the floor against this server on the same Node.`
      return { target, about, stop: server.stop }
    } finally {
      await agent.close().catch(() => {})
    }
  } catch (error) {
    await server.stop()
    throw error
  }
}
