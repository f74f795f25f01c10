// The change feed's streams on one instance share one reader: whatever the number of consumers, a
// change costs one read of the table and one encoding, written to each. A new stream first catches
// up from its own cursor with reads of its own, at its own pace, then joins the shared reader.
//
// The invariant: every live subscriber has been given every change (of its resource) up to its
// `after`, and the shared reader reads from `#after`, which is never above any live subscriber's.
// So a change read once reaches every live subscriber exactly once, and none is skipped. What is
// final comes from the table alone (db/queries/feed.ts: the horizon); notifications only wake it.
// A subscriber whose cursor a prune has passed (changes it was not given are gone) is given nothing
// more: it ends, and its consumer, resuming, is told so (410 changes-pruned).
import type { FeedChange, FeedInput, FeedPage } from '../db/queries/feed.js'

/** A change encoded once, for every subscriber it goes to. */
export interface EncodedChange { id: bigint, resourceId: string, bytes: Buffer }

export interface FeedSubscriber {
  readonly resourceId?: string
  /** Every change (of its resource) with an id up to this one has been given to it; -1n: none yet. */
  after: bigint
  readonly closed: boolean
  /**
   * Writes the changes, in order. Live (from the shared reader, which waits for nobody), it may
   * close the subscriber instead, when its consumer has not kept up; catching up, it waits for
   * room before the next read.
   */
  write: (changes: readonly EncodedChange[], live: boolean) => void
  /** Resolves when the consumer has room for more (or the subscriber closed). */
  room: () => Promise<void>
  /** Changes after its cursor, through `prunedThrough`, were pruned before it was given them: it closes. */
  missed: (prunedThrough: bigint) => void
}

export interface FeedHubOptions {
  read: (input: FeedInput) => Promise<FeedPage>
  encode: (change: FeedChange) => Buffer
  /** Changes per read. */
  pageSize: number
  /** While changes wait behind an older transaction, how soon to look again (doubling to pollMs). */
  heldBackRetryMs: number
  /** A read at least this often while anyone listens: a notification lost (a listening connection down) delays a change by no more. */
  pollMs: number
  onError: (error: unknown) => void
}

// A cursor as the read takes it; -1n (nothing given yet) reads from the oldest kept: every id is above it.
const after = (id: bigint) => String(id)
const prunedThrough = (page: FeedPage) => page.prunedThrough === undefined ? undefined : BigInt(page.prunedThrough)

export class FeedHub {
  readonly #options: FeedHubOptions
  readonly #live = new Set<FeedSubscriber>()
  /** Where the shared reader reads from; undefined while nobody is live. */
  #after: bigint | undefined
  #reading = false
  // Stryker disable next-line BooleanLiteral: read only after #readLoop has set it
  #again = false
  #retryMs: number
  #retry: NodeJS.Timeout | undefined
  readonly #poll: NodeJS.Timeout

  constructor (options: FeedHubOptions) {
    this.#options = options
    this.#retryMs = options.heldBackRetryMs
    this.#poll = setInterval(() => this.wake(), options.pollMs).unref()
  }

