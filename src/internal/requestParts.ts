/** The query strings and span attributes of the client's requests. */
import type { KubeResource } from "../KubeResource.ts"
import { apiVersion } from "../KubeResource.ts"
import type { ListOptions, WatchOptions } from "./kubeClientTypes.ts"

export type Query = ReadonlyArray<readonly [string, string | number | boolean | undefined]>

/**
 * `?a=1&b=2` (only the defined ones, each value percent-encoded), or `""`. Built by hand: a
 * `URLSearchParams` per watch request showed in a resume's profile (`npm run bench -- --profile
 * sw@22:storm`). The keys are this file's own, plain ASCII.
 */
export const queryString = (params: Query): string => {
  let text = ""
  for (const [key, value] of params) {
    if (value !== undefined) text += `${text === "" ? "?" : "&"}${key}=${encodeURIComponent(String(value))}`
  }
  return text
}

export const resourceName = (resource: KubeResource): string => `${apiVersion(resource)}/${resource.plural}`

export const spanAttributes = (
  resource: KubeResource,
  namespace: string | undefined,
  resourceVersion?: string,
  labelSelector?: string
) => {
  const attributes: Record<string, string> = { resource: resourceName(resource) }
  if (namespace !== undefined) attributes.namespace = namespace
  if (labelSelector !== undefined) attributes.labelSelector = labelSelector
  if (resourceVersion !== undefined) attributes.resourceVersion = resourceVersion
  return attributes
}

export const listQuery = (options: ListOptions): string =>
  queryString([
    ["labelSelector", options.labelSelector],
    ["fieldSelector", options.fieldSelector],
    ["limit", options.limit],
    ["continue", options.continue],
    ["resourceVersion", options.resourceVersion],
    ["resourceVersionMatch", options.resourceVersionMatch]
  ])

export const watchQuery = (options: WatchOptions): string =>
  queryString([
    ["watch", "1"],
    ["labelSelector", options.labelSelector],
    ["fieldSelector", options.fieldSelector],
    ["resourceVersion", options.resourceVersion],
    ["resourceVersionMatch", options.resourceVersionMatch],
    ["allowWatchBookmarks", options.allowWatchBookmarks],
    ["sendInitialEvents", options.sendInitialEvents],
    ["timeoutSeconds", options.timeoutSeconds]
  ])
