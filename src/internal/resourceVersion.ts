/**
 * Ordering of resourceVersions. The API promises they are opaque strings, but every apiserver
 * backed by etcd serves decimal integers (etcd's revision), and client-go's watch cache relies on
 * the same. Where both sides are decimal we compare; where either is not, we cannot tell, and say
 * "not older" so the cluster's word is taken.
 *
 * @internal
 */
const decimal = /^[0-9]+$/

/** True only when both are decimal and `candidate` is strictly older than `current`. */
export const isOlder = (candidate: string, current: string): boolean => {
  if (!decimal.test(candidate) || !decimal.test(current)) return false
  const a = candidate.replace(/^0+(?=.)/, "")
  const b = current.replace(/^0+(?=.)/, "")
  return a.length !== b.length ? a.length < b.length : a < b
}
