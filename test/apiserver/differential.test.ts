/**
 * The simulator against the real thing: one script of writes (creates, status updates, a spec
 * change, a label removed and put back, an annotation, a no-op patch, deletes, a re-add, and a few
 * refused writes) run through `KubeClient` against the simulated API server and against the real
 * kube-apiserver 1.20.2, each observed by a raw watch (`KubeClient.watch` from a list's
 * resourceVersion) and by `SandboxWatch` at once. Both servers must answer the same: the same
 * write answers, the same watch events in the same order, the same things told to subscribers, the
 * same final list — modulo what only a server decides (uid, creationTimestamp, managedFields,
 * generation and resourceVersion values).
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer, Option, Schema, Stream, SubscriptionRef } from "effect"
import * as KubeClient from "../../src/KubeClient.ts"
import { KubeConfig } from "../../src/KubeConfig.ts"
import type { KubeClientError } from "../../src/KubeError.ts"
import type { Sandbox } from "../../src/Sandbox.ts"
import { SandboxResource } from "../../src/Sandbox.ts"
import * as SandboxWatch from "../../src/SandboxWatch.ts"
import * as SimulatedApiServer from "../../src/SimulatedApiServer.ts"
import type { WatchEvent } from "../../src/WatchEvent.ts"
import { InitialEventsEndAnnotation } from "../../src/WatchEvent.ts"
import * as Facts from "./ApiServerFacts.ts"
import { readTruth } from "./truthReads.ts"
import type { Recorder } from "./watchSupport.ts"
import { clientOn, recordAll, recordChanges, sandboxBody, versionOf, waitFor } from "./watchSupport.ts"

const facts = Facts.load()
const ns = facts.namespace
const run = "differential"
const names = ["dif-a", "dif-b", "dif-c", "dif-d"] as const

/** Any object with a name and a resourceVersion, every other field kept as the server sent it. */
const Raw = Schema.Struct(
  {
    metadata: Schema.Struct(
      { name: Schema.String, resourceVersion: Schema.String },
      Schema.Record({ key: Schema.String, value: Schema.Unknown })
    )
  },
  Schema.Record({ key: Schema.String, value: Schema.Unknown })
)

/** What only a server decides. */
const serverSet = ["uid", "creationTimestamp", "managedFields", "generation", "resourceVersion"]

/** A deep copy without the server-set metadata fields; keys sorted so key order never matters. */
const normal = (object: unknown): unknown => {
  const sortKeys = (v: unknown): unknown =>
    Array.isArray(v)
      ? v.map(sortKeys)
      : v !== null && typeof v === "object"
      ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, sortKeys((v as Record<string, unknown>)[k])]))
      : v
  const copy = JSON.parse(JSON.stringify(object ?? null)) as {
    kind?: string
    metadata?: Record<string, unknown>
    details?: Record<string, unknown>
  } | null
  if (copy !== null && typeof copy === "object") {
    if (copy.metadata !== undefined) {
      for (const field of serverSet) delete copy.metadata[field]
      // When a delete began is the server's clock; that it began is the behaviour.
      if (copy.metadata.deletionTimestamp !== undefined) copy.metadata.deletionTimestamp = "<set>"
    }
    // A delete's Success Status names the object's uid (checked against the object separately).
    if (copy.kind === "Status" && copy.details !== undefined) delete copy.details.uid
  }
  return sortKeys(copy)
}

const toldNormal = (sandbox: Option.Option<Sandbox>) => Option.match(sandbox, { onNone: () => "gone", onSome: normal })

/** A refused write, as a caller sees it: code, reason and message. */
const refusal = (error: KubeClientError) =>
  error._tag === "KubeStatusError"
    ? { code: error.code, reason: error.reason, message: error.message }
    : { tag: error._tag }

interface Transcript {
  /** Each write's answer (normalized), or its refusal. */
  readonly answers: ReadonlyArray<{ readonly step: string; readonly answer: unknown }>
  /** Every raw watch event but bookmarks: type and normalized object. */
  readonly events: ReadonlyArray<readonly [string, unknown]>
  /** What `changes(name)` told, per name. */
  readonly told: Readonly<Record<string, ReadonlyArray<unknown>>>
  /** What `allChanges` told after the (empty) first list. */
  readonly all: ReadonlyArray<readonly [string, unknown]>
  /** The final list (limit 2, so paged) and the watch's cache, normalized, by name. */
  readonly list: { readonly items: ReadonlyArray<unknown>; readonly pages: number }
  readonly snapshot: ReadonlyArray<unknown>
  /** What a watch without a resourceVersion starts with, by name. */
  readonly initial: ReadonlyArray<ReadonlyArray<unknown>>
}

