// The pool tells a busy pool (overload) from a database it cannot reach (outage), against a real
// PostgreSQL, a port where nothing listens, and a black hole (a socket that accepts and never
// answers, as a firewalled or frozen host does).
import { once } from 'node:events'
import { connect, createServer, type Socket } from 'node:net'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { context, createContextKey, ROOT_CONTEXT } from '@opentelemetry/api'
import pg from 'pg'
import t from 'tap'
import { freePort } from '../../db/embedded-postgres.js'
import {
  ConnectionWaitTimeout, databaseErrorSummary, DatabaseUnreachable, isDatabaseUnavailable, isOverDatabaseLimit, isPoolerQueueWaitExpired, overloadReasonOf
} from '../../db/errors.js'
import { DatabasePool, sweepIntervalOf } from '../../db/pool.js'
import { SynchronousContextManager } from '../../src/tracing.js'
import { createTestDatabase } from '../support/database.js'
import { until } from '../support/waiting.js'

// Long enough for a new connection on a loaded machine (four test files at once on two cores), short
// enough that the waits the tests provoke stay cheap.
const WAIT_MS = 1_000

function poolOn (connectionString: string, max = 1): DatabasePool {
  const pool = new DatabasePool({ connectionString, max, connectionWaitMs: WAIT_MS, queryTimeoutMs: 5_000 })
  pool.on('error', () => {})
  t.teardown(() => pool.end())
  return pool
}

t.test('each error the database or the network can give, classified: outage, overload (and why) or neither', async (t) => {
  const withCode = (code: string, message = 'failed') => Object.assign(new Error(message), { code })
  const outages = ['DATABASE_UNREACHABLE', 'ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'EPIPE', 'ENOENT',
    '57P01', '57P02', '57P03', '08000', '08001', '08003', '08004', '08006']
  for (const code of outages) {
    t.ok(isDatabaseUnavailable(withCode(code)), `${code}: unavailable`)
    t.equal(overloadReasonOf(withCode(code)), undefined, `${code}: not overload`)
  }
  for (const message of ['Connection terminated unexpectedly', 'Query read timeout', 'Client has encountered a connection error and is not queryable']) {
    t.ok(isDatabaseUnavailable(new Error(message)), message)
  }
  t.equal(overloadReasonOf(withCode('53300')), 'connection_wait', 'too_many_connections')
  t.equal(overloadReasonOf(withCode('57014')), 'statement_timeout', 'query_canceled')
  t.equal(overloadReasonOf(new ConnectionWaitTimeout('busy')), 'connection_wait')
  for (const error of [withCode('53300'), withCode('57014'), withCode('23505'), new Error('syntax error at or near "x"')]) {
    t.notOk(isDatabaseUnavailable(error), `${String(error)}: not an outage`)
  }
  t.equal(overloadReasonOf(withCode('23505')), undefined, 'a constraint violation is neither')
  t.equal(overloadReasonOf({ code: '57014' }), undefined, 'not an Error: neither')
  t.notOk(isDatabaseUnavailable({ code: 'ECONNREFUSED', message: 'Connection terminated' }), 'not an Error: neither')
  t.same(databaseErrorSummary(withCode('ECONNREFUSED', 'connect ECONNREFUSED 127.0.0.1:1')), { code: 'ECONNREFUSED', reason: 'connect ECONNREFUSED 127.0.0.1:1' })
  // The pool's own errors carry codes too, so a log line names every kind alike.
  t.same(databaseErrorSummary(new ConnectionWaitTimeout('busy')), { code: 'CONNECTION_WAIT_TIMEOUT', reason: 'busy' })
  t.same(databaseErrorSummary(new DatabaseUnreachable('down')), { code: 'DATABASE_UNREACHABLE', reason: 'down' })
})

