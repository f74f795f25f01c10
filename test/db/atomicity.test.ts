// A DELETE cut off by a database failure halfway through its rows leaves all of them or none.
import { setTimeout as sleep } from 'node:timers/promises'
import t, { type Test } from 'tap'
import { ordersFixture, ordersPath } from '../support/fixtures.js'
import { build } from '../support/harness.js'
import { deleteToken, token } from '../support/tokens.js'

t.test('the connection of a DELETE is killed after it removed some rows → 503, none removed', async (t) => {
  const harness = await build(t)
  await harness.seed(ordersFixture())
  const grantsOfA = async () => (await harness.db.query(
    "SELECT permission_id FROM grants WHERE resource_id = 'orders-api' AND client_id = 'app-a' ORDER BY 1")).rows.map((row) => row.permission_id)
  const before = await grantsOfA()

  // Another transaction holds the last of the three rows in index order, so the DELETE gets past
  // p_create_orders and p_read_orders and waits on p_update_orders.
  const locker = await harness.db.connect()
  t.teardown(() => locker.release())
  await locker.query('BEGIN')
  await locker.query("SELECT 1 FROM grants WHERE client_id = 'app-a' AND permission_id = 'p_update_orders' FOR UPDATE")

  const pending = harness.request(ordersPath(), {
    method: 'DELETE', token: deleteToken(), json: ['p_read_orders', 'p_create_orders', 'p_update_orders']
  })
  let pid: number | undefined
  for (let attempt = 0; attempt < 100 && pid === undefined; attempt++) {
    const { rows } = await harness.db.query<{ pid: number }>(`
      SELECT pid FROM pg_stat_activity
      WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%DELETE FROM grants%'`)
    pid = rows[0]?.pid
    if (pid === undefined) await sleep(50)
  }
  t.ok(pid, 'the DELETE is waiting, halfway through its rows')
  await harness.db.query('SELECT pg_terminate_backend($1)', [pid])
  const res = await pending
  t.equal(res.status, 503)
  t.match(res.body, { type: '/problems/database-unavailable' })
  await locker.query('ROLLBACK')
  t.same(await grantsOfA(), before, 'all three grants are still there')

  const retry = await harness.request(ordersPath(), {
    method: 'DELETE', token: deleteToken(), json: ['p_read_orders', 'p_create_orders', 'p_update_orders']
  })
  t.equal(retry.status, 204, 'the retry, with the database back, removes them')
  t.equal((await grantsOfA()).length, before.length - 3)
})

// The DELETE sets its own bound in its transaction: with the session settings sent on each
// connection, and behind a transaction pooler, where none are sent (DATABASE_POOLER=transaction;
// PostgreSQL itself stands in for the pooler here, its database without a default bound). A
// DELETE without its bound would wait for the lock until the client's query timeout, an outage.
for (const [label, env] of [['settings sent with each connection', {}], ['no session settings (a transaction pooler)', { DATABASE_POOLER: 'transaction' }]] as const) {
  t.test(`${label}: a DELETE stuck past its statement timeout → 503 overloaded, and nothing is removed later either`, async (t) => {
    await deleteStuckPastItsTimeout(t, { DATABASE_STATEMENT_TIMEOUT_MS: '1000', DATABASE_QUERY_TIMEOUT_MS: '3000', ...env })
  })
}

async function deleteStuckPastItsTimeout (t: Test, env: Record<string, string>) {
  const harness = await build(t, env)
  await harness.seed(ordersFixture())
  const count = async () => (await harness.db.query("SELECT count(*)::int AS n FROM grants WHERE client_id = 'app-a'")).rows[0].n
  const before = await count()
  const locker = await harness.db.connect()
  t.teardown(() => locker.release())
  await locker.query('BEGIN')
  await locker.query("SELECT 1 FROM grants WHERE client_id = 'app-a' AND permission_id = 'p_update_orders' FOR UPDATE")
  const started = Date.now()
  const res = await harness.request(ordersPath(), {
    method: 'DELETE', token: deleteToken(), json: ['p_read_orders', 'p_create_orders', 'p_update_orders']
  })
  t.equal(res.status, 503)
  // The server answered (it cancelled the statement): the database is there, just not in time.
  t.match(res.body, { type: '/problems/overloaded' })
  t.ok(Date.now() - started < 8_000, `answered in ${Date.now() - started} ms`)
  await locker.query('ROLLBACK')
  // Wait for the event itself: no transaction of the app still holds the DELETE, so any commit it
  // could make has happened.
  for (let attempt = 0; attempt < 100; attempt++) {
    const { rows } = await harness.db.query(`
      SELECT 1 FROM pg_stat_activity
      WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE '%DELETE FROM grants%' AND state <> 'idle'`)
    if (rows.length === 0) break
    await sleep(20)
  }
  t.equal(await count(), before, 'the timed-out DELETE was rolled back, not committed once the lock went')
}