  #encode (changes: readonly FeedChange[]): EncodedChange[] {
    return changes.map((change) => ({ id: BigInt(change.id), resourceId: change.resourceId, bytes: this.#options.encode(change) }))
  }

  /**
   * Gives a subscriber the page already read for it, catches it up from there, then makes it live.
   * Resolves once it is live or closed; rejects when a read fails (the subscriber should close).
   */
  async follow (subscriber: FeedSubscriber, page: FeedPage): Promise<void> {
    for (;;) {
      this.#deliver(subscriber, this.#encode(page.changes), this.#readThrough(page), false, prunedThrough(page))
      if (subscriber.closed) return
      // Live writes wait for nobody: a consumer joins them only once it has taken what it was given.
      await subscriber.room()
      if (subscriber.closed) return
      // Everything up to the subscriber's cursor given, and the shared reader no further along:
      // from here the shared reader's changes are all it needs.
      if (page.changes.length < this.#options.pageSize && (this.#after === undefined || subscriber.after >= this.#after)) {
        this.#after ??= subscriber.after
        this.#live.add(subscriber)
        // A notification that came while nobody was live woke nothing.
        this.wake()
        return
      }
      page = await this.#options.read({ after: after(subscriber.after), limit: this.#options.pageSize, resourceId: subscriber.resourceId })
      if (subscriber.closed) return
    }
  }

  unfollow (subscriber: FeedSubscriber): void {
    this.#live.delete(subscriber)
    if (this.#live.size === 0) this.#after = undefined
  }

  /** Something may have changed (a notification, a timer): read, unless a read is under way. */
  wake (): void {
    if (this.#live.size === 0) return
    if (this.#reading) {
      this.#again = true
      return
    }
    this.#readLoop()
  }

  close (): void {
    clearInterval(this.#poll)
    clearTimeout(this.#retry)
    this.#live.clear()
    this.#after = undefined
  }

  async #readLoop (): Promise<void> {
    this.#reading = true
    clearTimeout(this.#retry)
    this.#retry = undefined
    try {
      do {
        this.#again = false
        const from = this.#after!
        const page = await this.#options.read({ after: after(from), limit: this.#options.pageSize })
        if (this.#live.size === 0) {
          this.#after = undefined
          return
        }
        // Everyone left while it read, and someone joined from further back: the page starts too
        // late for them. Read again from where they are.
        if (this.#after !== from) {
          this.#again = true
          continue
        }
        const through = this.#readThrough(page)
        const changes = this.#encode(page.changes)
        const pruned = prunedThrough(page)
        for (const subscriber of this.#live) {
          this.#deliver(subscriber, changes, through, true, pruned)
          if (subscriber.closed) this.#live.delete(subscriber)
        }
        if (this.#live.size === 0) {
          this.#after = undefined
          return
        }
        // Where the reader has read to, back too: a subscriber may have joined with a cursor past
        // every change (after=999999999999999999 is a valid one), and the reader is never to stay
        // above a live subscriber's cursor; nothing is given twice, each is given from its own.
        this.#after = through
        if (page.changes.length === this.#options.pageSize) this.#again = true
        else if (page.heldBack) this.#retryLater()
        else this.#retryMs = this.#options.heldBackRetryMs
      } while (this.#again)
    } catch (error) {
      this.#options.onError(error)
      this.#retryLater()
    } finally {
      this.#reading = false
    }
  }

  // Looks again soon, then less often: a change held back waits for a transaction that may
  // announce nothing when it ends (it may have written elsewhere), and a failed read for a
  // database that may take a while to return.
  #retryLater (): void {
    // Stryker disable next-line ConditionalExpression: equivalent but for timing: a second timer only wakes the reader once more, and doubles the pause sooner
    if (this.#retry !== undefined) return
    this.#retry = setTimeout(() => {
      this.#retry = undefined
      this.wake()
    }, this.#retryMs).unref()
    this.#retryMs = Math.min(this.#retryMs * 2, this.#options.pollMs)
  }

  // How far a page has been read: to its last change when full (more may follow), else to just
  // below the horizon (every change below it is final, and was on the page or before it).
  #readThrough (page: FeedPage): bigint {
    return page.changes.length === this.#options.pageSize ? BigInt(page.changes.at(-1)!.id) : BigInt(page.horizon) - 1n
  }

  #deliver (subscriber: FeedSubscriber, changes: readonly EncodedChange[], through: bigint, live: boolean, pruned: bigint | undefined): void {
    const { after: cursor, resourceId } = subscriber
    // Its cursor passed by a prune while it waited to catch up, or before the shared reader read a
    // change written with an old time: the page starts after changes it will never be given. (No
    // cursor yet: its first page is the oldest kept, whatever was pruned before.)
    // Stryker disable next-line ConditionalExpression: equivalent (the survivor, pruned !== undefined made true): with no mark, cursor < undefined is false
    if (pruned !== undefined && cursor !== -1n && cursor < pruned) {
      subscriber.missed(pruned)
      return
    }
    const due = changes.filter((change) => change.id > cursor && (resourceId === undefined || change.resourceId === resourceId))
    if (due.length > 0) subscriber.write(due, live)
    // Stryker disable next-line EqualityOperator: equivalent: when equal, the assignment changes nothing
    if (through > subscriber.after) subscriber.after = through
  }
}