t.test('PgBouncer\'s words from anyone else, or on what is no Error, are neither outage nor overload; a limit of the database\'s is its own', async (t) => {
  const pool = poolOn(await createTestDatabase(t))
  const failureOf = (text: string) => pool.query(text).then(() => undefined, (error: Error) => error)
  // A statement that raises them (P0001): the database answering, in PgBouncer's words.
  for (const words of ['query_wait_timeout', 'no more connections allowed (max_client_conn)',
    'server login has been failing, try again later (server_login_retry)', 'server conn crashed?']) {
    const raised = await failureOf(`DO $$ BEGIN RAISE EXCEPTION '${words}'; END $$`)
    t.match(raised, { code: 'P0001', message: words })
    t.notOk(isPoolerQueueWaitExpired(raised), `raised ${words}: not PgBouncer's queue wait`)
    t.notOk(isDatabaseUnavailable(raised), `raised ${words}: not an outage`)
    t.equal(overloadReasonOf(raised), undefined, `raised ${words}: not overload`)
    // As PgBouncer sends them (08P01), but no Error.
    const copy = { code: '08P01', message: words }
    t.notOk(isPoolerQueueWaitExpired(copy), `${words}, no Error: not PgBouncer's queue wait`)
    t.equal(overloadReasonOf(copy), undefined, `${words}, no Error: not overload`)
  }
  t.notOk(pool.unreachable, 'each of them was the database answering')
  // PgBouncer (1.19 on) behind another PgBouncer that is full: the login it keeps failing is the
  // outage, whatever the cached error says.
  const cached = Object.assign(new Error('server login has been failing, cached error: no more connections allowed (max_client_conn) (server_login_retry)'), { code: '08P01' })
  t.ok(isDatabaseUnavailable(cached), 'a cached max_client_conn in server_login_retry: an outage')
  t.equal(overloadReasonOf(cached), undefined, 'not PgBouncer taking no more clients')

  // program_limit_exceeded: an index entry over a third of a page.
  const client = await pool.connect()
  await client.query('CREATE TEMPORARY TABLE wide (id text PRIMARY KEY)')
  const tooLarge = await client.query("INSERT INTO wide SELECT string_agg(md5(i::text), '') FROM generate_series(1, 300) AS i").then(() => undefined, (error: Error) => error)
  await client.query("INSERT INTO wide VALUES ('a')")
  const duplicate = await client.query("INSERT INTO wide VALUES ('a')").then(() => undefined, (error: Error) => error)
  client.release()
  t.match(tooLarge, { code: '54000' })
  t.equal(isOverDatabaseLimit(tooLarge), true, String(tooLarge))
  t.match(duplicate, { code: '23505' })
  t.equal(isOverDatabaseLimit(duplicate), false, 'a unique violation is no limit')
  t.equal(isOverDatabaseLimit({ code: '54000', message: 'index row size exceeds maximum' }), false, 'not an Error: no')
})

t.test('what counts as the database answering: a connection made, a query answered; answersSince waits for one', async (t) => {
  const pool = poolOn(await createTestDatabase(t), 2)
  t.notOk(pool.unreachable, 'a new pool has no sign either way')
  let since = performance.now()
  const client = await pool.connect()
  t.ok(pool.lastAnsweredAt > since, 'a connection made is an answer')
  client.release()
  since = performance.now()
  t.equal(await pool.answersSince(since, 50), false, 'nothing answered since: false once the wait is over')
  since = performance.now()
  await pool.query('SELECT 1')
  t.ok(pool.lastAnsweredAt > since, 'a query answered is one')
  t.notOk(pool.unreachable)
  since = performance.now()
  await t.rejects(pool.query('SELECT no_such_column'), { code: '42703' })
  t.ok(pool.lastAnsweredAt > since, 'so is a query refused')
  t.notOk(pool.unreachable)
  t.equal(await pool.answersSince(since, 50), true, 'an answer already given counts at once')
  since = performance.now()
  const answered = pool.answersSince(since, 5_000)
  await pool.query('SELECT 1')
  t.equal(await answered, true, 'an answer given while waiting ends the wait')
  // The routes release a connection with whatever failed its transaction, a bug of ours included.
  const failedIn = await pool.connect()
  since = performance.now()
  failedIn.release(new TypeError('the app failed, not the database'))
  t.ok(pool.lastAnsweredAt < since, 'a connection released with an error of the app\'s own is not an answer')
  t.notOk(pool.unreachable, 'nor a sign of an outage')
})

t.test('a server that refuses the connection (no such database) answered: an error, not an outage', async (t) => {
  const url = new URL(await createTestDatabase(t))
  url.pathname = '/no_such_database'
  const pool = poolOn(url.toString())
  const error = await pool.query('SELECT 1').then(() => undefined, (error: Error) => error)
  t.equal((error as { code?: string } | undefined)?.code, '3D000')
  t.notOk(isDatabaseUnavailable(error))
  t.notOk(pool.unreachable)
})

