// The replica set on its own (db/replicas.ts), against a real primary and streaming replica
// (test/support/replication.ts): what its probe learns, which replica a read may go to and why
// none may, the events an outage makes, and its end. test/system/replicas.test.ts tests the same
// through the service, where the read path's own check of a replica's position hides some of it.
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import t, { type Test } from 'tap'
import { ConnectionWaitTimeout } from '../../db/errors.js'
import { freePort } from '../../db/embedded-postgres.js'
import { parseLsn, positionColumn } from '../../db/lsn.js'
import { DatabasePool } from '../../db/pool.js'
import { readIfReplayed, recoveryConflict, type Replica, replicaFailed, ReplicaSet, type ReplicaSetOptions, schemaBehind } from '../../db/replicas.js'
import { holdingProxy } from '../support/holding-proxy.js'
import { replicatedPostgres, skipUnlessPostgresServer } from '../support/replication.js'

skipUnlessPostgresServer(t, 'the replica set test')
const cluster = await replicatedPostgres(t)
const primary = new pg.Pool({ connectionString: cluster.primaryUrl, max: 1 })
t.teardown(() => primary.end())
// A test crashes the primary: its idle connection is lost with it.
primary.on('error', () => {})
await primary.query('CREATE TABLE IF NOT EXISTS writes (n int)')
await cluster.waitForReplay()
const closedUrl = `postgres://u:p@127.0.0.1:${await freePort()}/db`

/** A replica set made for the test, closed when it ends; it probes only when told, unless started. */
/** A set on the cluster, not started, that the test closes itself (a pool is ended once only). */
function unclosedSet (options: Partial<ReplicaSetOptions> = {}): ReplicaSet {
  return new ReplicaSet({
    urls: [cluster.replicaUrl],
    pool: { max: 2, connectionWaitMs: 5000, queryTimeoutMs: 5000 },
    primaryUrl: cluster.primaryUrl,
    maxLagMs: 60_000,
    probeIntervalMs: 50,
    ...options
  })
}

function replicaSet (t: Test, options: Partial<ReplicaSetOptions> = {}): ReplicaSet {
  const set = unclosedSet(options)
  t.teardown(() => set.close())
  return set
}

/** The events a set emits, as "down replica-1: message" and "up replica-1". */
function eventsOf (set: ReplicaSet): string[] {
  const events: string[] = []
  set.on('down', (replica: Replica, error: Error) => events.push(`down ${replica.name}: ${error.message}`))
  set.on('up', (replica: Replica) => events.push(`up ${replica.name}`))
  return events
}

/**
 * Probes until the replica is found caught up (lag 0): the primary writes WAL of its own now and
 * then (a checkpoint, a snapshot of running transactions), which a replica replays a moment later.
 */
async function probeUntilCaughtUp (set: ReplicaSet, replica: Replica): Promise<void> {
  for (let attempt = 0; attempt < 50; attempt++) {
    await set.probe()
    if (set.lagMs(replica) === 0) return
    await sleep(20)
  }
}

/** Pauses replay until `t` ends, and writes on the primary: the time of the write, once the replica has received it. */
async function stallReplayBehindAWrite (t: Test): Promise<number> {
  await cluster.pauseReplay()
  t.teardown(() => cluster.resumeReplay())
  await primary.query('INSERT INTO writes VALUES (1)')
  const written = performance.now()
  await cluster.waitForReceive()
  return written
}

/** Where the primary has written now. */
async function primaryLsn (): Promise<bigint> {
  return parseLsn((await primary.query('SELECT pg_current_wal_lsn()::text AS lsn')).rows[0].lsn)!
}

t.test('before its first probe: no replica may answer, and no lag is known', async (t) => {
  const set = replicaSet(t)
  t.equal(set.choose(), 'none_up')
  t.equal(set.replicas[0].up, false)
  t.equal(set.lagMs(set.replicas[0]), undefined, 'no position of the primary yet')
})

