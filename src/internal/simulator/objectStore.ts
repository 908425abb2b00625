/**
 * The simulated apiserver's storage: the objects of one resource, the one resourceVersion counter,
 * and a bounded window of past events (the apiserver's watch cache and etcd's compaction in one).
 * Writes follow a custom resource with the status subresource: the main resource ignores
 * `status`, `.../status` changes nothing else, `generation` counts spec changes, a no-op write makes
 * no event, a finalizer holds a delete until it is removed.
 *
 * Synchronous on purpose: one write, its resourceVersion and its fan-out to every listener happen
 * in one step, so a watch that replays history and subscribes never misses or repeats an event.
 * @internal
 */
import { Either } from "effect"
import type { KubeResource } from "../../KubeResource.ts"
import * as KubeResourceModule from "../../KubeResource.ts"
import { isRecord } from "../isRecord.ts"
import type { FailureStatus } from "./kubeJson.ts"
import { clone, jsonEqual, mergePatch } from "./kubeJson.ts"

/** An object as stored: plain JSON with a `metadata` record. */
export type KubeObject = Record<string, unknown> & { readonly metadata: Record<string, unknown> }

export type EventType = "ADDED" | "MODIFIED" | "DELETED"

/**
 * One write, as the watch cache keeps it: the new state (for `DELETED` the last state stamped with
 * the delete's resourceVersion) and the state before it, so a watch with a selector can tell an
 * object leaving the selection from one that was never in it.
 */
export interface StoreEvent {
  readonly resourceVersion: number
  readonly type: EventType
  readonly key: string
  readonly object: KubeObject
  readonly previous: KubeObject | undefined
}

/** Who writes, and when: the server supplies these so the store stays free of clocks and randomness. */
export interface WriteContext {
  /** RFC 3339, seconds, as `creationTimestamp` spells it. */
  readonly now: string
  readonly uid: string
  readonly manager: string
  /** HTTP PUT of a custom resource needs `metadata.resourceVersion`; a test's direct write need not. */
  readonly requireResourceVersion: boolean
  /** A test may seed an object with a status; an HTTP create drops it, like the apiserver. */
  readonly keepStatusOnCreate: boolean
}

export interface StoreConfig {
  readonly resource: KubeResource
  readonly kind: string
  readonly historySize: number
  readonly initialResourceVersion: number
}

/** The key an object is stored and ordered under, as the apiserver's `namespace/name`. */
export const objectKey = (namespace: string, name: string): string => `${namespace}/${name}`

export const nameOf = (object: KubeObject): string => String(object.metadata.name ?? "")
export const namespaceOf = (object: KubeObject): string => String(object.metadata.namespace ?? "")
export const labelsOf = (object: KubeObject): Readonly<Record<string, string>> | undefined =>
  isRecord(object.metadata.labels) ? (object.metadata.labels as Record<string, string>) : undefined

/**
 * The apiserver round-trips a custom resource's `metadata` through Go's `ObjectMeta`, whose maps and
 * lists are `omitempty`: an empty `labels` (the last label patched away) is not stored at all.
 */
const dropEmptyMetadata = (metadata: Record<string, unknown>): void => {
  for (const field of ["labels", "annotations"]) {
    const value = metadata[field]
    if (isRecord(value) && Object.keys(value).length === 0) delete metadata[field]
  }
  for (const field of ["finalizers", "ownerReferences"]) {
    const value = metadata[field]
    if (Array.isArray(value) && value.length === 0) delete metadata[field]
  }
}

const dns1123Subdomain = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/

/** The storage; see the module comment. */
export class ObjectStore {
  private rv: number
  private floorRv: number
  private readonly objects = new Map<string, KubeObject>()
  private history: Array<StoreEvent> = []
  private readonly listeners = new Set<(event: StoreEvent) => void>()
  private readonly apiVersion: string
  private readonly qualified: string

