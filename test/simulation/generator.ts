/**
 * What a simulation run is made of, and how fast-check draws it: the truth (what the cluster
 * did), what the server does to each request the watch makes, how the fibers are scheduled, and
 * who listens. Everything is data, so fast-check can shrink it, and every shrink is still a valid
 * scenario: truth steps are made effective against the state they meet (`truth.ts`), and a plan
 * means something for any kind of request (`scriptedServer.ts` says what).
 */
import { FastCheck as fc } from "effect"
import type { Phase } from "./truth.ts"
import { Names } from "./truth.ts"

/** How the answer to a request that got a 200 ends, once what it was to send is sent. */
export type Ending =
  /** The server closes the body cleanly. */
  | "close"
  /** The connection is reset mid-body. */
  | "reset"
  /** Nothing more is sent and the body stays open (the watch's idle limit or the body deadline ends it). */
  | "silence"
  /** An `ERROR` event (a watch; a list page is sent whole). */
  | "error410"
  | "error429"
  | "error500"
  /** Half a line, then a close. */
  | "truncated"

/** How a streaming list's initial events end. */
export type EndBookmark =
  /** The bookmark annotated `k8s.io/initial-events-end`, at the list's resourceVersion. */
  | "annotated"
  /** The same with an empty resourceVersion. */
  | "emptyRv"
  /** A bookmark without the annotation (a server that ignored `sendInitialEvents`). */
  | "plain"
  /** No bookmark: the events go on as a plain watch's would. */
  | "none"

export type RequestPlan =
  /** A non-2xx answer to the request itself, with a Kubernetes Status. */
  | {
    readonly _tag: "Status"
    readonly code: 403 | 410 | 429 | 500 | 503 | 504
    /** Seconds, as `Retry-After` and `details.retryAfterSeconds`. */
    readonly retryAfter: number | undefined
    /** A 504 that says "too large resource version" (an apiserver behind its peers). */
    readonly tooLargeResourceVersion: boolean
  }
  /** No answer at all: the connection is reset, or the headers never come. */
  | { readonly _tag: "NoAnswer"; readonly how: "reset" | "hang" }
  /** A 200 whose body is the truth, sent as far as `upTo`, with the flaws named. */
  | {
    readonly _tag: "Answer"
    /** Objects or events sent before the ending; undefined: all of them, then live ones. */
    readonly upTo: number | undefined
    /** How long the answer goes on sending live changes (capped at the watch's timeoutSeconds). */
    readonly liveMs: number
    /** Bookmarks every minute while live. */
    readonly bookmarks: boolean
    /** A bookmark just before the ending. */
    readonly bookmarkBeforeEnd: boolean
    readonly ending: Ending
    readonly endBookmark: EndBookmark
    /** The list is this many changes behind (a lagging apiserver). */
    readonly lagBy: number
    /** The list's (page's, bookmarks') resourceVersion is `""`. */
    readonly emptyResourceVersion: boolean
    /** Names sent twice; a paged list's continue token does not advance. */
    readonly repeatNames: boolean
    /** For an `error429` ending: its `retryAfterSeconds`. */
    readonly retryAfter: number | undefined
    /**
     * 0: what is sent at one instant goes in one read. k > 0: each object, event or ending is its own
     * read, k microtasks after the one before (a streaming list's draft is then checked per object).
     */
    readonly spread: number
  }

export type AnswerPlan = Extract<RequestPlan, { readonly _tag: "Answer" }>

/** The honest answer: everything, live changes until the watch's term, bookmarks, a clean close. */
export const Honest: AnswerPlan = {
  _tag: "Answer",
  upTo: undefined,
  liveMs: Number.POSITIVE_INFINITY,
  bookmarks: true,
  bookmarkBeforeEnd: false,
  ending: "close",
  endBookmark: "annotated",
  lagBy: 0,
  emptyResourceVersion: false,
  repeatNames: false,
  retryAfter: undefined,
  spread: 0
}

/** Plans repeated: `cycle` answers the next requests in turn, `times` over. */
export interface Stretch {
  readonly cycle: ReadonlyArray<RequestPlan>
  readonly times: number
}

/** One step of the truth, `gapMs` after the one before (the initial ones at 0). */
export interface GeneratedStep {
  readonly gapMs: number
  readonly name: number
  readonly kind: "touch" | "delete" | "unlabel"
  readonly phase: Phase
  readonly garbled: boolean
  readonly padBytes: number
  readonly awaited: boolean
}

