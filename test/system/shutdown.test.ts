// Shutdown as a rolling deploy does it: SIGTERM to the real server process while it is under load.
import { type ChildProcess, spawn, type SpawnOptions, spawnSync } from 'node:child_process'
import { once } from 'node:events'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { request } from 'node:http'
import { connect, createServer, type Socket } from 'node:net'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import pg from 'pg'
import t, { type Test } from 'tap'
import { postmasterPid, running } from '../../db/cluster-folders.js'
import { freePort, startEmbeddedPostgres } from '../../db/embedded-postgres.js'
import { migrateDatabase } from '../../db/migrate.js'
import { seedDatabase } from '../../db/seed.js'
import { migrationsDir } from '../../src/project-root.js'
import { ordersFixture, ordersPath } from '../support/fixtures.js'
import { endsWithTest } from '../support/at-exit.js'
import { createTestDatabase } from '../support/database.js'
import { build } from '../support/harness.js'
import { productionServerEnv, projectCopy, serverProcess } from '../support/server-process.js'
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

// In this process, where the mutation runs reach plugins/lifecycle.ts (the tests further down run
// the server as a process of its own).
t.test('app.close() with a connection open that has sent nothing: it is ended before anything is answered on it', async (t) => {
  const harness = await build(t)
  const port = Number(new URL(harness.baseUrl).port)
  const accepted = once(harness.app.server, 'connection')
  const spare = connect(port, '127.0.0.1')
  spare.on('error', () => {})
  t.teardown(() => { spare.destroy() })
  let answered = ''
  spare.setEncoding('utf8').on('data', (chunk) => { answered += chunk })
  const spareClosed = once(spare, 'close')
  await Promise.all([once(spare, 'connect'), accepted])
  const closing = harness.app.close()
  // Draining is set in the same step that ends the unused connections (its preClose hook).
  await until('the close has begun', () => harness.app.draining)
  // Left open, this request would be answered (503, Connection: close) and the close would wait
  // for it: an idle client's connection would hold the close until SHUTDOWN_TIMEOUT_MS.
  spare.write('GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n')
  await spareClosed
  t.equal(answered, '', 'closed by the service, nothing answered on it')
  await closing
})

