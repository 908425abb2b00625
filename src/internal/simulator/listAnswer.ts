/**
 * A list's answer from the store: which snapshot a list's resourceVersion, match and continue
 * token ask for, and the page of it, with its continue token, as etcd pages keys. Pure over the
 * store: the HTTP side is in `reads.ts`.
 *
 * @internal
 */
import { Either } from "effect"
import { isEmptySelection } from "../labelSelector.ts"
import type { FailureStatus } from "./kubeJson.ts"
import type { KubeObject, ObjectStore } from "./objectStore.ts"
import { nameOf, namespaceOf } from "./objectStore.ts"
import type { ListRequest } from "./requests.ts"
import {
  badRequest,
  decodeContinue,
  encodeContinue,
  expired,
  inconsistentContinue,
  parseResourceVersion,
  tooLarge
} from "./requests.ts"

/** The list object to encode, or the Status to answer instead. */
export const listAnswer = (
  store: ObjectStore,
  { apiVersion, kind }: { readonly apiVersion: string; readonly kind: string },
  namespace: string | undefined,
  request: ListRequest,
  keep: (object: KubeObject) => boolean
): Either.Either<unknown, FailureStatus> => {
  const { continueToken: continueParam, limit, match, resourceVersion: rvParam, selectors } = request
  let snapshotRv: number
  let items: Array<[string, KubeObject]>
  let start = ""
  if (continueParam !== "") {
    if (rvParam !== "" && rvParam !== "0") {
      return Either.left(badRequest("specifying resource version is not allowed when using continue"))
    }
    const token = decodeContinue(continueParam)
    if (Either.isLeft(token)) return Either.left(badRequest(`invalid continue token: ${token.left}`))
    start = token.right.start
    if (token.right.rv === -1) {
      // The inconsistent continuation the 410 below offers: the rest, as it is now.
      snapshotRv = store.resourceVersion
      items = store.current()
    } else {
      const snapshot = store.snapshotAt(token.right.rv)
      if (snapshot === undefined) return Either.left(expired(inconsistentContinue, encodeContinue(-1, start)))
      snapshotRv = Math.min(token.right.rv, store.resourceVersion)
      items = snapshot
    }
  } else if (rvParam === "" || rvParam === "0") {
    snapshotRv = store.resourceVersion
    items = store.current()
  } else {
    const asked = parseResourceVersion(rvParam)
    if (asked === undefined) return Either.left(badRequest(`invalid resource version: "${rvParam}"`))
    if (asked > store.resourceVersion) return Either.left(tooLarge(rvParam, store.resourceVersion))
    // With a limit and no match, a resourceVersion is exact (the legacy paging semantics).
    const exact = match === "Exact" || (match === "" && limit !== undefined)
    if (exact) {
      const snapshot = store.snapshotAt(asked)
      if (snapshot === undefined) {
        return Either.left(expired("The resourceVersion for the provided list is too old."))
      }
      snapshotRv = asked
      items = snapshot
    } else {
      snapshotRv = store.resourceVersion
      items = store.current()
    }
  }

  // The continue token's start key is relative to the list's prefix, as etcd keys are.
  const relativeKey = (key: string, object: KubeObject) => (namespace === undefined ? key : nameOf(object))
  const selected = items.filter(([key, object]) => keep(object) && relativeKey(key, object) >= start)
  const page = limit === undefined ? selected : selected.slice(0, limit)
  const remaining = selected.length - page.length
  const metadata: Record<string, unknown> = { continue: "", resourceVersion: String(snapshotRv) }
  const last = page[page.length - 1]
  const lastKey = last === undefined ? undefined : relativeKey(last[0], last[1])
  // etcd pages keys, not matches: a full page is followed by a token whenever any key of the
  // list's range (selected or not) comes after it, so a selector can end in an empty page.
  const inRange = (object: KubeObject) => namespace === undefined || namespaceOf(object) === namespace
  const moreKeys = limit !== undefined && page.length === limit && lastKey !== undefined &&
    items.some(([key, object]) => inRange(object) && relativeKey(key, object) > lastKey)
  if (moreKeys && lastKey !== undefined) {
    metadata.continue = encodeContinue(snapshotRv, `${lastKey}\u0000`)
    if (isEmptySelection(selectors.labels, selectors.fields)) metadata.remainingItemCount = remaining
  }
  return Either.right({ apiVersion, items: page.map(([, object]) => object), kind: `${kind}List`, metadata })
}