  constructor(private readonly config: StoreConfig) {
    this.rv = config.initialResourceVersion
    this.floorRv = config.initialResourceVersion
    this.apiVersion = KubeResourceModule.apiVersion(config.resource)
    this.qualified = config.resource.group === ""
      ? config.resource.plural
      : `${config.resource.plural}.${config.resource.group}`
  }

  /** The latest resourceVersion: the last write's, or the starting one. */
  get resourceVersion(): number {
    return this.rv
  }

  /** The oldest resourceVersion still in the window: a watch or a snapshot from an older one is 410. */
  get oldestResourceVersion(): number {
    return this.floorRv
  }

  /** `sandboxes.jr2.dev`, as messages name the resource. */
  get qualifiedResource(): string {
    return this.qualified
  }

  /** The current objects, ordered by key (namespace, then name). */
  current(): Array<[string, KubeObject]> {
    return [...this.objects.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
  }

  get(namespace: string, name: string): KubeObject | undefined {
    return this.objects.get(objectKey(namespace, name))
  }

  /**
   * The objects as they were at `resourceVersion`, ordered by key; `undefined` when that is older
   * than the window. Rebuilt by undoing the newer events.
   */
  snapshotAt(resourceVersion: number): Array<[string, KubeObject]> | undefined {
    if (resourceVersion < this.floorRv) return undefined
    const state = new Map(this.objects)
    for (let i = this.history.length - 1; i >= 0; i--) {
      const event = this.history[i]!
      if (event.resourceVersion <= resourceVersion) break
      if (event.previous === undefined) state.delete(event.key)
      else state.set(event.key, event.previous)
    }
    return [...state.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
  }

  /** Every event newer than `resourceVersion`, oldest first; `undefined` when that is out of the window. */
  eventsAfter(resourceVersion: number): Array<StoreEvent> | undefined {
    if (resourceVersion < this.floorRv) return undefined
    return this.history.filter((event) => event.resourceVersion > resourceVersion)
  }

  /** Hears every event as it is committed, synchronously. Returns the unsubscribe. */
  subscribe(listener: (event: StoreEvent) => void): () => void {
    this.listeners.add(listener)
    return () => {
      this.listeners.delete(listener)
    }
  }

  /** An apiserver restart: the window starts again at the current resourceVersion; objects stay. */
  restart(): void {
    this.history = []
    this.floorRv = this.rv
  }

  private commit(type: EventType, key: string, object: KubeObject, previous: KubeObject | undefined): KubeObject {
    const event: StoreEvent = { resourceVersion: this.rv, type, key, object, previous }
    if (type === "DELETED") this.objects.delete(key)
    else this.objects.set(key, object)
    this.history.push(event)
    while (this.history.length > this.config.historySize) {
      const dropped = this.history.shift()!
      this.floorRv = dropped.resourceVersion
    }
    for (const listener of [...this.listeners]) listener(event)
    return object
  }

  private failure(code: number, reason: string, message: string, name?: string): FailureStatus {
    return {
      code,
      reason,
      message,
      details: {
        ...(name === undefined ? {} : { name }),
        group: this.config.resource.group,
        kind: this.config.resource.plural
      }
    }
  }

  notFound(name: string): FailureStatus {
    return this.failure(404, "NotFound", `${this.qualified} "${name}" not found`, name)
  }

  private invalid(name: string, field: string, detail: string, reason = "FieldValueInvalid"): FailureStatus {
    const group = this.config.resource.group === "" ? "" : `.${this.config.resource.group}`
    return {
      code: 422,
      reason: "Invalid",
      message: `${this.config.kind}${group} "${name}" is invalid: ${field}: ${detail}`,
      details: {
        name,
        group: this.config.resource.group,
        kind: this.config.kind,
        causes: [{ reason, message: detail, field }]
      }
    }
  }

  private badRequest(message: string): FailureStatus {
    return { code: 400, reason: "BadRequest", message }
  }

  /** Checks what every body must be: an object of this resource, in this namespace. */
  private checkBody(body: unknown, namespace: string): Either.Either<KubeObject, FailureStatus> {
    if (!isRecord(body)) return Either.left(this.badRequest("the body of the request must be a JSON object"))
    if (body.apiVersion !== undefined && body.apiVersion !== this.apiVersion) {
      return Either.left(
        this.badRequest(
          `the API version in the data (${
            String(body.apiVersion)
          }) does not match the expected API version (${this.apiVersion})`
        )
      )
    }
    if (body.kind !== undefined && body.kind !== this.config.kind) {
      return Either.left(
        this.badRequest(
          `the kind in the data (${String(body.kind)}) does not match the expected kind (${this.config.kind})`
        )
      )
    }
    const metadata = body.metadata === undefined ? {} : body.metadata
    if (!isRecord(metadata)) return Either.left(this.badRequest("metadata must be a JSON object"))
    if (metadata.namespace !== undefined && metadata.namespace !== "" && metadata.namespace !== namespace) {
      return Either.left(
        this.badRequest("the namespace of the provided object does not match the namespace sent on the request")
      )
    }
    for (const field of ["labels", "annotations"] as const) {
      const map = metadata[field]
      if (map !== undefined && (!isRecord(map) || Object.values(map).some((v) => typeof v !== "string"))) {
        return Either.left(this.badRequest(`metadata.${field} must be a map of strings`))
      }
    }
    return Either.right({
      ...clone(body),
      apiVersion: this.apiVersion,
      kind: this.config.kind,
      metadata: clone(metadata)
    })
  }

  private managedFields(
    previous: ReadonlyArray<unknown> | undefined,
    object: KubeObject,
    context: WriteContext,
    operation: "Update",
    subresource: "status" | undefined
  ): Array<unknown> {
    const fields = (value: unknown, depth: number): Record<string, unknown> => {
      if (!isRecord(value) || depth === 0) return {}
      const out: Record<string, unknown> = {}
      for (const [key, child] of Object.entries(value)) out[`f:${key}`] = fields(child, depth - 1)
      return out
    }
    const touched: Record<string, unknown> = {}
    if (subresource === "status") {
      if (object.status !== undefined) touched["f:status"] = fields(object.status, 3)
    } else {
      const meta: Record<string, unknown> = {}
      for (const key of ["labels", "annotations", "finalizers"]) {
        if (object.metadata[key] !== undefined) meta[`f:${key}`] = fields(object.metadata[key], 1)
      }
      if (Object.keys(meta).length > 0) touched["f:metadata"] = meta
      for (const [key, value] of Object.entries(object)) {
        if (key !== "apiVersion" && key !== "kind" && key !== "metadata" && key !== "status") {
          touched[`f:${key}`] = fields(value, 3)
        }
      }
    }
    const entry: Record<string, unknown> = {
      apiVersion: this.apiVersion,
      fieldsType: "FieldsV1",
      fieldsV1: touched,
      manager: context.manager,
      operation,
      ...(subresource === undefined ? {} : { subresource }),
      time: context.now
    }
    const others = (previous ?? []).filter(
      (e) =>
        !(isRecord(e) && e.manager === context.manager && e.operation === operation && e.subresource === subresource)
    )
    return [...others, entry]
  }

  /** POST: a new object. 409 AlreadyExists when the name is taken. */
  create(namespace: string, body: unknown, context: WriteContext): Either.Either<KubeObject, FailureStatus> {
    const checked = this.checkBody(body, namespace)
    if (Either.isLeft(checked)) return checked
    const object = checked.right
    const metadata = object.metadata
    let name = typeof metadata.name === "string" ? metadata.name : ""
    if (name === "" && typeof metadata.generateName === "string" && metadata.generateName !== "") {
      name = `${metadata.generateName}${context.uid.replace(/-/g, "").slice(0, 5)}`
    }
    if (name === "") {
      return Either.left(
        this.invalid("", "metadata.name", "Required value: name or generateName is required", "FieldValueRequired")
      )
    }
    if (name.length > 253 || !dns1123Subdomain.test(name)) {
      return Either.left(
        this.invalid(
          name,
          "metadata.name",
          `Invalid value: "${name}": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`
        )
      )
    }
    const key = objectKey(namespace, name)
    if (this.objects.has(key)) {
      return Either.left(this.failure(409, "AlreadyExists", `${this.qualified} "${name}" already exists`, name))
    }
    this.rv += 1
    const { resourceVersion: _rv, deletionTimestamp: _dt, managedFields: _mf, ...kept } = metadata
    const stored: KubeObject = {
      ...object,
      metadata: {
        ...kept,
        name,
        namespace,
        uid: context.uid,
        resourceVersion: String(this.rv),
        generation: 1,
        creationTimestamp: context.now
      }
    }
    if (!context.keepStatusOnCreate) delete stored.status
    dropEmptyMetadata(stored.metadata)
    ;(stored.metadata as Record<string, unknown>).managedFields = this.managedFields(
      undefined,
      stored,
      context,
      "Update",
      undefined
    )
    return Either.right(this.commit("ADDED", key, stored, undefined))
  }

  /** PUT (of the object or its `status`). */
  replace(
    namespace: string,
    name: string,
    body: unknown,
    context: WriteContext,
    subresource: "status" | undefined
  ): Either.Either<KubeObject, FailureStatus> {
    const checked = this.checkBody(body, namespace)
    if (Either.isLeft(checked)) return checked
    const bodyName = checked.right.metadata.name
    if (bodyName !== undefined && bodyName !== name) {
      return Either.left(
        this.badRequest(`the name of the object (${String(bodyName)}) does not match the name on the URL (${name})`)
      )
    }
    return this.update(namespace, name, checked.right, context, subresource, context.requireResourceVersion)
  }

  /** PATCH with a JSON merge patch (of the object or its `status`). */
  mergePatch(
    namespace: string,
    name: string,
    patch: unknown,
    context: WriteContext,
    subresource: "status" | undefined
  ): Either.Either<KubeObject, FailureStatus> {
    const old = this.objects.get(objectKey(namespace, name))
    if (old === undefined) return Either.left(this.notFound(name))
    if (!isRecord(patch)) return Either.left(this.badRequest("the body of a merge patch must be a JSON object"))
    const patched = mergePatch(clone(old), patch)
    const checked = this.checkBody(patched, namespace)
    if (Either.isLeft(checked)) return checked
    const patchMeta = isRecord(patch.metadata) ? patch.metadata : {}
    // A merge patch is unconditional unless it names a resourceVersion, which is then a precondition.
    const withVersion: KubeObject = {
      ...checked.right,
      metadata: {
        ...checked.right.metadata,
        name,
        resourceVersion: typeof patchMeta.resourceVersion === "string"
          ? patchMeta.resourceVersion
          : old.metadata.resourceVersion
      }
    }
    return this.update(namespace, name, withVersion, context, subresource, false)
  }

  private update(
    namespace: string,
    name: string,
    body: KubeObject,
    context: WriteContext,
    subresource: "status" | undefined,
    requireResourceVersion: boolean
  ): Either.Either<KubeObject, FailureStatus> {
    const key = objectKey(namespace, name)
    const old = this.objects.get(key)
    if (old === undefined) return Either.left(this.notFound(name))
    const version = body.metadata.resourceVersion
    if (version === undefined || version === "") {
      if (requireResourceVersion) {
        return Either.left(
          this.invalid(name, "metadata.resourceVersion", "Invalid value: 0x0: must be specified for an update")
        )
      }
    } else if (version !== old.metadata.resourceVersion) {
      return Either.left(
        this.failure(
          409,
          "Conflict",
          `Operation cannot be fulfilled on ${this.qualified} "${name}": the object has been modified; please apply your changes to the latest version and try again`,
          name
        )
      )
    }
    let next: KubeObject
    if (subresource === "status") {
      next = { ...clone(old), metadata: clone(old.metadata) }
      if (body.status === undefined) delete next.status
      else next.status = clone(body.status)
    } else {
      const { status: _ignored, ...rest } = body
      // What the server owns comes from the stored object, whatever the body says.
      const {
        resourceVersion: _rv,
        managedFields: _mf,
        deletionTimestamp: _dt,
        deletionGracePeriodSeconds: _dg,
        uid: _uid,
        creationTimestamp: _ct,
        generation: _gen,
        ...meta
      } = body.metadata
      const serverOwned: Record<string, unknown> = {}
      for (
        const field of [
          "uid",
          "creationTimestamp",
          "generation",
          "deletionTimestamp",
          "deletionGracePeriodSeconds",
          "managedFields",
          "resourceVersion"
        ]
      ) {
        if (old.metadata[field] !== undefined) serverOwned[field] = old.metadata[field]
      }
      next = { ...rest, metadata: { ...meta, name, namespace, ...serverOwned } }
      if (old.status !== undefined) next.status = clone(old.status)
      const specOf = (o: KubeObject) => {
        const { metadata: _m, status: _s, ...spec } = o
        return spec
      }
      if (!jsonEqual(specOf(next), specOf(old))) {
        next.metadata.generation = Number(old.metadata.generation ?? 0) + 1
      }
    }
    dropEmptyMetadata(next.metadata)
    if (jsonEqual(next, old)) return Either.right(old)
    this.rv += 1
    next.metadata.resourceVersion = String(this.rv)
    next.metadata.managedFields = this.managedFields(
      Array.isArray(old.metadata.managedFields) ? old.metadata.managedFields : undefined,
      next,
      context,
      "Update",
      subresource
    )
    const finalizers = next.metadata.finalizers
    if (next.metadata.deletionTimestamp !== undefined && (!Array.isArray(finalizers) || finalizers.length === 0)) {
      // The last finalizer is gone from an object being deleted: the update completes the delete.
      // As kube-apiserver does it, the update itself is never stored: the object is deleted as it
      // was stored (finalizer and all), which is what the DELETED event carries; the writer is
      // answered with the object as its update made it.
      const last: KubeObject = { ...clone(old), metadata: { ...clone(old.metadata), resourceVersion: String(this.rv) } }
      this.commit("DELETED", key, last, old)
      return Either.right(next)
    }
    return Either.right(this.commit("MODIFIED", key, next, old))
  }

  /**
   * DELETE. Without finalizers the object goes at once and the answer is its last state; with
   * finalizers it gets a `deletionTimestamp` and stays until an update removes the last one.
   */
  delete(namespace: string, name: string, context: WriteContext): Either.Either<KubeObject, FailureStatus> {
    const key = objectKey(namespace, name)
    const old = this.objects.get(key)
    if (old === undefined) return Either.left(this.notFound(name))
    const finalizers = old.metadata.finalizers
    if (Array.isArray(finalizers) && finalizers.length > 0) {
      if (old.metadata.deletionTimestamp !== undefined) return Either.right(old)
      this.rv += 1
      const marked: KubeObject = {
        ...clone(old),
        metadata: {
          ...clone(old.metadata),
          deletionTimestamp: context.now,
          deletionGracePeriodSeconds: 0,
          resourceVersion: String(this.rv)
        }
      }
      return Either.right(this.commit("MODIFIED", key, marked, old))
    }
    this.rv += 1
    const last: KubeObject = { ...clone(old), metadata: { ...clone(old.metadata), resourceVersion: String(this.rv) } }
    this.commit("DELETED", key, last, old)
    return Either.right(old)
  }
}
