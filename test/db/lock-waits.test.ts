// A change waiting on locks is a database under load, never one that is down: its lock waits are
// bounded by the server's statement timeout (503 overloaded), and the client-side query bound,
// meant for a server that answers nothing, must not end the connection first.
import pg from 'pg'
import t from 'tap'
import { ordersFixture, ordersPath } from '../support/fixtures.js'
import { build } from '../support/harness.js'
import { deleteToken } from '../support/tokens.js'

const STATEMENT_TIMEOUT_MS = 2000
const QUERY_TIMEOUT_MS = 2500

const harness = await build(t, {
  DATABASE_STATEMENT_TIMEOUT_MS: String(STATEMENT_TIMEOUT_MS),
  DATABASE_QUERY_TIMEOUT_MS: String(QUERY_TIMEOUT_MS)
})
await harness.seed(ordersFixture())
const url = (harness.db.options as { connectionString: string }).connectionString
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

async function connection (): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  t.teardown(() => client.end().catch(() => {}))
  return client
}

/** Resolves once a backend of the app waits on an advisory lock. */
async function appWaitsOnAdvisoryLock (): Promise<void> {
  for (let attempt = 0; attempt < 400; attempt++) {
    const { rows: [{ n }] } = await harness.db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_locks WHERE NOT granted AND locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")
    if (n > 0) return
    await sleep(10)
  }
  throw new Error('no backend waited on the advisory lock')
}

t.test('two lock waits, each shorter than the statement timeout, together past the query bound: overloaded (each may wait half of it), not an outage', async (t) => {
  // Another writer holds the change's advisory lock, a third the authorization's row.
  const advisory = await connection()
  await advisory.query("SELECT pg_advisory_lock(hashtext('orders-api'), hashtext('app-a'))")
  const row = await connection()
  await row.query("BEGIN; SELECT FROM authorizations WHERE resource_id = 'orders-api' AND client_id = 'app-a' FOR UPDATE")

  const removal = harness.request(ordersPath(), { method: 'DELETE', token: deleteToken(), json: ['p_read_orders'] })
  await appWaitsOnAdvisoryLock()
  // Each held 0.8 of the statement timeout, one after the other: 1.6 of it together, past the
  // query bound (1.25 of it, swept every 250 ms).
  await sleep(STATEMENT_TIMEOUT_MS * 0.8)
  await advisory.query("SELECT pg_advisory_unlock(hashtext('orders-api'), hashtext('app-a'))")
  await sleep(STATEMENT_TIMEOUT_MS * 0.8)
  await row.query('ROLLBACK')

  const res = await removal
  t.equal(res.status, 503)
  t.match(res.body, { type: '/problems/overloaded' }, 'a lock wait is load: the server cancels it, the connection is not ended as an outage')
  t.equal(res.headers.get('retry-after'), '5')
  const { rows } = await harness.db.query("SELECT 1 FROM grants WHERE client_id = 'app-a' AND resource_id = 'orders-api' AND permission_id = 'p_read_orders'")
  t.equal(rows.length, 1, 'nothing removed')
  t.equal((await harness.request(ordersPath(), { method: 'DELETE', token: deleteToken(), json: ['p_read_orders'] })).status, 204, 'served again')
})
