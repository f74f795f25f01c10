// Behind PgBouncer (transaction pooling) overload is still told apart from an outage. The service's
// pool gets a PgBouncer connection at once: the wait for a server connection is PgBouncer's queue,
// and PgBouncer answers for the database when it refuses. Its refusals come as 08P01 errors:
// `query_wait_timeout` (no server connection free in time, also while the database is gone) and
// `server login has been failing … (server_login_retry)` (it cannot log in to the server).
// Needs the pgbouncer binary, as test/system/pgbouncer.test.ts.
import { Writable } from 'node:stream'
import pg from 'pg'
import t from 'tap'
import { isDatabaseUnavailable, isPoolerQueueWaitExpired, overloadReasonOf } from '../../db/errors.js'
import { seedDatabase } from '../../db/seed.js'
import { ownPostgres } from '../support/database.js'
import { ordersFixture, ordersPath } from '../support/fixtures.js'
import { build } from '../support/harness.js'
import { consoleUrl, pgbouncerBinary as binary, startPgBouncer } from '../support/pgbouncer.js'
import { readToken } from '../support/tokens.js'
import { until } from '../support/waiting.js'

const SERVER_CONNECTIONS = 2
// PgBouncer's query_wait_timeout, in seconds: how long a client waits in its queue for a server connection.
const QUERY_WAIT_TIMEOUT_S = 2