t.test('a connection that has closed is not kept for the close: a server up for months does not hold every connection it served', async (t) => {
  // A full collection on demand (node:vm gives the function once V8's flag is set).
  setFlagsFromString('--expose-gc')
  const gc = runInNewContext('gc') as () => void
  const harness = await build(t)
  const port = Number(new URL(harness.baseUrl).port)
  let served: WeakRef<Socket> | undefined
  harness.app.server.once('connection', (socket: Socket) => { served = new WeakRef(socket) })
  const client = connect(port, '127.0.0.1')
  await once(client, 'connect')
  await until('the connection accepted', () => served !== undefined)
  const serverSide = once(served!.deref()!, 'close')
  client.end()
  await serverSide
  // A WeakRef's target is kept until the end of the job that read it: collected a tick later.
  await until('the closed connection collected', async () => {
    await new Promise((resolve) => setImmediate(resolve))
    gc()
    return served!.deref() === undefined
  }, 5_000)
  t.pass('collected')
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

async function listening (child: ChildProcess, output: () => string, withinMs = 30_000): Promise<number> {
  for (let waited = 0; waited < withinMs; waited += 50) {
    const port = /Server listening at http:\/\/127\.0\.0\.1:(\d+)/.exec(output())?.[1]
    if (port) return Number(port)
    if (child.exitCode !== null) break
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  throw new Error(`the server did not start:\n${output()}`)
}

/** `command` started for this test (killed with it if still running), its stdout and stderr gathered as one text. */
function started (t: Test, command: string, args: string[], options: Omit<SpawnOptions, 'stdio'>) {
  const child = endsWithTest(spawn(command, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] }))
  t.teardown(() => { child.kill('SIGKILL') })
  let output = ''
  child.stdout!.on('data', (chunk) => { output += chunk })
  child.stderr!.on('data', (chunk) => { output += chunk })
  return { child, output: () => output }
}

/** The real server process on `databaseUrl` with production settings and `env`, once it listens. */
async function startedServer (t: Test, databaseUrl: string, env: Record<string, string>) {
  const { child, output } = started(t, serverProcess.command, serverProcess.args, {
    env: { ...productionServerEnv(databaseUrl), ...env }
  })
  return { child, port: await listening(child, output), output }
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
  t.equal(await readinessAfterSignal(port), 503, 'readiness fails right after SIGTERM')
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

/** /readyz's answer once it stops being 200, or 200 still after 5 s. */
async function readinessAfterSignal (port: number): Promise<number | string> {
  const since = Date.now()
  let readiness: number | string = 200
  while (readiness === 200 && Date.now() - since < 5_000) {
    readiness = await get(port, '/readyz')
    if (readiness === 200) await sleep(20)
  }
  return readiness
}

/** A DELETE that sends its headers and half its body now, and the rest when told. */
function slowDelete (port: number, token: string, id: string, path = ordersPath()) {
  const body = JSON.stringify([id])
  const req = request({
    host: '127.0.0.1',
    port,
    method: 'DELETE',
    path,
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

t.test('a shutdown cut short (SHUTDOWN_TIMEOUT_MS passed, or a second signal): exit 1, said in the JSON log at error, naming why', async (t) => {
  // close-with-grace said both with console.error, a bare line of text on stderr among the JSON
  // lines ("killed by timeout (1000ms)", "second SIGTERM, exiting"): no level for an operator's
  // log search, and read as unparsable by a log pipeline that takes JSON.
  const databaseUrl = await createTestDatabase(t)
  const deleteToken = tokenWith({ scope: 'delete:resource', ...productionClaims })
  const jsonLines = (output: string) => output.split('\n').filter(Boolean).map((line) => {
    try {
      return JSON.parse(line) as { level: number, msg: string }
    } catch {
      return line
    }
  })

  const late = await startedServer(t, databaseUrl, { SHUTDOWN_TIMEOUT_MS: '1000' })
  // In flight past the bound: half its body sent, the rest never.
  const held = slowDelete(late.port, deleteToken, 'p_read_orders')
  await until('the request is in', () => /"method":"DELETE"/.test(late.output()), 10_000)
  late.child.kill('SIGTERM')
  const [lateCode] = await once(late.child, 'exit')
  t.equal(lateCode, 1, 'exit 1: cut short')
  const lateLines = jsonLines(late.output())
  t.same(lateLines.filter((line) => typeof line === 'string'), [], 'JSON lines only')
  t.match(lateLines.at(-1), { level: 50, msg: /SHUTDOWN_TIMEOUT_MS \(1000 ms\)/ }, 'the last line says why, at error')
  held.sendRest()

  const twice = await startedServer(t, databaseUrl, { SHUTDOWN_DELAY_MS: '5000' })
  // Serving, not still starting: a signal between the listening line and the end of the start
  // stops the start instead ("stopped before serving", exit 0), which is not the case tested here.
  await until('ready', async () => await get(twice.port, '/readyz') === 200, 30_000)
  twice.child.kill('SIGTERM')
  await until('draining', () => /draining before close/.test(twice.output()), 10_000)
  twice.child.kill('SIGTERM')
  const [twiceCode] = await once(twice.child, 'exit')
  t.equal(twiceCode, 1, 'exit 1: cut short')
  const twiceLines = jsonLines(twice.output())
  t.same(twiceLines.filter((line) => typeof line === 'string'), [], 'JSON lines only')
  t.match(twiceLines.at(-1), { level: 50, signal: 'SIGTERM', msg: /second signal/ }, 'the last line says why, at error')
})

/**
 * The server as `npm start` runs it on a laptop (no DATABASE_URL, no NODE_ENV), in a project copy
 * (`copy`, or a new one); `detached`: in a process group of its own.
 */
async function startedOnEmbedded (t: Test, { detached = false, copy }: { detached?: boolean, copy?: { args: string[], clusterDir: string } } = {}) {
  const { args, clusterDir } = copy ?? await projectCopy(t)
  const { child, output } = started(t, process.execPath, args, {
    env: {
      PATH: process.env.PATH,
      HOST: '127.0.0.1',
      PORT: '0',
      EMBEDDED_POSTGRES_PORT: String(await freePort()),
      SHUTDOWN_DELAY_MS: '1500',
      MAX_EVENT_LOOP_DELAY_MS: '0'
    },
    detached
  })
  const port = await listening(child, output, 120_000)
  await until('the demo token is printed', () => /export TOKEN=(\S+)/.test(output()), 10_000)
  const token = /export TOKEN=(\S+)/.exec(output())![1]
  return { child, port, token, clusterDir, output }
}

t.test('npm start on the embedded PostgreSQL: SIGTERM drains as with DATABASE_URL, then PostgreSQL stops, exit 0', async (t) => {
  const { child, port, token, clusterDir, output } = await startedOnEmbedded(t)
  const postgres = postmasterPid(clusterDir)
  t.ok(postgres !== undefined && running(postgres), 'the embedded PostgreSQL runs')
  t.equal(await get(port, '/readyz'), 200, 'ready')

  // In flight across the whole drain: the demo grants billing-app perm_read_orders on orders-api.
  const slow = slowDelete(port, token, 'perm_read_orders', ordersPath('billing-app'))
  child.kill('SIGTERM')
  t.equal(await readinessAfterSignal(port), 503, 'readiness fails right after SIGTERM', { output: output().slice(-2000) })
  await until('the listener closed', async () => (await get(port, '/healthz')) === 'ECONNREFUSED', 10_000)
  t.equal(child.exitCode, null, 'still running while a request is in flight')
  t.ok(running(postgres!), 'PostgreSQL still runs while a request is in flight')
  slow.sendRest()
  t.equal(await slow.status, 204, 'the request in flight completes')
  const [code] = child.exitCode !== null ? [child.exitCode] : await once(child, 'exit')
  t.equal(code, 0, 'exit code 0', { output: output().slice(-2000) })
  t.notOk(running(postgres!), 'PostgreSQL is gone')
  t.notOk(existsSync(join(clusterDir, 'postmaster.pid')), 'stopped cleanly: no postmaster.pid left')
})

t.test('npm start on the embedded PostgreSQL, Ctrl-C at its terminal (SIGINT to PostgreSQL too): exit 0 within seconds, PostgreSQL gone', async (t) => {
  // A terminal sends SIGINT to its foreground process group: node and the PostgreSQL it spawned.
  const { child, clusterDir, output } = await startedOnEmbedded(t, { detached: true })
  const postgres = postmasterPid(clusterDir)
  t.ok(postgres !== undefined && running(postgres), 'the embedded PostgreSQL runs')
  process.kill(-child.pid!, 'SIGINT')
  const signalledAt = Date.now()
  const [code] = await once(child, 'exit')
  t.equal(code, 0, 'exit code 0', { output: output().slice(-2000) })
  t.ok(Date.now() - signalledAt < 8_000, `within SHUTDOWN_DELAY_MS and seconds, not SHUTDOWN_TIMEOUT_MS (${Date.now() - signalledAt} ms)`)
  t.notOk(running(postgres!), 'PostgreSQL is gone')
})

/** The PIDs of the processes whose command line holds every one of `words`. */
function processesWith (...words: string[]): number[] {
  return readdirSync('/proc').filter((name) => /^\d+$/.test(name)).flatMap((name) => {
    let commandLine = ''
    try {
      commandLine = readFileSync(`/proc/${name}/cmdline`, 'utf8').split('\0').join(' ')
    } catch {}
    return words.every((word) => commandLine.includes(word)) ? [Number(name)] : []
  })
}

t.test('the first npm start, stopped by SIGTERM while it makes the embedded PostgreSQL: the next one starts and serves', async (t) => {
  // A process manager's or an IDE's stop reaches node alone, not the initdb it runs: initdb goes on
  // and completes the cluster. The next start refused it for good (its password file was never
  // written: ENOENT), and told to change the port.
  const copy = await projectCopy(t)
  const { child, output } = started(t, process.execPath, copy.args, {
    // TMPDIR: where embedded-postgres writes initdb's password file, removed once initdb is done,
    // which the stop comes before; in the copy, which goes with the test.
    env: { PATH: process.env.PATH, TMPDIR: copy.dir, HOST: '127.0.0.1', PORT: '0', EMBEDDED_POSTGRES_PORT: String(await freePort()), MAX_EVENT_LOOP_DELAY_MS: '0' }
  })
  const exited = once(child, 'exit')
  // initdb, held still while node is stopped: the stop comes in the middle of it, however fast it runs.
  let initdb: number | undefined
  await until('initdb runs', () => (initdb = processesWith('initdb', '--pgdata=', join(copy.clusterDir, '..'))[0]) !== undefined, 60_000, 10)
  process.kill(initdb!, 'SIGSTOP')
  t.teardown(() => { try { process.kill(initdb!, 'SIGKILL') } catch {} })
  child.kill('SIGTERM')
  const [code] = await exited
  t.equal(code, 0, 'the start stopped', { output: output() })
  process.kill(initdb!, 'SIGCONT')
  await until('initdb has finished on its own', () => !running(initdb!), 60_000)

  const { child: next, clusterDir, output: nextOutput } = await startedOnEmbedded(t, { copy })
  t.pass('the next start serves')
  t.same(readdirSync(join(clusterDir, '..')).sort(), ['dev-jwt-secret', 'postgres', 'postgres.password'], 'nothing half-made left in .data/')
  next.kill('SIGTERM')
  const [nextCode] = next.exitCode !== null ? [next.exitCode] : await once(next, 'exit')
  t.equal(nextCode, 0, 'and stops as usual', { output: nextOutput().slice(-2000) })
})

t.test('npm start stopped by SIGTERM while its embedded PostgreSQL is up and the start still works on it: exit 0, said once, PostgreSQL gone', async (t) => {
  // The start held in its demo data, deterministically: the cluster made beforehand, migrated,
  // with a trigger that makes the seed's first insert wait.
  const copy = await projectCopy(t)
  const port = await freePort()
  const made = await startEmbeddedPostgres({ dataDir: copy.clusterDir, port })
  try {
    const pool = new pg.Pool({ connectionString: made.url, max: 1 })
    pool.on('error', () => {})
    try {
      await migrateDatabase(pool, migrationsDir)
      await pool.query(`CREATE FUNCTION hold_the_start () RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(120); RETURN NULL; END $$;
        CREATE TRIGGER hold_the_start BEFORE INSERT ON resources FOR EACH STATEMENT EXECUTE FUNCTION hold_the_start()`)
    } finally {
      await pool.end()
    }
  } finally {
    await made.stop()
  }
  const { child, output } = started(t, process.execPath, copy.args, {
    env: {
      PATH: process.env.PATH,
      HOST: '127.0.0.1',
      PORT: '0',
      EMBEDDED_POSTGRES_PORT: String(port),
      MAX_EVENT_LOOP_DELAY_MS: '0',
      // Longer than the hold: what ends it is the signal.
      DATABASE_STATEMENT_TIMEOUT_MS: '300000',
      DATABASE_QUERY_TIMEOUT_MS: '600000'
    }
  })
  const exited = once(child, 'exit')
  const held = async () => {
    const client = new pg.Client({ connectionString: made.url })
    client.on('error', () => {})
    try {
      await client.connect()
      const { rows } = await client.query("SELECT 1 FROM pg_stat_activity WHERE query LIKE '%INSERT INTO resources%' AND wait_event = 'PgSleep'")
      return rows.length > 0
    } catch {
      return false
    } finally {
      await client.end().catch(() => {})
    }
  }
  await until('the start waits in its demo data', held, 120_000, 200)
  const postgres = postmasterPid(copy.clusterDir)
  child.kill('SIGTERM')
  const [code] = await exited
  t.equal(code, 0, 'exit 0: stopped as asked, not failed', { output: output() })
  t.match(output(), /SIGTERM while starting: stopped before serving/, 'says why it stopped')
  t.notMatch(output(), /was not loaded|could not start|"level":60/, 'and nothing of the start\'s own failure, which the stop caused')
  t.notOk(postgres !== undefined && running(postgres), 'PostgreSQL is gone')
})

/** A server that accepts connections and never answers: a database still starting, as seen from a client. */
async function silentServer (t: Test): Promise<{ port: number, connected: Promise<unknown> }> {
  const sockets: Socket[] = []
  const server = createServer((socket) => { sockets.push(socket) })
  const connected = once(server, 'connection')
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => {
    for (const socket of sockets) socket.destroy()
    server.close()
  })
  return { port: (server.address() as { port: number }).port, connected }
}

t.test('SIGTERM while starting, waiting for the database, to node as PID 1 (a container\'s): exit 0 at once', async (t) => {
  const database = await silentServer(t)
  // node as PID 1 of a PID namespace of its own, as in a container: a signal it has no handler for
  // is ignored there. Elsewhere, as a plain process (the default action would kill it instead).
  const asInit = spawnSync('unshare', ['--user', '--map-root-user', '--pid', '--fork', 'true']).status === 0
  if (!asInit) t.comment('no PID namespace can be made here: node runs as a plain process')
  const [command, args] = asInit
    ? ['unshare', ['--user', '--map-root-user', '--pid', '--fork', serverProcess.command, ...serverProcess.args]]
    : [serverProcess.command, serverProcess.args]
  const { child, output } = started(t, command, args, {
    env: { ...productionServerEnv(`postgres://u:p@127.0.0.1:${database.port}/db`), MIGRATIONS_CONNECTION_WAIT_MS: '60000' }
  })
  const exited = once(child, 'exit')
  await database.connected
  // The start waits in its migrations' connection; unshare's child is node.
  const server = asInit ? Number(readFileSync(`/proc/${child.pid}/task/${child.pid}/children`, 'utf8').trim().split(' ')[0]) : child.pid!
  process.kill(server, 'SIGTERM')
  const signalledAt = Date.now()
  const [code, signal] = await Promise.race([exited, sleep(10_000, undefined, { ref: false }).then(() => ['still running', null])])
  t.same([code, signal], [0, null], 'exit 0, not killed', { output: output().slice(-2000) })
  t.ok(Date.now() - signalledAt < 8_000, `before the 10 s a start waits for its plugins (${Date.now() - signalledAt} ms)`)
  t.match(output(), /SIGTERM while starting/, 'says why it stopped')
})
