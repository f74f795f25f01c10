// The service through Debian's PgBouncer in transaction-pooling mode, as behind a managed pooler:
// no session state and no named prepared statements may be relied on across transactions.
// Needs the pgbouncer binary (CI installs Debian's package); skipped with a message otherwise, and
// a failure under CI.
import t, { type Test } from 'tap'
import { seedDatabase } from '../../db/seed.js'
import { ordersFixture, ordersPath } from '../support/fixtures.js'
import { createTestDatabase } from '../support/database.js'
import { build } from '../support/harness.js'
import { pgbouncerBinary as binary, startPgBouncer } from '../support/pgbouncer.js'
import { deleteToken, readToken } from '../support/tokens.js'

const SERVER_CONNECTIONS = 3

if (!binary) {
  if (process.env.CI) throw new Error('pgbouncer is not installed, and CI must run the service through it')
  t.plan(0, 'pgbouncer is not installed (apt-get install pgbouncer); CI installs it')
} else {
  const directUrl = new URL(await createTestDatabase(t))
  const bouncerUrl = await startPgBouncer(t, binary, directUrl, { serverConnections: SERVER_CONNECTIONS })

  const harness = await build(t, {
    DATABASE_URL: bouncerUrl.toString(),
    // The migration lock is a session lock: it needs a direct connection.
    MIGRATIONS_DATABASE_URL: directUrl.toString(),
    DATABASE_POOL_MAX: '20',
    // PgBouncer 1.18 (Debian 12) in transaction mode cannot keep named prepared statements.
    DATABASE_PREPARED_STATEMENTS: 'false',
    // PgBouncer refuses startup parameters: statement_timeout belongs on the role here.
    DATABASE_POOLER: 'transaction'
  })
  await seedDatabase(harness.app.db, ordersFixture())

  t.test('the app\'s connections really share a few server connections (transaction pooling)', async (t) => {
    const pids = await Promise.all(Array.from({ length: 20 }, () =>
      harness.app.db.query<{ pid: number }>('SELECT pg_backend_pid() AS pid, pg_sleep(0.05)').then(({ rows }) => rows[0].pid)))
    t.ok(new Set(pids).size <= SERVER_CONNECTIONS, `${new Set(pids).size} server connections for 20 concurrent queries`)
  })

  t.test('both operations behave exactly as on a direct connection, under concurrency', async (t) => {
    const sorts = ['name.asc', 'description.desc,name', 'id.desc', 'name.desc,id']
    const lists = await Promise.all(Array.from({ length: 60 }, (_, i) =>
      harness.request(`${ordersPath()}?limit=3&offset=${i % 4}&sort_by=${sorts[i % sorts.length]}`, { token: readToken() })))
    t.same([...new Set(lists.map(({ status }) => status))], [200])
    t.ok(lists.every(({ headers }) => headers.get('x-total-count') === '10'))

    const unknown = await harness.request(ordersPath(), { method: 'DELETE', token: deleteToken(), json: ['p_read_orders', 'p_typo'] })
    t.equal(unknown.status, 422)
    const removals = await Promise.all(['p_read_orders', 'p_create_orders', 'p_read_orders', 'p_update_orders'].map((id) =>
      harness.request(ordersPath(), { method: 'DELETE', token: deleteToken(), json: [id] })))
    t.same(removals.map(({ status }) => status), [204, 204, 204, 204])
    const after = await harness.request(`${ordersPath()}?limit=500`, { token: readToken() })
    t.equal(after.headers.get('x-total-count'), '7')
    t.notOk((after.body as Array<{ id: string }>).some(({ id }) => ['p_read_orders', 'p_create_orders', 'p_update_orders'].includes(id)))
  })

  /** The error a start fails with when its pool connects to `databaseUrl` (a start that succeeds fails the test). */
  async function startFailure (t: Test, databaseUrl: URL, env: Record<string, string> = {}): Promise<Error & { code?: string, cause?: unknown }> {
    // Migrations on a direct connection of their own: they succeed, and the pool's first query is the one that fails.
    const started = build(t, { DATABASE_URL: databaseUrl.toString(), MIGRATIONS_DATABASE_URL: directUrl.toString(), DATABASE_PREPARED_STATEMENTS: 'false', ...env })
    return started.then(() => { throw new Error('the start succeeded') }, (error: Error) => error)
  }

  t.test('without DATABASE_POOLER=transaction the start fails, saying what to set', async (t) => {
    const error = await startFailure(t, bouncerUrl)
    t.match(error.message, /unsupported startup parameter.*set DATABASE_POOLER=transaction/)
    t.match(error.cause, { code: '08P01', message: /unsupported startup parameter/ }, 'the pooler\'s own error kept as the cause')
  })

  // The advice is for that refusal only: any other failure of the pool's first query stops the start as it is.
  t.test('a first query failing for another reason stops the start with its own error', async (t) => {
    const missingDatabase = new URL(directUrl)
    missingDatabase.pathname = '/no_such_database'
    const error = await startFailure(t, missingDatabase)
    t.match(error, { code: '3D000', message: /database "no_such_database" does not exist/ })
    t.notMatch(error.message, /DATABASE_POOLER/)
  })

  t.test('with DATABASE_POOLER=transaction no settings are sent: a refusal by the pooler is its own error', async (t) => {
    const unknownToBouncer = new URL(bouncerUrl)
    unknownToBouncer.pathname = '/not_in_pgbouncer_ini'
    const error = await startFailure(t, unknownToBouncer, { DATABASE_POOLER: 'transaction' })
    // PgBouncer 1.18 says "bouncer config error" for a database missing from its configuration.
    t.match(error, { code: '08P01', message: /bouncer config error/ })
    t.notMatch(error.message, /DATABASE_POOLER/)
  })

  t.test('readiness goes through the pooler too', async (t) => {
    t.equal((await harness.request('/readyz')).status, 200)
  })
}
