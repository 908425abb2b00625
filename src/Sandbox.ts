/**
 * The Sandbox custom resource (`jr2.dev/v1alpha1`, `sandboxes`) as the Orchestrator reads it: the
 * fields its waits use and nothing else. Decoding drops every other field, so the cache holds a
 * small object (no `managedFields`); a phase or condition we have not heard of is kept as a string.
 */
import { Schema } from "effect"
import * as KubeResource from "./KubeResource.ts"
import { ObjectMeta } from "./ObjectMeta.ts"

export const SandboxResource: KubeResource.KubeResource = KubeResource.make({
  group: "jr2.dev",
  version: "v1alpha1",
  plural: "sandboxes",
  namespaced: true
})

/** The label every Sandbox the Orchestrator provisions carries. */
export const DefaultLabelSelector = "jr2.dev/run"

/** `Lost` is terminal: a Lost Sandbox is never Pending or Ready again. Other strings are kept. */
export const SandboxPhase = Schema.String
export type SandboxPhase = "Pending" | "Ready" | "Terminating" | "Lost" | (string & {})

export const Condition = Schema.Struct({
  type: Schema.String,
  status: Schema.String,
  reason: Schema.optional(Schema.String),
  message: Schema.optional(Schema.String),
  lastTransitionTime: Schema.optional(Schema.String)
})
export type Condition = typeof Condition.Type

/** What the node cache did about the latest ask for one repo key. */
export const RepoStatus = Schema.Struct({
  key: Schema.String,
  asked: Schema.optional(Schema.String),
  fetched: Schema.optional(Schema.String),
  attempted: Schema.optional(Schema.String),
  error: Schema.optional(Schema.String)
})
export type RepoStatus = typeof RepoStatus.Type

export const Termination = Schema.Struct({
  reason: Schema.optional(Schema.String),
  exitCode: Schema.optional(Schema.Number),
  finishedAt: Schema.optional(Schema.String),
  message: Schema.optional(Schema.String)
})
export type Termination = typeof Termination.Type

export const ContainerRecord = Schema.Struct({
  restartCount: Schema.optional(Schema.Number),
  lastTerminated: Schema.optional(Termination)
})
export type ContainerRecord = typeof ContainerRecord.Type

export const ContainerWaiting = Schema.Struct({
  container: Schema.String,
  reason: Schema.optional(Schema.String),
  message: Schema.optional(Schema.String)
})
export type ContainerWaiting = typeof ContainerWaiting.Type

export const SandboxStatus = Schema.Struct({
  phase: Schema.optional(SandboxPhase),
  endpoint: Schema.optional(Schema.String),
  podUID: Schema.optional(Schema.String),
  conditions: Schema.optional(Schema.Array(Condition)),
  repos: Schema.optional(Schema.Array(RepoStatus)),
  harness: Schema.optional(ContainerRecord),
  waiting: Schema.optional(Schema.Array(ContainerWaiting)),
  effector: Schema.optional(ContainerRecord)
})
export type SandboxStatus = typeof SandboxStatus.Type

export const SandboxSpec = Schema.Struct({
  repos: Schema.optional(
    Schema.Array(Schema.Struct({ key: Schema.optional(Schema.String), url: Schema.optional(Schema.String) }))
  ),
  resources: Schema.optional(
    Schema.Struct({
      limits: Schema.optional(
        Schema.Struct({ memory: Schema.optional(Schema.String), cpu: Schema.optional(Schema.String) })
      )
    })
  )
})
export type SandboxSpec = typeof SandboxSpec.Type

export const Sandbox = Schema.Struct({
  apiVersion: Schema.optional(Schema.String),
  kind: Schema.optional(Schema.String),
  metadata: ObjectMeta,
  spec: Schema.optional(SandboxSpec),
  status: Schema.optional(SandboxStatus)
})
export type Sandbox = typeof Sandbox.Type

/** The condition of a type, if the operator wrote one. */
export const condition = (sandbox: Sandbox, type: string): Condition | undefined =>
  sandbox.status?.conditions?.find((c) => c.type === type)
