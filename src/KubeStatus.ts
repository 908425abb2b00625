/**
 * The Kubernetes `Status` object: what the apiserver sends for a failed request and inside a watch
 * `ERROR` event. Decoded leniently: every field is optional, because proxies and old servers send
 * partial ones and a failure must never fail to be understood.
 */
import { Schema } from "effect"

/** One cause in `details.causes`, e.g. `{ reason: "ResourceVersionTooLarge" }`. */
export const StatusCause = Schema.Struct({
  reason: Schema.optional(Schema.String),
  message: Schema.optional(Schema.String),
  field: Schema.optional(Schema.String)
})
export type StatusCause = typeof StatusCause.Type

export const StatusDetails = Schema.Struct({
  name: Schema.optional(Schema.String),
  group: Schema.optional(Schema.String),
  kind: Schema.optional(Schema.String),
  uid: Schema.optional(Schema.String),
  causes: Schema.optional(Schema.Array(StatusCause)),
  retryAfterSeconds: Schema.optional(Schema.Number)
})
export type StatusDetails = typeof StatusDetails.Type

export const Status = Schema.Struct({
  kind: Schema.optional(Schema.String),
  apiVersion: Schema.optional(Schema.String),
  status: Schema.optional(Schema.String),
  message: Schema.optional(Schema.String),
  reason: Schema.optional(Schema.String),
  details: Schema.optional(StatusDetails),
  code: Schema.optional(Schema.Number)
})
export type Status = typeof Status.Type