t.test('nothing listens → unavailable at once, and the pool knows it', async (t) => {
  const pool = poolOn(`postgres://postgres@127.0.0.1:${await freePort()}/postgres`)
  const error = await pool.query('SELECT 1').then(() => undefined, (error: Error) => error)
  t.ok(isDatabaseUnavailable(error), String(error))
  t.equal(overloadReasonOf(error), undefined)
  t.ok(pool.unreachable)
})

t.test('a connection terminated by the server (57P01, a DatabaseError) marks the database unreachable, not answered', async (t) => {
  const url = await createTestDatabase(t)
  const pool = poolOn(url, 2)
  const client = await pool.connect()
  // The server's goodbye may arrive before the next query, as an 'error' event of the client.
  client.on('error', () => {})
  const { rows: [{ pid }] } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')
  await pool.query('SELECT pg_terminate_backend($1)', [pid])
  const error = await client.query('SELECT 1').then(() => undefined, (error: Error) => error)
  client.release(error)
  t.ok(isDatabaseUnavailable(error), `${String(error)} ${(error as { code?: string }).code} ${error?.constructor.name}`)
  t.ok(pool.unreachable, 'the last sign of the database is a lost connection')
})

t.test('every connection busy, database answering → ConnectionWaitTimeout (overload), not unavailable', async (t) => {
  const pool = poolOn(await createTestDatabase(t))
  const held = await pool.connect()
  await held.query('SELECT 1')
  const error = await pool.connect().then(() => undefined, (error: Error) => error)
  t.type(error, ConnectionWaitTimeout)
  t.equal(error?.message, `no pooled database connection became free within ${WAIT_MS} ms`)
  t.equal((error?.cause as Error | undefined)?.message, 'timeout exceeded when trying to connect', 'pg-pool\'s error kept as the cause')
  t.equal(overloadReasonOf(error), 'connection_wait')
  t.notOk(isDatabaseUnavailable(error))
  t.notOk(pool.unreachable)
  held.release()
  const { rows } = await pool.query('SELECT 1 AS one')
  t.same(rows, [{ one: 1 }], 'served once a connection is free')
})

t.test('a pool saturated for longer than the query timeout: every query answered, no connection ended (the bound is per query)', async (t) => {
  // One connection, four callers always waiting: pg-pool hands the client from one query's answer
  // straight to the next caller, so it never drains while this runs, three times the bound.
  const pool = new DatabasePool({ connectionString: await createTestDatabase(t), max: 1, connectionWaitMs: 5_000, queryTimeoutMs: 300 })
  pool.on('error', () => {})
  t.teardown(() => pool.end())
  const until = Date.now() + 900
  let answered = 0
  const failures: string[] = []
  await Promise.all(Array.from({ length: 4 }, async () => {
    while (Date.now() < until) {
      await pool.query('SELECT pg_sleep(0.02)').then(() => { answered++ }, (error: Error) => { failures.push(error.message) })
    }
  }))
  t.same(failures, [], 'no query failed')
  t.ok(answered > 20, `${answered} queries answered`)
  t.notOk(pool.unreachable, 'the database was never taken for unreachable')
})

t.test('the sweep for unanswered queries runs every tenth of the bound, within 10 ms and 1 s', async (t) => {
  t.equal(sweepIntervalOf(5_000), 500)
  t.equal(sweepIntervalOf(300), 30)
  t.equal(sweepIntervalOf(50), 10, 'not more often than every 10 ms')
  t.equal(sweepIntervalOf(60_000), 1000, 'not less often than every second')
})

t.test('a query the server never answers ends its connection after the query timeout: an outage, and pool.end() still ends', async (t) => {
  // A black hole that completes no startup: the connect would time out first, so the client is
  // connected to a real server whose query is then held by an advisory lock the test keeps.
  const connectionString = await createTestDatabase(t)
  const holder = poolOn(connectionString)
  const lock = await holder.connect()
  await lock.query('SELECT pg_advisory_lock(4242)')
  // The sweep runs every tenth of the bound (10 ms here), from the pool's making: at its 1 s cap
  // its first run would come a second after this, when the query has waited long enough.
  const made = Date.now()
  const pool = new DatabasePool({ connectionString, max: 1, connectionWaitMs: 5_000, queryTimeoutMs: 100 })
  pool.on('error', () => {})
  const client = await pool.connect()
  const sent = Date.now()
  const error = await client.query('SELECT pg_advisory_lock(4242)').then(() => undefined, (error: Error) => error)
  client.release(error)
  const ended = Date.now()
  t.match(error?.message, /Connection terminated/)
  t.ok(isDatabaseUnavailable(error), 'classified as unavailable')
  t.ok(ended - sent >= 100, `ended after the bound: ${ended - sent} ms`)
  t.ok(ended - made < 900, `ended by a sweep within a tenth of the bound, not one at the 1 s cap: ${ended - made} ms after the pool was made`)
  await pool.end()
  lock.release()
})

