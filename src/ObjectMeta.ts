/**
 * The part of `metadata` a watch needs. Decoding keeps only these fields: `managedFields` alone is
 * often half an object, and nothing downstream reads it.
 */
import { Schema } from "effect"

export const ObjectMeta = Schema.Struct({
  name: Schema.String,
  namespace: Schema.optional(Schema.String),
  uid: Schema.optional(Schema.String),
  resourceVersion: Schema.String,
  generation: Schema.optional(Schema.Number),
  creationTimestamp: Schema.optional(Schema.String),
  deletionTimestamp: Schema.optional(Schema.String),
  labels: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.String })),
  annotations: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.String }))
})
export type ObjectMeta = typeof ObjectMeta.Type

/** What every decoded object offers the client: a name and a resourceVersion. */
export interface HasMetadata {
  readonly metadata: { readonly name: string; readonly resourceVersion: string }
}