export interface Scenario {
  readonly listMode: "auto" | "stream" | "paged"
  readonly pageSize: number
  /** The fiber runtime's yield budget (`FiberRef.currentMaxOpsBeforeYield`) for the watch and its readers. */
  readonly maxOpsBeforeYield: number
  /** The client's `maxListItems`. */
  readonly maxListItems: number
  /** Seeds the watch's `Random` (the back-off's jitter). */
  readonly randomSeed: number
  /** Sandboxes there before the watch starts. */
  readonly initial: ReadonlyArray<GeneratedStep>
  readonly steps: ReadonlyArray<GeneratedStep>
  readonly stretches: ReadonlyArray<Stretch>
  readonly readers: ReadonlyArray<ReaderPlan>
  /** How the honest answers' sends are cut into reads (`spread` of a plan): the network's timing. */
  readonly honestSpread: number
  /** Microtasks between an awaited create and its `awaitReady` beginning. */
  readonly waitHops: number
}

/** A reader of the watch: `changes(name)`, or `allChanges` (no name). */
export interface ReaderPlan {
  /** An index into `Names`; undefined: every name (`allChanges`). */
  readonly name: number | undefined
  /**
   * When it subscribes: 0 at the start, k as the server takes the watch's k-th request (a reader
   * that registers while the watch lands that list or applies that watch's first events); a request
   * that never comes, never.
   */
  readonly startsAtRequest: number
  /**
   * Steps of work it does with each value (a reader is rarely idle): with the yield budget, where in
   * its take it yields, and so which interleavings with the watch it meets.
   */
  readonly work: number
}

export interface GeneratorOptions {
  /**
   * Large objects (96 KiB of padding) in the truth, for the byte budget's check; the item budget
   * then holds every name, so that what is found is about bytes.
   */
  readonly largeObjects: boolean
}

const weighted = <A>(...pairs: ReadonlyArray<readonly [number, fc.Arbitrary<A>]>): fc.Arbitrary<A> =>
  fc.oneof(...pairs.map(([weight, arbitrary]) => ({ weight, arbitrary })))

const phase: fc.Arbitrary<Phase> = weighted(
  [4, fc.constant("Pending" as const)],
  [5, fc.constant("Ready" as const)],
  [1, fc.constant("Lost" as const)]
)

const step = (options: GeneratorOptions, gap: fc.Arbitrary<number>): fc.Arbitrary<GeneratedStep> =>
  fc.record({
    gapMs: gap,
    name: fc.nat({ max: Names.length - 1 }),
    kind: weighted(
      [6, fc.constant("touch" as const)],
      [3, fc.constant("delete" as const)],
      [1, fc.constant("unlabel" as const)]
    ),
    phase,
    garbled: weighted([9, fc.constant(false)], [1, fc.constant(true)]),
    padBytes: options.largeObjects
      ? weighted([1, fc.constant(0)], [2, fc.constant(96 * 1024)])
      : fc.constant(0),
    awaited: fc.boolean()
  })

const ending: fc.Arbitrary<Ending> = weighted(
  [6, fc.constant("close" as const)],
  [3, fc.constant("reset" as const)],
  [2, fc.constant("silence" as const)],
  [4, fc.constant("error410" as const)],
  [2, fc.constant("error429" as const)],
  [2, fc.constant("error500" as const)],
  [1, fc.constant("truncated" as const)]
)

const spread = weighted([1, fc.constant(0)], [1, fc.integer({ min: 1, max: 24 })])

const plan: fc.Arbitrary<RequestPlan> = weighted<RequestPlan>(
  [
    11,
    fc.record({
      _tag: fc.constant("Answer" as const),
      upTo: weighted([1, fc.constant(undefined)], [1, fc.nat({ max: 3 })]),
      liveMs: weighted(
        [4, fc.constant(0)],
        [3, fc.integer({ min: 1, max: 120 }).map((s) => s * 1000)],
        [3, fc.constant(Number.POSITIVE_INFINITY)]
      ),
      bookmarks: fc.boolean(),
      bookmarkBeforeEnd: fc.boolean(),
      ending,
      endBookmark: weighted(
        [7, fc.constant("annotated" as const)],
        [1, fc.constant("emptyRv" as const)],
        [1, fc.constant("plain" as const)],
        [1, fc.constant("none" as const)]
      ),
      // A lagging list lands, then the changes since reach the cache at once: two steps in a row,
      // which readers woken by the first may still be busy with.
      lagBy: weighted([1, fc.constant(0)], [1, fc.integer({ min: 1, max: 4 })]),
      emptyResourceVersion: weighted([9, fc.constant(false)], [1, fc.constant(true)]),
      repeatNames: weighted([6, fc.constant(false)], [1, fc.constant(true)]),
      retryAfter: weighted([1, fc.constant(undefined)], [1, fc.nat({ max: 40 })]),
      spread
    })
  ],
  [
    5,
    fc.record({
      _tag: fc.constant("Status" as const),
      code: fc.constantFrom(403 as const, 410 as const, 429 as const, 500 as const, 503 as const, 504 as const),
      retryAfter: weighted([1, fc.constant(undefined)], [1, fc.nat({ max: 40 })]),
      tooLargeResourceVersion: fc.boolean()
    })
  ],
  [
    4,
    fc.record({
      _tag: fc.constant("NoAnswer" as const),
      how: weighted([3, fc.constant("reset" as const)], [1, fc.constant("hang" as const)])
    })
  ]
)