if (!binary) {
  if (process.env.CI) throw new Error('pgbouncer is not installed, and CI must run the service through it')
  t.plan(0, 'pgbouncer is not installed (apt-get install pgbouncer); CI installs it')
} else {
  // A server of the test's own: it is stopped.
  const server = await ownPostgres(t)
  const directUrl = new URL(server.url)
  const bouncerUrl = await startPgBouncer(t, binary, directUrl, {
    serverConnections: SERVER_CONNECTIONS,
    settings: [`query_wait_timeout = ${QUERY_WAIT_TIMEOUT_S}`]
  })
  const logs: Array<{ msg: string, err?: { message: string } }> = []
  const stream = new Writable({ write (chunk, _encoding, done) { logs.push(...chunk.toString().split('\n').filter(Boolean).map((line: string) => JSON.parse(line))); done() } })
  const harness = await build(t, {
    DATABASE_URL: bouncerUrl.toString(),
    MIGRATIONS_DATABASE_URL: directUrl.toString(),
    DATABASE_PREPARED_STATEMENTS: 'false',
    DATABASE_POOLER: 'transaction',
    LOG_LEVEL: 'warn',
    // Longer than PgBouncer's queue wait: a probe queued there and refused, readiness goes by
    // whether the service's own statements are answered meanwhile.
    READINESS_TIMEOUT_MS: String(5 * QUERY_WAIT_TIMEOUT_S * 1000)
  }, { logs: stream })
  await seedDatabase(harness.app.db, ordersFixture())
  const list = () => harness.request(ordersPath(), { token: readToken() })

  /** Statements of the service's own pool holding every server connection for `seconds`, once they all run. */
  async function holdEveryServerConnection (seconds: number): Promise<Array<Promise<unknown>>> {
    const holds = Array.from({ length: SERVER_CONNECTIONS }, () => harness.app.db.query(`SELECT pg_sleep(${seconds})`).catch((error: unknown) => error))
    await until('every server connection held', async () => (await show('POOLS')).some((pool) => Number(pool.cl_active) >= SERVER_CONNECTIONS && Number(pool.sv_active) >= SERVER_CONNECTIONS))
    return holds
  }

  /** A SHOW command's rows, from PgBouncer's console. */
  async function show (what: string): Promise<Array<Record<string, string>>> {
    const console = new pg.Client({ connectionString: consoleUrl(bouncerUrl).toString() })
    await console.connect()
    try {
      return (await console.query(`SHOW ${what}`)).rows
    } finally {
      await console.end()
    }
  }

  t.test('overload: no server connection free within query_wait_timeout → 503 overloaded with Retry-After, still ready', async (t) => {
    const holds = await holdEveryServerConnection(2 * QUERY_WAIT_TIMEOUT_S)
    const [shed, ready] = await Promise.all([list(), harness.request('/readyz')])
    t.equal(shed.status, 503)
    t.match(shed.body, { type: '/problems/overloaded', status: 503 })
    t.equal(shed.headers.get('retry-after'), '5')
    t.equal(ready.status, 200, 'the database answers the service\'s other statements: ready')
    t.match(await (await fetch(`${harness.baseUrl}/metrics`)).text(), /requests_shed_total\{reason="connection_wait"\} [1-9]/, 'counted as shed for want of a connection')
    for (const held of await Promise.all(holds)) t.notOk(held instanceof Error, 'the statements holding the server connections were answered')
    t.equal((await list()).status, 200, 'served again once a server connection is free')
  })

  t.test('overload: PgBouncer taking no more client connections (max_client_conn) → 503 overloaded with Retry-After', async (t) => {
    // A second PgBouncer in front of the same server, which takes two clients at once.
    const fullUrl = await startPgBouncer(t, binary!, directUrl, { serverConnections: SERVER_CONNECTIONS, clientConnections: SERVER_CONNECTIONS })
    const full = await build(t, {
      DATABASE_URL: fullUrl.toString(),
      MIGRATIONS_DATABASE_URL: directUrl.toString(),
      DATABASE_PREPARED_STATEMENTS: 'false',
      DATABASE_POOLER: 'transaction',
      LOG_LEVEL: 'silent'
    })
    // Its two client connections held by the service's own pool; a request needs a third.
    const holds = Array.from({ length: SERVER_CONNECTIONS }, () => full.app.db.query('SELECT pg_sleep(2)').catch((error: unknown) => error))
    await until('both client connections made', async () => full.app.db.totalCount >= SERVER_CONNECTIONS && full.app.db.idleCount === 0)
    const shed = await full.request(ordersPath(), { token: readToken() })
    // PgBouncer's refusal itself, to a client of the test's own: overload, and not its queue wait.
    const own = new pg.Client({ connectionString: fullUrl.toString() })
    own.on('error', () => {})
    const refusal = await own.connect().then(() => undefined, (error: Error) => error)
    await own.end().catch(() => {})
    t.match(refusal, { code: '08P01', message: 'no more connections allowed (max_client_conn)' })
    t.equal(overloadReasonOf(refusal), 'connection_wait')
    t.notOk(isPoolerQueueWaitExpired(refusal))
    t.notOk(isDatabaseUnavailable(refusal))
    t.equal(shed.status, 503, shed.text)
    t.match(shed.body, { type: '/problems/overloaded', status: 503 })
    t.equal(shed.headers.get('retry-after'), '5')
    t.match(await (await fetch(`${full.baseUrl}/metrics`)).text(), /requests_shed_total\{reason="connection_wait"\} [1-9]/, 'counted as shed for want of a connection')
    for (const held of await Promise.all(holds)) t.notOk(held instanceof Error, 'the statements holding the client connections were answered')
  })

  t.test('the database stopped while a request waits in PgBouncer\'s queue: its query_wait_timeout is the outage → 503 database-unavailable', async (t) => {
    const holds = await holdEveryServerConnection(60)
    const waiting = list()
    await until('the request waiting in PgBouncer\'s queue', async () => (await show('POOLS')).some((pool) => Number(pool.cl_waiting) >= 1))
    const logged = logs.length
    // The statements holding the server connections fail with the server (57P01).
    await server.stop()
    await Promise.all(holds)
    const res = await waiting
    t.equal(res.status, 503)
    t.match(res.body, { type: '/problems/database-unavailable', status: 503 })
    t.equal(res.headers.get('retry-after'), '5')
    t.ok(logs.slice(logged).some((line) => line.err?.message === 'query_wait_timeout'), 'PgBouncer refused the request with query_wait_timeout')
  })

  t.test('the database stopped: PgBouncer\'s refusals (server_login_retry) → 503 database-unavailable, not ready', async (t) => {
    // PgBouncer has found that it cannot log in (a client of the test's own through it is refused so).
    let refusal: Error | undefined
    await until('PgBouncer refusing with server_login_retry', async () => {
      const client = new pg.Client({ connectionString: bouncerUrl.toString() })
      client.on('error', () => {})
      try {
        await client.connect()
        await client.query('SELECT 1')
        return false
      } catch (error) {
        refusal = error as Error
        return /server_login_retry/.test((error as Error).message)
      } finally {
        await client.end().catch(() => {})
      }
    })
    // An outage, and neither overload nor PgBouncer's queue wait, which it also sends as 08P01.
    t.match(refusal, { code: '08P01' })
    t.ok(isDatabaseUnavailable(refusal))
    t.equal(overloadReasonOf(refusal), undefined)
    t.notOk(isPoolerQueueWaitExpired(refusal))
    const logged = logs.length
    // Readiness asked while the service's requests keep coming: each is refused by PgBouncer on a
    // connection the service has just made to it, and neither is the database answering.
    const readiness = { pending: true }
    const ready = harness.request('/readyz').finally(() => { readiness.pending = false })
    const answers = []
    while (readiness.pending) answers.push(await list())
    t.equal((await ready).status, 503)
    t.match((await ready).body, { type: '/problems/database-unavailable' })
    t.ok(answers.length > 0)
    for (const res of answers) {
      t.equal(res.status, 503)
      t.match(res.body, { type: '/problems/database-unavailable', status: 503 })
      t.equal(res.headers.get('retry-after'), '5')
    }
    t.ok(logs.slice(logged).some((line) => /server_login_retry/.test(line.err?.message ?? '')), 'PgBouncer refused the requests with server_login_retry')
  })
}
