/**
 * Who listens to what. Telling a name touches only that name's subscribers and the few
 * whole-namespace ones, so the cost of a change does not grow with subscribers to other names.
 *
 * @internal
 */
import { Effect, type Scope } from "effect"
import { LatestMailbox } from "./LatestMailbox.ts"

export class SubscriberHub<V> {
  private readonly byName = new Map<string, Set<LatestMailbox<string, V>>>()
  private readonly everyName = new Set<LatestMailbox<string, V>>()
  private count = 0

  get subscribers(): number {
    return this.count
  }

  /** Names with at least one subscriber: the ones a reconcile must tell. */
  subscribedNames(): Iterable<string> {
    return this.byName.keys()
  }

  tell(name: string, value: V): void {
    const subscribers = this.byName.get(name)
    if (subscribers !== undefined) for (const mailbox of subscribers) mailbox.put(name, value)
    for (const mailbox of this.everyName) mailbox.put(name, value)
  }

  /** A mailbox for one name, removed when the scope closes. */
  subscribe(name: string): Effect.Effect<LatestMailbox<string, V>, never, Scope.Scope> {
    return Effect.acquireRelease(
      Effect.sync(() => {
        const mailbox = new LatestMailbox<string, V>()
        let set = this.byName.get(name)
        if (set === undefined) this.byName.set(name, (set = new Set()))
        set.add(mailbox)
        this.count++
        return mailbox
      }),
      (mailbox) =>
        Effect.sync(() => {
          const set = this.byName.get(name)
          if (set?.delete(mailbox) === true) {
            this.count--
            if (set.size === 0) this.byName.delete(name)
          }
        })
    )
  }

  /** A mailbox for every name, removed when the scope closes. */
  subscribeAll(): Effect.Effect<LatestMailbox<string, V>, never, Scope.Scope> {
    return Effect.acquireRelease(
      Effect.sync(() => {
        const mailbox = new LatestMailbox<string, V>()
        this.everyName.add(mailbox)
        this.count++
        return mailbox
      }),
      (mailbox) =>
        Effect.sync(() => {
          if (this.everyName.delete(mailbox)) this.count--
        })
    )
  }
}