/**
 * The script, against the server behind `connection`. After each write it waits until the watch
 * told it (so no two changes of one name coalesce in a subscriber's mailbox): both servers see the
 * same writes at the same pace.
 */
const script = (connection: KubeClient.KubeClientService, watchClient: KubeClient.KubeClientService) =>
  Effect.gen(function*() {
    const admin = connection
    const labelSelector = `jr2.dev/run=${run}`
    // Not selected, and after every selected name: a full page of the selection is followed by
    // an empty one (etcd pages keys, not matches).
    yield* admin.create(SandboxResource, ns, sandboxBody(ns, "dif-z", `${run}-other`))
    const start = yield* readTruth(admin.list(SandboxResource, Raw, { namespace: ns, labelSelector }))
    expect(start.items).toEqual([])

    // The raw watch: every event, in order.
    const events = yield* SubscriptionRef.make<
      ReadonlyArray<{ readonly type: string; readonly rv: string; readonly object: unknown }>
    >([])
    yield* admin.watch(SandboxResource, Raw, {
      namespace: ns,
      labelSelector,
      resourceVersion: start.resourceVersion,
      timeoutSeconds: 120
    }).pipe(
      Stream.runForEach((event) =>
        event.type === "ADDED" || event.type === "MODIFIED" || event.type === "DELETED"
          ? SubscriptionRef.update(
            events,
            (all) => [...all, { type: event.type, rv: event.resourceVersion, object: event.object }]
          )
          : event.type === "BOOKMARK"
          ? Effect.void
          : SubscriptionRef.update(events, (all) => [...all, { type: event.type, rv: "", object: event }])
      ),
      Effect.forkScoped
    )

    const watch = yield* SandboxWatch.make({
      namespace: ns,
      labelSelector,
      backoffFloor: "50 millis",
      backoffCap: "2 seconds"
    }).pipe(
      Effect.provideService(KubeClient.KubeClient, watchClient)
    )
    yield* watch.synced
    const all = yield* recordAll(watch)
    const recorders: Record<string, Recorder> = {}
    for (const name of names) recorders[name] = yield* recordChanges(watch, name)
    for (const name of names) yield* recorders[name]!.awaitShorts(1)

    const answers: Array<{ step: string; answer: unknown }> = []
    let lastRv = start.resourceVersion
    const uids = new Map<string, string>()
    /** A write whose answer is the object: recorded, then waited for until the watch told it. */
    const write = (
      step: string,
      name: string,
      told: "object" | "gone" | "nothing",
      effect: Effect.Effect<unknown, KubeClientError>
    ) =>
      Effect.gen(function*() {
        const answer = yield* effect
        answers.push({ step, answer: normal(answer) })
        if (step.startsWith("create")) uids.set(name, String((answer as { metadata: { uid: unknown } }).metadata.uid))
        if (told === "nothing") return
        if (told === "gone") return yield* recorders[name]!.awaitLast(name, "gone")
        lastRv = versionOf(answer)
        yield* recorders[name]!.awaitLast(name, lastRv)
      })
    const refused = (step: string, effect: Effect.Effect<unknown, KubeClientError>) =>
      Effect.gen(function*() {
        const error = yield* Effect.flip(effect)
        answers.push({ step, answer: refusal(error) })
      })
    const status = (name: string, value: unknown) =>
      admin.mergePatch(SandboxResource, ns, name, { status: value }, { subresource: "status" })
    const patch = (name: string, value: unknown) => admin.mergePatch(SandboxResource, ns, name, value)

    for (const name of ["dif-a", "dif-b", "dif-c"]) {
      // `status` in a create is dropped: the status subresource owns it.
      yield* write(
        `create ${name}`,
        name,
        "object",
        admin.create(SandboxResource, ns, sandboxBody(ns, name, run, { status: { phase: "Ignored" } }))
      )
    }
    yield* write("status a Pending", "dif-a", "object", status("dif-a", { phase: "Pending" }))
    yield* write("status b Pending", "dif-b", "object", status("dif-b", { phase: "Pending" }))
    yield* write(
      "status a Ready",
      "dif-a",
      "object",
      status("dif-a", {
        phase: "Ready",
        endpoint: "10.0.0.7:7000",
        conditions: [{ type: "Ready", status: "True", reason: "PodReady", message: "a <b> & c" }]
      })
    )
    // A spec change (a generation bump on both; generation itself is the server's).
    yield* write("spec c", "dif-c", "object", patch("dif-c", { spec: { resources: { limits: { memory: "4Gi" } } } }))
    // `status` through the main resource is ignored: the same object back, no event.
    yield* write("status via main resource", "dif-c", "nothing", patch("dif-c", { status: { phase: "Sneaky" } }))
    yield* write(
      "annotate a",
      "dif-a",
      "object",
      patch("dif-a", { metadata: { annotations: { "jr2.dev/note": "hello" } } })
    )
    // The label removed: gone as far as the selector can say (DELETED with the last state).
    const unlabelled = yield* patch("dif-b", { metadata: { labels: { "jr2.dev/run": null } } })
    answers.push({ step: "unlabel b", answer: normal(unlabelled) })
    yield* recorders["dif-b"]!.awaitLast("dif-b", "gone")
    // A no-op: the same status again changes nothing, so no event and no new resourceVersion.
    yield* write(
      "status a Ready again",
      "dif-a",
      "nothing",
      status("dif-a", {
        phase: "Ready",
        endpoint: "10.0.0.7:7000",
        conditions: [{ type: "Ready", status: "True", reason: "PodReady", message: "a <b> & c" }]
      })
    )
    yield* write("delete a", "dif-a", "gone", admin.delete(SandboxResource, ns, "dif-a"))
    yield* write("re-add a", "dif-a", "object", admin.create(SandboxResource, ns, sandboxBody(ns, "dif-a", run)))
    yield* write(
      "label b again",
      "dif-b",
      "object",
      patch("dif-b", { metadata: { labels: { "jr2.dev/run": run, extra: "yes" } } })
    )
    yield* write(
      "status b Lost",
      "dif-b",
      "object",
      status("dif-b", { phase: "Lost", conditions: [{ type: "Lost", status: "True", reason: "PodDeleted" }] })
    )
    const deleteC = yield* admin.delete(SandboxResource, ns, "dif-c")
    answers.push({ step: "delete c", answer: normal(deleteC) })
    yield* recorders["dif-c"]!.awaitLast("dif-c", "gone")
    // The Success Status names the very object that went.
    expect((deleteC as { details?: { uid?: string } }).details?.uid).toBe(uids.get("dif-c"))
    // A finalizer holds a delete: the object stays, marked, until the finalizer is removed.
    yield* write(
      "create d with a finalizer",
      "dif-d",
      "object",
      admin.create(
        SandboxResource,
        ns,
        sandboxBody(ns, "dif-d", run, {
          metadata: { name: "dif-d", namespace: ns, labels: { "jr2.dev/run": run }, finalizers: ["jr2.dev/hold"] }
        })
      )
    )
    yield* write("delete d (held)", "dif-d", "object", admin.delete(SandboxResource, ns, "dif-d"))
    yield* write("release d", "dif-d", "gone", patch("dif-d", { metadata: { finalizers: null } }))

    yield* refused("create a twice", admin.create(SandboxResource, ns, sandboxBody(ns, "dif-a", run)))
    yield* refused("delete c twice", admin.delete(SandboxResource, ns, "dif-c"))
    yield* refused("patch c, gone", patch("dif-c", { metadata: { annotations: { x: "y" } } }))
    yield* refused(
      "update a, stale",
      admin.replace(SandboxResource, ns, "dif-a", {
        ...sandboxBody(ns, "dif-a", run),
        metadata: { name: "dif-a", namespace: ns, resourceVersion: start.resourceVersion }
      })
    )
    yield* refused("create Bad_Name", admin.create(SandboxResource, ns, sandboxBody(ns, "Bad_Name", run)))

    // The raw watch has heard the last write (the release of d comes after every other event).
    const heard = yield* waitFor(
      events,
      (all) => all.some((e) => e.type === "DELETED" && (e.object as Sandbox).metadata.name === "dif-d"),
      "the raw watch hearing dif-d go"
    )
    expect(BigInt(heard.at(-1)!.rv)).toBeGreaterThan(BigInt(lastRv))
    const finalList = yield* readTruth(admin.listAll(SandboxResource, Raw, { namespace: ns, labelSelector, limit: 2 }))
    const allTold = yield* all.told
    const told: Record<string, ReadonlyArray<unknown>> = {}
    for (const name of names) told[name] = (yield* recorders[name]!.told).map((t) => toldNormal(t.sandbox))
    const snapshot = yield* watch.snapshot
    // A watch with no resourceVersion starts with a synthetic ADDED for each object there is.
    const initial = yield* admin.watch(SandboxResource, Raw, { namespace: ns, labelSelector, timeoutSeconds: 30 }).pipe(
      Stream.take(finalList.items.length),
      Stream.runCollect
    )
    return {
      // In no promised order: 1.20 serves them from its watch cache's store, a Go map.
      initial: [...initial]
        .map((
          e
        ) => (e.type === "ADDED" || e.type === "MODIFIED" || e.type === "DELETED"
          ? [e.type, e.object.metadata.name, normal(e.object)]
          : [e.type])
        )
        .sort((a, b) => String(a[1]).localeCompare(String(b[1])))
        .map(([type, , object]) => (object === undefined ? [type] : [type, object])),
      answers,
      events: heard.map((e) => [e.type, normal(e.object)] as const),
      told,
      all: allTold.map((t) => [t.name, toldNormal(t.sandbox)] as const),
      list: { items: finalList.items.map(normal), pages: finalList.pages },
      snapshot: [...snapshot.values()].map(normal).sort((a, b) => JSON.stringify(a) < JSON.stringify(b) ? -1 : 1)
    } satisfies Transcript
  })