t.test('a new connection that times out while the pool\'s others are answering → overload, not an outage', async (t) => {
  // A proxy to the test server that lets two connections through and leaves later ones unanswered,
  // as a database too busy to take one more connection does.
  const target = new URL(await createTestDatabase(t))
  const sockets = new Set<Socket>()
  let accepted = 0
  const proxy = createServer((socket) => {
    sockets.add(socket)
    if (++accepted > 2) return
    const upstream = connect(Number(target.port), target.hostname)
    sockets.add(upstream)
    socket.pipe(upstream).pipe(socket)
    socket.on('error', () => upstream.destroy())
    upstream.on('error', () => socket.destroy())
  })
  proxy.listen(0, '127.0.0.1')
  await new Promise((resolve) => proxy.once('listening', resolve))
  t.teardown(() => { for (const socket of sockets) socket.destroy(); proxy.close() })
  const viaProxy = new URL(target)
  viaProxy.port = String((proxy.address() as { port: number }).port)
  const pool = poolOn(viaProxy.toString(), 3)

  const [first, second] = await Promise.all([pool.connect(), pool.connect()])
  const third: { settled: boolean, error?: Error } = { settled: false }
  pool.connect().then(() => {}, (error: Error) => { third.error = error }).finally(() => { third.settled = true })
  first.release()
  // While the third connection waits on the silent socket, the first keeps answering.
  while (!third.settled) await pool.query('SELECT 1')
  const { error } = third
  second.release()
  t.type(error, ConnectionWaitTimeout)
  t.equal(error?.message, `no new database connection within ${WAIT_MS} ms while the database answers`)
  t.equal((error?.cause as Error | undefined)?.message, 'Connection terminated due to connection timeout')
  t.equal(overloadReasonOf(error), 'connection_wait')
  t.notOk(pool.unreachable)
})

t.test('black hole → the connect times out as unavailable; a wait behind it is unavailable too, not overload', async (t) => {
  const sockets = new Set<Socket>()
  const blackHole = createServer((socket) => { sockets.add(socket) })
  blackHole.listen(0, '127.0.0.1')
  await new Promise((resolve) => blackHole.once('listening', resolve))
  t.teardown(() => { for (const socket of sockets) socket.destroy(); blackHole.close() })
  const { port } = blackHole.address() as { port: number }
  const pool = poolOn(`postgres://postgres@127.0.0.1:${port}/postgres`)

  const first = await pool.connect().then(() => undefined, (error: Error) => error)
  t.ok(isDatabaseUnavailable(first), `a connect that times out: ${String(first)}`)
  t.ok(pool.unreachable)
  // One new connection in progress fills the pool; the next request waits behind it.
  const [connecting, waiting] = await Promise.allSettled([pool.connect(), pool.connect()])
  t.equal(connecting.status, 'rejected')
  t.equal(waiting.status, 'rejected')
  const reason = (waiting as PromiseRejectedResult).reason
  t.type(reason, DatabaseUnreachable)
  t.equal(reason.message, `no database connection within ${WAIT_MS} ms: the database could not be reached at the last attempt`)
  t.equal(reason.cause?.message, 'timeout exceeded when trying to connect')
  t.ok(isDatabaseUnavailable(reason))
  t.equal(overloadReasonOf(reason), undefined)
})

