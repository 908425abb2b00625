/**
 * The peer: `@kubernetes/client-node`'s informer (`makeInformer` over `CustomObjectsApi`), used as
 * its README shows. It has no synced signal, so "synced" is its N-th `add`; "told" is its `update`
 * callback, which runs after the object is in its cache. Its informer lists in one unpaged call:
 * 2.0.1 has no streaming list (no `sendInitialEvents` anywhere in the package), so it has no
 * streaming row.
 *
 * The package is loaded by a name the runner chooses (`@kubernetes/client-node` 2.x under Node 22,
 * `client-node-1`, an alias of 1.4.0, under Node 20) from test/bench/node_modules, with a computed
 * specifier so the root's type check does not need that folder installed.
 */
import {
  cpuMs,
  gcWatch,
  go,
  hrtimeNs,
  latencyFigures,
  measureEvents,
  measureStorm,
  now,
  rssMB,
  scaleFigures,
  sentNs,
  settledHeap,
  snapshotIfAsked,
  syncFigures,
  window
} from "../common.ts"
import { finalEvent, Group, Plural, Salt, SentAnnotation, Version } from "../data.ts"
import type { ChildParams, ChildResult } from "../protocol.ts"
import { apiServerSecrets } from "../protocol.ts"

interface KubeObject {
  readonly metadata: {
    readonly name: string
    readonly resourceVersion: string
    readonly annotations?: Record<string, string>
  }
}

/** The part of client-node's surface this file uses. */
interface ClientNode {
  readonly KubeConfig: new() => {
    loadFromOptions(options: unknown): void
    makeApiClient<T>(api: new(...args: Array<never>) => T): T
  }
  readonly CustomObjectsApi: new(...args: Array<never>) => {
    listNamespacedCustomObject(
      request: { group: string; version: string; namespace: string; plural: string }
    ): Promise<unknown>
  }
  readonly makeInformer: (
    kubeconfig: unknown,
    path: string,
    list: () => Promise<unknown>
  ) => {
    on(verb: "add" | "update" | "error", callback: (object: KubeObject) => void): void
    start(): Promise<void>
    list(): Array<KubeObject>
  }
}

export const run = async (p: ChildParams): Promise<ChildResult> => {
  const { shape } = p
  const specifier = p.peer ?? "@kubernetes/client-node"
  const k8s = (await import(specifier)) as ClientNode
  const kc = new k8s.KubeConfig()
  // The replay server speaks plain HTTP, which client-node allows only with skipTLSVerify; the
  // real kube-apiserver is verified against its CA, as a kubeconfig's certificate-authority-data.
  const secrets = apiServerSecrets(p)
  kc.loadFromOptions({
    clusters: [
      secrets === undefined
        ? { name: "bench", server: p.url, skipTLSVerify: true }
        : { name: "bench", server: p.url, caData: Buffer.from(secrets.caPem).toString("base64") }
    ],
    users: [{ name: "bench", token: secrets?.token ?? "bench" }],
    contexts: [{ name: "bench", cluster: "bench", user: "bench", namespace: p.namespace }],
    currentContext: "bench"
  })
  const api = kc.makeApiClient(k8s.CustomObjectsApi)
  const informer = k8s.makeInformer(
    kc,
    `/apis/${Group}/${Version}/namespaces/${encodeURIComponent(p.namespace)}/${Plural}`,
    () => api.listNamespacedCustomObject({ group: Group, version: Version, namespace: p.namespace, plural: Plural })
  )
  let adds = 0
  let onSynced: () => void = () => undefined
  const synced = new Promise<void>((resolve) => (onSynced = resolve))
  informer.on("add", () => {
    if (++adds === shape.n) onSynced()
  })
  let onUpdate: (object: KubeObject) => void = () => undefined
  informer.on("update", (object) => onUpdate(object))
  informer.on("error", (error) => {
    console.error(`client-node informer error: ${String(error)}`)
    process.exit(2)
  })
  const reached = (target: { name: string; resourceVersion: string }, also?: (object: KubeObject) => void) =>
    new Promise<void>((resolve) => {
      onUpdate = (object) => {
        also?.(object)
        if (object.metadata.name === target.name && object.metadata.resourceVersion === target.resourceVersion) {
          resolve()
        }
      }
    })

  const heapBefore = p.scenario === "heap" || p.scenario === "scale" ? await settledHeap() : 0
  const timedWindow = p.scenario === "sync" || p.scenario === "scale"
  if (timedWindow) await window.start()
  const rssStart = rssMB()
  const started = now()
  const c0 = cpuMs()
  void informer.start()
  await synced
  const syncedFigures = syncFigures(now() - started, cpuMs() - c0, rssStart)
  if (timedWindow) await window.stop()
  switch (p.scenario) {
    case "sync":
      return { figures: { ...syncedFigures } }
    case "scale":
      return { figures: await scaleFigures(shape.n, syncedFigures, heapBefore) }
    case "heap": {
      const heapAfter = await settledHeap()
      await snapshotIfAsked()
      return { figures: { perObject: (heapAfter - heapBefore) / shape.n, heapMB: (heapAfter - heapBefore) / 1048576 } }
    }
    case "tp":
    case "fanout": {
      const hot = p.scenario === "fanout"
      const target = finalEvent(
        shape.m,
        hot ? Math.min(shape.hot, shape.n) : shape.n,
        hot ? Salt.hot : Salt.throughput,
        shape.n
      )
      return measureEvents(p, shape.m, target, reached)
    }
    case "storm":
      return measureStorm(p, shape, finalEvent(shape.storm, Math.min(shape.hot, shape.n), Salt.storm, shape.n), reached)
    case "lat": {
      const samples: Array<number> = []
      const target = finalEvent(shape.latencyEvents, Math.min(shape.hot, shape.n), Salt.latency, shape.n)
      const done = reached(target, (object) => {
        const sent = sentNs(object.metadata.annotations, SentAnnotation)
        if (sent !== undefined) samples.push(Number(hrtimeNs() - sent))
      })
      await window.start()
      const gcs = await gcWatch()
      await go(p.url, p.namespace)
      await done
      await window.stop()
      return { figures: { ...latencyFigures(samples), ...(await gcs.stop()) } }
    }
  }
}
