// Overload is not an outage: a pool held busy by real slow statements sheds the requests it cannot
// serve in time as 503 overloaded, while /readyz stays 200 and nothing is reported as the database
// being down. The statements are slow because a test transaction really locks the grants table.
import { randomBytes } from 'node:crypto'
import { PassThrough } from 'node:stream'
import pg from 'pg'
import t, { type Test } from 'tap'
import { seedDatabase } from '../../db/seed.js'
import { ordersFixture, ordersPath } from '../support/fixtures.js'
import { createTestDatabase, newDatabase, testDatabaseUrl } from '../support/database.js'
import { build } from '../support/harness.js'
import { holdingProxy } from '../support/holding-proxy.js'
import { deleteToken, readToken } from '../support/tokens.js'
import { until } from '../support/waiting.js'

const CONNECTION_WAIT_MS = 300
const STATEMENT_TIMEOUT_MS = 3000

const logs: Array<Record<string, unknown>> = []
const stream = new PassThrough()
stream.on('data', (chunk: Buffer) => {
  for (const line of chunk.toString().split('\n').filter(Boolean)) logs.push(JSON.parse(line))
})
const harness = await build(t, {
  LOG_LEVEL: 'info',
  DATABASE_POOL_MAX: '2',
  DATABASE_CONNECTION_WAIT_MS: String(CONNECTION_WAIT_MS),
  DATABASE_STATEMENT_TIMEOUT_MS: String(STATEMENT_TIMEOUT_MS)
}, { logs: stream })
await harness.seed(ordersFixture())
const list = () => harness.request(ordersPath(), { token: readToken() })

/** Holds an ACCESS EXCLUSIVE lock on grants (every list and DELETE waits) until released. */
async function lockGrants (): Promise<{ release: () => Promise<void> }> {
  const locker = new pg.Client({ connectionString: harnessDatabaseUrl() })
  await locker.connect()
  await locker.query('BEGIN; LOCK TABLE grants IN ACCESS EXCLUSIVE MODE')
  return { release: async () => { await locker.query('ROLLBACK'); await locker.end() } }
}

function harnessDatabaseUrl (): string {
  return (harness.db.options as { connectionString: string }).connectionString
}

/** Resolves once `count` backends of the app wait on a lock: the pool is really held busy. */
async function waitersOnLock (count: number): Promise<void> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const { rows: [{ n }] } = await harness.db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()")
    if (n >= count) return
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
  throw new Error(`${count} statements never waited on the lock`)
}

const metricValue = async (pattern: RegExp) =>
  Number(pattern.exec(await (await fetch(`${harness.baseUrl}/metrics`)).text())?.[1] ?? NaN)

t.test('session settings reach the server: every statement has a server-side bound', async (t) => {
  const { rows } = await harness.app.db.query<{ name: string, setting: string }>(
    "SELECT name, setting FROM pg_settings WHERE name IN ('statement_timeout', 'plan_cache_mode') ORDER BY name")
  t.same(rows, [
    { name: 'plan_cache_mode', setting: 'force_generic_plan' },
    { name: 'statement_timeout', setting: String(STATEMENT_TIMEOUT_MS) }
  ])
})

t.test('pool held busy → 503 overloaded at once, /readyz 200, the held requests still served', async (t) => {
  t.equal((await list()).status, 200, 'before')
  const lock = await lockGrants()
  let released = false
  // Two requests take both pooled connections and wait on the lock.
  const held = [list(), harness.request(ordersPath(), { method: 'DELETE', token: deleteToken(), json: ['p_read_orders'] })]
  await waitersOnLock(2)

  const shed = await Promise.all([list(), list(), harness.request(ordersPath(), { method: 'DELETE', token: deleteToken(), json: ['p_read_invoices'] })])
  t.notOk(released, 'answered while the pool is still held, not after')
  for (const res of shed) {
    t.equal(res.status, 503)
    t.equal(res.headers.get('retry-after'), '5')
    t.match(res.body, { type: '/problems/overloaded', title: 'Overloaded', status: 503 })
  }
  const ready = await harness.request('/readyz')
  t.equal(ready.status, 200, 'readiness has its own connection: it does not queue behind the pool')

  released = true
  await lock.release()
  const [listed, removed] = await Promise.all(held)
  t.equal(listed.status, 200, 'the request that held a connection is served once the lock is gone')
  t.equal(removed.status, 204)
  const { rows } = await harness.db.query("SELECT 1 FROM grants WHERE client_id = 'app-a' AND permission_id = 'p_read_invoices'")
  t.equal(rows.length, 1, 'a shed DELETE removed nothing')

  const shedLines = logs.filter((line) => line.msg === 'request shed')
  t.ok(shedLines.length >= 3, 'each shed request is logged')
  t.ok(shedLines.every((line) => line.level === 40 && line.reason === 'connection_wait'), 'at warn, with its reason')
  t.notOk(logs.some((line) => Number(line.level) >= 50), 'nothing is logged as an error')
  t.ok(await metricValue(/requests_shed_total\{reason="connection_wait"\} (\d+)/) >= 3, 'counted as shed')
  t.equal(await metricValue(/db_errors_total\{kind="unavailable"\} (\d+)/), 0, 'never counted as an outage')
})

