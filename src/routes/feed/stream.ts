// The change feed as Server-Sent Events. The stream's first page is read before anything is sent,
// so a pruned cursor still gets its 410 (and a close during that read a 503 shutting-down), then it
// is caught up and kept live by the shared reader (src/feed-hub.ts). What waits for a consumer is
// bounded: a consumer that, when the shared reader has more for it, still has more than
// FEED_STREAM_BUFFER_BYTES to read besides what it was given last (a consumer keeping up may still
// be reading the last page) is disconnected, and resumes with Last-Event-ID where it stopped.
// Catching up, a stream is not cut for its pace: it reads its next page once its consumer has taken
// the last. Live or catching up, a consumer that takes none of what waits for it for
// FEED_STALL_TIMEOUT_MS is disconnected too (a zero TCP window): it would hold a FEED_MAX_STREAMS
// slot for as long as it stays connected.
import { once } from 'node:events'
import type { ServerResponse } from 'node:http'
import { Readable } from 'node:stream'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { cursorEvent, FEED_PAGE_SIZE, HEARTBEAT, RECONNECT_AFTER } from '../../feed-events.js'
import type { EncodedChange, FeedSubscriber } from '../../feed-hub.js'
import { tokenAcceptedUntil } from '../../../plugins/auth/index.js'
import type { OpenStream } from '../../../plugins/feed.js'
import { problems } from '../../problems.js'
import { assertNotPruned } from './pruned.js'
import { endUnanswered } from '../../tracing.js'

const ROOM_CHECK_MS = 100
// On shutdown: how long a stream's last bytes may take to reach its consumer before the
// connection is cut, so that one consumer that stopped reading holds no close up.
const END_GRACE_MS = 1000

class EventStream implements FeedSubscriber, OpenStream {
  // Its buffer is what waits for the consumer beyond the socket's own (Fastify pipes it).
  readonly body = new Readable({ read () {} })
  after: bigint
  closed = false
  /** Whether the stream's first bytes (the retry field) are written: no heartbeat comes before them. */
  #started = false
  /** The cursor the consumer resumes from: its Last-Event-ID (or `after`), then the last id sent. */
  #sentThrough: bigint
  /** Bytes of the last write: a consumer keeping up may still be reading them. */
  #lastWrite = 0
  /** Bytes pushed for the consumer since the start. */
  #pushed = 0
  /** The most bytes the consumer was seen to have taken, at a heartbeat, and since when. */
  #taken = 0
  #takenSince = Date.now()
  /** The wait for room under way, if any: the stream's close ends it. */
  #roomWait: AbortController | undefined
  /** Whether it was ended before it started (the service closing during its first read): nothing was sent. */
  endedEarly = false
  /** Settles when it is ended before it started: the handler answers 503 then, without waiting for the read. */
  readonly endedBeforeStart: Promise<undefined>
  #endBeforeStart: () => void = () => {}