/**
 * Bookmarks, as watches of `bookmarkRun` from one resourceVersion hear them (each to its timeout):
 * - `quiet`: nothing happens;
 * - `replayed`: after a change to a selected Sandbox, which the watch replays;
 * - `live`: once the watch has replayed that change, another Sandbox (not selected) changes.
 * A bookmark's resourceVersion is written `other` when it is that last change's; consecutive equal
 * lines are written once (how many bookmarks come in a watch's last seconds is the server's timing).
 */
const bookmarks = (admin: KubeClient.KubeClientService, bookmarkRun: string) =>
  Effect.gen(function*() {
    const labelSelector = `jr2.dev/run=${bookmarkRun}`
    const selected = `${bookmarkRun}-in`
    const other = `${bookmarkRun}-out`
    yield* admin.create(SandboxResource, ns, sandboxBody(ns, selected, bookmarkRun))
    yield* admin.create(SandboxResource, ns, sandboxBody(ns, other, `${bookmarkRun}-other`))
    const start = yield* readTruth(admin.list(SandboxResource, Raw, { namespace: ns, labelSelector }))
    const options = (timeoutSeconds: number) => ({
      namespace: ns,
      labelSelector,
      resourceVersion: start.resourceVersion,
      allowWatchBookmarks: true,
      timeoutSeconds
    })
    const setPhase = (name: string, phase: string) =>
      Effect.map(
        admin.mergePatch(SandboxResource, ns, name, { status: { phase } }, { subresource: "status" }),
        versionOf
      )
    const quiet = yield* Stream.runCollect(admin.watch(SandboxResource, Raw, options(3)))
    const changed = yield* setPhase(selected, "Ready")
    const replayed = yield* Stream.runCollect(admin.watch(SandboxResource, Raw, options(3)))
    let otherRv = ""
    // 5 s: the server's bookmarks come in a watch's last 3 s, well after the other change landed.
    const live = yield* admin.watch(SandboxResource, Raw, options(5)).pipe(
      Stream.tap((event) =>
        event.type === "MODIFIED" && event.resourceVersion === changed
          ? Effect.map(setPhase(other, "Elsewhere"), (rv) => {
            otherRv = rv
          })
          : Effect.void
      ),
      Stream.runCollect
    )
    const summary = (events: Iterable<WatchEvent<unknown>>) => {
      const out: Array<string> = []
      for (const e of events) {
        const text = e.type === "BOOKMARK"
          ? `BOOKMARK ${
            e.resourceVersion === otherRv
              ? "other"
              : e.resourceVersion === changed
              ? "changed"
              : e.resourceVersion === start.resourceVersion
              ? "start"
              : e.resourceVersion
          }`
          : e.type === "MODIFIED" || e.type === "ADDED" || e.type === "DELETED"
          ? `${e.type} ${e.resourceVersion === changed ? "changed" : e.resourceVersion}`
          : e.type
        if (out.at(-1) !== text) out.push(text)
      }
      return out
    }
    return { quiet: summary(quiet), replayed: summary(replayed), live: summary(live) }
  })

