// The deployment's topology with real processes: Debian's HAProxy running gateway/haproxy.cfg (the
// file docker-compose.yml mounts) in front of two replicas of src/server.ts on one PostgreSQL.
// Under steady load each replica in turn is stopped (SIGTERM) and started again: no request fails.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process'
import { once } from 'node:events'
import { request } from 'node:http'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import t from 'tap'
import { freePort } from '../db/embedded-postgres.js'
import { seedDatabase } from '../db/seed.js'
import { projectRoot } from '../src/project-root.js'
import { endsWithTest } from './at-exit.js'
import { createTestDatabase, serverProcess } from './helper.js'
import { PRODUCTION_AUDIENCE, PRODUCTION_ISSUER, productionClaims, TEST_SECRET, token } from './tokens.js'

const haproxy = ['/usr/sbin/haproxy', '/usr/bin/haproxy'].find((path) => spawnSync(path, ['-v']).status === 0)
if (!haproxy) {
  // CI installs it (.ci/run); elsewhere: apt-get install haproxy.
  if (process.env.CI) throw new Error('haproxy is not installed, and CI must run the gateway test')
  t.plan(0, 'haproxy is not installed (apt-get install haproxy): the gateway test is skipped')
  process.exit(0)
}

const RESOURCE = 'gateway-api'
const CLIENT = 'gateway-app'
const PERMISSIONS = 450
const collection = `/resources/${RESOURCE}/authorized_clients/${CLIENT}/permissions`
const permissionId = (index: number) => `p_${String(index).padStart(3, '0')}`
const readWrite = token({ scope: 'read:resource delete:resource', ...productionClaims }, { expiresIn: 600 })

interface Running { child: ChildProcess, output: () => string }

function start (command: string, args: string[], env: Record<string, string>): Running {
  const child = endsWithTest(spawn(command, args, { env: { PATH: process.env.PATH, ...env }, stdio: ['ignore', 'pipe', 'pipe'] }))
  let output = ''
  child.stdout!.on('data', (chunk) => { output += chunk })
  child.stderr!.on('data', (chunk) => { output += chunk })
  // A safety net when a test fails midway; the last test stops everything in order.
  t.teardown(() => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL') })
  return { child, output: () => output }
}

async function until (what: string, check: () => Promise<boolean> | boolean, timeoutMs = 30_000): Promise<void> {
  for (const started = Date.now(); Date.now() - started < timeoutMs; await sleep(100)) {
    if (await check()) return
  }
  throw new Error(`timed out waiting for ${what}`)
}

interface Answer { status: number, headers: Record<string, string | string[] | undefined>, body: string }

/** A request through the gateway, with the Host a public client would send. */
function send (port: number, method: string, path: string, options: { body?: string, headers?: Record<string, string> } = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { host: `api.example.test:${port}`, authorization: `Bearer ${readWrite}`, ...options.headers }
    if (options.body !== undefined) Object.assign(headers, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(options.body)) })
    const req = request({ host: '127.0.0.1', port, method, path, headers }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk) => { body += chunk })
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }))
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end(options.body)
  })
}

const databaseUrl = await createTestDatabase(t)
const replicaPorts = [await freePort(), await freePort()]
const gatewayPort = await freePort()
const statsPort = await freePort()

function startReplica (index: number): Running {
  return start(serverProcess.command, serverProcess.args, {
    NODE_ENV: 'production',
    HOST: '127.0.0.1',
    PORT: String(replicaPorts[index]),
    DATABASE_URL: databaseUrl,
    DATABASE_POOL_MAX: '4',
    JWT_SECRET: TEST_SECRET,
    JWT_ISSUER: PRODUCTION_ISSUER,
    JWT_AUDIENCE: PRODUCTION_AUDIENCE,
    // The gateway is the only proxy whose forwarded headers count.
    TRUST_PROXY: '127.0.0.1',
    // Longer than the gateway's inter x fall (500 ms x 2): it stops routing here before we close.
    SHUTDOWN_DELAY_MS: '2000',
    // Other test files share the cores: lag here is theirs (shedding: test/pressure.test.ts).
    MAX_EVENT_LOOP_DELAY_MS: '0',
    LOG_LEVEL: 'info'
  })
}

/** HAProxy's view of a replica (its stats CSV): UP, DOWN, MAINT... */
async function gatewaySees (index: number): Promise<string | undefined> {
  try {
    const csv = await (await fetch(`http://127.0.0.1:${statsPort}/stats;csv`)).text()
    const row = csv.split('\n').find((line) => line.startsWith(`replicas,replica-${index + 1},`))
    return row?.split(',')[17]
  } catch {
    return undefined
  }
}

const replicas = [startReplica(0), startReplica(1)]
const gateway = start(haproxy, ['-db', '-f', join(projectRoot, 'gateway', 'haproxy.cfg')], {
  GATEWAY_BIND: `127.0.0.1:${gatewayPort}`,
  GATEWAY_STATS: `127.0.0.1:${statsPort}`,
  REPLICA_1: `127.0.0.1:${replicaPorts[0]}`,
  REPLICA_2: `127.0.0.1:${replicaPorts[1]}`
})
await until('both replicas up behind the gateway', async () => (await gatewaySees(0)) === 'UP' && (await gatewaySees(1)) === 'UP', 60_000)

