// One LISTEN connection per instance on the channel the history announces changes on (migration
// 0007's trigger, whoever the writer). A notification only says "something changed": readers read
// the table, which alone decides what is final. A lost connection is made again after a pause that
// grows to maxRetryMs; 'listening' is emitted on each new one, since changes committed while none
// listened were announced to nobody. A server that accepts the connection and then answers nothing
// (stopped, a network that drops the packets, a proxy that holds the bytes) is a lost connection
// too: the connect and each statement are given up after timeoutMs without a word from the server,
// and a listening connection is checked every checkMs (a statement), since it sends nothing by
// itself and TCP keepalives see only the server's kernel, which still answers when the server is
// stopped. Those deadlines decide once the I/O waiting has been read (db/after-io.ts): after
// a stall of the event loop, an answer the server gave in time is not taken for none.
import { EventEmitter } from 'node:events'
import { Socket } from 'node:net'
import { performance } from 'node:perf_hooks'
import pg from 'pg'
import { afterIo } from './after-io.js'

export const CHANGES_CHANNEL = 'permission_changes'

export interface ChangeListenerOptions {
  connectionString: string
  retryMs?: number
  maxRetryMs?: number
  /** How long the connect, and then each statement (the LISTEN, a check), may go without a word from the server. */
  timeoutMs?: number
  /** How often a listening connection is checked. */
  checkMs?: number
}

export class ChangeListener extends EventEmitter<{ change: [], listening: [], lost: [Error] }> {
  readonly #connectionString: string
  readonly #minRetryMs: number
  readonly #maxRetryMs: number
  readonly #timeoutMs: number
  readonly #checkMs: number
  #retryMs: number
  #client: pg.Client | undefined
  #retry: NodeJS.Timeout | undefined
  #check: NodeJS.Timeout | undefined
  #closed = false
  #connecting = false

  constructor ({ connectionString, retryMs = 500, maxRetryMs = 10_000, timeoutMs = 10_000, checkMs = 30_000 }: ChangeListenerOptions) {
    super()
    this.#connectionString = connectionString
    this.#minRetryMs = this.#retryMs = retryMs
    this.#maxRetryMs = maxRetryMs
    this.#timeoutMs = timeoutMs
    this.#checkMs = checkMs
  }

  /** Whether the connection is up and listening. */
  get listening (): boolean {
    return this.#client !== undefined
  }

  start (): void {
    if (!this.#closed && !this.#connecting && this.#client === undefined && this.#retry === undefined) this.#connect()
  }

  async close (): Promise<void> {
    this.#closed = true
    clearTimeout(this.#retry)
    clearInterval(this.#check)
    const client = this.#client
    this.#client = undefined
    await client?.end().catch(() => {})
  }

  async #connect (): Promise<void> {
    this.#retry = undefined
    this.#connecting = true
    // A connect or a statement the server leaves unanswered for timeoutMs is given up (its socket
    // cut, with pg's own words for it, which is then taken as the connection's loss): the reader
    // polls meanwhile. Not by pg's connectionTimeoutMillis and query_timeout: their timers run,
    // after a stall of the event loop, before the answer that came meanwhile is read, and a
    // connect's several round trips would share the one bound with the stall. TCP keepalives end
    // a connection whose server's host is gone altogether.
    const socket = new Socket()
    const client = new pg.Client({
      connectionString: this.#connectionString,
      keepAlive: true,
      keepAliveInitialDelayMillis: 10_000,
      stream: () => socket
    })
    // When the server last sent anything: a connect is several round trips, each answered. (Over
    // TLS it hears only the server's first byte, before the handshake: from there a bound runs
    // whole, as pg's did, still decided after the I/O waiting is read.)
    let heardAt = 0
    socket.on('data', () => { heardAt = performance.now() })
    const bounded = async <T>(work: Promise<T>, timedOut: string): Promise<T> => {
      const since = performance.now()
      let settled = false
      let timer: NodeJS.Timeout | undefined
      const wait = (ms: number) => {
        timer = setTimeout(() => afterIo(() => {
          if (settled) return
          const silentMs = performance.now() - Math.max(since, heardAt)
          // Stryker disable next-line EqualityOperator: equivalent: a silence of exactly the bound, to the fraction of a ms, is no case a test can make
          if (silentMs >= this.#timeoutMs) {
            socket.destroy(new Error(timedOut))
          } else {
            // Stryker disable next-line ArithmeticOperator: equivalent but for timing: a longer wait checks again later, and cuts a silent server past the bound still
            wait(this.#timeoutMs - silentMs)
          }
        }), ms).unref()
      }
      wait(this.#timeoutMs)
      try {
        return await work
      } finally {
        settled = true
        clearTimeout(timer)
      }
    }
    let lost = false
    const lose = (error: Error) => {
      if (lost) return
      lost = true
      // Stryker disable next-line ConditionalExpression: equivalent: a connection's loss is told before another is made, so #client is this one or none here
      if (this.#client === client) {
        this.#client = undefined
        clearInterval(this.#check)
      }
      client.end().catch(() => {})
      if (this.#closed) return
      this.emit('lost', error)
      this.#retry = setTimeout(() => { this.#connect() }, this.#retryMs).unref()
      this.#retryMs = Math.min(this.#retryMs * 2, this.#maxRetryMs)
    }
    client.on('error', lose)
    // Stryker disable next-line StringLiteral,ArrowFunction: equivalent: pg reports an end it did not ask for as an error first (or rejects the connect), and one asked for comes after the loss or the close, so this listener never reports the loss
    client.on('end', () => lose(new Error('the listening connection ended')))
    // The connection listens on this channel only.
    client.on('notification', () => this.emit('change'))
    try {
      await bounded(client.connect(), 'timeout expired')
      await bounded(client.query(`LISTEN ${CHANGES_CHANNEL}`), 'Query read timeout')
    } catch (error) {
      // Stryker disable next-line BooleanLiteral: equivalent: a failed connect leaves a retry pending (or the listener closed), which start() looks at first, and the retry sets it again
      this.#connecting = false
      lose(error as Error)
      return
    }
    // Stryker disable next-line BooleanLiteral: equivalent: the client is there from here on (or closed), and start() looks no further then
    this.#connecting = false
    if (lost) return
    if (this.#closed) {
      await client.end().catch(() => {})
      return
    }
    this.#client = client
    this.#retryMs = this.#minRetryMs
    // A connection that only listens hears nothing from a server that stopped answering.
    // Stryker disable next-line StringLiteral: equivalent: the server answers an empty statement too (EmptyQueryResponse), a round trip as 'SELECT 1' is
    this.#check = setInterval(() => { bounded(client.query('SELECT 1'), 'Query read timeout').catch(lose) }, this.#checkMs).unref()
    this.emit('listening')
  }
}