  constructor (
    readonly resourceId: string | undefined,
    after: string | undefined,
    private readonly response: ServerResponse,
    private readonly bufferBytes: number,
    private readonly stallTimeoutMs: number,
    /** When the token that opened the stream stops being accepted (ms since the epoch). */
    private readonly acceptedUntil: number,
    private readonly onTooSlow: (reason: 'behind' | 'stalled') => void,
    private readonly onPruned: (prunedThrough: bigint) => void,
    private readonly onExpired: () => void
  ) {
    this.after = this.#sentThrough = after === undefined ? -1n : BigInt(after)
    this.endedBeforeStart = new Promise((resolve) => { this.#endBeforeStart = () => resolve(undefined) })
  }

  /** Bytes written for the consumer and not yet taken by it (beyond the kernel's socket buffer). */
  get waiting (): number {
    // Stryker disable next-line ArithmeticOperator: piped, the body holds the bytes once the response's own buffer (16 KiB) is full: - shifts the measure by twice that, which no bound or step of the kernel's can tell
    return this.body.readableLength + this.response.writableLength
  }

  write (changes: readonly EncodedChange[], live: boolean): void {
    if (live && this.#fallenBehind()) return
    this.#lastWrite = 0
    for (const { id, bytes } of changes) {
      this.#push(bytes)
      this.#lastWrite += bytes.length
      this.#sentThrough = id
    }
  }

  // Only on an idle stream: one with bytes still waiting is not idle to a gateway. There the tick
  // checks that the consumer took some of them within the stall timeout. Not before the stream has
  // started (the tick may come while its first page is still being read), nor once it is ending or
  // its connection is (a consumer gone is not one that stopped reading).
  heartbeat (): void {
    if (!this.#started || this.closed || this.response.destroyed) return
    const now = Date.now()
    // Checked as a request would be: a stream lives no longer than the token that opened it. It
    // ends cleanly, and its consumer resumes with Last-Event-ID and a token that is still good.
    // Stryker disable next-line EqualityOperator: at the very millisecond of expiry, > ends the stream one heartbeat later: timing only
    if (now >= this.acceptedUntil) {
      this.onExpired()
      this.end()
      return
    }
    const waiting = this.waiting
    // What the socket handed to the kernel. The response's own framing (its head, chunk sizes)
    // counts in `waiting` and not in #pushed, so this may dip: only a new high is progress. The
    // kernel lets more in only once a third of its buffer is free, so progress comes in steps.
    const taken = this.#pushed - waiting
    // With nothing waiting, taken is every byte pushed: always a new high, since each tick before
    // either saw bytes waiting or pushed a heartbeat (and the first follows the retry field).
    if (taken > this.#taken) {
      this.#taken = taken
      this.#takenSince = now
      // With bytes waiting, a heartbeat would only queue behind them (`true` here survives mutation
      // testing: an event stream's comments are ignored, and no test weighs a backlog's bytes). Not
      // marked: a mark would also hide `false`, which sends none at all.
      if (waiting === 0) {
        this.#push(HEARTBEAT)
        this.#giveCursor()
      }
    // At exactly the timeout since the last progress, > would cut one heartbeat later: timing
    // only, a survivor of mutation testing. Not marked: a mark would also hide `<`, which cuts
    // every stream at once.
    } else if (now - this.#takenSince >= this.stallTimeoutMs) {
      // Stryker disable next-line StringLiteral: onTooSlow tells only 'behind' apart, so any other reason is counted and logged as stalled alike
      this.#cut('stalled')
    }
  }

  start (): void {
    this.#started = true
    this.#push(RECONNECT_AFTER)
  }

  /** Resolves once the consumer has taken at least half of what waits for it, or the stream closed. */
  async room (): Promise<void> {
    // Stryker disable next-line EqualityOperator: with exactly half the bound waiting, >= reads the next page one check later: timing only
    while (!this.closed && this.waiting > this.bufferBytes / 2) {
      // 'drain' comes only after a write the socket refused; the timer covers bytes it took. Each
      // wait leaves nothing behind when it ends (its listeners, its timer): a consumer that takes
      // nothing for hours would otherwise gather them every check.
      const wait = this.#roomWait = new AbortController()
      const timer = setTimeout(() => wait.abort(), ROOM_CHECK_MS)
      // Stryker disable next-line StringLiteral: equivalent but for timing: waiting for no event, the timer checks again within ROOM_CHECK_MS
      await once(this.response, 'drain', { signal: wait.signal }).catch(() => {})
      clearTimeout(timer)
      this.#roomWait = undefined
    }
  }

  /**
   * One resource's stream: every change of it up to its cursor was sent, and other resources'
   * changes moved the cursor on. Its consumer resumes from there, not from its last event: the
   * prune mark is one for the whole feed, and a prune of those other changes would answer it 410
   * for nothing. Without a filter, nothing lies between the last event and the cursor, but a
   * stream opened without a cursor that has sent nothing (an empty feed) has given its consumer no
   * id: it would come back without one, from the oldest change kept, past changes recorded since
   * and pruned before it came back, without a 410 (as a page's link, from no cursor, goes on from
   * the horizon). It is given the cursor once. Given on an idle heartbeat, and last when the
   * stream ends.
   */
  #giveCursor (): void {
    if ((this.resourceId !== undefined || this.#sentThrough === -1n) && this.after > this.#sentThrough) {
      this.#sentThrough = this.after
      this.#push(cursorEvent(this.after))
    }
  }

  /**
   * Ends the stream after what is written, its cursor last; a consumer that does not take it
   * within a second is cut. Before it started, nothing is written: its handler answers 503
   * shutting-down instead.
   */
  end (): void {
    // Stryker disable next-line ConditionalExpression: equivalent: a stream closed before it started was counted out at its consumer's close and is never ended; a started one ended again pushes an EOF that Readable ignores and arms a timer that does what the first does
    if (this.closed) return
    // Before it started its cursor has not moved (the hub moves it from its first page on): none.
    this.#giveCursor()
    this.#close()
    if (!this.#started) {
      // Stryker disable next-line BooleanLiteral: practically unobservable: the flag counts only when the first read settles in the same turn of microtasks as this end, before its handler resumes
      this.endedEarly = true
      this.#endBeforeStart()
      return
    }
    this.body.push(null)
    // Stryker disable next-line ConditionalExpression: equivalent: a response that finished has handed its socket back (Node detaches it on 'finish'), so destroying it then cuts nothing
    setTimeout(() => { if (!this.response.writableFinished) this.response.destroy() }, END_GRACE_MS).unref()
  }

  /** The other side went away, or the stream was ended: nothing more is written. */
  #close (): void {
    this.closed = true
    this.#roomWait?.abort()
  }

  #push (bytes: Buffer): void {
    // Stryker disable next-line ConditionalExpression: equivalent: its callers stop at a closed stream first (a heartbeat, a live write, the hub between reads), but for the start of one whose consumer left during the first read, whose body goes nowhere
    if (this.closed) return
    this.body.push(bytes)
    this.#pushed += bytes.length
  }

  // A consumer too slow to take what is written is cut off rather than buffered for without bound:
  // what waits for it is at most the bound plus two writes.
  #fallenBehind (): boolean {
    // Stryker disable next-line ConditionalExpression,BooleanLiteral: practically unobservable: an ended stream stays live only until its response closes (END_GRACE_MS at most), and differs then only if a live write finds more than the bound and the last write waiting: it is counted as cut and destroyed at once instead of ended within the grace
    if (this.closed) return true
    // Stryker disable next-line EqualityOperator: a one-byte shift of the bound, which no consumer can tell with socket buffers of unknown size
    if (this.waiting <= this.bufferBytes + this.#lastWrite) return false
    this.#cut('behind')
    // Stryker disable next-line BooleanLiteral: equivalent: the cut closed the stream, and a closed stream's write pushes nothing (#push)
    return true
  }

  #cut (reason: 'behind' | 'stalled'): void {
    this.#close()
    this.onTooSlow(reason)
    this.response.destroy()
  }

  // The consumer resumes with Last-Event-ID, below the mark, and is answered 410 changes-pruned.
  missed (prunedThrough: bigint): void {
    this.onPruned(prunedThrough)
    this.end()
  }

  closedByPeer (): void {
    this.#close()
  }
}

export interface StreamRequest {
  /** Changes after this id; Last-Event-ID when given, else `after`. */
  after?: string
  resourceId?: string
}

/** Answers a feed request with a stream of its changes, from its cursor on. */
export async function streamFeed (fastify: FastifyInstance, request: FastifyRequest, reply: FastifyReply, { after, resourceId }: StreamRequest) {
  const { feed, config } = fastify
  const stream = new EventStream(resourceId, after, reply.raw, config.FEED_STREAM_BUFFER_BYTES, config.FEED_STALL_TIMEOUT_MS,
    tokenAcceptedUntil(request),
    (reason) => {
      feed.tooSlow()
      if (reason === 'behind') {
        request.log.info({ after: String(stream.after), bufferBytes: config.FEED_STREAM_BUFFER_BYTES }, 'change feed: consumer too slow, disconnected')
      } else {
        request.log.info({ after: String(stream.after), waiting: stream.waiting, stallTimeoutMs: config.FEED_STALL_TIMEOUT_MS },
          'change feed: consumer stopped reading, disconnected')
      }
    },
    (prunedThrough) => {
      request.log.info({ after: String(stream.after), prunedThrough: String(prunedThrough) },
        'change feed: changes the stream had yet to send were pruned; ended (resuming, the consumer gets 410)')
    },
    () => {
      request.log.info({ after: String(stream.after) }, 'change feed: the token that opened the stream expired; ended (the consumer resumes with a fresh one)')
    })
  feed.admit(stream)
  // Before anything is awaited: a consumer gone during the first read is counted out too. One
  // gone before the handler ran (during an awaited hook) has had its 'close' already.
  const gone = () => {
    stream.closedByPeer()
    feed.hub.unfollow(stream)
    feed.release(stream)
  }
  if (reply.raw.destroyed) {
    gone()
    // Nothing is sent: no hook of the answer runs, and the request's span is ended here.
    endUnanswered(request)
    return reply
  }
  reply.raw.once('close', gone)
  let page
  try {
    const reading = feed.read({ after, limit: FEED_PAGE_SIZE, resourceId })
    // A close during the read answers at once, as any request during the close: no empty 200, no
    // connection cut a second later, and no close held up. The read left behind may still fail.
    reading.catch(() => {})
    page = await Promise.race([reading, stream.endedBeforeStart])
    if (page === undefined || stream.endedEarly) throw problems.shuttingDown()
    assertNotPruned(after, page)
  } catch (error) {
    feed.release(stream)
    throw error
  }
  stream.start()
  feed.hub.follow(stream, page).catch((error: unknown) => {
    request.log.warn({ err: error }, 'change feed: catching a stream up failed; ending it (the consumer resumes with Last-Event-ID)')
    stream.end()
  })
  // Its time is how long its consumer stays, not a latency: kept out of the request histogram.
  fastify.unmeasured(request)
  reply.header('content-type', 'text/event-stream; charset=utf-8')
    // Every event is new: nothing on the way may keep or hold it back.
    .header('cache-control', 'no-store')
    .header('x-accel-buffering', 'no')
  return reply.send(stream.body)
}
