/**
 * sandbox-watch: the one watch of every Sandbox in a Kubernetes namespace, as Effect services.
 *
 * Each public module is re-exported here under its own name, as Effect's packages do
 * (`import { SandboxWatch } from "sandbox-watch"`); every module also has a subpath of its own
 * (`sandbox-watch/SandboxWatch`). Nothing under `internal/` is public.
 */

/**
 * A Kubernetes API client: list, paged list, watch as a `Stream` of typed events, and writes.
 */
export * as KubeClient from "./KubeClient.ts"

/**
 * Where the cluster is and how to prove who we are, resolved as kubectl resolves it.
 */
export * as KubeConfig from "./KubeConfig.ts"

/**
 * Every way a Kubernetes request can fail, as typed errors, and the questions asked of them.
 */
export * as KubeError from "./KubeError.ts"

/**
 * A Kubernetes resource as a value: group, version, plural, namespaced.
 */
export * as KubeResource from "./KubeResource.ts"

/**
 * The Kubernetes `Status` object, decoded leniently.
 */
export * as KubeStatus from "./KubeStatus.ts"

/**
 * The part of `metadata` a watch needs.
 */
export * as ObjectMeta from "./ObjectMeta.ts"

/**
 * The waits an orchestrator makes on Sandboxes: Ready, a repo fetch landing, continuity.
 */
export * as Orchestrator from "./Orchestrator.ts"

/**
 * The Sandbox custom resource as the Orchestrator reads it.
 */
export * as Sandbox from "./Sandbox.ts"

/**
 * What a Sandbox's status says about why it is not Ready, as data and as words.
 */
export * as SandboxEvidence from "./SandboxEvidence.ts"

/**
 * The one watch of every Sandbox in a namespace, held in memory and pushed to subscribers.
 */
export * as SandboxWatch from "./SandboxWatch.ts"

/**
 * A simulated Kubernetes API server over real HTTP on loopback, for tests and the demo.
 */
export * as SimulatedApiServer from "./SimulatedApiServer.ts"

/**
 * The events of a Kubernetes watch, typed.
 */
export * as WatchEvent from "./WatchEvent.ts"