const db = new pg.Pool({ connectionString: databaseUrl, max: 2 })
const permissions = Array.from({ length: PERMISSIONS }, (_, index) => ({
  id: permissionId(index), resource_id: RESOURCE, name: `do:thing${index}`
}))
await seedDatabase(db, {
  resources: [{ id: RESOURCE }],
  clients: [{ id: CLIENT }],
  permissions,
  authorizations: [{ resource_id: RESOURCE, client_id: CLIENT, permission_ids: permissions.map(({ id }) => id) }]
})
const granted = async () => (await db.query<{ permission_id: string }>(
  'SELECT permission_id FROM grants WHERE resource_id = $1 AND client_id = $2 ORDER BY permission_id', [RESOURCE, CLIENT]
)).rows.map((row) => row.permission_id)

t.test('Link URLs carry the gateway\'s public host and scheme, whatever the client forges', async (t) => {
  const page = await send(gatewayPort, 'GET', `${collection}?limit=5`, { headers: { 'x-forwarded-proto': 'javascript', 'x-forwarded-host': 'evil.example' } })
  t.equal(page.status, 200)
  t.match(page.headers.link, new RegExp(`^<http://api\\.example\\.test:${gatewayPort}${collection}\\?limit=5&offset=0&sort_by=name\\.asc>; rel="first"`))
  t.notMatch(page.headers.link, /evil|javascript/)
})

t.test('the gateway\'s request id is in the response, the problem body, the replica\'s log and the gateway\'s', async (t) => {
  const missing = await send(gatewayPort, 'GET', `/resources/${RESOURCE}/authorized_clients/nobody/permissions`, { headers: { 'x-request-id': 'chosen-by-the-client' } })
  t.equal(missing.status, 404)
  const id = missing.headers['x-request-id'] as string
  t.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/, 'a UUID made by the gateway, not the client\'s')
  t.equal(JSON.parse(missing.body).request_id, id)
  await until('the log lines', () => gateway.output().includes(`request_id=${id}`) &&
    replicas.some((replica) => replica.output().includes(`"reqId":"${id}"`)), 5_000)
  t.pass('in the gateway\'s and a replica\'s log')
})

t.test('/metrics is not served through the gateway', async (t) => {
  const metrics = await send(gatewayPort, 'GET', '/metrics')
  t.equal(metrics.status, 404)
  t.equal(metrics.headers['content-type'], 'application/problem+json')
})

t.test('DELETE bodies arrive intact: 400 ids removed exactly; one unknown id among 399 named exactly', async (t) => {
  const ids = Array.from({ length: 400 }, (_, index) => permissionId(index + 50))
  const unknown = await send(gatewayPort, 'DELETE', collection, { body: JSON.stringify([...ids.slice(0, 399), 'no-such-permission']) })
  t.equal(unknown.status, 422)
  t.same(JSON.parse(unknown.body).unknown_permission_ids, ['no-such-permission'])
  t.equal((await granted()).length, PERMISSIONS, 'nothing removed')
  t.equal((await send(gatewayPort, 'DELETE', collection, { body: JSON.stringify(ids) })).status, 204)
  t.same(await granted(), Array.from({ length: 50 }, (_, index) => permissionId(index)))
})

t.test('a rolling restart under steady load: each replica stopped and started again, no request fails', async (t) => {
  const failures: string[] = []
  const answered = { GET: 0, DELETE: 0 }
  const load = { running: true }
  // Four clients: lists, and DELETEs of ids that stay removed (a repeated DELETE answers 204),
  // paced so the load is steady rather than all the CPU the machine has.
  const worker = async (index: number) => {
    for (let round = 0; load.running && round < 100_000; round++) {
      const method = (round + index) % 3 === 0 ? 'DELETE' : 'GET'
      try {
        const answer = method === 'GET'
          ? await send(gatewayPort, 'GET', `${collection}?limit=20&sort_by=id.desc`)
          : await send(gatewayPort, 'DELETE', collection, { body: JSON.stringify([permissionId(round % 50), permissionId(100)]) })
        if (answer.status !== (method === 'GET' ? 200 : 204)) failures.push(`${method} → ${answer.status} ${answer.body.slice(0, 200)}`)
        else answered[method]++
      } catch (error) {
        failures.push(`${method} → ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`)
      }
      await sleep(25)
    }
  }
  const total = () => answered.GET + answered.DELETE
  // Requests answered through the gateway since now: what "under load" means at each step.
  const moreAnswered = (count: number) => {
    const mark = total()
    return until(`${count} more requests answered`, () => total() >= mark + count)
  }
  const workers = [0, 1, 2, 3].map(worker)
  for (const index of [0, 1]) {
    await moreAnswered(40)
    const exited = once(replicas[index].child, 'exit')
    replicas[index].child.kill('SIGTERM')
    const [code] = await exited
    t.equal(code, 0, `replica ${index + 1} exits 0 after draining`)
    replicas[index] = startReplica(index)
    await until(`replica ${index + 1} back in rotation`, async () => (await gatewaySees(index)) === 'UP', 60_000)
  }
  await moreAnswered(40)
  load.running = false
  await Promise.all(workers)
  t.same(failures, [], 'no failed request')
  t.ok(answered.GET > 20 && answered.DELETE > 10, `steady load: ${answered.GET} GETs and ${answered.DELETE} DELETEs answered`)
  t.equal(await gatewaySees(0), 'UP')
  t.equal(await gatewaySees(1), 'UP')
})

t.test('the topology stops cleanly: replicas exit 0 on SIGTERM, the gateway on SIGTERM', async (t) => {
  for (const [index, { child }] of replicas.entries()) {
    const exited = once(child, 'exit')
    child.kill('SIGTERM')
    t.equal((await exited)[0], 0, `replica ${index + 1}`)
  }
  const stopped = once(gateway.child, 'exit')
  gateway.child.kill('SIGTERM')
  await stopped
  await db.end()
})
