/**
 * Ordering of resourceVersions. The API promises they are opaque strings, but every apiserver
 * backed by etcd serves decimal integers (etcd's revision), and client-go's watch cache relies on
 * the same. Where both sides are decimal we compare; where either is not, we cannot tell, and say
 * "not older" so the cluster's word is taken.
 *
 * Compared character by character, not with regular expressions, for speed: every watch event is
 * compared with what the cache holds (`npm run bench -- --profile sw@22:storm` shows the cost).
 *
 * @internal
 */
const Zero = 48
const Nine = 57

const isDecimal = (text: string): boolean => {
  if (text.length === 0) return false
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i)
    if (code < Zero || code > Nine) return false
  }
  return true
}

/** Where the number's significant digits start: leading zeros skipped, the last digit kept. */
const significantFrom = (digits: string): number => {
  let i = 0
  while (i < digits.length - 1 && digits.charCodeAt(i) === Zero) i++
  return i
}

/** True only when both are decimal and `candidate` is strictly older than `current`. */
export const isOlder = (candidate: string, current: string): boolean => {
  if (!isDecimal(candidate) || !isDecimal(current)) return false
  const a = significantFrom(candidate)
  const b = significantFrom(current)
  const lengthA = candidate.length - a
  const lengthB = current.length - b
  if (lengthA !== lengthB) return lengthA < lengthB
  for (let i = 0; i < lengthA; i++) {
    const digitA = candidate.charCodeAt(a + i)
    const digitB = current.charCodeAt(b + i)
    if (digitA !== digitB) return digitA < digitB
  }
  return false
}
