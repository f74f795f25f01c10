// The database really goes away (its server is stopped) and comes back.
import { readdir, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import t from 'tap'
import { seedDatabase } from '../../db/seed.js'
import { ordersFixture, ordersPath } from '../support/fixtures.js'
import { ownPostgres } from '../support/database.js'
import { build } from '../support/harness.js'
import { deleteToken, readToken } from '../support/tokens.js'

const server = await ownPostgres(t)
const logs: string[] = []
const stream = new Writable({ write (chunk, _encoding, done) { logs.push(...chunk.toString().split('\n').filter(Boolean)); done() } })
// A hung database is detected by the client-side query timeout: shortened here, default 10 s.
const QUERY_TIMEOUT_MS = 2000
const harness = await build(t, {
  DATABASE_URL: server.url, LOG_LEVEL: 'warn', DATABASE_QUERY_TIMEOUT_MS: String(QUERY_TIMEOUT_MS), DATABASE_STATEMENT_TIMEOUT_MS: '1000'
}, { logs: stream })
await seedDatabase(harness.app.db, ordersFixture())
const list = () => harness.request(ordersPath(), { token: readToken() })

t.test('while the database is up: 200 and ready', async (t) => {
  t.equal((await list()).status, 200)
  t.equal((await harness.request('/readyz')).status, 200)
})

t.test('database stopped → 503 problem with Retry-After, /readyz 503, /healthz 200', async (t) => {
  await server.stop()
  const started = Date.now()
  for (const res of [
    await list(),
    await harness.request(ordersPath(), { method: 'DELETE', token: deleteToken(), json: ['p_read_orders'] }),
    await harness.request('/readyz')
  ]) {
    t.equal(res.status, 503)
    t.equal(res.headers.get('retry-after'), '5')
    t.match(res.body, { type: '/problems/database-unavailable', status: 503 })
  }
  t.ok(Date.now() - started < 15_000, 'answered within seconds, not hung')
  t.equal((await harness.request('/healthz')).status, 200)
  t.equal((await harness.request(ordersPath())).status, 401, 'auth still answers first')
  const lost = logs.map((line) => JSON.parse(line)).filter((line) => /idle database connection lost|readiness check failed/.test(line.msg))
  t.ok(lost.some((line) => line.msg === 'readiness check failed' && line.level === 40), 'the failed readiness check is logged, as a warning')
  for (const line of lost) {
    t.same(Object.keys(line).filter((key) => !['level', 'time', 'pid', 'hostname', 'msg', 'reqId'].includes(key)).sort(), ['code', 'reason'], line.msg)
    t.ok(JSON.stringify(line).length < 400, `${line.msg}: one short line, no pg client in it`)
  }
})

t.test('database back → the same process serves again, with its data and metrics of the outage', async (t) => {
  await server.start()
  t.equal((await harness.request('/readyz')).status, 200)
  const res = await list()
  t.equal(res.status, 200)
  t.equal(res.headers.get('x-total-count'), '10')
  const metrics = await (await fetch(`${harness.baseUrl}/metrics`)).text()
  t.match(metrics, /db_errors_total\{kind="unavailable"\} [1-9]/, 'the outage was counted')
})

/** The postmaster of the cluster and every process it started. */
async function clusterProcesses (): Promise<number[]> {
  const postmaster = Number((await readFile(join(server.dataDir, 'postmaster.pid'), 'utf8')).split('\n')[0])
  const children: number[] = []
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '')
    if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === postmaster) children.push(Number(entry))
  }
  return [postmaster, ...children]
}

t.test('database hung (every process stopped, connections open but silent) → 503 within the timeouts, then recovery', async (t) => {
  t.equal((await list()).status, 200, 'a pooled connection is open')
  const processes = await clusterProcesses()
  const mark = logs.length
  for (const pid of processes) process.kill(pid, 'SIGSTOP')
  t.teardown(() => { for (const pid of processes) { try { process.kill(pid, 'SIGCONT') } catch {} } })
  const started = Date.now()
  const [api, ready, alive] = await Promise.all([list(), harness.request('/readyz'), harness.request('/healthz')])
  t.equal(alive.status, 200, 'liveness does not wait for the database')
  t.equal(api.status, 503)
  t.match(api.body, { type: '/problems/database-unavailable' })
  t.equal(ready.status, 503)
  t.ok(Date.now() - started < QUERY_TIMEOUT_MS + 5000, `answered in ${Date.now() - started} ms, not hung`)
  // Neither the probe nor the pool was answered, nor refused: the check's own deadline (READINESS_TIMEOUT_MS) says so.
  const readiness = logs.slice(mark).map((line) => JSON.parse(line)).filter((line) => line.msg === 'readiness check failed')
  t.same(readiness.map(({ reason }) => reason), ['the database answered nobody within 1000 ms'], 'the readiness check says why')
  for (const pid of processes) process.kill(pid, 'SIGCONT')
  let res
  for (let attempt = 0; attempt < 50 && res?.status !== 200; attempt++) {
    res = await list()
    if (res.status !== 200) await new Promise((resolve) => setTimeout(resolve, 200))
  }
  t.equal(res!.status, 200, 'served again once the database answers')
})
