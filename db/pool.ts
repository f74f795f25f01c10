// The service's pg Pool: a bounded wait for a connection, server-side session settings sent with
// each new connection, and a memory of the database's last sign of life, so that a request that
// cannot get a connection in time is told apart: the pool is busy (overload) or the database
// cannot be reached (outage). https://node-postgres.com/apis/pool
import { EventEmitter, once } from 'node:events'
import { performance } from 'node:perf_hooks'
import { type Context, context, ROOT_CONTEXT } from '@opentelemetry/api'
import pg from 'pg'
import { afterIo, deadline } from './after-io.js'
import { ConnectionWaitTimeout, DatabaseUnreachable, isDatabaseUnavailable, isPoolerQueueWaitExpired, markQueueWaitWhileUnreachable } from './errors.js'

export interface DatabasePoolOptions {
  connectionString: string
  max: number
  /**
   * How long a request may wait for a connection (a free pooled one, or a new one) before it
   * fails: with ConnectionWaitTimeout while the database answers, else as unreachable.
   */
  connectionWaitMs: number
  /** Client-side bound on a query the server does not answer at all (a hung server). */
  queryTimeoutMs: number
  /**
   * Session settings (GUCs) sent in each connection's startup packet: no round trip, and nothing
   * left on a shared server connection. Leave empty behind a transaction pooler (PgBouncer refuses
   * startup parameters): put them on the database role instead.
   */
  settings?: Record<string, string | number>
  /** How long an idle connection is kept; 0 keeps it (pg-pool's default is 10 s). */
  idleTimeoutMs?: number
  /**
   * Connected through a transaction pooler (PgBouncer): a connection made is the pooler's answer,
   * given whether or not the database can be reached.
   */
  pooler?: boolean
}

// pg-pool's words when a queued request's wait runs out (a new connection that times out says
// "Connection terminated due to connection timeout" instead).
const QUEUE_WAIT_EXPIRED = 'timeout exceeded when trying to connect'
const NEW_CONNECTION_TIMED_OUT = 'Connection terminated due to connection timeout'

type ConnectCallback = (err: Error | undefined, client: pg.PoolClient | undefined, done: (release?: unknown) => void) => void

/**
 * pg's Client, its queries bounded by its pool (queryTimeoutMs) rather than by pg's query_timeout,
 * which arms a timer and a closure for every query: measured, most of the pool's cost per request
 * (docs/performance.md, the ladder). A query notes when the client began waiting for answers; the
 * pool's one sweep ends a client that has waited past the bound.
 */
class BoundedClient extends pg.Client {
  /** performance.now() when the queries now pending were sent (the first of them); -1: none pending. */
  pendingSince = -1
  /**
   * The trace context of whoever checked the client out, while they hold it: their statements' spans
   * go under it (instrumentation-pg reads the active context). Tracing keeps no context across
   * awaits (src/tracing.ts): the client carries it instead. Undefined untraced.
   */
  traceContext: Context | undefined

  constructor (config?: string | pg.ClientConfig) {
    super(config)
    // Every query sent has been answered (pg says so once its queue is empty).
    EventEmitter.prototype.on.call(this, 'drain', () => { this.pendingSince = -1 })
  }
}
const sendQuery = pg.Client.prototype.query as (this: pg.Client, ...args: unknown[]) => unknown
// pg's query() has many overloads; this one only notes the time, after pg took the query. A client
// with nothing in flight starts the clock again even before its 'drain': pg-pool hands a client
// that has just answered to the next waiter, who sends its query within that answer's callback.
// A client checked out untraced (undefined: ROOT) may still be handed over inside another request's
// statement's callback (pg-pool gives a released client to the next waiter there), whose context
// is then the active one: its statements are sent in its own context, not in that one.
BoundedClient.prototype.query = function query (this: BoundedClient & { readyForQuery: boolean }, ...args: unknown[]) {
  const idle = this.readyForQuery
  const traced = this.traceContext ?? ROOT_CONTEXT
  const result = traced === context.active() ? sendQuery.apply(this, args) : context.with(traced, sendQuery, this, ...args)
  if (idle || this.pendingSince < 0) this.pendingSince = performance.now()
  return result
} as typeof pg.Client.prototype.query