t.test('a probe: the replica is up, has replayed what the primary wrote, lags 0 ms; a token decides alone', async (t) => {
  const set = replicaSet(t)
  const events = eventsOf(set)
  await set.probe()
  const [replica] = set.replicas
  t.equal(replica.up, true)
  t.equal(set.primaryReachable, true, 'one position of the primary is enough')
  await probeUntilCaughtUp(set, replica)
  t.ok(replica.replayed > 0n && replica.replayed <= await primaryLsn(), `replayed ${replica.replayed}`)
  t.equal(set.lagMs(replica), 0)
  t.equal(set.choose(), replica)
  t.equal(set.choose(replica.replayed), replica, 'a token at exactly what it replayed')
  t.equal(set.choose(replica.replayed + 1n), 'behind_token', 'a token past it, however small the lag')
  t.same(events, [], 'no event: a first probe that finds it up is no return from an outage')
})

t.test('what a read shows of a replica\'s position moves it forward, never back', async (t) => {
  const set = replicaSet(t)
  await set.probe()
  const [replica] = set.replicas
  const probed = replica.replayed
  set.observed(replica, probed - 1n)
  t.equal(replica.replayed, probed, 'an older position changes nothing')
  set.observed(replica, probed + 10n)
  t.equal(replica.replayed, probed + 10n)
  t.equal(set.choose(probed + 10n), replica, 'a token the read showed')
})

t.test('replay paused: the lag grows from the primary\'s first position the replica lacks; past maxLag no read goes there', async (t) => {
  const set = replicaSet(t, { maxLagMs: 300 })
  const patient = replicaSet(t, { maxLagMs: 60_000 })
  await set.probe()
  // Caught up first: a set that has not seen its replica replay its first position never counts it within a bound.
  await probeUntilCaughtUp(patient, patient.replicas[0])
  const [replica] = set.replicas
  const written = await stallReplayBehindAWrite(t)
  await set.probe()
  const first = set.lagMs(replica)!
  await sleep(400)
  await set.probe()
  const lag = set.lagMs(replica)!
  t.ok(lag >= first + 350 && lag <= performance.now() - written + 100, `${first} ms, then ${lag} ms, ${performance.now() - written} ms after the write`)
  t.equal(set.choose(), 'lagging')
  // A caller passing on the tokens the stalled replica gave would otherwise stay at its state for
  // as long as it stalls, while a caller without one reads the current state from the primary.
  t.equal(set.choose(replica.replayed), 'lagging', 'a token it has replayed: lagging all the same')
  await patient.probe()
  t.equal(patient.choose(), patient.replicas[0], 'within a longer bound')
  await cluster.resumeReplay()
  await cluster.waitForReplay()
  await probeUntilCaughtUp(set, replica)
  t.equal(set.lagMs(replica), 0, 'caught up')
  t.equal(set.choose(), replica)
})

t.test('a set started while its replica is behind: how long it has lagged is unknown, so no read without a token goes there until it has replayed where the primary was at the first probe', async (t) => {
  // The replica may have stalled an hour before: the set knows the primary's positions only since
  // its first probe, which would make that hour look like the few ms since.
  await stallReplayBehindAWrite(t)
  const set = replicaSet(t, { maxLagMs: 60_000 })
  await set.probe()
  const [replica] = set.replicas
  t.equal(replica.up, true)
  t.equal(set.choose(), 'lagging', 'behind the first position probed: not within the bound, whatever the bound')
  t.equal(set.choose(replica.replayed), 'lagging', 'a token it has replayed: lagging all the same')
  await cluster.resumeReplay()
  await cluster.waitForReplay()
  await probeUntilCaughtUp(set, replica)
  t.equal(set.choose(), replica, 'once it has replayed it, the measured lag decides')
})

t.test('DATABASE_REPLICA_MAX_LAG_MS=0: a replica caught up (lag 0) still answers', async (t) => {
  const set = replicaSet(t, { maxLagMs: 0 })
  const [replica] = set.replicas
  await probeUntilCaughtUp(set, replica)
  t.equal(set.lagMs(replica), 0)
  t.equal(set.choose(), replica)
})

