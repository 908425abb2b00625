/**
 * Deterministic Sandboxes as the operator writes them and the apiserver returns them: labels, an
 * annotation, spec, a full status and `managedFields`, about 3 KB of JSON each. Every value comes
 * from a hash of (seed, index, variant), so the runner and every child agree on names and on which
 * event is last without shipping the data set around.
 */

export const Seed = 0x5eed_2026
export const Group = "jr2.dev"
export const Version = "v1alpha1"
export const Plural = "sandboxes"
/** The annotation a latency event carries: when the server wrote it, `process.hrtime` ns. */
export const SentAnnotation = "bench.jr2.dev/sent"
/** Fixed width, so the server can stamp a pre-serialized line in place. */
export const SentPlaceholder = "0".repeat(20)

/** A 32-bit mix (murmur3 finaliser): the same input, the same output, in every process. */
export const mix32 = (x: number): number => {
  x = Math.imul(x ^ (x >>> 16), 0x85ebca6b)
  x = Math.imul(x ^ (x >>> 13), 0xc2b2ae35)
  return (x ^ (x >>> 16)) >>> 0
}

/** mulberry32: small, fast, seeded. */
export const rng = (seed: number): () => number => {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

const hex = (n: number, width = 8) => n.toString(16).padStart(width, "0")

/** The name of Sandbox `index`: what the Orchestrator would call it (run id, then a short hash). */
export const nameOf = (index: number): string => {
  const h = mix32(index ^ Seed)
  return `sbx-${(index % 97).toString(36)}${hex(mix32(index + 1), 4).slice(0, 4)}-${hex(h)}`
}

/** The `resourceVersion` of the list: objects 0..N-1 were written at 1..N. */
export const listResourceVersion = (n: number): number => n

/** Which Sandbox watch event `k` (1-based) of a stream over `names` names is about. */
export const eventTarget = (k: number, names: number, salt: number): number => mix32(k * 0x9e3779b1 + salt) % names

const uuid = (r: () => number) => {
  const part = (w: number) => hex(Math.floor(r() * 0x1_0000_0000), 8).slice(0, w)
  return `${part(8)}-${part(4)}-4${part(3)}-a${part(3)}-${part(8)}${part(4)}`
}

const time = (r: () => number, base = Date.UTC(2026, 10, 1, 9, 0, 0)) =>
  new Date(base + Math.floor(r() * 86_400_000)).toISOString().replace(/\.\d{3}Z$/, "Z")

const words = [
  "fetch",
  "repo",
  "cache",
  "node",
  "harness",
  "layer",
  "token",
  "mount",
  "pull",
  "image",
  "retry",
  "quota",
  "volume",
  "timeout",
  "exit",
  "signal",
  "stderr",
  "effector",
  "landlock",
  "kernel",
  "module",
  "build",
  "step"
]
const sentence = (r: () => number, length: number) => {
  let s = ""
  while (s.length < length) s += (s === "" ? "" : " ") + words[Math.floor(r() * words.length)]
  return s.slice(0, length)
}

const phases = ["Pending", "Ready", "Ready", "Ready", "Terminating"] as const
const conditionTypes = ["Ready", "ReposFresh", "Scheduled", "HarnessHealthy", "EffectorReady"] as const

/**
 * Sandbox `index` as of `variant` (0 for the listed state; a watch event's number after that),
 * at `resourceVersion`. `sent` adds the latency annotation (a placeholder the server overwrites).
 */
export const makeSandbox = (
  index: number,
  variant: number,
  resourceVersion: number,
  namespace: string,
  sent = false
): Record<string, unknown> => {
  const fixed = rng(mix32(index ^ Seed))
  const r = rng(mix32(index * 31 + variant * 7919 + Seed))
  const name = nameOf(index)
  const run = `run-${(index % 97).toString(36)}`
  const created = time(fixed, Date.UTC(2026, 9, 30))
  const repoCount = 1 + Math.floor(fixed() * 3)
  const repoKeys = Array.from(
    { length: repoCount },
    (_, i) => `git.example.com/team-${hex(mix32(index + i), 4)}/service-${i}`
  )
  const conditionCount = 3 + Math.floor(fixed() * 3)
  const phase = phases[Math.floor(r() * phases.length)]!
  const changed = time(r)
  const annotations: Record<string, string> = {
    "jr2.dev/requested-by": `orchestrator/${run}/task-${hex(mix32(index), 6)}`
  }
  if (sent) annotations[SentAnnotation] = SentPlaceholder
  const managedFields = [
    {
      manager: "orchestrator",
      operation: "Update",
      apiVersion: `${Group}/${Version}`,
      time: created,
      fieldsType: "FieldsV1",
      fieldsV1: {
        "f:metadata": {
          "f:annotations": { ".": {}, "f:jr2.dev/requested-by": {} },
          "f:labels": { ".": {}, "f:jr2.dev/run": {}, "f:jr2.dev/size": {}, "f:jr2.dev/instance": {} }
        },
        "f:spec": {
          ".": {},
          "f:repos": {},
          "f:resources": { ".": {}, "f:limits": { ".": {}, "f:cpu": {}, "f:memory": {} } }
        }
      }
    },
    {
      manager: "sandbox-operator",
      operation: "Update",
      apiVersion: `${Group}/${Version}`,
      time: changed,
      fieldsType: "FieldsV1",
      fieldsV1: {
        "f:status": {
          ".": {},
          "f:conditions": {},
          "f:endpoint": {},
          "f:phase": {},
          "f:podUID": {},
          "f:repos": {},
          "f:waiting": {},
          "f:harness": {
            ".": {},
            "f:lastTerminated": { ".": {}, "f:exitCode": {}, "f:finishedAt": {}, "f:message": {}, "f:reason": {} },
            "f:restartCount": {}
          },
          "f:effector": { ".": {}, "f:restartCount": {} }
        }
      },
      subresource: "status"
    }
  ]
  return {
    apiVersion: `${Group}/${Version}`,
    kind: "Sandbox",
    metadata: {
      annotations,
      creationTimestamp: created,
      generation: 1 + (variant % 3),
      labels: { "jr2.dev/instance": "orchestrator-0", "jr2.dev/run": run, "jr2.dev/size": ["s", "m", "l"][index % 3]! },
      managedFields,
      name,
      namespace,
      resourceVersion: String(resourceVersion),
      uid: uuid(fixed)
    },
    spec: {
      repos: repoKeys.map((key) => ({ key, url: `https://${key}.git` })),
      resources: { limits: { cpu: String(1 + (index % 4)), memory: `${2 << index % 3}Gi` } }
    },
    status: {
      phase,
      endpoint: `10.${index % 250}.${Math.floor(fixed() * 250)}.${Math.floor(r() * 250)}:7070`,
      podUID: uuid(r),
      conditions: conditionTypes.slice(0, conditionCount).map((type, i) => ({
        type,
        status: r() < 0.8 ? "True" : "False",
        reason: i === 2 ? "Scheduled" : `${type}Observed`,
        message: sentence(r, 40 + Math.floor(r() * 40)),
        lastTransitionTime: i === 0 ? changed : created
      })),
      repos: repoKeys.map((key) => ({ key, asked: changed, fetched: changed, attempted: changed })),
      harness: {
        restartCount: variant % 5,
        lastTerminated: { reason: "Error", exitCode: 1 + (variant % 3), finishedAt: changed, message: sentence(r, 200) }
      },
      waiting: [{
        container: "harness",
        reason: "CrashLoopBackOff",
        message: "back-off 10s restarting failed container=harness"
      }],
      effector: { restartCount: 0 }
    }
  }
}

type Json = Record<string, any>

/**
 * Sandbox `index` as of watch event `variant`, from its listed state `base`: what the operator's
 * status writes change (phase, pod, conditions, repo times, the harness's last end and its
 * message), the rest shared with `base`. Much cheaper than `makeSandbox`, for streams of 200,000.
 */
export const evolve = (base: Json, index: number, variant: number, resourceVersion: number, sent = false): Json => {
  const r = rng(mix32(index * 31 + variant * 7919 + Seed))
  const changed = time(r)
  const metadata = base.metadata as Json
  const status = base.status as Json
  const managedFields = metadata.managedFields as Array<Json>
  return {
    ...base,
    metadata: {
      ...metadata,
      annotations: sent ? { ...metadata.annotations, [SentAnnotation]: SentPlaceholder } : metadata.annotations,
      generation: 1 + (variant % 3),
      managedFields: [managedFields[0], { ...managedFields[1], time: changed }],
      resourceVersion: String(resourceVersion)
    },
    status: {
      ...status,
      phase: phases[Math.floor(r() * phases.length)]!,
      podUID: uuid(r),
      conditions: (status.conditions as Array<Json>).map((c, i) =>
        i === 0 ? { ...c, status: r() < 0.8 ? "True" : "False", lastTransitionTime: changed } : c
      ),
      repos: (status.repos as Array<Json>).map((repo) => ({
        key: repo.key,
        asked: changed,
        fetched: changed,
        attempted: changed
      })),
      harness: {
        restartCount: variant % 5,
        lastTerminated: { reason: "Error", exitCode: 1 + (variant % 3), finishedAt: changed, message: sentence(r, 200) }
      }
    }
  }
}

/** What a data set is made of; the runner builds the server's bytes from it, children only use counts. */
export interface DataShape {
  /** Sandboxes listed. */
  readonly n: number
  /** Events a throughput watch streams. */
  readonly m: number
  /** Names the hot streams (fan-out, storm, latency) write to: the first `hot` names. */
  readonly hot: number
  /** Watches the storm closes and resumes. */
  readonly storm: number
  /** Events of the latency stream, and their rate. */
  readonly latencyEvents: number
  readonly latencyRate: number
}

/** Salts so each stream picks its own names. */
export const Salt = { throughput: 1, hot: 2, storm: 3, latency: 4 } as const

/** The last event of a stream: which name, and the resourceVersion the cache must reach. */
export const finalEvent = (count: number, names: number, salt: number, n: number) => ({
  name: nameOf(eventTarget(count, names, salt)),
  resourceVersion: String(listResourceVersion(n) + count)
})