t.test('a statement past DATABASE_STATEMENT_TIMEOUT_MS → the server cancels it: 503 overloaded, nothing changed', async (t) => {
  const lock = await lockGrants()
  let released = false
  t.teardown(async () => { if (!released) await lock.release() })
  const [listed, removal] = await Promise.all([
    list(),
    harness.request(ordersPath(), { method: 'DELETE', token: deleteToken(), json: ['p_read_refunds'] })
  ])
  t.notOk(released, 'cancelled by the server while the lock is still held')
  for (const res of [listed, removal]) t.match(res.body, { type: '/problems/overloaded', status: 503 })
  released = true
  await lock.release()
  const { rows } = await harness.db.query("SELECT 1 FROM grants WHERE client_id = 'app-a' AND permission_id = 'p_read_refunds'")
  t.equal(rows.length, 1, 'the cancelled DELETE removed nothing')
  t.ok(await metricValue(/requests_shed_total\{reason="statement_timeout"\} (\d+)/) >= 2, 'counted as shed')
  t.equal((await list()).status, 200, 'served again')
})

t.test('/readyz: the database refuses the probe one more connection while the pool answers → 200; nobody answers → 503', async (t) => {
  // Connection limits do not bind superusers: the service connects as a role of its own here.
  const adminUrl = await createTestDatabase(t)
  const admin = new pg.Client({ connectionString: adminUrl })
  await admin.connect()
  const role = `app_${randomBytes(4).toString('hex')}`
  const database = new URL(adminUrl).pathname.slice(1)
  await admin.query(`CREATE ROLE ${role} LOGIN PASSWORD 'app-password'`)
  await admin.query(`ALTER DATABASE ${database} OWNER TO ${role}`)
  t.teardown(async () => {
    await admin.end()
    const server = new pg.Client({ connectionString: testDatabaseUrl() })
    await server.connect()
    await server.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`)
    await server.query(`DROP ROLE IF EXISTS ${role}`)
    await server.end()
  })
  const appUrl = Object.assign(new URL(adminUrl), { username: role, password: 'app-password' }).toString()
  const limited = await build(t, { DATABASE_URL: appUrl, DATABASE_POOL_MAX: '2', READINESS_TIMEOUT_MS: '500' })
  await seedDatabase(limited.app.db, ordersFixture())
  const listLimited = () => limited.request(ordersPath(), { token: readToken() })
  await Promise.all([listLimited(), listLimited()]) // both pooled connections open
  const { rows: [{ n }] } = await admin.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE usename = $1', [role])
  await admin.query(`ALTER ROLE ${role} CONNECTION LIMIT ${n}`)
  t.rejects(new pg.Client({ connectionString: appUrl }).connect(), { code: '53300' }, 'the role gets no further connection')

  const traffic = { on: true }
  const steady = (async () => { while (traffic.on) t.equal((await listLimited()).status, 200) })()
  const ready = await limited.request('/readyz')
  traffic.on = false
  await steady
  t.equal(ready.status, 200, 'the pool was answered meanwhile: the database is there')

  const idle = await limited.request('/readyz')
  t.equal(idle.status, 503, 'no probe answer and no other answer within READINESS_TIMEOUT_MS')
  t.match(idle.body, { type: '/problems/database-unavailable' })
})

/**
 * A service whose database is behind a holding proxy (test/support/holding-proxy.ts), seeded, its
 * pool's connection made by a first list: the proxy can then stall this process's loop right after
 * an answer, as a service that lags while its database answers.
 */
async function behindHoldingProxy (t: Test, env: Record<string, string>) {
  const { url, drop } = await newDatabase({ migrated: true })
  const proxy = await holdingProxy(t, url)
  const lagging = await build(t, { DATABASE_URL: proxy.url, ...env }, { database: { url, drop } })
  await lagging.seed(ordersFixture())
  const listLagging = () => lagging.request(ordersPath(), { token: readToken() })
  t.equal((await listLagging()).status, 200, 'served; the pool has its connection')
  return { proxy, lagging, listLagging }
}

t.test('a stall of the event loop past DATABASE_QUERY_TIMEOUT_MS, the database having answered in time: served, not database-unavailable', async (t) => {
  // The bound is on a server that answers nothing; an answer waiting in the socket while the loop
  // was busy is read before the query is ended as unanswered.
  const { proxy, lagging, listLagging } = await behindHoldingProxy(t, { DATABASE_STATEMENT_TIMEOUT_MS: '200', DATABASE_QUERY_TIMEOUT_MS: '300' })
  let connects = 0
  lagging.app.db.on('connect', () => { connects++ })
  proxy.stallAfterNextAnswer(1000)
  const answer = await listLagging()
  t.equal(answer.status, 200, 'the database answered at once')
  const metrics = await (await fetch(`${lagging.baseUrl}/metrics`)).text()
  t.match(metrics, /db_errors_total\{kind="unavailable"\} 0\n/, 'no outage counted')
  t.equal((await listLagging()).status, 200)
  t.equal(connects, 0, 'its connection kept: not ended as unanswered once its answer was read')
})

t.test('a stall of the event loop past DATABASE_CONNECTION_WAIT_MS, the pooled connection answered in time: the request queued for it is served, not shed', async (t) => {
  // The connection the request waits for became free in time: its holder's answer reached the
  // socket while the loop was busy. The wait must read it before it gives up (503 overloaded),
  // and on a replica, before the replica is marked down for it.
  const { proxy, lagging, listLagging } = await behindHoldingProxy(t, { DATABASE_POOL_MAX: '1', DATABASE_CONNECTION_WAIT_MS: '300' })
  proxy.hold()
  const sent = proxy.nextSend()
  const holder = listLagging()
  await sent
  const queued = listLagging()
  await until('the second request queued for the connection', () => lagging.app.db.waitingCount === 1)
  proxy.stallAfterNextAnswer(1000)
  proxy.release()
  t.equal((await holder).status, 200, 'the holder served')
  const answer = await queued
  t.equal(answer.status, 200, 'the connection was free within the wait')
  const metrics = await (await fetch(`${lagging.baseUrl}/metrics`)).text()
  t.notMatch(metrics, /requests_shed_total\{reason="connection_wait"\} [1-9]/, 'nothing shed')
})
