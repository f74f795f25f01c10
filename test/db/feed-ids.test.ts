// Migration 0007 in the database itself, whoever writes: a change's id is its transaction's id ×
// 65536 + its number within the transaction (an id a writer supplies is overwritten), at most 65536
// changes a transaction (PH001); each change is announced at commit on permission_changes; a prune
// records the largest id it deleted, a mark that never goes down. The feed's order rests on these.
import { readFileSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import { migrate } from 'postgres-migrations'
import t, { type Test } from 'tap'
import { migrateDatabase } from '../../db/migrate.js'
import { pruneChanges } from '../../db/queries/history.js'
import { migrationsDir } from '../../src/project-root.js'
import { createTestDatabase } from '../support/database.js'

const TOO_MANY_CHANGES = 'PH001'
const PER_TRANSACTION = 65536n
// Long enough for a notification to cross a loaded machine; only waited for, never assumed.
const NOTIFY_DEADLINE_MS = 20_000

/** A pool on a new database, migrated through `upTo` (a file name prefix, exclusive) or to the end. */
async function database (t: Test, upTo?: string): Promise<pg.Pool> {
  const url = await createTestDatabase(t)
  const pool = new pg.Pool({ connectionString: url, max: 4 })
  pool.on('error', () => {}) // the database is dropped with FORCE at teardown
  t.teardown(() => pool.end())
  if (upTo === undefined) {
    await migrateDatabase(pool, migrationsDir)
    return pool
  }
  const files = readdirSync(migrationsDir).filter((file) => file < upTo)
  const client = await pool.connect()
  try {
    await migrate({ client }, t.testdir(Object.fromEntries(files.map((file) => [file, readFileSync(join(migrationsDir, file), 'utf8')]))))
  } finally {
    client.release()
  }
  return pool
}

/** A client of its own, for a transaction the test holds open. */
async function connection (t: Test, pool: pg.Pool): Promise<pg.PoolClient> {
  const client = await pool.connect()
  t.teardown(() => client.release())
  return client
}

const insertSql = (count: number, ago = '0 seconds') => `
  INSERT INTO permission_changes (at, resource_id, client_id, action, permission_ids, request_id)
  SELECT now() - interval '${ago}', 'orders-api', 'app-' || n, 'granted', '{p_read_orders}', 'req-' || n
  FROM generate_series(1, ${count}) AS n
  RETURNING id::text`

/** `count` changes recorded `ago` by a plain INSERT (one statement, so one transaction): their ids. */
async function record (db: pg.Pool | pg.PoolClient, count = 1, ago?: string): Promise<bigint[]> {
  return (await db.query<{ id: string }>(insertSql(count, ago))).rows.map(({ id }) => BigInt(id))
}

const currentTransaction = async (client: pg.PoolClient) =>
  BigInt((await client.query<{ xid: string }>('SELECT pg_current_xact_id()::text AS xid')).rows[0].xid)

t.test('migration 0007 on a database with history: the ids given before are kept, and every new id is larger', async (t) => {
  const pool = await database(t, '0007')
  await record(pool, 3, '2 days')
  const before = (await pool.query('SELECT * FROM permission_changes ORDER BY id')).rows
  t.same(before.map(({ id }) => id), ['1', '2', '3'], 'identity ids before 0007')
  t.same(await migrateDatabase(pool, migrationsDir), ['0007_change_feed.sql', '0008_grants_described_per_statement.sql', '0009_version_follows_shown_grants.sql', '0010_renames_lock_authorizations_first.sql', '0011_trigger_functions_search_path.sql', '0012_prune_mark_guarded.sql', '0013_change_times_in_range.sql', '0014_versions_outlive_truncate.sql', '0015_prune_mark_below_next_ids.sql'])
  t.same((await pool.query('SELECT * FROM permission_changes ORDER BY id')).rows, before, 'every row, every column, as it was')
  const client = await connection(t, pool)
  await client.query('BEGIN')
  const xid = await currentTransaction(client)
  const [added] = await record(client)
  await client.query('COMMIT')
  t.equal(added, xid * PER_TRANSACTION, 'the next change is numbered from its transaction')
  t.ok(added > 3n, 'above every id given before')
})

t.test('migration 0007 refuses a history whose ids reach the ones it would number from, and leaves it as it was', async (t) => {
  const pool = await database(t, '0007')
  await pool.query(`INSERT INTO permission_changes (id, resource_id, client_id, action, permission_ids, request_id)
    OVERRIDING SYSTEM VALUE VALUES (4000000000000000000, 'orders-api', 'app-a', 'granted', '{p}', 'far-ahead')`)
  await t.rejects(migrateDatabase(pool, migrationsDir), { message: /permission_changes holds ids above the ones this migration begins numbering from/ })
  const { rows } = await pool.query("SELECT count(*)::int AS n FROM pg_trigger WHERE tgname = 'permission_changes_numbered'")
  t.same(rows, [{ n: 0 }], 'not applied')
  t.same((await pool.query('SELECT id::text FROM permission_changes')).rows, [{ id: '4000000000000000000' }])
})

t.test('ids: the trigger overwrites an id a writer supplies; one transaction\'s are consecutive from xid × 65536, across statements; a rolled-back savepoint gives its numbers back', async (t) => {
  const pool = await database(t)
  const client = await connection(t, pool)

  await client.query('BEGIN')
  const xid = await currentTransaction(client)
  const { rows: [supplied] } = await client.query<{ id: string }>(`
    INSERT INTO permission_changes (id, resource_id, client_id, action, permission_ids, request_id)
    VALUES (42, 'orders-api', 'app-a', 'granted', '{p}', 'supplied') RETURNING id::text`)
  const three = await record(client, 3)
  await client.query('SAVEPOINT attempt')
  const [undone] = await record(client)
  await client.query('ROLLBACK TO SAVEPOINT attempt')
  const [last] = await record(client)
  await client.query('COMMIT')
  const base = xid * PER_TRANSACTION
  t.equal(BigInt(supplied.id), base, 'the supplied id 42 is replaced by the first of the transaction')
  t.same(three, [base + 1n, base + 2n, base + 3n], 'a statement\'s rows, in order')
  t.equal(undone, base + 4n)
  t.equal(last, base + 4n, 'the number of the rolled-back row is given again')
  t.same((await pool.query('SELECT id::text FROM permission_changes ORDER BY id')).rows.map(({ id }) => BigInt(id)), [base, ...three, last])

  // The count is the transaction's: the next one on the same connection starts again at 0.
  await client.query('BEGIN')
  const nextXid = await currentTransaction(client)
  const [first] = await record(client)
  await client.query('COMMIT')
  t.ok(nextXid > xid)
  t.equal(first, nextXid * PER_TRANSACTION)
  const [alone] = await record(pool)
  t.equal(alone % PER_TRANSACTION, 0n, 'a statement on its own is a transaction of its own: number 0')
  t.ok(alone > first)
})

t.test('a transaction recording more than 65536 changes fails with PH001 and records none; 65536 fit', async (t) => {
  const pool = await database(t)
  await t.rejects(pool.query(insertSql(65537)), {
    code: TOO_MANY_CHANGES, table: 'permission_changes', message: 'permission_changes: one transaction records at most 65536 changes', hint: /Commit between batches/
  }, 'one INSERT of 65537 rows')
  t.same((await pool.query('SELECT count(*)::int AS n FROM permission_changes')).rows, [{ n: 0 }], 'nothing recorded')

  const client = await connection(t, pool)
  await client.query('BEGIN')
  const xid = await currentTransaction(client)
  const { rows: [full] } = await client.query<{ first: string, last: string, n: number }>(`
    WITH recorded AS (${insertSql(65536)}) SELECT min(id::bigint)::text AS first, max(id::bigint)::text AS last, count(*)::int AS n FROM recorded`)
  t.same(full, { first: String(xid * PER_TRANSACTION), last: String(xid * PER_TRANSACTION + 65535n), n: 65536 }, 'the 65536th is number 65535')
  await t.rejects(record(client), { code: TOO_MANY_CHANGES }, 'one more in the same transaction')
  await client.query('ROLLBACK')
  t.same((await pool.query('SELECT count(*)::int AS n FROM permission_changes')).rows, [{ n: 0 }], 'rolled back')
  const [again] = await record(pool)
  t.equal(again % PER_TRANSACTION, 0n, 'the next transaction records again, from number 0')
})

t.test('every change, written by any writer, is announced on permission_changes at commit, not before; a rolled-back one never', async (t) => {
  const pool = await database(t)
  const listener = new pg.Client({ connectionString: (pool as unknown as { options: { connectionString: string } }).options.connectionString })
  await listener.connect()
  t.teardown(() => listener.end())
  const received: Array<Record<string, string>> = []
  listener.on('notification', ({ channel, payload }) => { if (channel === 'permission_changes') received.push(JSON.parse(payload!)) })
  await listener.query('LISTEN permission_changes')
  const waitFor = async (count: number) => {
    for (const deadline = Date.now() + NOTIFY_DEADLINE_MS; received.length < count && Date.now() < deadline;) {
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
  }

  const writer = await connection(t, pool)
  await writer.query('BEGIN')
  const { rows } = await writer.query<{ id: string, resource_id: string, client_id: string, action: string }>(`
    INSERT INTO permission_changes (resource_id, client_id, action, permission_ids, request_id)
    VALUES ('orders-api', 'app-a', 'granted', '{p1}', 'r1'), ('other-api', 'app-b', 'unauthorized', '{p2, p3}', 'r2')
    RETURNING id::text, resource_id, client_id, action`)
  const { rows: more } = await writer.query<{ id: string, resource_id: string, client_id: string, action: string }>(`
    INSERT INTO permission_changes (resource_id, client_id, action, permission_ids, request_id)
    VALUES ('billing-api', 'app-c', 'granted', '{p4}', 'r3') RETURNING id::text, resource_id, client_id, action`)
  // A round trip on the listening connection delivers whatever was sent to it so far.
  await listener.query('SELECT 1')
  await new Promise((resolve) => setTimeout(resolve, 200))
  t.same(received, [], 'nothing before the commit')
  await writer.query('COMMIT')
  await waitFor(3)
  t.same(received, [...rows, ...more], 'one notification a change, {id, resource_id, client_id, action}, in id order')

  await writer.query('BEGIN')
  await record(writer)
  await writer.query('ROLLBACK')
  const [marker] = await record(pool)
  await waitFor(4)
  t.same(received.slice(3), [{ id: String(marker), resource_id: 'orders-api', client_id: 'app-1', action: 'granted' }],
    'the committed change after it is announced; the rolled-back one is not')
})

t.test('a prune records the largest id it deleted in permission_changes_pruned; the mark never goes down', async (t) => {
  const pool = await database(t)
  const mark = async () => (await pool.query<{ id: string }>('SELECT through_id::text AS id FROM permission_changes_pruned')).rows.map(({ id }) => BigInt(id))
  t.same(await mark(), [], 'no prune, no mark')
  const oldest = await record(pool, 3, '40 days')
  const [twentyDays] = await record(pool, 1, '20 days')
  await record(pool, 1)
  t.equal(await pruneChanges(pool, 60), 0)
  t.same(await mark(), [], 'a prune that deletes nothing sets no mark')

  t.equal(await pruneChanges(pool, 30), 3)
  t.same(await mark(), [oldest[2]], 'the largest of the ids deleted')
  t.equal(await pruneChanges(pool, 30), 0)
  t.same(await mark(), [oldest[2]], 'unchanged by a prune that deletes nothing')
  t.equal(await pruneChanges(pool, 10), 1)
  t.same(await mark(), [twentyDays])

  // Another writer's rows whose ages are not in id order: a change goes only with every change
  // before it in the feed, so every change kept stays above the mark.
  const [threeDays] = await record(pool, 1, '3 days')
  const [eightDays] = await record(pool, 1, '8 days')
  t.ok(threeDays < eightDays)
  t.equal(await pruneChanges(pool, 5), 0, 'today\'s change comes first in the feed: nothing after it goes')
  t.same(await mark(), [twentyDays])
  t.same((await pool.query('SELECT count(*)::int AS n FROM permission_changes_pruned')).rows, [{ n: 1 }], 'one row')
})

t.test('a prune whose DELETE fails (a lock wait past lock_timeout) rejects, deletes nothing, and its connection is closed, not put back', async (t) => {
  const pool = await database(t)
  await record(pool, 1, '40 days')
  // SHARE mode lets the prune's first read through and holds its DELETE.
  const holder = await connection(t, pool)
  await holder.query('BEGIN; LOCK TABLE permission_changes IN SHARE MODE')
  const impatient = new pg.Pool({ connectionString: pool.options.connectionString, max: 1, options: '-c lock_timeout=200' })
  t.teardown(() => impatient.end())
  await t.rejects(pruneChanges(impatient, 30), { code: '55P03' })
  t.equal(impatient.totalCount, 0, 'the connection whose transaction failed was closed, not put back')
  await holder.query('ROLLBACK')
  t.same((await pool.query('SELECT count(*)::int AS n FROM permission_changes')).rows, [{ n: 1 }], 'nothing deleted')
})

t.test('a prune never leaves a change below its mark: ages out of feed order wait for the changes before them', async (t) => {
  const pool = await database(t)
  // A writer that gives `at` itself (a backfill) records a newer change first, then an older one.
  const [twentyDays] = await record(pool, 1, '20 days')
  const [fortyDays] = await record(pool, 1, '40 days')
  t.equal(await pruneChanges(pool, 30), 0, 'the 40-day change is after a 20-day one in the feed: it stays')
  t.equal(await pruneChanges(pool, 10), 2, 'both go once the first is old enough')
  t.same((await pool.query<{ id: string }>('SELECT through_id::text AS id FROM permission_changes_pruned')).rows.map(({ id }) => BigInt(id)), [fortyDays])
  const [kept] = await record(pool, 1)
  t.ok(kept > fortyDays && twentyDays < fortyDays, 'what is kept is after the mark')
})

t.test('a prune waits, up to waitMs, for a transaction still open below what it would delete; committed meanwhile, its change goes too', async (t) => {
  const pool = await database(t)
  const client = await connection(t, pool)
  await client.query('BEGIN')
  const [open] = await record(client, 1, '40 days')
  const [committed] = await record(pool, 1, '40 days')
  t.ok(open < committed, 'the open transaction holds the smaller id: the committed change is above the horizon')
  const started = Date.now()
  t.equal(await pruneChanges(pool, 30, { waitMs: 300 }), 0, 'the transaction still open after waitMs: only what is below it goes, nothing here')
  t.ok(Date.now() - started >= 300, 'it waited out waitMs first')
  const pruning = pruneChanges(pool, 30, { waitMs: 60_000 })
  await sleep(300)
  await client.query('COMMIT')
  t.equal(await pruning, 2, 'committed while the prune waited: both go')
})
