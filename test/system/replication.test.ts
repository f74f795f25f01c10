// test/support/replication.ts itself, on real processes (Debian's PostgreSQL, which CI installs): the
// replica follows the primary, a paused replay holds a received write back until it resumes, the
// replica refuses writes, each server can be stopped and started again without the other, and a
// start ends the servers that a process killed with SIGKILL left behind.
import { existsSync, readlinkSync } from 'node:fs'
import { dirname } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import t from 'tap'
import { running } from '../../db/cluster-folders.js'
import { reportThenSigkill } from '../support/killed-fixture.js'
import { replicatedPostgres, skipUnlessPostgresServer } from '../support/replication.js'

skipUnlessPostgresServer(t, 'the replication helper\'s test')

/**
 * A pair started by a process of its own, which is then killed with SIGKILL, as a test runner's
 * timeout kills a test file: no hook runs, and its servers (started by pg_ctl, not its children) stay.
 */
async function pairLeftBySigkill (): Promise<{ postmasters: number[], folder: string, killed: boolean, survived: boolean }> {
  const { report: { postmasters }, killed } = await reportThenSigkill<{ postmasters: number[] }>('test/system/replication-leftover.fixture.ts')
  // A postmaster's working folder is its data folder, in the pair's folder.
  const folder = dirname(readlinkSync(`/proc/${postmasters[0]}/cwd`))
  return { postmasters, folder, killed, survived: postmasters.length === 2 && postmasters.every(running) }
}

const leftover = await pairLeftBySigkill()
const cluster = await replicatedPostgres(t)

/** One statement on a connection of its own: the servers are stopped between statements. */
async function query<R extends pg.QueryResultRow> (url: string, sql: string, values: unknown[] = []): Promise<R[]> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return (await client.query<R>(sql, values)).rows
  } finally {
    await client.end()
  }
}

const names = (url: string) => query<{ name: string }>(url, 'SELECT name FROM item ORDER BY name').then((rows) => rows.map(({ name }) => name))
const write = (name: string) => query(cluster.primaryUrl, 'INSERT INTO item (name) VALUES ($1)', [name])
const lsns = async () => {
  const [{ primary }] = await query<{ primary: string }>(cluster.primaryUrl, 'SELECT pg_current_wal_lsn()::text AS primary')
  const [{ replayed, behind }] = await query<{ replayed: string, behind: boolean }>(cluster.replicaUrl,
    'SELECT pg_last_wal_replay_lsn()::text AS replayed, pg_last_wal_replay_lsn() < $1::pg_lsn AS behind', [primary])
  return { primary, replayed, behind }
}

await query(cluster.primaryUrl, 'CREATE TABLE item (name text PRIMARY KEY)')

t.test('a start ends the servers of a pair whose owner was killed with SIGKILL, and removes its folder', async (t) => {
  t.ok(leftover.killed, 'the owner was alive until SIGKILL ended it')
  t.ok(leftover.survived, 'both servers outlived their owner')
  for (const pid of leftover.postmasters) t.notOk(running(pid), `postmaster ${pid} stopped`)
  t.notOk(existsSync(leftover.folder), `${leftover.folder} removed`)
})

t.test('a row written on the primary is on the replica after waitForReplay(), which is a hot standby', async (t) => {
  await write('first')
  await cluster.waitForReplay()
  t.same(await names(cluster.replicaUrl), ['first'])
  t.same(await query(cluster.replicaUrl, 'SELECT pg_is_in_recovery() AS standby'), [{ standby: true }])
  t.same(await query(cluster.primaryUrl, 'SELECT pg_is_in_recovery() AS standby'), [{ standby: false }])
})

t.test('with replay paused, a write the replica has received is not shown until replay resumes', async (t) => {
  await cluster.pauseReplay()
  t.same(await query(cluster.replicaUrl, 'SELECT pg_get_wal_replay_pause_state() AS state'), [{ state: 'paused' }])
  await write('second')
  // The WAL is on the replica: what holds the row back is the paused replay, not the network.
  await cluster.waitForReceive()
  t.same(await names(cluster.replicaUrl), ['first'], 'the replica still shows the state before the write')
  const paused = await lsns()
  t.ok(paused.behind, `replayed ${paused.replayed} < primary ${paused.primary}`)
  await t.rejects(cluster.waitForReplay(100), /short of the primary's .* \(replay is paused\)/, 'a bounded wait says why it gave up')

  let replayed = false
  const waiting = cluster.waitForReplay()
  waiting.then(() => { replayed = true }, () => {})
  await sleep(250)
  t.notOk(replayed, 'waitForReplay() waits while replay is paused')
  t.equal((await lsns()).replayed, paused.replayed, 'replay has not moved a quarter of a second later')
  t.same(await names(cluster.replicaUrl), ['first'])

  await cluster.resumeReplay()
  await waiting
  t.same(await names(cluster.replicaUrl), ['first', 'second'], 'resumed, the replica shows the write once waitForReplay() resolves')
  const resumed = await lsns()
  t.notOk(resumed.behind, `replayed ${resumed.replayed} >= primary ${resumed.primary}`)
})

t.test('the replica refuses writes → SQLSTATE 25006 (read_only_sql_transaction)', async (t) => {
  await t.rejects(query(cluster.replicaUrl, 'INSERT INTO item (name) VALUES ($1)', ['on the replica']), { code: '25006' })
  await t.rejects(query(cluster.replicaUrl, 'CREATE TABLE other (id int)'), { code: '25006' })
  t.same(await names(cluster.primaryUrl), ['first', 'second'], 'nothing reached the primary')
})

t.test('the replica stopped refuses connections; started again, it catches up on what it missed', async (t) => {
  await cluster.stopReplica()
  await t.rejects(query(cluster.replicaUrl, 'SELECT 1'), { code: 'ECONNREFUSED' })
  await write('while the replica was down')
  t.same(await names(cluster.primaryUrl), ['first', 'second', 'while the replica was down'], 'the primary does not wait for it')
  await cluster.startReplica()
  await cluster.waitForReplay()
  t.same(await names(cluster.replicaUrl), ['first', 'second', 'while the replica was down'])
})

t.test('the primary stopped: the replica stays readable and read-only; started again, replication resumes', async (t) => {
  await cluster.stopPrimary()
  await t.rejects(query(cluster.primaryUrl, 'SELECT 1'), { code: 'ECONNREFUSED' })
  t.same(await names(cluster.replicaUrl), ['first', 'second', 'while the replica was down'])
  await t.rejects(query(cluster.replicaUrl, 'INSERT INTO item (name) VALUES ($1)', ['no primary']), { code: '25006' })

  await cluster.startPrimary()
  await write('after the primary came back')
  await cluster.waitForReplay()
  t.same(await names(cluster.replicaUrl), ['after the primary came back', 'first', 'second', 'while the replica was down'])
})
