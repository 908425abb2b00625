/**
 * Who listens to what. Telling a name touches only that name's subscribers and the few
 * whole-namespace ones, so the cost of a change does not grow with subscribers to other names.
 * Adding and removing are plain calls: a subscription is a mailbox in a set, nothing more, so ten
 * thousand idle ones weigh little beyond the streams that read them.
 *
 * @internal
 */
import { LatestMailbox } from "./latestMailbox.ts"

export class SubscriberHub<V> {
  private readonly byName = new Map<string, Set<LatestMailbox<string, V>>>()
  private readonly everyName = new Set<LatestMailbox<string, V>>()
  private count = 0

  /**
   * `isAbsent`: which values say a name is not there; a whole-namespace mailbox then never hears a
   * name gone that it did not hear present (`LatestMailbox`'s `takenPresent`).
   */
  constructor(private readonly isAbsent?: (value: V) => boolean) {}

  get subscribers(): number {
    return this.count
  }

  /** Names with at least one subscriber: the ones a reconcile must tell. */
  subscribedNames(): Iterable<string> {
    return this.byName.keys()
  }

  /**
   * Puts `value` in every mailbox of `name` and, unless `onlyNamed`, of every name, and adds the ones
   * whose reader waits to `woken`, not waking them: the caller wakes them (`wakeReader`) once its
   * step is over. What is told is in every mailbox when this returns.
   */
  tell(name: string, value: V, woken: Array<LatestMailbox<string, V>>, onlyNamed = false): void {
    const subscribers = this.byName.get(name)
    if (subscribers !== undefined) {
      for (const mailbox of subscribers) if (mailbox.store(name, value)) woken.push(mailbox)
    }
    if (!onlyNamed && this.everyName.size > 0) {
      for (const mailbox of this.everyName) if (mailbox.store(name, value)) woken.push(mailbox)
    }
  }

  /** A new mailbox for one name (`undefined`: every name). Pair with `remove`. */
  add(name: string | undefined): LatestMailbox<string, V> {
    const mailbox = name === undefined
      ? new LatestMailbox<string, V>("many", this.isAbsent)
      : new LatestMailbox<string, V>("one")
    if (name === undefined) {
      this.everyName.add(mailbox)
    } else {
      let set = this.byName.get(name)
      if (set === undefined) this.byName.set(name, set = new Set())
      set.add(mailbox)
    }
    this.count++
    return mailbox
  }

  /** Forgets a mailbox `add` returned; a second call does nothing. */
  remove(name: string | undefined, mailbox: LatestMailbox<string, V>): void {
    if (name === undefined) {
      if (this.everyName.delete(mailbox)) this.count--
      return
    }
    const set = this.byName.get(name)
    if (set?.delete(mailbox) === true) {
      this.count--
      if (set.size === 0) this.byName.delete(name)
    }
  }
}
