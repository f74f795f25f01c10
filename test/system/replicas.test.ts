// Reads from a real streaming replica (issue 28): Debian's PostgreSQL, a primary and a hot standby
// made with pg_basebackup -R (test/support/replication.ts), replay paused to make lag happen on purpose.
// A caller that sends back the Consistency-Token it was given never sees an older state; without
// one, a replica answers within the lag bound; a replica or the primary down costs no read.
import { execFileSync } from 'node:child_process'
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import Fastify, { type FastifyInstance } from 'fastify'
import pg from 'pg'
import t, { type Test } from 'tap'
import { parseLsn, positionColumn } from '../../db/lsn.js'
import { pruneChanges } from '../../db/queries/history.js'
import { seedDatabase } from '../../db/seed.js'
import app, { serverOptions } from '../../src/app.js'
import { loadConfig } from '../../src/config.js'
import { checkContract } from '../support/contract.js'
import { historyPath, ordersFixture, ordersPath } from '../support/fixtures.js'
import { captureLogs, type CapturedLogs } from '../support/logs.js'
import { freePort } from '../../db/embedded-postgres.js'
import { replicatedPostgres, skipUnlessPostgresServer } from '../support/replication.js'
import { TEST_SECRET, token } from '../support/tokens.js'
import { until } from '../support/waiting.js'

skipUnlessPostgresServer(t, 'the replica test')
const cluster = await replicatedPostgres(t)
const readWrite = token({ scope: 'read:resource delete:resource create:resource' }, { expiresIn: 3600 })

interface Service { url: string, logs: CapturedLogs, app: FastifyInstance }

/** The real app on the primary, with the replica for reads. */
async function service (t: Test, env: Record<string, string> = {}): Promise<Service> {
  const logs = captureLogs()
  const config = loadConfig({
    DATABASE_URL: cluster.primaryUrl,
    DATABASE_REPLICA_URLS: cluster.replicaUrl,
    DATABASE_REPLICA_PROBE_INTERVAL_MS: '100',
    JWT_SECRET: TEST_SECRET,
    MAX_EVENT_LOOP_DELAY_MS: '0',
    LOG_LEVEL: 'info',
    ...env
  })
  const fastify = Fastify({ ...serverOptions(config), logger: { ...serverOptions(config).logger as object, stream: logs.stream } })
  await fastify.register(app, { config })
  await fastify.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => fastify.close())
  return { url: `http://127.0.0.1:${(fastify.server.address() as AddressInfo).port}`, logs, app: fastify }
}

interface Answer { status: number, headers: Headers, body: unknown }

