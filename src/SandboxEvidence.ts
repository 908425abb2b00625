/**
 * What a Sandbox's status says about why it is not Ready, as data and as words a person can act on.
 * The Orchestrator's errors and the program's table both read a Sandbox through these functions, so
 * the same facts are told the same way everywhere.
 */
import { Option } from "effect"
import type { ContainerRecord, ContainerWaiting, Sandbox } from "./Sandbox.ts"
import { condition } from "./Sandbox.ts"

/** A condition's reason and its own words. */
export interface ReasonedCondition {
  readonly reason: string
  readonly message: Option.Option<string>
}

/** How a container last ended, with what helps explain it. */
export interface LastTermination {
  readonly container: "harness" | "effector"
  readonly reason: Option.Option<string>
  readonly exitCode: Option.Option<number>
  readonly message: Option.Option<string>
  readonly restartCount: number
  /** `spec.resources.limits.memory`, told with a harness `OOMKilled`: the limit it hit. */
  readonly memoryLimit: Option.Option<string>
}

/** Everything the status offers about a Sandbox that is not (yet) Ready. */
export interface NotReadyEvidence {
  readonly phase: Option.Option<string>
  /** `Scheduled=False`: the scheduler's refusal (`Unschedulable`) or a quota's (`QuotaExceeded`). */
  readonly unscheduled: Option.Option<ReasonedCondition>
  /** `Ready=False` with a reason, when the operator gave one. */
  readonly notReady: Option.Option<ReasonedCondition>
  /** Every waiting container, init containers first, in the kubelet's words. */
  readonly waiting: ReadonlyArray<ContainerWaiting>
  readonly harness: Option.Option<LastTermination>
  readonly effector: Option.Option<LastTermination>
}

/** Why a Sandbox is Lost: the `Lost` condition's reason and message. */
export interface LostEvidence {
  readonly reason: string
  readonly message: Option.Option<string>
}

/** The phase the operator published, if it has. */
export const phase = (sandbox: Sandbox): Option.Option<string> => Option.fromNullable(sandbox.status?.phase)

/** `Lost` is terminal: such a Sandbox is never Pending or Ready again. */
export const isLost = (sandbox: Sandbox): boolean => sandbox.status?.phase === "Lost"

export const isReady = (sandbox: Sandbox): boolean => sandbox.status?.phase === "Ready"

/** The `Lost` condition's words; `Unknown` when the operator set the phase without one. */
export const lost = (sandbox: Sandbox): LostEvidence => {
  const c = condition(sandbox, "Lost")
  return {
    reason: nonEmpty(c?.reason).pipe(Option.getOrElse(() => "Unknown")),
    message: nonEmpty(c?.message)
  }
}

const reasonedFalse = (sandbox: Sandbox, type: string): Option.Option<ReasonedCondition> => {
  const c = condition(sandbox, type)
  if (c === undefined || c.status !== "False") return Option.none()
  const reason = nonEmpty(c.reason)
  const message = nonEmpty(c.message)
  if (Option.isNone(reason) && Option.isNone(message)) return Option.none()
  return Option.some({ reason: Option.getOrElse(reason, () => "NoReason"), message })
}

const termination = (
  container: "harness" | "effector",
  record: ContainerRecord | undefined,
  memoryLimit: string | undefined
): Option.Option<LastTermination> => {
  const last = record?.lastTerminated
  if (last === undefined) return Option.none()
  const reason = nonEmpty(last.reason)
  return Option.some({
    container,
    reason,
    exitCode: Option.fromNullable(last.exitCode),
    message: nonEmpty(last.message),
    restartCount: record?.restartCount ?? 0,
    // Only a memory kill is explained by the memory limit; for any other end it is noise.
    memoryLimit: Option.filter(nonEmpty(memoryLimit), () => Option.getOrUndefined(reason) === "OOMKilled")
  })
}

/** Read what a Sandbox's status says about it not being Ready. */
export const notReady = (sandbox: Sandbox): NotReadyEvidence => ({
  phase: phase(sandbox),
  unscheduled: reasonedFalse(sandbox, "Scheduled"),
  notReady: reasonedFalse(sandbox, "Ready"),
  waiting: sandbox.status?.waiting ?? [],
  harness: termination("harness", sandbox.status?.harness, sandbox.spec?.resources?.limits?.memory),
  effector: termination("effector", sandbox.status?.effector, undefined)
})

/** `reason: message`, or whichever of the two there is. */
export const describeReasoned = (c: { readonly reason: string; readonly message: Option.Option<string> }): string =>
  Option.match(c.message, { onNone: () => c.reason, onSome: (m) => `${c.reason}: ${oneLine(m)}` })

export const describeWaiting = (w: ContainerWaiting): string => {
  const reason = w.reason ?? "(no reason)"
  return `container ${w.container} waiting ${reason}${w.message ? `: ${oneLine(w.message)}` : ""}`
}

export const describeTermination = (t: LastTermination): string => {
  const reason = Option.getOrElse(t.reason, () => "terminated")
  const exit = Option.match(t.exitCode, { onNone: () => "", onSome: (code) => ` (exit ${code})` })
  const limit = Option.match(t.memoryLimit, { onNone: () => "", onSome: (m) => ` at its memory limit ${m}` })
  const restarts = t.restartCount > 0 ? `, ${t.restartCount} restart${t.restartCount === 1 ? "" : "s"}` : ""
  // A termination message is the container's last words; its last non-empty line says the most.
  const words = Option.match(t.message, { onNone: () => "", onSome: (m) => `: ${lastLine(m)}` })
  return `${t.container} last terminated ${reason}${exit}${limit}${restarts}${words}`
}

/** The evidence as `; `-separated clauses, most telling first. */
export const describeNotReady = (e: NotReadyEvidence): string => {
  const clauses: Array<string> = [
    Option.match(e.phase, {
      onNone: () => "no phase yet (the operator has not written a status)",
      onSome: (p) => `phase ${p}`
    })
  ]
  Option.map(e.unscheduled, (c) => clauses.push(`Scheduled=False ${describeReasoned(c)}`))
  for (const w of e.waiting) clauses.push(describeWaiting(w))
  Option.map(e.harness, (t) => clauses.push(describeTermination(t)))
  Option.map(e.effector, (t) => clauses.push(describeTermination(t)))
  Option.map(e.notReady, (c) => clauses.push(`Ready=False ${describeReasoned(c)}`))
  return clauses.join("; ")
}

const MaxWords = 300

/** Collapse whitespace and cap the length, so one fact stays one readable line. */
export const oneLine = (text: string): string => {
  const flat = text.replace(/\s+/g, " ").trim()
  return flat.length > MaxWords ? `${flat.slice(0, MaxWords - 1)}…` : flat
}

const lastLine = (text: string): string => {
  const lines = text.split(/\r?\n/).map((l) => l.trim()).filter((l) => l.length > 0)
  return oneLine(lines[lines.length - 1] ?? "")
}

const nonEmpty = (s: string | undefined): Option.Option<string> =>
  s === undefined || s.trim() === "" ? Option.none() : Option.some(s)