t.test('a client checked out in a trace context sends its statements in it, from wherever they are sent; one checked out in none, in none', async (t) => {
  // The service's context manager when tracing is on (src/tracing.ts); no other test here traces.
  context.setGlobalContextManager(new SynchronousContextManager())
  t.teardown(() => { context.disable() })
  const request = createContextKey('request')
  const traced = ROOT_CONTEXT.setValue(request, 'request 1')
  const pool = poolOn(await createTestDatabase(t), 2)
  /** The request whose context was active as `client` sent a statement (what instrumentation-pg reads then). */
  async function sentIn (client: pg.PoolClient): Promise<unknown> {
    const query = new pg.Query('SELECT 1')
    const submit = query.submit.bind(query)
    let active: unknown
    query.submit = (connection) => { active = context.active().getValue(request); submit(connection) }
    await new Promise((resolve, reject) => client.query(query).on('end', resolve).on('error', reject))
    return active
  }
  const inRequest = await context.with(traced, () => pool.connect())
  const untraced = await pool.connect()
  t.equal(await sentIn(inRequest), 'request 1', 'sent after an await, outside the request\'s context: in it')
  t.equal(await context.with(traced, () => sentIn(untraced)), undefined, 'checked out untraced, sent inside a request\'s context: in none')
  inRequest.release()
  untraced.release()
  // A connect asked for in a trace context that fails fails as it would untraced.
  const down = poolOn(`postgres://postgres@127.0.0.1:${await freePort()}/postgres`)
  const error = await context.with(traced, () => down.connect()).then(() => undefined, (error: Error) => error)
  t.ok(isDatabaseUnavailable(error), String(error))
})

t.test('end(callback) calls back once the pool has ended, and when it was ended already', async (t) => {
  const pool = new DatabasePool({ connectionString: await createTestDatabase(t), max: 1, connectionWaitMs: WAIT_MS, queryTimeoutMs: 5_000 })
  pool.on('error', () => {})
  await pool.query('SELECT 1')
  const removed = once(pool, 'remove')
  await new Promise<void>((resolve) => pool.end(resolve))
  t.ok(pool.ended, 'ended')
  await removed
  // pg-pool refuses a second end() (a rejection); the callback hears of it all the same.
  await new Promise<void>((resolve) => pool.end(resolve))
  t.pass('called back')
})

t.test('a client whose statement went unanswered is ended once, not again at each sweep while its holder keeps it', async (t) => {
  const connectionString = await createTestDatabase(t)
  const holder = poolOn(connectionString)
  const lock = await holder.connect()
  await lock.query('SELECT pg_advisory_lock(4243)')
  const pool = new DatabasePool({ connectionString, max: 2, connectionWaitMs: 5_000, queryTimeoutMs: 300 })
  pool.on('error', () => {})
  const [first, second] = await Promise.all([pool.connect(), pool.connect()])
  let ends = 0
  const end = first.end.bind(first)
  first.end = (() => { ends++; return end() }) as typeof first.end
  await t.rejects(first.query('SELECT pg_advisory_lock(4243)'), /Connection terminated/)
  // Sent once the first was ended, so ended by a later sweep, which looked at the first again.
  await t.rejects(second.query('SELECT pg_advisory_lock(4243)'), /Connection terminated/)
  t.equal(ends, 1, 'the first client was ended by one sweep only')
  first.release(true)
  second.release(true)
  await pool.end()
  lock.release()
})

t.test('the pool keeps no client it has removed, and nothing keeps a pool that has ended', async (t) => {
  // A full collection before each look: what is still reachable stays, nothing else.
  setFlagsFromString('--expose-gc')
  const gc = runInNewContext('gc') as () => void
  // Once its socket has closed too (after pg's 'end'): polled, a collection before each look.
  const collected = (what: string, ref: WeakRef<object>) => until(what, () => { gc(); return ref.deref() === undefined }, 5_000)
  const connectionString = await createTestDatabase(t)
  let pool: DatabasePool | undefined = new DatabasePool({ connectionString, max: 2, connectionWaitMs: WAIT_MS, queryTimeoutMs: 5_000 })
  let client: pg.PoolClient | undefined = await pool.connect()
  const removedClient = new WeakRef(client)
  // pg-pool says 'remove' once the client's connection has ended (the promise keeps no client).
  let removed = once(pool, 'remove').then(() => {})
  client.release(true) // a client released with an error is removed
  client = undefined
  await removed
  await collected('the removed client collected while its pool lives', removedClient)
  await pool.query('SELECT 1')
  const ended = new WeakRef(pool)
  removed = once(pool, 'remove').then(() => {})
  await pool.end()
  pool = undefined
  await removed
  await collected('the ended pool collected', ended)
  t.pass('neither kept')
})