t.test('a replica stalled longer than maxLag and four probe intervals: its lag reads that ceiling (the positions kept)', async (t) => {
  const set = replicaSet(t, { maxLagMs: 100, probeIntervalMs: 50 })
  const ceiling = 100 + 4 * 50
  await set.probe()
  const [replica] = set.replicas
  const written = await stallReplayBehindAWrite(t)
  // Each probe's start and end: two samples of the primary are at most (a probe's end - the one
  // before's start) apart, and the last is no older than the last probe's start.
  const probes: Array<{ start: number, end: number }> = []
  while (performance.now() - written < 4 * ceiling) {
    await sleep(50)
    const start = performance.now()
    await set.probe()
    probes.push({ start, end: performance.now() })
  }
  const lag = set.lagMs(replica)!
  const readAt = performance.now()
  const widestGap = Math.max(...probes.slice(1).map(({ end }, index) => end - probes[index].start))
  const slack = widestGap + (readAt - probes[probes.length - 1].start) + 20
  t.ok(lag >= ceiling && lag <= ceiling + slack,
    `${lag.toFixed(0)} ms after ${(readAt - written).toFixed(0)} ms stalled: the ceiling ${ceiling} ms, up to ${slack.toFixed(0)} ms more`)
  t.equal(set.choose(), 'lagging')
  await cluster.resumeReplay()
  await cluster.waitForReplay()
})

t.test('the primary unreachable: no lag known, so a replica answers however far behind', async (t) => {
  const set = replicaSet(t, { primaryUrl: closedUrl, maxLagMs: 1 })
  await set.probe()
  t.equal(set.primaryReachable, false)
  t.equal(set.lagMs(set.replicas[0]), undefined)
  t.equal(set.choose(), set.replicas[0], 'stale reads beat none')
})

t.test('a URL that is not a standby (the primary\'s): down, with the reason, and never chosen', async (t) => {
  const set = replicaSet(t, { urls: [cluster.primaryUrl] })
  const events = eventsOf(set)
  await set.probe()
  await set.probe()
  t.equal(set.replicas[0].up, false)
  t.equal(set.choose(), 'none_up')
  t.same(events, ['down replica-1: not a streaming replica: pg_is_in_recovery() is false'], 'reported once')
})

