// The pool tells a busy pool (overload) from a database it cannot reach (outage), against a real
// PostgreSQL, a port where nothing listens, and a black hole (a socket that accepts and never
// answers, as a firewalled or frozen host does).
import { createServer, type Socket } from 'node:net'
import t from 'tap'
import { freePort } from '../../db/embedded-postgres.js'
import { ConnectionWaitTimeout, databaseErrorSummary, DatabaseUnreachable, isDatabaseUnavailable, overloadReasonOf } from '../../db/errors.js'
import { DatabasePool } from '../../db/pool.js'
import { createTestDatabase } from '../helper.js'

const WAIT_MS = 200

function poolOn (connectionString: string, max = 1): DatabasePool {
  const pool = new DatabasePool({ connectionString, max, connectionWaitMs: WAIT_MS, queryTimeoutMs: 5_000 })
  pool.on('error', () => {})
  t.teardown(() => pool.end())
  return pool
}

t.test('every connection busy, database answering → ConnectionWaitTimeout (overload), not unavailable', async (t) => {
  const pool = poolOn(await createTestDatabase(t))
  const held = await pool.connect()
  await held.query('SELECT 1')
  const error = await pool.connect().then(() => undefined, (error: Error) => error)
  t.type(error, ConnectionWaitTimeout)
  t.equal(overloadReasonOf(error), 'connection_wait')
  t.notOk(isDatabaseUnavailable(error))
  t.notOk(pool.unreachable)
  held.release()
  const { rows } = await pool.query('SELECT 1 AS one')
  t.same(rows, [{ one: 1 }], 'served once a connection is free')
})

t.test('nothing listens → unavailable at once, and the pool knows it', async (t) => {
  const pool = poolOn(`postgres://postgres@127.0.0.1:${await freePort()}/postgres`)
  const error = await pool.query('SELECT 1').then(() => undefined, (error: Error) => error)
  t.ok(isDatabaseUnavailable(error), String(error))
  t.equal(overloadReasonOf(error), undefined)
  t.ok(pool.unreachable)
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
  t.ok(isDatabaseUnavailable(reason))
  t.equal(overloadReasonOf(reason), undefined)
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
})