// Changes of one authorization are applied one after the other, each seeing what the one before it
// did: the locks are taken before the change statement's snapshot.
t.test('a DELETE that waits for a POST of the same id to commit removes what the POST granted', async (t) => {
  const harness = await build(t)
  await harness.seed(ordersFixture())
  const granted = async () => (await harness.db.query(
    "SELECT 1 FROM grants WHERE resource_id = 'orders-api' AND client_id = 'app-a' AND permission_id = 'p_update_refunds'")).rowCount
  t.equal(await granted(), 0)
  // A POST on another replica, mid-transaction: its locks taken and its grant made, not committed.
  const post = await harness.db.connect()
  t.teardown(() => post.release())
  await post.query(`BEGIN;
    SELECT pg_advisory_xact_lock(hashtext('orders-api'), hashtext('app-a'));
    SELECT FROM authorizations WHERE resource_id = 'orders-api' AND client_id = 'app-a' FOR UPDATE;
    INSERT INTO grants (resource_id, client_id, permission_id) VALUES ('orders-api', 'app-a', 'p_update_refunds')`)
  const pending = harness.request(ordersPath(), { method: 'DELETE', token: deleteToken(), json: ['p_update_refunds'] })
  let waiting = false
  for (let attempt = 0; attempt < 100 && !waiting; attempt++) {
    const { rowCount } = await harness.db.query(`
      SELECT 1 FROM pg_stat_activity
      WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%pg_advisory_xact_lock%' AND pid <> $1`, [(post as unknown as { processID: number }).processID])
    waiting = rowCount! > 0
    if (!waiting) await sleep(50)
  }
  t.ok(waiting, 'the DELETE waits for the POST')
  await post.query('COMMIT')
  const res = await pending
  t.equal(res.status, 204)
  t.equal(await granted(), 0, 'the grant the POST made is removed')
  const { rows } = await harness.db.query("SELECT action, permission_ids FROM permission_changes WHERE client_id = 'app-a' ORDER BY id")
  t.same(rows.at(-1), { action: 'unauthorized', permission_ids: ['p_update_refunds'] }, 'and the history says so')
})

t.test('a POST that PostgreSQL fails to break a deadlock is run again → 204, granted once', async (t) => {
  const harness = await build(t)
  // Two clients, each holding one of two permissions; the POST grants the first to the second client.
  await harness.db.query(`
    INSERT INTO resources (id) VALUES ('cycle-api');
    INSERT INTO permissions (id, resource_id, name) VALUES ('cycle-p1', 'cycle-api', 'read:cycle'), ('cycle-p2', 'cycle-api', 'write:cycle');
    INSERT INTO clients (id) VALUES ('cycle-c1'), ('cycle-c2');
    INSERT INTO authorizations (resource_id, client_id) VALUES ('cycle-api', 'cycle-c1'), ('cycle-api', 'cycle-c2');
    INSERT INTO grants (resource_id, client_id, permission_id) VALUES ('cycle-api', 'cycle-c1', 'cycle-p1'), ('cycle-api', 'cycle-c2', 'cycle-p2')`)
  // An administrator describes both permissions anew in one transaction, one after the other. It
  // waits 10 s before it looks for a deadlock, the POST 1 s (the default): the POST is the one failed.
  const admin = await harness.db.connect()
  t.teardown(() => admin.release())
  await admin.query("BEGIN; SET LOCAL deadlock_timeout = '10s'; UPDATE permissions SET description = 'first' WHERE id = 'cycle-p1'")
  const pending = harness.request('/resources/cycle-api/authorized_clients/cycle-c2/permissions', {
    method: 'POST', token: token({ scope: 'create:resource' }), json: ['cycle-p1']
  })
  // The POST holds cycle-c2's authorization and waits for cycle-p1's row (its description check, 0008).
  let waiting = false
  for (let attempt = 0; attempt < 100 && !waiting; attempt++) {
    const { rowCount } = await harness.db.query(`
      SELECT 1 FROM pg_stat_activity
      WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO grants%'`)
    waiting = rowCount! > 0
    if (!waiting) await sleep(50)
  }
  t.ok(waiting, 'the POST waits for the administrator')
  // Now the administrator waits for cycle-c2's authorization (0010): a cycle, which PostgreSQL breaks
  // by failing the POST's transaction; the administrator's statement then goes on.
  await admin.query("UPDATE permissions SET description = 'second' WHERE id = 'cycle-p2'")
  await admin.query('COMMIT')
  const res = await pending
  t.equal(res.status, 204, res.text)
  const { rows } = await harness.db.query("SELECT permission_id, permission_description FROM grants WHERE client_id = 'cycle-c2' ORDER BY 1")
  t.same(rows, [
    { permission_id: 'cycle-p1', permission_description: 'first' },
    { permission_id: 'cycle-p2', permission_description: 'second' }
  ], 'granted once, with the description committed last')
  const history = await harness.db.query("SELECT action, permission_ids FROM permission_changes WHERE client_id = 'cycle-c2'")
  t.same(history.rows, [{ action: 'granted', permission_ids: ['cycle-p1'] }], 'one change in the history')
})
