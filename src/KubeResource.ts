/**
 * A Kubernetes resource as a value: which API group and version serve it, its plural name, and
 * whether it lives in a namespace. Nothing here knows about any particular resource.
 */

export interface KubeResource {
  /** The API group; `""` for the core group (`/api/v1`). */
  readonly group: string
  readonly version: string
  /** The plural, lower-case name used in URLs (`sandboxes`). */
  readonly plural: string
  readonly namespaced: boolean
}

export const make = (resource: KubeResource): KubeResource => resource

/** `group/version`, or `version` for the core group, as `apiVersion` fields spell it. */
export const apiVersion = (resource: KubeResource): string =>
  resource.group === "" ? resource.version : `${resource.group}/${resource.version}`

/**
 * The collection path of a resource, e.g. `/apis/jr2.dev/v1alpha1/namespaces/ns/sandboxes`.
 * A namespaced resource asked without a namespace is listed across all namespaces.
 */
export const collectionPath = (resource: KubeResource, namespace?: string): string => {
  const root = resource.group === "" ? `/api/${resource.version}` : `/apis/${resource.group}/${resource.version}`
  const ns = resource.namespaced && namespace !== undefined ? `/namespaces/${encodeURIComponent(namespace)}` : ""
  return `${root}${ns}/${resource.plural}`
}

/** The path of one named object of a resource. */
export const objectPath = (resource: KubeResource, namespace: string | undefined, name: string): string =>
  `${collectionPath(resource, namespace)}/${encodeURIComponent(name)}`
