// Shutdown as a rolling deploy does it: SIGTERM to the real server process while it is under load.
import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import { request } from 'node:http'
import { connect } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import t, { type Test } from 'tap'
import { seedDatabase } from '../../db/seed.js'
import { ordersFixture, ordersPath } from '../support/fixtures.js'
import { endsWithTest } from '../support/at-exit.js'
import { createTestDatabase } from '../support/database.js'
import { build } from '../support/harness.js'
import { productionServerEnv, serverProcess } from '../support/server-process.js'
import { productionClaims, readToken, token as tokenWith } from '../support/tokens.js'
import { until } from '../support/waiting.js'

t.test('draining: /readyz → 503 shutting-down while liveness and the API still answer', async (t) => {
  const harness = await build(t)
  await harness.seed(ordersFixture())
  harness.app.startDraining()
  const ready = await harness.request('/readyz')
  t.equal(ready.status, 503)
  t.match(ready.body, { type: '/problems/shutting-down' })
  t.equal((await harness.request('/healthz')).status, 200)
  t.equal((await harness.request(ordersPath(), { token: readToken() })).status, 200)
})

/** One GET on a new connection: its status, or the network error's code. */
function get (port: number, path: string, token?: string): Promise<number | string> {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, path, agent: false, headers: token ? { authorization: `Bearer ${token}` } : {} }, (res) => {
      res.resume()
      res.on('end', () => resolve(res.statusCode!))
      res.on('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? 'ERROR'))
    })
    req.on('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? 'ERROR'))
    req.end()
  })
}

async function listening (child: ChildProcess, output: () => string): Promise<number> {
  for (let waited = 0; waited < 30_000; waited += 50) {
    const port = /Server listening at http:\/\/127\.0\.0\.1:(\d+)/.exec(output())?.[1]
    if (port) return Number(port)
    if (child.exitCode !== null) break
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  throw new Error(`the server did not start:\n${output()}`)
}

/** The real server process on `databaseUrl` with production settings and `env`, once it listens. */
async function startedServer (t: Test, databaseUrl: string, env: Record<string, string>) {
  const child = endsWithTest(spawn(serverProcess.command, serverProcess.args, {
    env: { ...productionServerEnv(databaseUrl), ...env },
    stdio: ['ignore', 'pipe', 'pipe']
  }))
  t.teardown(() => { child.kill('SIGKILL') })
  let output = ''
  child.stdout!.on('data', (chunk) => { output += chunk })
  child.stderr!.on('data', (chunk) => { output += chunk })
  return { child, port: await listening(child, () => output), output: () => output }
}

t.test('SIGTERM under load: readiness fails, in-flight requests complete, new connections are refused, exit 0', async (t) => {
  const databaseUrl = await createTestDatabase(t)
  // Longer than this test's readiness check can take on a loaded machine: the "gateway" must see
  // readiness fail and stop sending before the listener closes, or its next connections are reset.
  const { child, port } = await startedServer(t, databaseUrl, { SHUTDOWN_DELAY_MS: '2000' })
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 1 })
  pool.on('error', () => {}) // the database is dropped with FORCE at teardown
  await seedDatabase(pool, ordersFixture())
  await pool.end()

  const token = tokenWith({ scope: 'read:resource', ...productionClaims })
  const deleteToken = tokenWith({ scope: 'delete:resource', ...productionClaims })
  // The gateway: sends load until it sees readiness fail, then sends this replica nothing new.
  const gateway = { stopped: false }
  const results: Array<number | string> = []
  const worker = async () => {
    while (!gateway.stopped) results.push(await get(port, ordersPath(), token))
  }
  const workers = Array.from({ length: 16 }, worker)
  // Under load: a few rounds of all sixteen answered before the signal.
  await until('the load is running', () => results.length > 48, 10_000)
  const beforeSignal = results.length

  // Requests still arriving when the listener closes: each sends half its body now, the rest later.
  const slow = ['p_read_orders', 'p_create_orders', 'p_update_orders', 'p_read_invoices'].map((id) => slowDelete(port, deleteToken, id))

  child.kill('SIGTERM')
  const signalledAt = Date.now()
  let readiness: number | string = 200
  while (readiness === 200 && Date.now() - signalledAt < 5_000) {
    readiness = await get(port, '/readyz')
    if (readiness === 200) await sleep(20)
  }
  t.equal(readiness, 503, 'readiness fails right after SIGTERM')
  gateway.stopped = true
  await Promise.all(workers)

  // Past SHUTDOWN_DELAY_MS the listener closes, while the slow requests are still open.
  await until('the listener closed', async () => (await get(port, '/healthz')) === 'ECONNREFUSED', 10_000)
  t.equal(await get(port, '/healthz'), 'ECONNREFUSED', 'new connections are refused')
  t.equal(child.exitCode, null, 'still running while requests are in flight')
  for (const finish of slow) finish.sendRest()
  t.same(await Promise.all(slow.map(({ status }) => status)), [204, 204, 204, 204], 'in-flight requests complete')

  const [code] = await once(child, 'exit')
  t.equal(code, 0, 'exit code 0')
  t.ok(Date.now() - signalledAt < 10_000, 'within the shutdown bound')
  t.ok(beforeSignal > 16, `load was running (${beforeSignal} requests before SIGTERM)`)
  t.same(results.filter((result) => result !== 200), [], `every request of the load was served (${results.length})`)
})

/** A DELETE that sends its headers and half its body now, and the rest when told. */
function slowDelete (port: number, token: string, id: string) {
  const body = JSON.stringify([id])
  const req = request({
    host: '127.0.0.1',
    port,
    method: 'DELETE',
    path: ordersPath(),
    agent: false,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }
  })
  const status = new Promise<number | string>((resolve) => {
    req.on('response', (res) => { res.resume(); res.on('end', () => resolve(res.statusCode!)) })
    req.on('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? 'ERROR'))
  })
  req.flushHeaders()
  req.write(body.slice(0, 4))
  return { status, sendRest: () => req.end(body.slice(4)) }
}

t.test('SIGTERM with a connection open that has sent nothing: it is closed with the listener, exit 0 at once', async (t) => {
  const { child, port, output } = await startedServer(t, await createTestDatabase(t), { SHUTDOWN_DELAY_MS: '0', SHUTDOWN_TIMEOUT_MS: '20000' })
  // A client's spare connection, opened and not used: undici opens one after a stream it was
  // reading is aborted, browsers open them ahead of need. Node's server.close() leaves it open.
  const spare = connect(port, '127.0.0.1')
  spare.on('error', () => {})
  t.teardown(() => { spare.destroy() })
  await once(spare, 'connect')
  const closedByServer = once(spare, 'close')
  // And one that has served a request and waits, kept alive (Node closes those itself).
  t.equal(await get(port, '/healthz'), 200)
  child.kill('SIGTERM')
  const signalledAt = Date.now()
  const [code] = await once(child, 'exit')
  t.equal(code, 0, `exit code 0\n${output().slice(-2000)}`)
  t.ok(Date.now() - signalledAt < 10_000, `within seconds, not the shutdown bound (${Date.now() - signalledAt} ms)`)
  await closedByServer
  t.pass('the spare connection was closed')
})