/** Label selectors in test/LabelSelector.test.ts's rows, each with the Sandboxes below to pick from. */
const selectorRows = [
  "tier=web",
  "tier in (web,db),env!=prod",
  "tier notin (web)",
  "env=in",
  "env in (in,notin)",
  "in=x",
  "!in",
  "a notin (in)",
  "n>9007199254740992",
  "n<9007199254740993",
  "n>-5",
  "n>9223372036854775808",
  "tier in (web,,)",
  "tier in (web,,db)",
  "x nott in (y)",
  "env in prod",
  "a in (xyz),",
  "a in (xyz abc)",
  "x=a||y=b",
  "x<a",
  "a/b/c",
  ",x"
] as const

/** Sandboxes `${run}-…` with labels to select from, then each row's answer: names picked, or the refusal. */
const selections = (admin: KubeClient.KubeClientService, run: string) =>
  Effect.gen(function*() {
    const labelled: ReadonlyArray<[string, Record<string, string>]> = [
      ["web", { tier: "web", env: "prod" }],
      ["db", { tier: "db", env: "in" }],
      ["words", { in: "x", a: "in", env: "notin" }],
      ["big", { n: "9007199254740993" }],
      ["bigger", { n: "9223372036854775808" }]
    ]
    for (const [name, labels] of labelled) {
      const body = sandboxBody(ns, `${run}-${name}`, run)
      yield* admin.create(SandboxResource, ns, {
        ...body,
        metadata: { ...body.metadata, labels: { ...body.metadata.labels, ...labels } }
      })
    }
    const answers: Array<readonly [string, unknown]> = []
    for (const labelSelector of selectorRows) {
      const answer = yield* admin.list(SandboxResource, Raw, { namespace: ns, labelSelector }).pipe(
        Effect.map((list) =>
          list.items.map((i) => i.metadata.name).filter((n) => n.startsWith(`${run}-`)).map((n) =>
            n.slice(run.length + 1)
          )
            .sort()
        ),
        Effect.catchAll((error) => Effect.succeed(refusal(error)))
      )
      answers.push([labelSelector, answer])
    }
    return answers
  })