t.test('a standby of another cluster (the test PostgreSQL as the primary): down, with the reason, and never chosen', async (t) => {
  // The pair's standby is in recovery and answers a position, but of another server's WAL: its
  // state is not the primary's, nor are its positions comparable with the primary's.
  const set = replicaSet(t, { primaryUrl: process.env.TEST_DATABASE_URL!, maxLagMs: 600_000 })
  const events = eventsOf(set)
  await set.probe()
  await set.probe()
  t.equal(set.primaryReachable, true)
  t.equal(set.replicas[0].up, false)
  t.equal(set.choose(), 'none_up')
  t.equal(events.length, 1, 'reported once')
  t.match(events[0], /^down replica-1: not a replica of the primary: another cluster \(system identifier \d+, the primary's \d+\)$/)
})

t.test('a standby of the primary named with another database: down, with the reason; the same database again, up', async (t) => {
  await primary.query('CREATE DATABASE other_database')
  t.teardown(() => primary.query('DROP DATABASE other_database'))
  await cluster.waitForReplay()
  const url = new URL(cluster.replicaUrl)
  url.pathname = '/other_database'
  const set = replicaSet(t, { urls: [url.toString(), cluster.replicaUrl] })
  const events = eventsOf(set)
  await set.probe()
  t.equal(set.replicas[0].up, false, 'another database: another state')
  t.equal(set.replicas[1].up, true, 'the primary\'s database')
  t.same(events, ['down replica-1: not a replica of the primary\'s database: it serves "other_database", the primary "postgres"'])
})

t.test('the primary\'s URL moved to another cluster, further back in its WAL: its replicas take reads once caught up with it, positions of the former cluster not compared with theirs', async (t) => {
  // The test PostgreSQL as the former primary, its WAL moved past where the pair's primary is (and will be during the test).
  const former = new pg.Client({ connectionString: process.env.TEST_DATABASE_URL })
  await former.connect()
  t.teardown(() => former.end())
  const formerLsn = async () => parseLsn((await former.query('SELECT pg_current_wal_lsn()::text AS lsn')).rows[0].lsn)!
  while (await formerLsn() < await primaryLsn() + 64n * 1024n * 1024n) {
    await former.query("SELECT pg_logical_emit_message(false, 'replicas.test', 'a move'), pg_switch_wal()")
  }
  // One role on both, for one URL through the proxy to either (the database: the replica's).
  for (const server of [former, primary]) {
    await server.query("CREATE ROLE replicas_test_move LOGIN SUPERUSER PASSWORD 'moved'")
    t.teardown(() => server.query('DROP ROLE replicas_test_move'))
  }
  const url = new URL(process.env.TEST_DATABASE_URL!)
  Object.assign(url, { username: 'replicas_test_move', password: 'moved', pathname: new URL(cluster.replicaUrl).pathname })
  const proxy = await holdingProxy(t, url.href)
  const set = replicaSet(t, { primaryUrl: proxy.url })
  await set.probe()
  const [replica] = set.replicas
  t.equal(replica.up, false, 'a standby of another cluster than the primary')
  proxy.switchTo(cluster.primaryUrl)
  // The first probe finds the former primary's connection gone; a later one asks the new primary.
  for (let attempt = 0; attempt < 50 && !replica.up; attempt++) await set.probe()
  t.equal(replica.up, true, 'a standby of the primary now')
  await probeUntilCaughtUp(set, replica)
  t.equal(set.lagMs(replica), 0)
  t.equal(set.choose(), replica, 'caught up with the primary it replicates: it takes reads')
})

t.test('a replica lacking an object the primary has: reported once per replica and object', async (t) => {
  const set = replicaSet(t, { urls: [cluster.replicaUrl, cluster.replicaUrl] })
  const reported: string[] = []
  set.on('lacking', (replica: Replica, error: Error) => reported.push(`${replica.name}: ${error.message}`))
  const [first, second] = set.replicas
  const lacks = (name: string) => Object.assign(new Error(`relation "${name}" does not exist`), { code: '42P01' })
  set.lacking(first, lacks('grants_v2'))
  set.lacking(first, lacks('grants_v2'))
  set.lacking(first, lacks('permissions_v2'))
  set.lacking(second, lacks('grants_v2'))
  t.same(reported, ['replica-1: relation "grants_v2" does not exist', 'replica-1: relation "permissions_v2" does not exist', 'replica-2: relation "grants_v2" does not exist'])
})

t.test('an outage: reported once however many probes fail; the first probe after it brings the replica back, and says so', async (t) => {
  const set = replicaSet(t)
  const events = eventsOf(set)
  await set.probe()
  const [replica] = set.replicas
  const failure = new Error('a read failed')
  set.markDown(replica, failure)
  set.markDown(replica, failure)
  t.equal(replica.up, false)
  t.equal(set.choose(), 'none_up')
  await set.probe()
  t.equal(replica.up, true)
  t.same(events, ['down replica-1: a read failed', 'up replica-1'])
  const closed = replicaSet(t, { urls: [closedUrl] })
  const refused = eventsOf(closed)
  await closed.start()
  await sleep(300)
  t.equal(refused.length, 1, `one event over several probes: ${refused.join(' | ')}`)
  t.match(refused[0], /^down replica-1: /)
})

t.test('a probe answered later than its interval, within a second (a busy machine): no outage', async (t) => {
  const proxy = await holdingProxy(t, cluster.replicaUrl)
  const set = replicaSet(t, { urls: [proxy.url], probeIntervalMs: 20 })
  const events = eventsOf(set)
  await set.probe()
  const [replica] = set.replicas
  t.equal(replica.up, true)
  proxy.hold()
  const asked = proxy.nextSend()
  const probing = set.probe()
  await asked
  // Ten intervals without an answer.
  await sleep(200)
  proxy.release()
  await probing
  t.equal(replica.up, true, 'still up: the probe waits at least a second, not one interval')
  t.same(events, [])
})

t.test('a probe that asked before a read found the replica failing: its answer does not bring the replica back; the next probe does', async (t) => {
  const proxy = await holdingProxy(t, cluster.replicaUrl)
  const set = replicaSet(t, { urls: [proxy.url] })
  const events = eventsOf(set)
  await set.probe()
  const [replica] = set.replicas
  proxy.hold()
  const asked = proxy.nextSend()
  const probing = set.probe()
  await asked
  set.markDown(replica, new Error('a read failed'))
  proxy.release()
  await probing
  t.equal(replica.up, false, 'an answer to a question asked before the failure says nothing of now')
  t.equal(set.choose(), 'none_up')
  await set.probe()
  t.equal(replica.up, true, 'asked after it')
  t.same(events, ['down replica-1: a read failed', 'up replica-1'])
})

t.test('two replicas: reads take turns', async (t) => {
  const set = replicaSet(t, { urls: [cluster.replicaUrl, cluster.replicaUrl] })
  await probeUntilCaughtUp(set, set.replicas[0])
  const chosen = [set.choose(), set.choose(), set.choose(), set.choose()].map((each) => typeof each === 'string' ? each : each.name)
  t.same(chosen, ['replica-2', 'replica-1', 'replica-2', 'replica-1'])
})

t.test('closed: its pools are ended and no probe runs again, even when closed during the first one', async (t) => {
  for (const when of ['after its start', 'during its first probe']) {
    const set = unclosedSet({ pool: { max: 1, connectionWaitMs: 5000, queryTimeoutMs: 5000 }, probeIntervalMs: 20 })
    const events = eventsOf(set)
    const started = set.start()
    if (when === 'after its start') await started
    await set.close()
    await started
    await sleep(200)
    t.same(events, [], `${when}: no probe of the ended pools reported them down`)
    t.equal(set.primaryReachable, true, `${when}: no probe after the close asked the primary through its ended pool`)
    await t.rejects(set.replicas[0].pool.query('SELECT 1'), `${when}: the replica's pool is ended`)
  }
})

t.test('closed during a later probe: that probe ends, and none follows', async (t) => {
  const proxy = await holdingProxy(t, cluster.replicaUrl)
  const set = unclosedSet({ urls: [proxy.url], pool: { max: 1, connectionWaitMs: 5000, queryTimeoutMs: 5000 }, probeIntervalMs: 20 })
  const events = eventsOf(set)
  await set.start()
  proxy.hold()
  // The second probe has asked the primary, and now the replica.
  await proxy.nextSend()
  const closed = set.close()
  proxy.release()
  await closed
  await sleep(200)
  t.same(events, [], 'no probe of the ended pools reported them down')
  t.equal(set.primaryReachable, true, 'no probe after the close asked the primary through its ended pool')
})

/**
 * A pool of one connection, so that what one read leaves on it is what the next one finds, and the
 * text of each statement sent through it.
 */
function onePool (t: Test, connectionString: string): { pool: DatabasePool, sent: string[] } {
  const pool = new DatabasePool({ connectionString, max: 1, connectionWaitMs: 5000, queryTimeoutMs: 5000 })
  t.teardown(() => pool.end())
  const sent: string[] = []
  pool.on('connect', (client) => {
    const query = client.query.bind(client) as (...args: unknown[]) => unknown
    client.query = ((...args: unknown[]) => {
      sent.push(typeof args[0] === 'string' ? args[0] : (args[0] as { text: string }).text)
      return query(...args)
    }) as typeof client.query
  })
  return { pool, sent }
}

/** A read as the service's reads are: its rows and the position of the state it showed. */
const readPosition = async (db: pg.PoolClient) => (await db.query<{ position: string }>(`SELECT ${positionColumn}`)).rows[0]
/** A read that must not run: a failure if it does. */
const unexpected = (t: Test, what: string) => async () => { t.fail(what); return {} }
const askedWhereItStands = (sent: string[]) => sent.filter((text) => text.includes('pg_last_wal_replay_lsn() END'))

t.test('readIfReplayed: asks the server first, and reads only if it had replayed the position; a connection that has seen it there is not asked again', async (t) => {
  const { pool, sent } = onePool(t, cluster.replicaUrl)
  await cluster.waitForReplay()
  const replayed = parseLsn((await pool.query('SELECT pg_last_wal_replay_lsn()::text AS lsn')).rows[0].lsn)!
  sent.length = 0
  const first = await readIfReplayed(pool, replayed, readPosition, { pooler: false })
  t.ok(first && parseLsn(first.position)! >= replayed, 'a position it has replayed: read')
  t.equal(askedWhereItStands(sent).length, 1, 'asked first, in a statement of its own')
  t.notOk(sent.some((text) => /BEGIN|COMMIT/.test(text)), 'no transaction: the connection stays on its server')
  sent.length = 0
  t.ok(await readIfReplayed(pool, parseLsn(first!.position)!, readPosition, { pooler: false }), 'a position the connection has seen its server at: read')
  t.same(askedWhereItStands(sent), [], 'without asking again')
  t.equal(await readIfReplayed(pool, parseLsn(first!.position)! + 1n, unexpected(t, 'read past what it had replayed'), { pooler: false }), undefined,
    'a position past it: asked again, and no read')
  t.equal(askedWhereItStands(sent).length, 1)
})

t.test('readIfReplayed: what a read shows of its server, past where the server was asked, is remembered: a read at that position is not asked again', async (t) => {
  const { pool, sent } = onePool(t, cluster.replicaUrl)
  await cluster.waitForReplay()
  const before = parseLsn((await pool.query('SELECT pg_last_wal_replay_lsn()::text AS lsn')).rows[0].lsn)!
  // A read that goes on while the server replays a write made after it was asked.
  const read = await readIfReplayed(pool, before, async (db) => {
    await primary.query('INSERT INTO writes VALUES (1)')
    await cluster.waitForReplay()
    return await readPosition(db)
  }, { pooler: false })
  const shown = parseLsn(read!.position)!
  t.ok(shown > before, `the read showed ${read!.position}, past where its server was`)
  sent.length = 0
  t.ok(await readIfReplayed(pool, shown, readPosition, { pooler: false }), 'a position the read showed: read')
  t.same(askedWhereItStands(sent), [], 'without asking again')
})

t.test('readIfReplayed behind a transaction pooler: asked every time, in one transaction with the read, which ends before the connection goes back', async (t) => {
  const { pool, sent } = onePool(t, cluster.replicaUrl)
  await cluster.waitForReplay()
  const replayed = parseLsn((await pool.query('SELECT pg_last_wal_replay_lsn()::text AS lsn')).rows[0].lsn)!
  // Seen at the position on this connection before: behind a pooler that says nothing of the next statement's server.
  t.ok(await readIfReplayed(pool, replayed, readPosition, { pooler: false }))
  for (let read = 0; read < 2; read++) {
    sent.length = 0
    const began = await readIfReplayed(pool, replayed, async (db) => {
      const first = await db.query('SELECT now()::text AS began')
      const second = await db.query('SELECT now()::text AS began')
      return { ...(await readPosition(db)), began: [first.rows[0].began, second.rows[0].began] }
    }, { pooler: true })
    t.equal(began?.began[0], began?.began[1], 'one transaction (now() is when it began)')
    t.equal(askedWhereItStands(sent).length, 1, 'asked, whatever the connection saw before')
    const { rows: [{ own }] } = await pool.query('SELECT now() = statement_timestamp() AS own')
    t.equal(own, true, 'the connection is back in the pool with its transaction ended')
  }
})

t.test('readIfReplayed: replay paused behind a write, no read; a server that is not a standby, no read; a failed read drops its connection', async (t) => {
  const { pool: replica } = onePool(t, cluster.replicaUrl)
  await stallReplayBehindAWrite(t)
  for (const pooler of [false, true]) {
    t.equal(await readIfReplayed(replica, await primaryLsn(), unexpected(t, 'read on a replica behind'), { pooler }), undefined, `pooler: ${pooler}`)
    const { pool: notAStandby } = onePool(t, cluster.primaryUrl)
    t.equal(await readIfReplayed(notAStandby, 0n, unexpected(t, 'read on the primary as a replica'), { pooler }), undefined,
      'the primary named as a replica: never read, whatever the position')
    const pid = (await replica.query('SELECT pg_backend_pid() AS pid')).rows[0].pid
    await t.rejects(readIfReplayed(replica, 0n, async (db) => ({ position: (await db.query('SELECT * FROM no_such_table')).rows[0] }), { pooler }), { code: '42P01' }, 'the read\'s error')
    t.equal(replica.totalCount, 0, 'its connection, perhaps in an aborted transaction, is not pooled again')
    t.not((await replica.query('SELECT pg_backend_pid() AS pid')).rows[0].pid, pid)
  }
})

t.test('a replica\'s failure or a conflict with its recovery, told from a request\'s own error', async (t) => {
  const withCode = (code: string) => Object.assign(new Error(code), { code })
  for (const code of ['40001', '40P01', '57P04']) t.equal(recoveryConflict(withCode(code)), true, code)
  t.equal(recoveryConflict(withCode('23505')), false, 'a unique violation')
  t.equal(recoveryConflict({ code: '40001' }), false, 'not an Error')
  t.equal(replicaFailed(withCode('ECONNREFUSED')), true, 'unreachable')
  t.equal(replicaFailed(new ConnectionWaitTimeout('no connection in time')), true, 'busy beyond its bounds')
  t.equal(replicaFailed(withCode('57014')), true, 'a statement past its timeout')
  t.equal(replicaFailed(withCode('42P01')), false, 'an error of the request')
  // What a migration makes, not yet replayed: a table, a column, a function, a type.
  for (const code of ['42P01', '42703', '42883', '42704']) t.equal(schemaBehind(withCode(code)), true, code)
  for (const code of ['22P02', '42601', '42501', '57014', '40001']) t.equal(schemaBehind(withCode(code)), false, `${code}: the primary's answer as well, or handled as an outage, overload or conflict`)
  t.equal(schemaBehind({ code: '42P01' }), false, 'not an Error')
})

t.test('a position\'s text: pg_lsn only', async (t) => {
  t.equal(parseLsn('16/B374D848'), (0x16n << 32n) | 0xB374D848n)
  t.equal(parseLsn('not a position'), undefined)
  t.equal(parseLsn('1/2/3'), undefined)
})

t.test('the primary restarted after a crash, named as a replica: it answers the position its recovery replayed, and is still no standby: down', async (t) => {
  await cluster.crashPrimary()
  await cluster.startPrimary()
  const direct = new pg.Client({ connectionString: cluster.primaryUrl })
  await direct.connect()
  t.teardown(() => direct.end())
  const { rows: [state] } = await direct.query('SELECT pg_is_in_recovery() AS standby, pg_last_wal_replay_lsn()::text AS lsn')
  t.equal(state.standby, false)
  t.not(state.lsn, null, 'a position replayed, though no standby')
  const set = replicaSet(t, { urls: [cluster.primaryUrl] })
  const events = eventsOf(set)
  await set.probe()
  t.equal(set.replicas[0].up, false)
  t.equal(set.choose(), 'none_up')
  t.same(events, ['down replica-1: not a streaming replica: pg_is_in_recovery() is false'])
  await cluster.waitForReplay()
})