async function call (base: Service, method: string, path: string, headers: Record<string, string> = {}, body?: unknown): Promise<Answer> {
  const res = await fetch(base.url + path, {
    method,
    headers: { authorization: `Bearer ${readWrite}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
    ...(body === undefined ? {} : { body: JSON.stringify(body) })
  })
  const text = await res.text()
  const answer = { status: res.status, headers: res.headers, body: text && /json/.test(res.headers.get('content-type') ?? '') ? JSON.parse(text) : text }
  // Every answer as the spec says, Consistency-Token included (the harness checks those without replicas).
  checkContract(method, path, { ...answer, text })
  return answer
}

const ids = (answer: Answer) => (answer.body as Array<{ id: string }>).map(({ id }) => id)

/** db_reads_total and db_read_fallbacks_total, as the service's /metrics says them. */
async function readCounts (base: Service): Promise<Record<string, number>> {
  const text = await (await fetch(`${base.url}/metrics`)).text()
  const counts: Record<string, number> = {}
  for (const [, name, label, value] of text.matchAll(/^(db_reads_total|db_read_fallbacks_total)\{\w+="([\w-]+)"\} (\d+)/gm)) counts[`${name === 'db_reads_total' ? 'read' : 'fallback'}:${label}`] = Number(value)
  return counts
}

const primary = new pg.Pool({ connectionString: cluster.primaryUrl, max: 2 })
primary.on('error', () => {})
t.teardown(() => primary.end())
// The first service migrates the primary; the fixture is seeded once it has.
const relaxed = await service(t, { DATABASE_REPLICA_MAX_LAG_MS: '600000' })
await seedDatabase(primary, ordersFixture())
await cluster.waitForReplay()

// First: the prune below deletes changes only before the first one recorded within the days kept,
// and the tests after this one record changes of today.
t.test('a feed poll from a cursor below the prune mark, on the replica: 410 changes-pruned with a Consistency-Token, as the spec says; sent back, the restart reads no older state', async (t) => {
  const { rows } = await primary.query<{ id: string }>(`INSERT INTO permission_changes (at, resource_id, client_id, action, permission_ids, request_id)
    SELECT now() - interval '40 days', 'orders-api', 'app-a', 'granted', ARRAY['p_read_orders'], 'old-' || n FROM generate_series(1, 3) AS n RETURNING id::text`)
  const old = rows.map(({ id }) => BigInt(id)).sort((a, b) => (a < b ? -1 : 1))
  t.equal(await pruneChanges(primary, 30), 3)
  await cluster.waitForReplay()
  const before = await readCounts(relaxed)
  const gone = await call(relaxed, 'GET', `/permission_changes?after=${old[0]}`)
  t.equal(gone.status, 410)
  t.match(gone.body, { type: '/problems/changes-pruned', pruned_through: String(old[2]) })
  const token = gone.headers.get('consistency-token')
  t.match(token, /^[0-9A-F]+\/[0-9A-F]+$/, 'the state that said 410')
  t.equal((await readCounts(relaxed))['read:replica-1'] - before['read:replica-1'], 1, 'read on the replica')
  const restart = await call(relaxed, 'GET', '/permission_changes', { 'consistency-token': token! })
  t.equal(restart.status, 200)
  t.ok(parseLsn(restart.headers.get('consistency-token')!)! >= parseLsn(token!)!, 'the restart from a state at least as new')
})

t.test('reads are answered by the replica, writes by the primary; every answer carries a Consistency-Token', async (t) => {
  const before = await readCounts(relaxed)
  const page = await call(relaxed, 'GET', ordersPath())
  t.equal(page.status, 200)
  t.match(page.headers.get('consistency-token'), /^[0-9A-F]+\/[0-9A-F]+$/)
  const history = await call(relaxed, 'GET', historyPath())
  t.equal(history.status, 200)
  t.ok(history.headers.get('consistency-token'))
  const feed = await call(relaxed, 'GET', '/permission_changes')
  t.equal(feed.status, 200)
  t.match(feed.headers.get('consistency-token'), /^[0-9A-F]+\/[0-9A-F]+$/, 'the change feed\'s page too')
  const after = await readCounts(relaxed)
  t.equal(after['read:replica-1'] - before['read:replica-1'], 3, 'the three reads on the replica')
  t.equal(after['read:primary'], before['read:primary'], 'none on the primary')
  const removed = await call(relaxed, 'DELETE', ordersPath(), {}, ['p_update_refunds'])
  t.equal(removed.status, 204)
  t.match(removed.headers.get('etag'), /^"\d+"$/)
  t.ok(removed.headers.get('consistency-token'))
  const refused = await call(relaxed, 'DELETE', ordersPath(), { 'if-match': '"1"' }, ['p_update_refunds'])
  t.equal(refused.status, 412)
  t.ok(refused.headers.get('consistency-token'), 'a refused change carries one: the next read is at least as new')
  const missing = await call(relaxed, 'GET', ordersPath('nobody'))
  t.equal(missing.status, 404)
  t.ok(missing.headers.get('consistency-token'), 'a 404 read from the database carries one too')
  // The replica's answer holds no version to compare with the one named: the primary decides.
  const missingNamed = await call(relaxed, 'GET', ordersPath('nobody'), { 'if-none-match': '"1"' })
  t.equal(missingNamed.status, 404, 'If-None-Match on a client that is not authorized: 404 still')
  t.equal((await call(relaxed, 'GET', ordersPath(), { 'consistency-token': 'nonsense' })).status, 400)
})

t.test('replay paused: with the DELETE\'s token the removed grant is gone (the primary answers), without it the replica shows the older state', async (t) => {
  await cluster.waitForReplay()
  await cluster.pauseReplay()
  t.teardown(() => cluster.resumeReplay())
  const removed = await call(relaxed, 'DELETE', ordersPath(), {}, ['p_read_orders'])
  t.equal(removed.status, 204)
  const consistency = removed.headers.get('consistency-token')!
  await cluster.waitForReceive()
  const stale = await call(relaxed, 'GET', ordersPath())
  t.ok(ids(stale).includes('p_read_orders'), 'without a token: the replica, within the (generous) lag bound, before the DELETE')
  const before = await readCounts(relaxed)
  const fresh = await call(relaxed, 'GET', ordersPath(), { 'consistency-token': consistency })
  t.equal(fresh.status, 200)
  t.notOk(ids(fresh).includes('p_read_orders'), 'with the token: the DELETE is seen')
  t.equal(fresh.headers.get('etag'), removed.headers.get('etag'))
  const after = await readCounts(relaxed)
  t.equal(after['fallback:behind_token'] - before['fallback:behind_token'], 1, 'sent to the primary: the replica has not replayed the token')
  // Time never goes backwards for a tag either: the replica holds an older version than the one named.
  // The newest version the list names decides, wherever it stands in it.
  const unchanged = await call(relaxed, 'GET', ordersPath(), { 'if-none-match': `${removed.headers.get('etag')!}, "1"` })
  t.equal(unchanged.status, 304, 'If-None-Match with the DELETE\'s ETag (then an older tag), no token: decided on the primary')
  t.equal((await readCounts(relaxed))['fallback:behind_version'] - after['fallback:behind_version'], 1)
  const reversed = await call(relaxed, 'GET', ordersPath(), { 'if-none-match': `"1", ${removed.headers.get('etag')!}` })
  t.equal(reversed.status, 304, 'the older tag first: the newest decides still, on the primary')
  t.equal((await readCounts(relaxed))['fallback:behind_version'] - after['fallback:behind_version'], 2)
  // If-Match as well: the replica, at the version before the DELETE, would refuse the DELETE's tag.
  const walked = await call(relaxed, 'GET', ordersPath(), { 'if-match': removed.headers.get('etag')! })
  t.equal(walked.status, 200, 'If-Match with the DELETE\'s ETag, no token: decided on the primary, not 412')
  t.notOk(ids(walked).includes('p_read_orders'))
  t.equal((await readCounts(relaxed))['fallback:behind_version'] - after['fallback:behind_version'], 3)
  // The history too: with the token it has the DELETE's change, which the paused replica has not.
  const staleHistory = await call(relaxed, 'GET', historyPath())
  const freshHistory = await call(relaxed, 'GET', historyPath(), { 'consistency-token': consistency })
  t.equal((freshHistory.body as unknown[]).length, (staleHistory.body as unknown[]).length + 1, 'the history read with the token has the DELETE')
  // And the change feed's poll (once the primary's horizon is past the DELETE's change).
  const staleFeed = await call(relaxed, 'GET', '/permission_changes')
  await until('the feed read with the token has the DELETE', async () =>
    ((await call(relaxed, 'GET', '/permission_changes', { 'consistency-token': consistency })).body as unknown[]).length === (staleFeed.body as unknown[]).length + 1, 10_000)
  // Each answer's token is at least the one sent: a caller passing on the latest never goes back.
  t.ok(fresh.headers.get('consistency-token'))
  await cluster.resumeReplay()
  await cluster.waitForReplay()
  // Once its probe has seen the replica replay the token, the replica answers it itself.
  await until('the caught-up replica answers the token', async () => {
    const mark = (await readCounts(relaxed))['read:replica-1']
    const caughtUp = await call(relaxed, 'GET', ordersPath(), { 'consistency-token': consistency })
    t.notOk(ids(caughtUp).includes('p_read_orders'), 'never the older state')
    return (await readCounts(relaxed))['read:replica-1'] > mark
  })
  // Caught up, the replica holds the version the DELETE's ETag names: it decides the tag itself.
  const mark = await readCounts(relaxed)
  const decided = await call(relaxed, 'GET', ordersPath(), { 'if-none-match': removed.headers.get('etag')! })
  t.equal(decided.status, 304)
  const now = await readCounts(relaxed)
  t.equal(now['read:replica-1'] - mark['read:replica-1'], 1, 'If-None-Match naming the version the replica holds: the replica answers')
  t.equal(now['fallback:behind_version'], mark['fallback:behind_version'], 'not sent to the primary')
})

t.test('the history\'s next page from a replica behind the page before: the primary answers it, so no change between is skipped', async (t) => {
  const history = historyPath('app-b')
  for (const method of ['POST', 'DELETE']) t.equal((await call(relaxed, method, ordersPath('app-b'), {}, ['p_read_orders'])).status, 204)
  await cluster.waitForReplay()
  await cluster.pauseReplay()
  t.teardown(() => cluster.resumeReplay())
  let consistency = ''
  for (const method of ['POST', 'DELETE', 'POST']) {
    const changed = await call(relaxed, method, ordersPath('app-b'), {}, ['p_read_invoices'])
    t.equal(changed.status, 204)
    consistency = changed.headers.get('consistency-token')!
  }
  await cluster.waitForReceive()
  const all = ids(await call(relaxed, 'GET', `${history}?limit=10`, { 'consistency-token': consistency }))
  t.equal(all.length, 5, 'two changes replicated, three not yet replayed')

  // The first page with the last change's token (the primary), the next as its Link says, without.
  const first = await call(relaxed, 'GET', `${history}?limit=2`, { 'consistency-token': consistency })
  t.same(ids(first), all.slice(0, 2))
  const next = new URL(/^<([^>]+)>; rel="next"$/.exec(first.headers.get('link')!)![1])
  const before = await readCounts(relaxed)
  const second = await call(relaxed, 'GET', next.pathname + next.search)
  t.same(ids(second), all.slice(2, 4), 'the page right after the first: the change between is not skipped')
  const after = await readCounts(relaxed)
  t.equal(after['fallback:behind_version'] - before['fallback:behind_version'], 1, 'the paused replica lacks the change the cursor names: sent to the primary')

  // Caught up, the replica has it and answers the same page itself.
  await cluster.resumeReplay()
  await cluster.waitForReplay()
  await until('the caught-up replica answers the next page', async () => {
    const mark = (await readCounts(relaxed))['read:replica-1']
    t.same(ids(await call(relaxed, 'GET', next.pathname + next.search)), all.slice(2, 4))
    return (await readCounts(relaxed))['read:replica-1'] > mark
  })
})

t.test('the replica stopped: reads go to the primary, no 5xx, one warning; started again, it takes reads and says so', async (t) => {
  const downLines = () => relaxed.logs.lines.filter((line) => line.msg === 'database replica down: its reads go elsewhere').length
  // Counted from here: on a loaded machine a slow probe may have taken the replica out before.
  const downBefore = downLines()
  await cluster.stopReplica()
  for (let i = 0; i < 5; i++) t.equal((await call(relaxed, 'GET', ordersPath())).status, 200, `read ${i}`)
  t.equal((await call(relaxed, 'GET', '/readyz')).status, 200, 'ready: the primary answers')
  await until('the down line', () => downLines() > downBefore)
  t.equal(downLines() - downBefore, 1, 'said once')
  await cluster.startReplica()
  const back = await relaxed.logs.waitFor((line) => line.msg === 'database replica back: it takes reads again', 'the back line')
  t.equal(back.replica, 'replica-1', 'the back line names the replica')
  await cluster.waitForReplay()
  await until('reads back on the replica', async () => {
    const mark = (await readCounts(relaxed))['read:replica-1']
    await call(relaxed, 'GET', ordersPath())
    return (await readCounts(relaxed))['read:replica-1'] > mark
  })
  t.pass('reads on the replica again')
})

t.test('the replica frozen (every process of it stopped, SIGSTOP): reads still answered, by the primary, no 5xx; thawed, it takes reads again', async (t) => {
  const slow = await service(t, { DATABASE_REPLICA_MAX_LAG_MS: '600000', DATABASE_QUERY_TIMEOUT_MS: '2000', DATABASE_STATEMENT_TIMEOUT_MS: '1000' })
  await cluster.waitForReplay()
  // The replica's server processes: its postmaster and every child of it.
  const replica = new pg.Client({ connectionString: cluster.replicaUrl })
  await replica.connect()
  const { rows: [{ pid }] } = await replica.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')
  const postmaster = Number(execFileSync('ps', ['-o', 'ppid=', '-p', String(pid)], { encoding: 'utf8' }).trim())
  await replica.end()
  const signal = (name: string) => {
    const children = execFileSync('ps', ['-o', 'pid=', '--ppid', String(postmaster)], { encoding: 'utf8' }).split('\n').map(Number).filter(Boolean)
    for (const each of [postmaster, ...children]) process.kill(each, name)
  }
  await until('a read on the replica', async () => (await call(slow, 'GET', ordersPath())).status === 200 &&
    slow.logs.lines.some((line) => line.msg === 'request completed'))
  signal('SIGSTOP')
  t.teardown(() => signal('SIGCONT'))
  const started = Date.now()
  const answers = await Promise.all([0, 1, 2, 3].map(() => call(slow, 'GET', ordersPath())))
  t.same(answers.map(({ status }) => status), [200, 200, 200, 200], 'every read answered')
  // Bounded by the query timeout (2 s) and the primary's answer: a frozen replica holds no read for ever.
  t.ok(Date.now() - started < 8000, `within the query timeout and a fallback (${Date.now() - started} ms)`)
  await slow.logs.waitFor((line) => line.msg === 'database replica down: its reads go elsewhere', 'the down line')
  const quick = Date.now()
  t.equal((await call(slow, 'GET', ordersPath())).status, 200)
  t.ok(Date.now() - quick < 1900, 'marked down: later reads go straight to the primary, not through the 2 s timeout')
  t.equal((await call(slow, 'GET', '/readyz')).status, 200)
  signal('SIGCONT')
  await slow.logs.waitFor((line) => line.msg === 'database replica back: it takes reads again', 'the back line')
})

t.test('the primary stopped: reads still answered by the replica, writes 503 database-unavailable, readiness 200 while a replica is up, 503 when none is', async (t) => {
  // Two more services: one whose second replica is down (one up is enough), one whose only replica is.
  const closedUrl = `postgres://u:p@127.0.0.1:${await freePort()}/db`
  const oneOfTwoUp = await service(t, { DATABASE_REPLICA_URLS: `${cluster.replicaUrl},${closedUrl}`, DATABASE_REPLICA_MAX_LAG_MS: '600000' })
  const noneUp = await service(t, { DATABASE_REPLICA_URLS: closedUrl })
  await cluster.waitForReplay()
  const seen = await call(relaxed, 'GET', ordersPath())
  await cluster.stopPrimary()
  let restarted = false
  t.teardown(async () => { if (!restarted) await cluster.startPrimary() })
  // The probe notices within its interval; a read meanwhile still goes to the replica.
  await sleep(300)
  const read = await call(relaxed, 'GET', ordersPath())
  t.equal(read.status, 200, 'read from the replica')
  t.same(ids(read), ids(seen))
  const history = await call(relaxed, 'GET', historyPath())
  t.equal(history.status, 200, 'the history too')
  const write = await call(relaxed, 'DELETE', ordersPath(), {}, ['p_read_orders'])
  t.equal(write.status, 503)
  t.match(write.body, { type: '/problems/database-unavailable' })
  t.ok(write.headers.get('retry-after'))
  t.equal((await call(relaxed, 'GET', '/readyz')).status, 200, 'ready: reads can be served')
  t.equal((await call(oneOfTwoUp, 'GET', '/readyz')).status, 200, 'one replica up of two: ready')
  t.equal((await call(noneUp, 'GET', '/readyz')).status, 503, 'no replica up and the primary down: not ready')
  // A token the replica has not replayed cannot be honoured by anyone now: 503, never older data.
  const ahead = await call(relaxed, 'GET', ordersPath(), { 'consistency-token': 'FFFFFFFF/0' })
  t.equal(ahead.status, 503)
  await cluster.startPrimary()
  restarted = true
  await until('writes again', async () => (await call(relaxed, 'POST', ordersPath(), {}, ['p_read_orders'])).status === 204)
  t.pass('the primary is back')
})

t.test('a primary restarted after a crash (its own recovery behind it): its tokens still move forward with its writes', async (t) => {
  await cluster.crashPrimary()
  await cluster.startPrimary()
  await until('writes again', async () => (await call(relaxed, 'POST', ordersPath(), {}, ['p_read_orders'])).status === 204)
  // The condition itself: a primary that went through recovery still answers a replayed position.
  const { rows: [{ replayed }] } = await primary.query<{ replayed: string | null }>('SELECT pg_last_wal_replay_lsn()::text AS replayed')
  t.not(replayed, null, 'the primary answers pg_last_wal_replay_lsn() after its recovery')
  await cluster.pauseReplay()
  t.teardown(() => cluster.resumeReplay())
  const removed = await call(relaxed, 'DELETE', ordersPath(), {}, ['p_read_orders'])
  t.equal(removed.status, 204)
  const written = parseLsn(removed.headers.get('consistency-token')!)!
  t.ok(written > parseLsn(replayed!)!, 'the write\'s token is past what the primary once replayed')
  const read = await call(relaxed, 'GET', ordersPath(), { 'consistency-token': removed.headers.get('consistency-token')! })
  t.notOk(ids(read).includes('p_read_orders'), 'the DELETE is seen')
  t.ok(parseLsn(read.headers.get('consistency-token')!)! >= written, 'the primary\'s answer carries a token at least as new')
  await cluster.resumeReplay()
  await cluster.waitForReplay()
})

t.test('a replica believed past the token but behind it when read: its position is asked before the read, so replay during the read passes no older state', async (t) => {
  const { app } = relaxed
  const [replica] = app.replicas!.replicas
  await cluster.waitForReplay()
  await until('the replica is up', async () => replica.up)
  await cluster.pauseReplay()
  t.teardown(() => cluster.resumeReplay())
  const granted = await call(relaxed, 'POST', ordersPath('app-b'), {}, ['p_update_refunds'])
  t.equal(granted.status, 204)
  t.teardown(() => call(relaxed, 'DELETE', ordersPath('app-b'), {}, ['p_update_refunds']))
  const consistency = parseLsn(granted.headers.get('consistency-token')!)!
  await cluster.waitForReceive()
  // What the set would believe of a standby restarted unnoticed, or of another one behind the same
  // URL: that it has replayed the token.
  app.replicas!.observed(replica, consistency)
  const fallbacks: string[] = []
  const onFallback = (reason: string) => fallbacks.push(reason)
  app.replicas!.on('fallback', onFallback)
  t.teardown(() => { app.replicas!.off('fallback', onFallback) })
  // The statement's snapshot is taken before replay resumes; its position column is read after.
  const read = app.read(async (db) => {
    const { rows: [row] } = await db.query<{ granted: number, position: string }>(
      `WITH shown AS MATERIALIZED (SELECT count(*)::int AS granted FROM grants WHERE client_id = 'app-b' AND permission_id = 'p_update_refunds')
       SELECT granted, pg_sleep(0.6) IS NULL AS slept, ${positionColumn} FROM shown`)
    return row
  }, { after: consistency })
  await sleep(200)
  await cluster.resumeReplay()
  const answer = await read
  t.equal(answer.granted, 1, 'the grant the token names is seen')
  t.ok(parseLsn(answer.position)! >= consistency)
  t.same(fallbacks, ['behind_token'], 'the replica, asked first, had not replayed the token: the primary answered')
})

t.test('a replica without a table the primary has (its creation not replayed yet): the read goes to the primary, said once; an error the primary would give too stays the caller\'s', async (t) => {
  const { app } = relaxed
  const [replica] = app.replicas!.replicas
  await cluster.waitForReplay()
  await until('the replica is up', async () => replica.up)
  await cluster.pauseReplay()
  t.teardown(async () => {
    await cluster.resumeReplay()
    await primary.query('DROP TABLE IF EXISTS made_after_the_start')
  })
  // Made after the service's first probe: the replica is within the lag bound and past the
  // primary's first position, as is any server behind the replica's URL that the probe did not see.
  await primary.query('CREATE TABLE made_after_the_start (n int); INSERT INTO made_after_the_start VALUES (1)')
  await cluster.waitForReceive()
  const fallbacks: string[] = []
  const onFallback = (reason: string) => fallbacks.push(reason)
  app.replicas!.on('fallback', onFallback)
  t.teardown(() => { app.replicas!.off('fallback', onFallback) })
  const warned = () => relaxed.logs.lines.filter((line) => line.msg === 'database replica lacks an object the primary has: such reads go to the primary').length
  const readNew = () => app.read(async (db) => {
    const { rows: [row] } = await db.query<{ n: number, position: string }>(`SELECT n, ${positionColumn} FROM made_after_the_start`)
    return row
  })
  for (const attempt of [1, 2]) t.equal((await readNew()).n, 1, `read ${attempt}: the primary answers`)
  t.same(fallbacks, ['schema_behind', 'schema_behind'])
  t.equal(warned(), 1, 'said once')
  t.match(relaxed.logs.lines.find((line) => line.msg === 'database replica lacks an object the primary has: such reads go to the primary'),
    { replica: 'replica-1', code: '42P01', reason: 'relation "made_after_the_start" does not exist' }, 'naming the replica and what it lacks')
  t.ok(replica.up, 'the replica still takes the reads it can answer')
  // A relation that exists nowhere, or a data error: the primary's answer would be the same.
  const failure = (sql: string) => app.read(async (db) => (await db.query(sql)).rows[0]).then(() => undefined, (error: Error & { code?: string }) => error.code)
  t.equal(await failure('SELECT * FROM no_such_relation_anywhere'), '42P01', 'the primary asked too, and its error is the caller\'s')
  t.equal(await failure("SELECT 'x'::int"), '22P02', 'a data error: not retried')
  t.same(fallbacks, ['schema_behind', 'schema_behind', 'schema_behind'])
  t.equal(warned(), 1, 'a relation the primary lacks as well says nothing of the replica')
})

t.test('a read the replica cancels in a conflict with its recovery: the primary answers, the replica stays up; a read the replica fails: marked down, said with its name and why, the primary answers', async (t) => {
  const { app, logs } = relaxed
  const [replica] = app.replicas!.replicas
  await cluster.waitForReplay()
  await until('the replica is up', async () => replica.up)
  const events: string[] = []
  const onFallback = (reason: string) => events.push(`fallback ${reason}`)
  const onDown = (down: { name: string }, error: Error) => events.push(`down ${down.name}: ${error.message}`)
  app.replicas!.on('fallback', onFallback)
  app.replicas!.on('down', onDown)
  t.teardown(() => { app.replicas!.off('fallback', onFallback); app.replicas!.off('down', onDown) })
  // The replica's server raises the error its condition gives (a DO block runs on a standby); the primary answers.
  const failingOnTheReplica = (code: string) => app.read(async (db) => {
    const { rows: [{ standby }] } = await db.query<{ standby: boolean }>('SELECT pg_is_in_recovery() AS standby')
    if (standby) await db.query(`DO $$ BEGIN RAISE EXCEPTION 'raised on the replica' USING ERRCODE = '${code}'; END $$`)
    return (await db.query<{ position: string }>(`SELECT ${positionColumn}`)).rows[0]
  })
  // 40001: what a standby answers a query it cancels in a snapshot conflict with its recovery.
  t.match(await failingOnTheReplica('40001'), { position: /^[0-9A-F]+\/[0-9A-F]+$/ }, 'answered')
  t.same(events, ['fallback recovery_conflict'], 'a conflict: the replica works, this read lost')
  t.ok(replica.up)
  // 57014: a statement cancelled past its timeout, a replica busy beyond its bounds.
  const mark = logs.lines.length
  t.match(await failingOnTheReplica('57014'), { position: /^[0-9A-F]+\/[0-9A-F]+$/ }, 'answered')
  t.same(events, ['fallback recovery_conflict', 'down replica-1: raised on the replica', 'fallback replica_failed'], 'a failure: marked down')
  const down = await logs.waitFor((line) => logs.lines.indexOf(line) >= mark && line.msg === 'database replica down: its reads go elsewhere', 'the down line')
  t.match(down, { replica: 'replica-1', code: '57014', reason: 'raised on the replica' }, 'the down line names the replica and why')
  await logs.waitFor((line) => logs.lines.indexOf(line) >= mark && line.msg === 'database replica back: it takes reads again', 'the back line')
})

t.test('a read with a token on the replica: its statements on their own by default; behind DATABASE_POOLER=transaction, in one transaction with the question of where the replica stands', async (t) => {
  const pooled = await service(t, { DATABASE_POOLER: 'transaction', DATABASE_REPLICA_MAX_LAG_MS: '600000' })
  await cluster.waitForReplay()
  for (const [base, pooler] of [[relaxed, false], [pooled, true]] as const) {
    const replicas = base.app.replicas!
    const reads: string[] = []
    const onRead = (name: string) => reads.push(name)
    replicas.on('read', onRead)
    t.teardown(() => { replicas.off('read', onRead) })
    let alone: boolean | undefined
    await until(`pooler ${pooler}: a read on the replica`, async () => {
      reads.length = 0
      // A token the replica has replayed: read there, after asking it.
      const after = replicas.replicas[0].replayed
      alone = (await base.app.read(async (db) => (await db.query<{ alone: boolean, position: string }>(
        `SELECT now() = statement_timestamp() AS alone, ${positionColumn}`)).rows[0], { after })).alone
      return reads[0] === 'replica-1'
    })
    t.equal(alone, !pooler, `pooler ${pooler}: ${pooler ? 'in the transaction begun with the question' : 'a statement of its own'}`)
  }
})

t.test('a service started while the replica has not replayed its migrations: its reads go to the primary (no 500 for a table the replica lacks); replayed, the replica takes them', async (t) => {
  const database = 'started_behind'
  await primary.query(`CREATE DATABASE ${database}`)
  t.teardown(async () => {
    await cluster.resumeReplay()
    await primary.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`)
  })
  await cluster.waitForReplay()
  await cluster.pauseReplay()
  const on = (url: string) => Object.assign(new URL(url), { pathname: `/${database}` }).toString()
  // A bound a replica that lacks the tables is well within, by the time measured since the start.
  const started = await service(t, { DATABASE_URL: on(cluster.primaryUrl), DATABASE_REPLICA_URLS: on(cluster.replicaUrl), DATABASE_REPLICA_MAX_LAG_MS: '600000' })
  const before = await readCounts(started)
  const read = await call(started, 'GET', ordersPath())
  t.equal(read.status, 404, `the primary, migrated and empty, answers: no such resource (${read.status} ${JSON.stringify(read.body)})`)
  const after = await readCounts(started)
  t.equal(after['fallback:lagging'] - (before['fallback:lagging'] ?? 0), 1, 'the replica, behind the primary\'s position at the start, lags by an unknown time')
  await cluster.resumeReplay()
  await cluster.waitForReplay()
  await until('the replica takes reads', async () => {
    const mark = (await readCounts(started))['read:replica-1'] ?? 0
    t.equal((await call(started, 'GET', ordersPath())).status, 404)
    return ((await readCounts(started))['read:replica-1'] ?? 0) > mark
  })
})

/** The replicas' metrics' HELP, as a scrape shows it (the others are in test/plugins/metrics.test.ts). */
const REPLICA_HELP: Record<string, string> = {
  db_reads_total: 'Reads by where they were answered: primary, replica-1...',
  db_read_fallbacks_total: 'Reads sent to the primary instead of a replica, by reason: none_up, lagging (past DATABASE_REPLICA_MAX_LAG_MS), ' +
    'behind_token (Consistency-Token not replayed), behind_version (If-None-Match names a newer version), replica_failed (the read failed ' +
    'on the replica), recovery_conflict (the replica cancelled it in a conflict with its replay), schema_behind (the replica lacks a table, ' +
    'column, function or type the read names)',
  db_replica_lag_seconds: 'How long ago the primary was at a position the replica has not replayed, at most about DATABASE_REPLICA_MAX_LAG_MS ' +
    'plus four to six probe intervals (a replica further behind takes no reads); NaN while the primary cannot be asked',
  db_replica_up: '1 while the replica answers its probe and takes reads, 0 while it is marked down'
}

// Last: prom-client's registry is one per process, and the newest app's counters are the ones served.
t.test('lag bound: a replica further behind than DATABASE_REPLICA_MAX_LAG_MS answers no read without a token; caught up, it does again', async (t) => {
  // Before the service: every position its probe records of the primary is later than this.
  const startedAt = performance.now()
  const strict = await service(t, { DATABASE_REPLICA_MAX_LAG_MS: '300' })
  // A new registry, before any read: each series of the replicas' metrics at 0, and each HELP whole.
  const fresh = await (await fetch(`${strict.url}/metrics`)).text()
  for (const reason of ['none_up', 'lagging', 'behind_token', 'behind_version', 'replica_failed', 'recovery_conflict', 'schema_behind']) {
    t.match(fresh, new RegExp(`^db_read_fallbacks_total\\{reason="${reason}"\\} 0$`, 'm'), `${reason} at 0 from the start`)
  }
  const help = (name: string) => new RegExp(`^# HELP ${name} (.*)$`, 'm').exec(fresh)?.[1]
  t.same(Object.fromEntries(Object.keys(REPLICA_HELP).map((name) => [name, help(name)])), REPLICA_HELP)
  await cluster.waitForReplay()
  let seen = ''
  await until('the replica takes reads', async () => {
    const mark = (await readCounts(strict))['read:replica-1'] ?? 0
    const page = await call(strict, 'GET', ordersPath())
    seen = page.headers.get('consistency-token')!
    return page.status === 200 && (await readCounts(strict))['read:replica-1'] > mark
  })
  await cluster.pauseReplay()
  t.teardown(() => cluster.resumeReplay())
  t.equal((await call(strict, 'POST', ordersPath(), {}, ['p_read_orders'])).status, 204)
  // Past the bound, by the probe's measure.
  await sleep(900)
  const before = await readCounts(strict)
  const answer = await call(strict, 'GET', ordersPath())
  t.ok(ids(answer).includes('p_read_orders'), 'the current state, from the primary')
  // A caller passing on the token the replica gave it: no staler than a caller without one.
  const withToken = await call(strict, 'GET', ordersPath(), { 'consistency-token': seen })
  t.ok(ids(withToken).includes('p_read_orders'), 'with a token the stalled replica has replayed: the current state too')
  const after = await readCounts(strict)
  t.equal(after['fallback:lagging'] - before['fallback:lagging'], 2, 'both counted as lagging')
  t.equal(after['read:primary'] - before['read:primary'], 2)
  // The lag as the gauge says it: past the bound, as the probe measured it, in seconds (at most the
  // time since the service's probe began); up, as it still answers its probe.
  const scraped = await (await fetch(`${strict.url}/metrics`)).text()
  const lag = Number(/^db_replica_lag_seconds\{replica="replica-1"\} (\S+)$/m.exec(scraped)?.[1])
  t.ok(lag > 0.3, `db_replica_lag_seconds past DATABASE_REPLICA_MAX_LAG_MS (${lag})`)
  t.ok(lag * 1000 <= performance.now() - startedAt, `in seconds (${lag})`)
  t.match(scraped, /^db_replica_up\{replica="replica-1"\} 1$/m)
  await cluster.resumeReplay()
  await cluster.waitForReplay()
  await until('reads back on the replica', async () => {
    const mark = (await readCounts(strict))['read:replica-1']
    await call(strict, 'GET', ordersPath())
    return (await readCounts(strict))['read:replica-1'] > mark
  })
  t.pass('back on the replica')
})