/**
 * A streaming list of three Sandboxes (`sendInitialEvents`), then one change on the same
 * connection: the events in order (the end bookmark written `END`), or the refusal.
 */
const streamingList = (admin: KubeClient.KubeClientService, run: string) =>
  Effect.gen(function*() {
    const labelSelector = `jr2.dev/run=${run}`
    for (const name of ["c", "a", "b"]) yield* admin.create(SandboxResource, ns, sandboxBody(ns, `${run}-${name}`, run))
    const listed = yield* readTruth(admin.list(SandboxResource, Raw, { namespace: ns, labelSelector }))
    const newest = Math.max(...listed.items.map((i) => Number(i.metadata.resourceVersion)))
    const seen: Array<string> = []
    let changed = false
    const answer = yield* admin.watch(SandboxResource, Raw, {
      namespace: ns,
      labelSelector,
      sendInitialEvents: true,
      resourceVersionMatch: "NotOlderThan",
      allowWatchBookmarks: true,
      timeoutSeconds: 10
    }).pipe(
      Stream.tap((event) => {
        if (event.type === "BOOKMARK") {
          const end = event.annotations[InitialEventsEndAnnotation] === "true"
          seen.push(
            end
              ? `END ${Number(event.resourceVersion) >= newest ? "at or after the objects" : "before them"}`
              : "BOOKMARK"
          )
        } else if (event.type === "ADDED" || event.type === "MODIFIED" || event.type === "DELETED") {
          seen.push(`${event.type} ${event.name.slice(run.length + 1)}`)
        } else seen.push(event.type)
        return event.type === "BOOKMARK" && event.annotations[InitialEventsEndAnnotation] === "true" && !changed
          ? Effect.asVoid(
            admin.mergePatch(SandboxResource, ns, `${run}-a`, { status: { phase: "Ready" } }, { subresource: "status" })
          ).pipe(Effect.tap(() => {
            changed = true
          }))
          : Effect.void
      }),
      Stream.takeUntil((event) => event.type === "MODIFIED"),
      Stream.runDrain,
      Effect.as({ events: seen }),
      Effect.catchAll((error) => Effect.succeed({ refused: refusal(error) }))
    )
    return answer
  })