const stretch: fc.Arbitrary<Stretch> = fc.record({
  cycle: fc.array(plan, { minLength: 1, maxLength: 3 }),
  // A server that misbehaves tends to do it again: half the stretches are long.
  times: weighted([1, fc.integer({ min: 1, max: 3 })], [1, fc.integer({ min: 4, max: 60 })])
})

const reader = (startsAtRequest: fc.Arbitrary<number>, work: fc.Arbitrary<number>): fc.Arbitrary<ReaderPlan> =>
  fc.record({
    name: weighted([1, fc.nat({ max: Names.length - 1 })], [1, fc.constant(undefined)]),
    startsAtRequest,
    work
  })

// Small budgets make fibers yield in the middle of what they do, where interleavings hide bugs.
// Below 10, Effect's own runtime livelocks (its yield costs more operations than the budget).
const smallBudget = fc.integer({ min: 10, max: 40 })

/** Any server, any truth, any readers. */
const anyScenario = (options: GeneratorOptions): fc.Arbitrary<Scenario> =>
  fc.record({
    listMode: fc.constantFrom("auto" as const, "stream" as const, "paged" as const),
    pageSize: fc.integer({ min: 1, max: 4 }),
    maxOpsBeforeYield: weighted([1, fc.constant(2048)], [4, smallBudget]),
    // With large objects the byte budget is under test: every name fits the item budget.
    maxListItems: options.largeObjects ? fc.constant(Names.length) : fc.integer({ min: 3, max: 8 }),
    randomSeed: fc.nat(),
    initial: fc.array(step(options, fc.constant(0)), { maxLength: 4 }),
    // At least two seconds apart: the pacing ceilings allow a burst of requests per change heard.
    steps: fc.array(step(options, fc.integer({ min: 2, max: 120 }).map((s) => s * 1000)), { maxLength: 16 }),
    stretches: fc.array(stretch, { maxLength: 6 }),
    readers: fc.array(
      reader(weighted([1, fc.constant(0)], [2, fc.integer({ min: 1, max: 40 })]), fc.nat({ max: 16 })),
      { maxLength: 5 }
    ),
    honestSpread: spread,
    waitHops: weighted([1, fc.constant(0)], [2, fc.integer({ min: 1, max: 60 })])
  })

/**
 * A crowded start: a crowd of readers and waits beginning as the first list lands, lagging, so that
 * the changes since reach the cache right after it: two cache steps in one busy moment, while the
 * readers the first woke are still busy (each with a different amount of work, so that one of them
 * is caught between its look at its mailbox and its sleep). Where a lost wake-up shows; short and
 * cheap (a few changes, an honest server after the first answer), so it can be drawn often.
 */
const crowdedStart = (options: GeneratorOptions): fc.Arbitrary<Scenario> =>
  fc.record({
    listMode: fc.constantFrom("auto" as const, "stream" as const),
    pageSize: fc.integer({ min: 1, max: 4 }),
    maxOpsBeforeYield: smallBudget,
    maxListItems: fc.constant(Names.length),
    randomSeed: fc.nat(),
    initial: fc.array(step(options, fc.constant(0)).map((s) => ({ ...s, awaited: true })), {
      minLength: 2,
      maxLength: 5
    }),
    steps: fc.array(step(options, fc.integer({ min: 2, max: 20 }).map((s) => s * 1000)), { maxLength: 3 }),
    firstLanding: fc.record({ lagBy: fc.integer({ min: 1, max: 4 }), liveMs: fc.integer({ min: 1, max: 60 }) }),
    readers: fc.array(reader(fc.constant(0), fc.nat({ max: 30 })), { minLength: 3, maxLength: 12 }),
    honestSpread: spread,
    waitHops: weighted([1, fc.constant(0)], [2, fc.integer({ min: 1, max: 60 })])
  }).map(({ firstLanding, ...rest }): Scenario => ({
    ...rest,
    stretches: [{ cycle: [{ ...Honest, lagBy: firstLanding.lagBy, liveMs: firstLanding.liveMs * 1000 }], times: 1 }]
  }))

/** Which scenarios to draw: any (half of them crowded starts), or only crowded starts. */
export type Focus = "any" | "crowdedStart"

export const scenario = (options: GeneratorOptions, focus: Focus = "any"): fc.Arbitrary<Scenario> =>
  focus === "crowdedStart"
    ? crowdedStart(options)
    : fc.oneof({ weight: 1, arbitrary: anyScenario(options) }, { weight: 1, arbitrary: crowdedStart(options) })
