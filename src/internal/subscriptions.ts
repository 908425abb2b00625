/**
 * What subscribers see: `changes`, `allChanges` and `waitFor`, each a mailbox of the hub read
 * until its reader stops. A mailbox is registered under the cache's lock, so no change can slip
 * between the value it starts from and what it is told; the cache-and-tell step
 * (`cacheSteps.ts`) fills it.
 *
 * @internal
 */
import { Channel, Chunk, Effect, HashMap, Metric, Option, Stream, SubscriptionRef } from "effect"
import type { Sandbox } from "../Sandbox.ts"
import type { CacheRef, SandboxHub, SandboxMailbox } from "./cacheSteps.ts"
import type * as SandboxCache from "./sandboxCache.ts"
import { metrics } from "./watchMetrics.ts"

/** One name's new state (`SandboxChange` of `SandboxWatch.ts`). */
export interface NamedChange {
  readonly name: string
  readonly sandbox: Option.Option<Sandbox>
}

export interface Subscriptions {
  readonly changes: (name: string) => Stream.Stream<Option.Option<Sandbox>>
  readonly allChanges: Stream.Stream<NamedChange>
  readonly waitFor: <A, E, R>(
    name: string,
    step: (value: Option.Option<Sandbox>) => Effect.Effect<Option.Option<A>, E, R>
  ) => Effect.Effect<A, E, R>
}

const valueOf = (_name: string, sandbox: Option.Option<Sandbox>) => sandbox

/** What a new mailbox is told first, once the cache is synced. */
type Initial = (mailbox: SandboxMailbox, current: SandboxCache.SandboxCache) => void

/** What the cache holds for `name`; nothing for a name that is unknown (rule 13). */
const tellCurrent = (name: string): Initial => (mailbox, current) => {
  if (!HashMap.has(current.unknown, name)) mailbox.put(name, current.objects.getOption(name))
}

const tellEveryCached: Initial = (mailbox, current) => {
  for (const [name, sandbox] of current.objects) mailbox.put(name, Option.some(sandbox))
}

export const makeSubscriptions = (cache: CacheRef, hub: SandboxHub): Subscriptions => {
  const updateSubscriberGauge = Effect.suspend(() => Metric.set(metrics.subscribers, hub.subscribers))

  /**
   * A new mailbox for `name` (`undefined`: every name), registered under the cache's lock so no
   * change can slip between "the current value" and "told"; once synced, `initial` puts what
   * the cache holds now.
   */
  const register = (
    name: string | undefined,
    initial: Initial,
    recorded?: (mailbox: SandboxMailbox) => void
  ) =>
    SubscriptionRef.modify(cache, (current) => {
      const mailbox = hub.add(name)
      recorded?.(mailbox)
      if (current.synced) initial(mailbox, current)
      return [mailbox, current] as const
    }).pipe(Effect.zipLeft(updateSubscriberGauge))

  const unregister = (name: string | undefined, mailbox: SandboxMailbox) =>
    Effect.suspend(() => {
      hub.remove(name, mailbox)
      return updateSubscriberGauge
    })

  /**
   * A subscription is one channel that loops on its mailbox: each wake writes what is pending as
   * one chunk. Its first pull registers; its end unregisters. A channel, not
   * `Stream.repeatEffectChunk`, whose every element also passes an `Option` error mapping, a
   * `catchAll` and an `unwrap` (`scratchpad/allocations.ts`); and no scoped acquire, which would add
   * a scope and channel layers to every subscription.
   */
  const subscription = <A>(
    name: string | undefined,
    initial: Initial,
    present: (name: string, sandbox: Option.Option<Sandbox>) => A
  ): Stream.Stream<A> =>
    Stream.suspend(() => {
      let mailbox: SandboxMailbox | undefined
      // The mailbox is recorded for the finalizer in the same synchronous step that registers it
      // (inside the cache's lock): no interrupt can fall between, or it would stay told for ever.
      // (An uninterruptible region around the first pull did the same, but measurably made every
      // later resume of the watch keep more memory.)
      const registerOnce = register(name, initial, (registered) => {
        mailbox = registered
      })
      // Each wake's step is made new, not one loop built once and re-entered: the bench's fanout row
      // (100 subscribers on the hot names) runs faster so on Node 20, and no slower on Node 22 beyond
      // its spread, for ~0.4 KB more per wake (`scratchpad/wakeCost.ts`, rows `changes`, `builtOnce`).
      const loopOn = (take: Effect.Effect<Chunk.Chunk<A>>): Channel.Channel<Chunk.Chunk<A>> => {
        const next = (): Channel.Channel<Chunk.Chunk<A>> =>
          Channel.flatMap(Channel.fromEffect(take), (pending) => Channel.flatMap(Channel.write(pending), next))
        return next()
      }
      return Stream.fromChannel(
        Channel.flatMap(Channel.fromEffect(registerOnce), (registered) => loopOn(registered.taker(present)))
      ).pipe(
        Stream.ensuring(Effect.suspend(() => (mailbox === undefined ? Effect.void : unregister(name, mailbox))))
      )
    })

  const waitFor = <A, E, R>(
    name: string,
    step: (value: Option.Option<Sandbox>) => Effect.Effect<Option.Option<A>, E, R>
  ): Effect.Effect<A, E, R> =>
    Effect.acquireUseRelease(
      register(name, tellCurrent(name)),
      (mailbox) => {
        const take = mailbox.taker(valueOf)
        return Effect.gen(function*() {
          for (;;) {
            for (const value of yield* take) {
              const answer = yield* step(value)
              if (Option.isSome(answer)) return answer.value
            }
          }
        })
      },
      (mailbox) => unregister(name, mailbox)
    )

  return {
    changes: (name) => subscription(name, tellCurrent(name), valueOf),
    allChanges: subscription(undefined, tellEveryCached, (name, sandbox): NamedChange => ({ name, sandbox })),
    waitFor
  }
}