describe("the simulated API server against the real kube-apiserver", () => {
  it.live(
    "bookmarks: only once something newer than where the watch stands happened to any Sandbox, selected or not",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const context = yield* Layer.build(
          SimulatedApiServer.layerWithKubeConfig({ resource: SandboxResource, namespace: ns })
        )
        const simulatedClient = yield* clientOn(Context.get(context, KubeConfig))
        const realClient = yield* clientOn(Facts.connection(facts))
        const [simulated, real] = yield* Effect.all([
          bookmarks(simulatedClient, "dif-bm"),
          bookmarks(realClient, "dif-bm")
        ], { concurrency: 2 })
        // 1.20's watch cache: a watch stands at its resourceVersion, or at the last event it
        // replayed; a bookmark is only sent when the resource has moved past that.
        expect(real).toEqual({
          quiet: [],
          replayed: ["MODIFIED changed"],
          live: ["MODIFIED changed", "BOOKMARK other"]
        })
        expect(simulated).toEqual(real)
      })),
    60_000
  )

  it.live(
    "label selectors: the same Sandboxes picked and the same refusals, in apimachinery's words",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const context = yield* Layer.build(
          SimulatedApiServer.layerWithKubeConfig({ resource: SandboxResource, namespace: ns })
        )
        const simulated = yield* selections(yield* clientOn(Context.get(context, KubeConfig)), "dif-sel")
        const real = yield* selections(yield* clientOn(Facts.connection(facts)), "dif-sel")
        const picked = (rows: ReadonlyArray<readonly [string, unknown]>) =>
          rows.map(([selector, answer]) =>
            [selector, Array.isArray(answer) ? answer : (answer as { code: number }).code] as const
          )
        // What the real server picked and refused, spelled out.
        expect(picked(real)).toEqual([
          ["tier=web", ["web"]],
          ["tier in (web,db),env!=prod", ["db"]],
          ["tier notin (web)", ["big", "bigger", "db", "words"]],
          ["env=in", ["db"]],
          ["env in (in,notin)", ["db", "words"]],
          ["in=x", ["words"]],
          ["!in", ["big", "bigger", "db", "web"]],
          ["a notin (in)", ["big", "bigger", "db", "web"]],
          // Compared as int64: 2^53 + 1 > 2^53, and a label beyond int64 is no integer at all.
          ["n>9007199254740992", ["big"]],
          ["n<9007199254740993", []],
          ["n>-5", 400],
          ["n>9223372036854775808", 400],
          // 1.20 consumed the second comma of `,,` and then found `)`; 1.37 takes it as the empty value.
          ["tier in (web,,)", facts.minor < 21 ? 400 : ["web"]],
          ["tier in (web,,db)", ["db", "web"]],
          ["x nott in (y)", 400],
          ["env in prod", 400],
          ["a in (xyz),", 400],
          ["a in (xyz abc)", 400],
          ["x=a||y=b", 400],
          ["x<a", 400],
          ["a/b/c", 400],
          [",x", 400]
        ])
        if (facts.minor >= 37) {
          // The simulator speaks apimachinery 0.37's texts, refusals included.
          expect(simulated).toEqual(real)
        } else {
          // 1.20's texts differ where its requirement errors were plain strings (`invalid label
          // value: "…": at key: "…"` for 0.37's `values[0][key]: Invalid value`), so only the picks
          // and the codes are compared.
          expect(picked(simulated)).toEqual(
            picked(real).map(([selector, answer]) =>
              selector === "tier in (web,,)" ? [selector, ["web"]] as const : [selector, answer] as const
            )
          )
        }
      })),
    60_000
  )

  it.live(
    "a streaming list: the same objects, in the same order, the end bookmark, then the watch goes on",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const context = yield* Layer.build(
          SimulatedApiServer.layerWithKubeConfig({ resource: SandboxResource, namespace: ns })
        )
        const simulated = yield* streamingList(yield* clientOn(Context.get(context, KubeConfig)), "dif-stream")
        const real = yield* streamingList(yield* clientOn(Facts.connection(facts)), "dif-stream")
        const streamed = ["ADDED a", "ADDED b", "ADDED c", "END at or after the objects", "MODIFIED a"]
        if (facts.minor >= 37) {
          // Names in key order, the end bookmark at the list's resourceVersion, then the watch.
          expect(real).toEqual({ events: streamed })
          expect(simulated).toEqual(real)
        } else {
          // 1.20 knows no streaming list: resourceVersionMatch is forbidden on a watch (and with
          // no resourceVersion), a 422 the watch takes for "list in pages" (rule 18). The
          // simulator streams, as 1.37 does.
          expect(real).toMatchObject({ refused: { code: 422, reason: "Invalid" } })
          expect((real as { refused: { message: string } }).refused.message).toContain(
            "resourceVersionMatch is forbidden for watch"
          )
          expect(simulated).toEqual({ events: streamed })
        }
      })),
    60_000
  )

  it.live(
    "one script, both servers: the same answers, watch events, things told and final objects",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const simulated = yield* Effect.gen(function*() {
          const context = yield* Layer.build(
            SimulatedApiServer.layerWithKubeConfig({ resource: SandboxResource, namespace: ns })
          )
          const connection = Context.get(context, KubeConfig)
          return yield* script(yield* clientOn(connection), yield* clientOn(connection))
        }).pipe(Effect.scoped)
        const real = yield* Effect.gen(function*() {
          const connection = Facts.connection(facts)
          return yield* script(yield* clientOn(connection), yield* clientOn(connection))
        }).pipe(Effect.scoped)

        // What the real server did, spelled out (so the comparison cannot pass on two wrong answers).
        expect(real.events.map(([type, object]) => `${type} ${(object as Sandbox).metadata.name}`)).toEqual([
          "ADDED dif-a",
          "ADDED dif-b",
          "ADDED dif-c",
          "MODIFIED dif-a",
          "MODIFIED dif-b",
          "MODIFIED dif-a",
          "MODIFIED dif-c",
          "MODIFIED dif-a",
          "DELETED dif-b",
          "DELETED dif-a",
          "ADDED dif-a",
          "ADDED dif-b",
          "MODIFIED dif-b",
          "DELETED dif-c",
          "ADDED dif-d",
          "MODIFIED dif-d",
          "DELETED dif-d"
        ])
        // The final list of two, two a page: the second page is empty (more keys, none selected).
        expect([real.list.items.length, real.list.pages]).toEqual([2, 2])
        expect(real.initial.map(([type, object]) => `${type} ${(object as Sandbox).metadata.name}`)).toEqual([
          "ADDED dif-a",
          "ADDED dif-b"
        ])
        expect(real.told["dif-d"]?.map((t) => (t === "gone" ? t : (t as Sandbox).metadata.deletionTimestamp ?? "-")))
          .toEqual(["gone", "-", "<set>", "gone"])
        expect(
          real.answers.filter((a) => "code" in (a.answer as object)).map((
            a
          ) => [a.step, (a.answer as { code: number }).code])
        ).toEqual([
          ["create a twice", 409],
          ["delete c twice", 404],
          ["patch c, gone", 404],
          ["update a, stale", 409],
          ["create Bad_Name", 422]
        ])

        // And the simulator the same, piece by piece for a readable difference.
        expect.soft(simulated.answers).toEqual(real.answers)
        expect.soft(simulated.events).toEqual(real.events)
        expect.soft(simulated.told).toEqual(real.told)
        expect.soft(simulated.all).toEqual(real.all)
        expect.soft(simulated.list).toEqual(real.list)
        expect.soft(simulated.snapshot).toEqual(real.snapshot)
        expect.soft(simulated.initial).toEqual(real.initial)
      })),
    120_000
  )
})
