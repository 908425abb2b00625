/**
 * The events of a Kubernetes watch, typed. The wire's `ADDED`/`MODIFIED`/`DELETED`/`BOOKMARK`/
 * `ERROR`, plus `UNDECODABLE`: an object event whose envelope was fine but whose object did not fit
 * the caller's schema. It still carries a resourceVersion the server will resume from, so it is an
 * event, not a stream failure; what to do with the object is the caller's decision.
 */
import type { Status } from "./KubeStatus.ts"

export interface ObjectEvent<A> {
  readonly type: "ADDED" | "MODIFIED" | "DELETED"
  readonly object: A
  readonly name: string
  readonly resourceVersion: string
  /**
   * The length of the watch line the object was read from, in characters (a byte each for the
   * ASCII an apiserver sends; `metadata.managedFields` left out unless the schema reads them): what
   * keeping the object costs, for a caller that bounds what it keeps (a streaming list's
   * `maxListBytes`). Absent on an event that was not read off the wire.
   */
  readonly bytes?: number
}

/** Only `metadata.resourceVersion` (and annotations) are promised by the server. */
export interface BookmarkEvent {
  readonly type: "BOOKMARK"
  readonly resourceVersion: string
  readonly annotations: Readonly<Record<string, string>>
}

export interface ErrorEvent {
  readonly type: "ERROR"
  readonly status: Status
}

export interface UndecodableEvent {
  readonly type: "UNDECODABLE"
  readonly eventType: "ADDED" | "MODIFIED" | "DELETED"
  /** Present when the object had a usable `metadata.name`. */
  readonly name: string | undefined
  readonly resourceVersion: string | undefined
  /** Why it did not decode, in the schema's words. */
  readonly problem: string
}

export type WatchEvent<A> = ObjectEvent<A> | BookmarkEvent | ErrorEvent | UndecodableEvent

/** The annotation a server puts on the bookmark that ends a streaming list's initial events. */
export const InitialEventsEndAnnotation = "k8s.io/initial-events-end"

/** Whether `event` is a streaming list's end bookmark (annotated `k8s.io/initial-events-end`). */
export const isInitialEventsEnd = (event: WatchEvent<unknown>): boolean =>
  event.type === "BOOKMARK" && event.annotations[InitialEventsEndAnnotation] === "true"
