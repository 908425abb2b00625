/**
 * The apiserver's JSON, byte for byte where it matters: custom resources are Go maps, so their keys
 * come out sorted at every level and `<`, `>`, `&` are escaped as Go's encoder does; a `Status` is a
 * Go struct, so its fields keep the struct's order. Every body ends with the encoder's newline.
 * @internal
 */

/** Go's `json.Marshal` of a `map[string]interface{}`: keys sorted, HTML characters escaped. */
export const encodeUnstructured = (value: unknown): string => escapeHtml(JSON.stringify(sortKeys(value)))

/** A Go struct: the caller's key order is the struct's field order, so it is kept. */
export const encodeStruct = (value: unknown): string => escapeHtml(JSON.stringify(value))

const sortKeys = (value: unknown): unknown => {
  if (Array.isArray(value)) return value.map(sortKeys)
  if (value !== null && typeof value === "object") {
    const out: Record<string, unknown> = {}
    for (const key of Object.keys(value).sort(compareGoStrings)) {
      const field = (value as Record<string, unknown>)[key]
      if (field !== undefined) out[key] = sortKeys(field)
    }
    return out
  }
  return value
}

/** Go sorts map keys by bytes; for the UTF-16 strings of JSON keys code-point order agrees. */
const compareGoStrings = (a: string, b: string): number => {
  const ca = Array.from(a)
  const cb = Array.from(b)
  for (let i = 0; i < Math.min(ca.length, cb.length); i++) {
    const d = ca[i]!.codePointAt(0)! - cb[i]!.codePointAt(0)!
    if (d !== 0) return d
  }
  return ca.length - cb.length
}

const escapeHtml = (json: string): string =>
  json.replace(/[<>&\u2028\u2029]/g, (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, "0")}`)

/** One cause of a Status's `details`. */
export interface StatusCause {
  readonly reason?: string
  readonly message?: string
  readonly field?: string
}

export interface StatusDetails {
  readonly name?: string
  readonly group?: string
  readonly kind?: string
  readonly uid?: string
  readonly causes?: ReadonlyArray<StatusCause>
  readonly retryAfterSeconds?: number
}

/** A failure Status as the apiserver builds it (`k8s.io/apimachinery/pkg/api/errors`). */
export interface FailureStatus {
  readonly code: number
  readonly reason: string
  readonly message: string
  readonly details?: StatusDetails
  /** `ListMeta.continue`: only the inconsistent-continue 410 carries one. */
  readonly continue?: string
}

/** The Status JSON, fields in the order of Go's `metav1.Status` (and of its `details`). */
export const encodeStatus = (status: FailureStatus): string => {
  const details = status.details
  return (
    encodeStruct({
      kind: "Status",
      apiVersion: "v1",
      metadata: status.continue === undefined ? {} : { continue: status.continue },
      status: "Failure",
      message: status.message,
      reason: status.reason,
      details: details === undefined
        ? undefined
        : {
          name: details.name === "" ? undefined : details.name,
          group: details.group === "" ? undefined : details.group,
          kind: details.kind === "" ? undefined : details.kind,
          uid: details.uid,
          causes: details.causes?.map((cause) => ({
            reason: cause.reason,
            message: cause.message,
            field: cause.field
          })),
          retryAfterSeconds: details.retryAfterSeconds
        },
      code: status.code
    })
  )
}

/**
 * The Success Status a DELETE of a custom resource answers once the object is gone, fields in Go's
 * order (no `code`, no `message`: both are empty and omitted).
 */
export const encodeSuccessStatus = (details: StatusDetails): string =>
  encodeStruct({
    kind: "Status",
    apiVersion: "v1",
    metadata: {},
    status: "Success",
    details: {
      name: details.name === "" ? undefined : details.name,
      group: details.group === "" ? undefined : details.group,
      kind: details.kind === "" ? undefined : details.kind,
      uid: details.uid === "" ? undefined : details.uid
    }
  })

/** RFC 7386 JSON merge patch: `null` deletes, objects merge, anything else replaces. */
export const mergePatch = (target: unknown, patch: unknown): unknown => {
  if (patch === null || typeof patch !== "object" || Array.isArray(patch)) return patch
  const base: Record<string, unknown> = target !== null && typeof target === "object" && !Array.isArray(target)
    ? { ...(target as Record<string, unknown>) }
    : {}
  for (const [key, value] of Object.entries(patch as Record<string, unknown>)) {
    if (value === null) delete base[key]
    else base[key] = mergePatch(base[key], value)
  }
  return base
}

/** A deep copy of plain JSON, so no caller can reach into the store. */
export const clone = <A>(value: A): A => (value === undefined ? value : (JSON.parse(JSON.stringify(value)) as A))

/** Structural equality of plain JSON, key order ignored. */
export const jsonEqual = (a: unknown, b: unknown): boolean => encodeUnstructured(a) === encodeUnstructured(b)