/** How often a pool looks for unanswered queries: a tenth of the bound, within 10 ms and 1 s (a query is ended at most that late). */
export const sweepIntervalOf = (queryTimeoutMs: number): number => Math.min(1000, Math.max(10, queryTimeoutMs / 10))

export class DatabasePool extends pg.Pool {
  /** performance.now() when the database last answered: a connection made or a query answered. */
  lastAnsweredAt = -Infinity
  /** performance.now() when the database was last found unreachable. */
  lastUnreachableAt = -Infinity
  readonly #connectionWaitMs: number
  readonly #clients = new Set<BoundedClient>()
  readonly #sweep: NodeJS.Timeout | undefined

  constructor ({ connectionString, max, connectionWaitMs, queryTimeoutMs, settings = {}, idleTimeoutMs = 10_000, pooler = false }: DatabasePoolOptions) {
    const options = Object.entries(settings).map(([name, value]) => `-c ${name}=${value}`).join(' ')
    super({
      connectionString,
      max,
      connectionTimeoutMillis: connectionWaitMs,
      // pg's Pool builds its clients as `new Client(options)`.
      Client: BoundedClient as unknown as new () => pg.ClientBase,
      idleTimeoutMillis: idleTimeoutMs,
      ...(options ? { options } : {})
    })
    this.#connectionWaitMs = connectionWaitMs
    if (queryTimeoutMs > 0) {
      this.on('connect', (client) => this.#clients.add(client as unknown as BoundedClient))
      this.on('remove', (client) => this.#clients.delete(client as unknown as BoundedClient))
      this.#sweep = setInterval(() => this.#endUnanswered(queryTimeoutMs), sweepIntervalOf(queryTimeoutMs))
      this.#sweep.unref()
    }
    // A pooler logs a client in while the database is gone (PgBouncer answers it with the server
    // settings it keeps): behind one, only a statement answered is the database answering.
    if (!pooler) this.on('connect', () => this.#answered())
    this.on('release', (error: Error | undefined, client: pg.PoolClient) => {
      (client as unknown as BoundedClient).traceContext = undefined
      if (!error) this.#answered()
      // Before any DatabaseError is taken for an answer: a server shutting down also answers with
      // one (57P01), and so does PgBouncer when it cannot reach the server (server_login_retry).
      else if (isDatabaseUnavailable(error)) this.lastUnreachableAt = performance.now()
      // PgBouncer's queue wait that ran out (query_wait_timeout) is overload while the database
      // answers, as pg-pool's own wait is (#classify), but an outage when the latest sign was that
      // it cannot be reached: PgBouncer says the same to a client queued when the server went away.
      // Told here, which the error passes before its caller gets it (pg-pool releases first).
      else if (isPoolerQueueWaitExpired(error)) {
        if (this.unreachable) markQueueWaitWhileUnreachable(error)
      // Neither is an answer of the database's. Any other DatabaseError is (a constraint, a cancelled statement).
      } else if (error instanceof pg.DatabaseError) this.#answered()
    })
  }

  /**
   * Ends each client whose queries have gone unanswered past `bound` (a server that answers
   * nothing: frozen, or cut off; a slow statement is cancelled by the server's statement_timeout
   * first). pg's end() destroys the socket of a client with a query pending, which fails with
   * "Connection terminated" (an outage to db/errors.ts) without an 'error' event, and the pool
   * drops the client when it is released.
   */
  #endUnanswered (bound: number): void {
    const now = performance.now()
    for (const client of this.#clients) {
      // Stryker disable next-line EqualityOperator: equivalent: pendingSince is -1 or a performance.now() taken after the process started (never 0), and a wait of exactly `bound` to the fraction of a ms is no case a test can make
      if (client.pendingSince >= 0 && now - client.pendingSince > bound) {
        const since = client.pendingSince
        // Once what has arrived is read (afterIo): past a stall of the event loop, the sweep runs
        // before the answer that reached the socket meanwhile, which would be taken for none.
        afterIo(() => {
          if (client.pendingSince !== since) return
          client.pendingSince = -1
          client.end().catch(() => {})
        })
      }
    }
  }

  override end (): Promise<void>
  override end (callback: () => void): void
  override end (callback?: () => void): Promise<void> | void {
    // The sweep stops once the pool has ended: pg-pool's end() waits for the clients checked out,
    // and one waiting on a server that answers nothing is ended by the sweep.
    const ended = super.end().finally(() => clearInterval(this.#sweep))
    if (!callback) return ended
    ended.then(() => callback(), () => callback())
  }

  #answered (): void {
    this.lastAnsweredAt = performance.now()
    this.emit('answered')
  }

  /** Whether the database answers one of this pool's connections after `since`, within `timeoutMs`. */
  async answersSince (since: number, timeoutMs: number): Promise<boolean> {
    // Stryker disable next-line EqualityOperator: equivalent: an answer at the very performance.now() the caller took `since`, to the fraction of a ms, does not happen
    if (this.lastAnsweredAt > since) return true
    return once(this, 'answered', { signal: deadline(timeoutMs) }).then(() => true, () => false)
  }

  /** Whether the database's latest sign is that it cannot be reached. */
  get unreachable (): boolean {
    return this.lastUnreachableAt > this.lastAnsweredAt
  }

  // pool.query() connects through here too, so every wait for a connection is classified once, and
  // every client handed out carries the trace context it was asked for in (ROOT: none, or untraced).
  override connect (): Promise<pg.PoolClient>
  override connect (callback: ConnectCallback): void
  override connect (callback?: ConnectCallback): Promise<pg.PoolClient> | void {
    if (!callback) {
      return new Promise((resolve, reject) => this.connect((error, client) => error ? reject(error) : resolve(client!)))
    }
    const traced = context.active()
    const handOut: ConnectCallback = (error, client, done) => {
      if (client &&
        // Stryker disable next-line ConditionalExpression: equivalent: a client given ROOT sends its statements in ROOT, as one given none (BoundedClient's query), and release() clears either
        traced !== ROOT_CONTEXT) (client as unknown as BoundedClient).traceContext = traced
      callback(error && this.#classify(error), client, done)
    }
    super.connect((error, client, done) => {
      if (error?.message !== QUEUE_WAIT_EXPIRED) return handOut(error, client, done)
      // pg-pool's wait for a pooled connection is a timer: past a stall of the event loop it runs
      // out before the answer that freed a connection in time, still unread in its socket. Decided
      // once that is read (afterIo): a connection free then is taken (pg-pool hands it to the
      // first waiter on its next tick), and the error is classified on what has been read.
      afterIo(() => {
        // Stryker disable next-line ConditionalExpression,EqualityOperator: equivalent but for timing: a wait begun again with no connection idle runs out again, and the request is shed as before, one wait later
        if (this.idleCount > 0) super.connect(handOut)
        else handOut(error, client, done)
      })
    })
  }

  #classify (error: Error): Error {
    if (error.message === QUEUE_WAIT_EXPIRED) {
      return this.unreachable
        ? new DatabaseUnreachable(`no database connection within ${this.#connectionWaitMs} ms: the database could not be reached at the last attempt`, { cause: error })
        : new ConnectionWaitTimeout(`no pooled database connection became free within ${this.#connectionWaitMs} ms`, { cause: error })
    }
    // A new connection that timed out while others were answered just now: a database slow to
    // take one more connection under load, not one that is gone.
    // Stryker disable next-line EqualityOperator: an answer exactly connectionWaitMs ago, to the fraction of a millisecond, is no case a test can make
    if (error.message === NEW_CONNECTION_TIMED_OUT && performance.now() - this.lastAnsweredAt < this.#connectionWaitMs) {
      return new ConnectionWaitTimeout(`no new database connection within ${this.#connectionWaitMs} ms while the database answers`, { cause: error })
    }
    if (isDatabaseUnavailable(error)) this.lastUnreachableAt = performance.now()
    return error
  }
}
