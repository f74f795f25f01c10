// The deployment's topology with real processes: Debian's HAProxy running gateway/haproxy.cfg (the
// file docker-compose.yml mounts) in front of two replicas of src/server.ts on one PostgreSQL.
// Under steady load each replica in turn is stopped (SIGTERM) and started again: no request fails.
// And the gateway's own guards: a body sent a byte at a time is answered 408 at its timeout,
// /metrics is refused however it is spelt, and only a request no replica received is sent again.
// A change feed stream passes through it as sent, and the replicas' heartbeats keep it open past
// the gateway's idle timeouts. Replicas named by DNS are found again at a new address.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process'
import { createSocket } from 'node:dgram'
import { EventEmitter, once } from 'node:events'
import { createServer as createHttpServer, request } from 'node:http'
import { connect, createServer } from 'node:net'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import t from 'tap'
import { freePort } from '../../db/embedded-postgres.js'
import { seedDatabase } from '../../db/seed.js'
import { projectRoot } from '../../src/project-root.js'
import { endsWithTest } from '../support/at-exit.js'
import { createTestDatabase } from '../support/database.js'
import { serverProcess } from '../support/server-process.js'
import { callerTraceparent, otlpReceiver } from '../support/otlp-receiver.js'
import { openStream } from '../support/sse.js'
import { PRODUCTION_AUDIENCE, PRODUCTION_ISSUER, productionClaims, TEST_SECRET, token } from '../support/tokens.js'
import { until } from '../support/waiting.js'

// Two replicas started three times, three gateways and the gateway's 10 s timeouts: on a loaded
// machine (the suite's other files beside it) this file has run past tap's 120 s per file. Every
// wait in it has its own bound and names what it waited for; the file as a whole gets 240 s.
t.setTimeout(240_000)

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

/** What `promise` gives, or an error naming `what` after `timeoutMs`: no wait here is unbounded. */
async function within<T> (what: string, promise: Promise<T>, timeoutMs = 30_000): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<never>((resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)), timeoutMs)
  })
  try {
    return await Promise.race([promise, late])
  } finally {
    clearTimeout(timer)
  }
}

/** Sends SIGTERM and waits for the process to exit: its exit code. */
async function stop (what: string, { child }: Running): Promise<number | null> {
  const exited = once(child, 'exit') as Promise<[number | null]>
  child.kill('SIGTERM')
  return (await within(`${what} to exit on SIGTERM`, exited))[0]
}

interface Answer { status: number, headers: Record<string, string | string[] | undefined>, body: string }

/** A raw HTTP/1.1 answer: the status line's code, headers by lowercase name, and the body as sent. */
function parseAnswer (raw: string): Answer {
  const end = raw.indexOf('\r\n\r\n')
  const [statusLine, ...lines] = raw.slice(0, end < 0 ? raw.length : end).split('\r\n')
  const headers: Record<string, string> = {}
  for (const line of lines) {
    const colon = line.indexOf(':')
    headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim()
  }
  return { status: Number(statusLine.split(' ')[1]), headers, body: end < 0 ? '' : raw.slice(end + 4) }
}

/**
 * A request without a body written byte for byte (node:http would normalise its target), with
 * Connection: close: the answer, read until the other side closes, within a bound.
 */
function sendRaw (port: number, target: string, method = 'GET'): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1')
    const chunks: Buffer[] = []
    const giveUp = setTimeout(() => {
      socket.destroy()
      reject(new Error(`no whole answer within 5 s to ${method} ${target}`))
    }, 5_000)
    socket.on('data', (chunk: Buffer) => chunks.push(chunk))
    socket.on('error', reject)
    socket.on('close', () => {
      clearTimeout(giveUp)
      resolve(parseAnswer(Buffer.concat(chunks).toString('latin1')))
    })
    socket.write(`${method} ${target} HTTP/1.1\r\nHost: api.example.test\r\nAuthorization: Bearer ${readWrite}\r\nConnection: close\r\n\r\n`, 'latin1')
  })
}

interface SlowSend { answer: Answer, bodyBytesSent: number, closedAfterMs: number | undefined }

/**
 * A DELETE that announces a body of 1000 bytes and sends it a byte a second, as a slow or hostile
 * client does: the answer, how much body had been sent, and when the other side closed the
 * connection (undefined if it had not after 20 s, when the client gives up).
 */
function sendSlowly (port: number, path: string, authorization: string | undefined): Promise<SlowSend> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1')
    const started = Date.now()
    const chunks: Buffer[] = []
    let bodyBytesSent = 1
    let closedAfterMs: number | undefined
    socket.write(`DELETE ${path} HTTP/1.1\r\nHost: api.example.test\r\n` +
      (authorization ? `Authorization: Bearer ${authorization}\r\n` : '') +
      'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n[')
    const drip = setInterval(() => {
      socket.write(' ')
      bodyBytesSent++
    }, 1_000)
    const giveUp = setTimeout(() => socket.destroy(), 20_000)
    socket.on('data', (chunk: Buffer) => chunks.push(chunk))
    // A byte written after the gateway closed fails: expected.
    socket.on('error', () => {})
    socket.on('end', () => { closedAfterMs = Date.now() - started })
    socket.on('close', () => {
      clearInterval(drip)
      clearTimeout(giveUp)
      resolve({ answer: parseAnswer(Buffer.concat(chunks).toString('latin1')), bodyBytesSent, closedAfterMs })
    })
  })
}

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
// Where the replicas send their traces (OTLP/HTTP, JSON): the gateway test checks that a caller's
// trace goes through the gateway and on into the replica's spans.
const traces = await otlpReceiver(t)
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
    // Other test files share the cores: lag here is theirs (shedding: test/plugins/pressure.test.ts),
    // and so is a wait for one of the four connections past the default second (the rolling
    // restart's four clients share them, on a replica just started; test/db/overload.test.ts tests the wait).
    MAX_EVENT_LOOP_DELAY_MS: '0',
    DATABASE_CONNECTION_WAIT_MS: '10000',
    // Well below the idle timeout of the gateway the stream test starts (3 s).
    FEED_HEARTBEAT_MS: '1000',
    LOG_LEVEL: 'info',
    OTEL_EXPORTER_OTLP_ENDPOINT: traces.endpoint,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    OTEL_BSP_SCHEDULE_DELAY: '100'
  })
}

/** HAProxy's view of a replica (its stats CSV): UP, DOWN, MAINT... */
async function gatewaySees (index: number, stats = statsPort): Promise<string | undefined> {
  try {
    const csv = await (await fetch(`http://127.0.0.1:${stats}/stats;csv`)).text()
    const row = csv.split('\n').find((line) => line.startsWith(`replicas,replica-${index + 1},`))
    return row?.split(',')[17]
  } catch {
    return undefined
  }
}

/** HAProxy on gateway/haproxy.cfg, listening on `port` (stats on `stats`) in front of two ports. */
function startGateway (port: number, stats: number, [replica1, replica2]: number[], env: Record<string, string> = {}): Running {
  return start(haproxy!, ['-db', '-f', join(projectRoot, 'gateway', 'haproxy.cfg')], {
    GATEWAY_BIND: `127.0.0.1:${port}`,
    GATEWAY_STATS: `127.0.0.1:${stats}`,
    REPLICA_1: `127.0.0.1:${replica1}`,
    REPLICA_2: `127.0.0.1:${replica2}`,
    ...env
  })
}

/** The gateway's log line for a request id. */
const logLineOf = (gateway: Running, id: string) => gateway.output().split('\n').find((line) => line.endsWith(`request_id=${id}`))

const replicas = [startReplica(0), startReplica(1)]
const gateway = startGateway(gatewayPort, statsPort, replicaPorts)
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

// Started now and checked near the end: the gateway's 10 s timeout runs while the other tests do.
// With a token and without: a replica answers the tokenless one 401 before its body, but the
// gateway holds both until their bodies are in.
const slowSends = Promise.all([
  sendSlowly(gatewayPort, `/resources/${RESOURCE}/authorized_clients/slow-with-token/permissions`, readWrite),
  sendSlowly(gatewayPort, `/resources/${RESOURCE}/authorized_clients/slow-without-token/permissions`, undefined)
])

t.test('Link URLs carry the gateway\'s public host and scheme, whatever the client forges', async (t) => {
  const forged = {
    'x-forwarded-proto': 'javascript',
    'x-forwarded-host': 'evil.example',
    forwarded: 'for=192.0.2.1;host=evil.example;proto=https',
    'x-forwarded-port': '8443',
    'x-forwarded-prefix': '/evil'
  }
  const page = await send(gatewayPort, 'GET', `${collection}?limit=5`, { headers: forged })
  t.equal(page.status, 200)
  t.match(page.headers.link, new RegExp(`^<http://api\\.example\\.test:${gatewayPort}${collection}\\?limit=5&offset=0&sort_by=name\\.asc>; rel="first"`))
  t.notMatch(page.headers.link, /evil|javascript|8443/)
  // A Host that is a list is no host: the gateway must not pass on a part of it (HAProxy's req.hdr
  // reads a header as comma-separated values and gives the last) as the public host.
  for (const host of [`api.example.test:${gatewayPort}, evil.example`, 'api.example.test,evil.example:80']) {
    const listed = await send(gatewayPort, 'GET', `${collection}?limit=5`, { headers: { host } })
    t.equal(listed.status, 200, host)
    t.match(listed.headers.link, new RegExp(`^<${collection}\\?limit=5&offset=0&sort_by=name\\.asc>; rel="first"`), `${host}: path-only links`)
    t.notMatch(listed.headers.link, /evil/, host)
  }
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

t.test('a token in the URL is in neither the gateway\'s log nor the replica\'s: the gateway logs the path, JWT-shaped parts redacted', async (t) => {
  // A client that puts its token in the query (RFC 6750's access_token) or in the path: the
  // replica redacts it in its log (src/request-lines.ts), and the gateway's line must not undo that.
  const signature = readWrite.split('.')[2]
  // Whatever the replica answers them (400: it knows no such parameter, and no such id).
  const inQuery = await send(gatewayPort, 'GET', `${collection}?limit=1&access_token=${readWrite}`)
  const inPath = await send(gatewayPort, 'GET', `/resources/${readWrite}/authorized_clients/${CLIENT}/permissions`)
  const ids = [inQuery, inPath].map(({ headers }) => headers['x-request-id'] as string)
  await until('the gateway\'s log lines', () => ids.every((id) => logLineOf(gateway, id) !== undefined), 5_000)
  const [queryLine, pathLine] = ids.map((id) => logLineOf(gateway, id)!)
  t.notOk(queryLine.includes(signature), `no token in the line: ${queryLine}`)
  t.match(queryLine, ` GET ${collection} ${inQuery.status} `, 'the path, without the query')
  t.notOk(pathLine.includes(signature), `no token in the line: ${pathLine}`)
  t.match(pathLine, ` GET /resources/[redacted]/authorized_clients/${CLIENT}/permissions ${inPath.status} `, 'the JWT in the path redacted')
  const replicaLines = (id: string) => replicas.flatMap((replica) => replica.output().split('\n')).filter((line) => line.includes(`"reqId":"${id}"`))
  await until('the replica\'s log lines', () => ids.every((id) => replicaLines(id).length > 0), 5_000)
  for (const id of ids) t.notOk(replicaLines(id).some((line) => line.includes(signature)), 'nor in the replica\'s')
})

t.test('a caller\'s trace goes through the gateway: traceparent and tracestate untouched, the replica\'s request span its child', async (t) => {
  const caller = callerTraceparent()
  const answer = await send(gatewayPort, 'GET', `${collection}?limit=5`, { headers: { traceparent: caller.traceparent, tracestate: 'caller=gateway-test' } })
  t.equal(answer.status, 200)
  const spans = await traces.until('the replica\'s span of the request', (spans) => spans.some((span) => span.traceId === caller.traceId && span.kind === 2))
  const request = spans.find((span) => span.traceId === caller.traceId && span.kind === 2)!
  t.equal(request.parentSpanId, caller.parentSpanId, 'the caller\'s span is its parent: the gateway started no trace of its own')
  t.equal(request.attributes['http.response.status_code'], 200)
  t.ok(spans.some((span) => span.traceId === caller.traceId && span.parentSpanId !== caller.parentSpanId), 'and the statement\'s span below it')
})

t.test('/metrics through the gateway, however it is spelt → 404 problem, never the metrics; API paths unaffected', async (t) => {
  const isMetrics = (answer: Answer) => answer.status === 200 && answer.body.includes('# HELP ')
  // What the replicas (no METRICS_PORT) serve as their metrics: the router decodes the path and
  // drops the query, in origin or absolute form. Each is checked on a replica directly first.
  const servedAsMetrics = [
    '/metrics', '/%6detrics', '/%6Detrics', '/metric%73', '/%6d%65%74%72%69%63%73', '/metrics?x=1', '/metrics?',
    'http://api.example.test/metrics', 'HTTP://api.example.test/metrics',
    'https://api.example.test/metrics', 'http://api.example.test/%6detrics'
  ]
  for (const target of servedAsMetrics) {
    t.ok(isMetrics(await sendRaw(replicaPorts[0], target)), `${target}: a replica serves its metrics`)
    const answer = await sendRaw(gatewayPort, target)
    t.equal(answer.status, 404, `${target} through the gateway`)
    t.equal(answer.headers['content-type'], 'application/problem+json', target)
    t.equal(JSON.parse(answer.body).status, 404, target)
    // The gateway's request id, in its header and body as a replica gives it, and in the gateway's
    // log line, which says no replica saw it.
    const id = answer.headers['x-request-id'] as string
    t.match(id, /^[0-9a-f-]{36}$/, `${target}: the request id`)
    t.equal(JSON.parse(answer.body).request_id, id, `${target}: in the problem`)
    await until(`the gateway's line of ${target}`, () => logLineOf(gateway, id) !== undefined, 5_000)
    t.match(logLineOf(gateway, id), / 404 api\/<NOSRV> /, `${target}: answered by the gateway, no replica saw it`)
  }
  t.equal((await sendRaw(gatewayPort, '/%6detrics', 'HEAD')).status, 404, 'HEAD too')
  // A query string a replica refuses (broken percent-encoding, 400): the gateway's 404 comes first.
  t.equal((await sendRaw(replicaPorts[0], '/%6Detrics?x=%zz')).status, 400, '/%6Detrics?x=%zz: a replica refuses it')
  t.equal((await sendRaw(gatewayPort, '/%6Detrics?x=%zz')).status, 404, '/%6Detrics?x=%zz through the gateway')
  // Served as metrics too, but not valid HTTP: the gateway refuses a fragment in the target.
  t.ok(isMetrics(await sendRaw(replicaPorts[0], '/metrics#x')), '/metrics#x: a replica serves its metrics')
  t.equal((await sendRaw(gatewayPort, '/metrics#x')).status, 400, '/metrics#x through the gateway')
  // Not metrics to the router today (404), some only because of its options (slashes, ;params,
  // case): refused all the same, by the gateway or by a replica.
  const otherSpellings = [
    '/METRICS', '/%4detrics', '/metrics/', '/%6detrics/', '/metrics;x', '/metrics%00', '/metrics%2F', '/%2Fmetrics',
    '//metrics', '/./metrics', '/%2e/metrics', '/../metrics', '/x/../metrics', '/x/%2e%2e/metrics', '/metrics%3Fx',
    'http://api.example.test//metrics'
  ]
  for (const target of otherSpellings) {
    const answer = await sendRaw(gatewayPort, target)
    t.equal(answer.status, 404, `${target} through the gateway`)
    t.match(answer.headers['content-type'], /^application\/problem\+json(;|$)/, target)
  }
  // The rule reads the decoded path, not every path with "metrics" in it.
  const encoded = await sendRaw(gatewayPort, `/resources/${RESOURCE}/authorized_clients/${CLIENT}/%70ermissions?limit=1`)
  t.equal(encoded.status, 200, 'an API path with an encoded letter is served')
  t.equal(JSON.parse(encoded.body).length, 1)
  const named = await sendRaw(gatewayPort, '/resources/metrics/authorized_clients/metrics/permissions')
  t.equal(named.status, 404)
  t.equal(JSON.parse(named.body).type, '/problems/resource-not-found', 'a resource named metrics reaches a replica')
})

/** Bytes written as given, the answer read until the other side closes, within 5 s. */
function exchange (port: number, raw: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1')
    const chunks: Buffer[] = []
    const giveUp = setTimeout(() => {
      socket.destroy()
      reject(new Error('no whole answer within 5 s'))
    }, 5_000)
    socket.on('data', (chunk: Buffer) => chunks.push(chunk))
    socket.on('error', () => {})
    socket.on('close', () => {
      clearTimeout(giveUp)
      resolve(parseAnswer(Buffer.concat(chunks).toString('latin1')))
    })
    socket.write(raw, 'latin1')
  })
}

t.test('the gateway\'s own 500 is a problem too, not HAProxy\'s HTML page', async (t) => {
  // A Host too long for the gateway to add its X-Forwarded-Host (a copy of it) within its buffer's
  // room for rewrites: it answers 500 itself, and no replica sees the request.
  const longHost = await exchange(gatewayPort, `GET ${collection} HTTP/1.1\r\nHost: ${'h'.repeat(15_000)}\r\nConnection: close\r\n\r\n`)
  t.equal(longHost.status, 500)
  t.equal(longHost.headers['content-type'], 'application/problem+json')
  t.match(JSON.parse(longHost.body), { type: 'about:blank', status: 500 })
  const id = longHost.headers['x-request-id'] as string
  t.equal(JSON.parse(longHost.body).request_id, id, 'the request id in the problem as in its header')
  await until('the gateway\'s line of the long Host', () => logLineOf(gateway, id) !== undefined, 5_000)
  t.match(logLineOf(gateway, id), / 500 api\/<NOSRV> /, 'answered by the gateway')
  // Requests its HTTP/1 parser refuses (a header line without a colon, headers over its 16 KiB
  // buffer) are answered 400 with HAProxy 2.6's built-in HTML page whatever the configuration says
  // (https://github.com/haproxy/haproxy/issues/3032): refused, never passed on.
  const malformed = await exchange(gatewayPort, `GET ${collection} HTTP/1.1\r\nHost: api.example.test\r\nNot a header\r\nConnection: close\r\n\r\n`)
  t.equal(malformed.status, 400)
})

t.test('DELETE bodies arrive intact: 500 long unknown ids (100 KB) named exactly; 400 ids removed exactly; one unknown id among 399 named exactly', async (t) => {
  // Longer than the gateway's buffer (16 KiB), which it then passes on as it fills.
  const long = Array.from({ length: 500 }, (_, index) => `unknown-${index}-${'x'.repeat(200)}`)
  const longAnswer = await send(gatewayPort, 'DELETE', collection, { body: JSON.stringify(long) })
  t.equal(longAnswer.status, 422, 'a body of 100 KB')
  t.same(JSON.parse(longAnswer.body).unknown_permission_ids, long)
  const ids = Array.from({ length: 400 }, (_, index) => permissionId(index + 50))
  const unknown = await send(gatewayPort, 'DELETE', collection, { body: JSON.stringify([...ids.slice(0, 399), 'no-such-permission']) })
  t.equal(unknown.status, 422)
  t.same(JSON.parse(unknown.body).unknown_permission_ids, ['no-such-permission'])
  t.equal((await granted()).length, PERMISSIONS, 'nothing removed')
  t.equal((await send(gatewayPort, 'DELETE', collection, { body: JSON.stringify(ids) })).status, 204)
  t.same(await granted(), Array.from({ length: 50 }, (_, index) => permissionId(index)))
})

t.test('a change feed stream through the gateway: sent through as written, open past the idle timeouts on heartbeats alone, then a change made through the gateway arrives', async (t) => {
  // A gateway of its own on the same file, with idle timeouts (timeout client, timeout server) of
  // 3 s instead of 30 s; the replicas send a heartbeat each second.
  const idleTimeoutMs = 3_000
  const port = await freePort()
  const stats = await freePort()
  const streaming = startGateway(port, stats, replicaPorts, { GATEWAY_IDLE_TIMEOUT: `${idleTimeoutMs}ms` })
  await until('both in rotation behind the stream gateway', async () => (await gatewaySees(0, stats)) === 'UP' && (await gatewaySees(1, stats)) === 'UP')
  const headers = { host: `api.example.test:${port}`, authorization: `Bearer ${readWrite}` }
  const open = async (gatewayPort: number, after: string | undefined) => {
    const opened = await openStream(`http://127.0.0.1:${gatewayPort}/permission_changes${after === undefined ? '' : `?after=${after}`}`, { headers })
    t.teardown(() => opened.close())
    return opened
  }
  // From the newest change committed: what the stream then sends is new. Nothing else writes to
  // this file's database meanwhile. (The feed may not show that change yet: a transaction open
  // elsewhere on the test cluster holds changes back for a while; the stream waits the same.)
  const { rows: [{ committed }] } = await db.query<{ committed: string | null }>('SELECT max(id)::text AS committed FROM permission_changes')

  const stream = await open(port, committed ?? undefined)
  t.equal(stream.status, 200)
  t.equal(stream.headers['content-type'], 'text/event-stream; charset=utf-8')
  await stream.until('the retry field', () => stream.retries.length === 1, 10_000)
  t.equal(stream.outcome, undefined, 'received while the response is open: the gateway passes it on, it does not hold the response')
  // Two idle timeouts without a change: only heartbeats go through.
  await sleep(2 * idleTimeoutMs)
  t.equal(stream.outcome, undefined, 'still open after two idle timeouts')
  t.ok(stream.comments.length >= 2 && stream.comments.every((comment) => comment === 'heartbeat'), `${stream.comments.length} heartbeats arrived as they were sent`)
  t.same(stream.events, [])

  const removed = await send(port, 'DELETE', collection, { body: JSON.stringify([permissionId(30)]) })
  t.equal(removed.status, 204)
  await stream.until('the change made through the gateway', () => stream.events.length >= 1, 30_000)
  t.match(JSON.parse(stream.events[0].data), {
    resource_id: RESOURCE, client_id: CLIENT, action: 'unauthorized', permission_ids: [permissionId(30)], request_id: removed.headers['x-request-id']
  })
  t.equal(stream.events.length, 1)
  t.equal(stream.outcome, undefined, 'the stream goes on')

  // The control: behind a gateway whose idle timeout is shorter than the heartbeat interval, the
  // same stream is cut. What kept the first one open was its heartbeats, not a timeout left unset.
  const shortPort = await freePort()
  const shortStats = await freePort()
  const short = startGateway(shortPort, shortStats, replicaPorts, { GATEWAY_IDLE_TIMEOUT: '400ms' })
  await until('both in rotation behind the short gateway', async () => (await gatewaySees(0, shortStats)) === 'UP' && (await gatewaySees(1, shortStats)) === 'UP')
  const cut = await open(shortPort, stream.events[0].id!)
  // Under load a replica may even take longer than 400 ms to answer (504); either way no stream lasts.
  const outcome = await Promise.race([cut.finished, sleep(15_000, 'still open after 15 s')])
  t.equal(outcome, cut.status === 200 ? 'cut' : 'end', `closed by the gateway (${cut.status})`)
  t.same(cut.events, [])

  await stop('the stream gateway', streaming)
  await stop('the short gateway', short)
})

/**
 * The one stand-in of this file, for what a real replica cannot be made to do on cue: dying
 * mid-request. It answers the gateway's health checks (GET /readyz) as a ready replica does; any
 * other request it reads whole, records, and then closes the connection without a byte of answer.
 * `close` then stops its listener: connections are refused, as to a replica that is gone.
 */
async function dyingReplica () {
  const received: Array<{ requestLine: string, requestId: string }> = []
  const checks = new EventEmitter()
  const server = createServer((socket) => {
    let data = Buffer.alloc(0)
    socket.on('error', () => {})
    socket.on('data', (chunk: Buffer) => {
      data = Buffer.concat([data, chunk])
      const end = data.indexOf('\r\n\r\n')
      if (end < 0) return
      const head = data.subarray(0, end).toString('latin1')
      if (data.length < end + 4 + Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0)) return
      socket.removeAllListeners('data')
      if (head.startsWith('GET /readyz ')) {
        socket.end('HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n')
        checks.emit('check')
      } else {
        received.push({ requestLine: head.split('\r\n')[0], requestId: /\r\nx-request-id: *([^\r]*)/i.exec(head)?.[1] ?? '' })
        socket.destroy()
      }
    })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => { server.close() })
  return {
    port: (server.address() as { port: number }).port,
    received,
    nextCheck: () => within('a health check of the stand-in', once(checks, 'check'), 10_000),
    close: () => { server.close() }
  }
}

t.test('the gateway sends a request again only when no replica received it', async (t) => {
  // A second gateway from the same file: replica 1 is the stand-in, replica 2 the real one.
  const stub = await dyingReplica()
  const port = await freePort()
  const stats = await freePort()
  const retrying = startGateway(port, stats, [stub.port, replicaPorts[1]])
  await until('both in rotation behind the second gateway', async () => (await gatewaySees(0, stats)) === 'UP' && (await gatewaySees(1, stats)) === 'UP')
  // Checked twice: its health is full, so one failed check does not take it out.
  await stub.nextCheck()
  await stub.nextCheck()

  t.test('a replica that dies mid-request: the DELETE is not sent to the other one → 502 problem, nothing removed', async (t) => {
    // Round robin: one of two consecutive requests goes to the stand-in.
    for (let attempt = 0; stub.received.length === 0 && attempt < 4; attempt++) {
      const id = permissionId(40 + attempt)
      const answer = await send(port, 'DELETE', collection, { body: JSON.stringify([id]) })
      if (stub.received.length === 0) {
        t.equal(answer.status, 204, `${id}: removed by the real replica`)
        continue
      }
      t.equal(answer.status, 502, `${id}: the client is told`)
      t.equal(answer.headers['content-type'], 'application/problem+json')
      t.match(JSON.parse(answer.body), { status: 502, detail: /may have been applied/ })
      t.ok((await granted()).includes(id), `${id} still granted: the real replica never received it`)
      const [{ requestId }] = stub.received
      // The id the replica received (and would have logged): the client can name the request.
      t.equal(answer.headers['x-request-id'], requestId, 'the request id the replica received, in the header')
      t.equal(JSON.parse(answer.body).request_id, requestId, 'and in the problem')
      await until('the log line', () => logLineOf(retrying, requestId) !== undefined, 5_000)
      t.match(logLineOf(retrying, requestId), / 502 replicas\/replica-1 .* retries=0 /, 'one attempt, on the stand-in')
    }
    t.same(stub.received.map(({ requestLine }) => requestLine), [`DELETE ${collection} HTTP/1.1`], 'the stand-in received it once')
  })

  t.test('a replica that refuses connections: the request goes to the other one and succeeds', async (t) => {
    // Right after a check: the gateway needs two more, 500 ms apart, to take it out of rotation.
    await stub.nextCheck()
    stub.close()
    const ids = [permissionId(44), permissionId(45)]
    // Round robin: one of the two is sent to the closed port first.
    const answers = [
      await send(port, 'DELETE', collection, { body: JSON.stringify([ids[0]]) }),
      await send(port, 'DELETE', collection, { body: JSON.stringify([ids[1]]) })
    ]
    t.same(answers.map(({ status }) => status), [204, 204])
    t.notOk((await granted()).some((id) => ids.includes(id)), 'both removed')
    const lineOf = ({ headers }: Answer) => logLineOf(retrying, headers['x-request-id'] as string)
    await until('the log lines', () => answers.every(lineOf), 5_000)
    const lines = answers.map(lineOf)
    t.ok(lines.every((line) => / 204 replicas\/replica-2 /.test(line ?? '')), 'both answered by the real replica')
    t.ok(lines.some((line) => / retries=\+1 /.test(line ?? '')), `one sent again, to the other replica: ${lines.join(' | ')}`)
    t.equal(stub.received.length, 1, 'nothing more reached the stand-in')
  })

  t.test('the second gateway stops', async () => {
    await stop('the second gateway', retrying)
  })
})

/**
 * A DNS server for the gateway's resolvers (UDP, on 127.0.0.1): A records for the names in
 * `addresses`, which the test changes as Docker's DNS does when a container is recreated with
 * another address; no AAAA records; NXDOMAIN for any other name.
 */
async function dnsServer (addresses: Record<string, string>) {
  const socket = createSocket('udp4')
  socket.on('message', (query, peer) => {
    if (query.length < 12) return
    let offset = 12
    const labels: string[] = []
    while (offset < query.length && query[offset] !== 0) {
      labels.push(query.subarray(offset + 1, offset + 1 + query[offset]).toString('latin1'))
      offset += query[offset] + 1
    }
    const question = query.subarray(12, offset + 5)
    const type = query.readUInt16BE(offset + 1)
    const address = addresses[labels.join('.').toLowerCase()]
    const header = Buffer.alloc(12)
    query.copy(header, 0, 0, 2)
    header.writeUInt16BE(address === undefined ? 0x8183 : 0x8180, 2)
    header.writeUInt16BE(1, 4)
    const answers = address !== undefined && type === 1
      ? [Buffer.from([0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4, ...address.split('.').map(Number)])]
      : []
    header.writeUInt16BE(answers.length, 6)
    socket.send(Buffer.concat([header, question, ...answers]), peer.port, peer.address)
  })
  socket.bind(0, '127.0.0.1')
  await once(socket, 'listening')
  t.teardown(() => { socket.close() })
  return { address: `127.0.0.1:${socket.address().port}`, addresses }
}

/** A stand-in replica on `host`: ready, and every answer says which address served it. */
async function standIn (host: string, port: number) {
  const server = createHttpServer((req, res) => {
    res.setHeader('content-type', 'application/json')
    res.end(JSON.stringify({ served_by: host, headers: req.headers }))
  })
  server.listen(port, host)
  await once(server, 'listening')
  t.teardown(() => { server.closeAllConnections(); server.close() })
  return { close: () => new Promise((resolve) => { server.closeAllConnections(); server.close(resolve) }) }
}

t.test('replicas recreated at other addresses (as docker compose does) are found there: the gateway asks DNS again', async (t) => {
  // Both replicas by name, as in docker-compose.yml, resolved by a DNS server of the test's as
  // Docker's embedded one (127.0.0.11) is in compose. Stand-ins: what matters is their address.
  const dns = await dnsServer({ 'replica-one.test': '127.0.0.2', 'replica-two.test': '127.0.0.3' })
  const port = await freePort()
  const stats = await freePort()
  const replicaPort = await freePort()
  const before = [await standIn('127.0.0.2', replicaPort), await standIn('127.0.0.3', replicaPort)]
  const named = startGateway(port, stats, replicaPorts, {
    REPLICA_1: `replica-one.test:${replicaPort}`,
    REPLICA_2: `replica-two.test:${replicaPort}`,
    GATEWAY_RESOLVER: dns.address
  })
  // Which addresses two requests in a row (round robin) reached; a 503 (none reached) reads as none.
  const servedBy = async () => {
    const answers = [await send(port, 'GET', '/x'), await send(port, 'GET', '/x')]
    return answers.map(({ status, body }) => status === 200 ? JSON.parse(body).served_by : status).sort()
  }
  const inRotationAt = (addresses: string[]) => async () =>
    (await gatewaySees(0, stats)) === 'UP' && (await gatewaySees(1, stats)) === 'UP' &&
    JSON.stringify(await servedBy()) === JSON.stringify(addresses)
  await until('both in rotation behind the named gateway', inRotationAt(['127.0.0.2', '127.0.0.3']), 15_000)
  t.same(await servedBy(), ['127.0.0.2', '127.0.0.3'])

  // Both containers recreated: the old addresses are gone, the names lead to new ones.
  for (const server of before) await server.close()
  Object.assign(dns.addresses, { 'replica-one.test': '127.0.0.4', 'replica-two.test': '127.0.0.5' })
  await standIn('127.0.0.4', replicaPort)
  await standIn('127.0.0.5', replicaPort)
  await until('both in rotation at their new addresses', inRotationAt(['127.0.0.4', '127.0.0.5']), 15_000)
  t.same(await servedBy(), ['127.0.0.4', '127.0.0.5'])
  await stop('the named gateway', named)
})

t.test('forwarded headers reach a replica as the gateway sets them: the client\'s are replaced or removed', async (t) => {
  const port = await freePort()
  const stats = await freePort()
  const ports = [await freePort(), await freePort()]
  for (const replicaPort of ports) await standIn('127.0.0.1', replicaPort)
  const fronting = startGateway(port, stats, ports)
  await until('both stand-ins in rotation', async () => (await gatewaySees(0, stats)) === 'UP' && (await gatewaySees(1, stats)) === 'UP', 15_000)
  const forged = {
    forwarded: 'for=203.0.113.9;host=evil.example;proto=https',
    'x-forwarded-for': '203.0.113.9',
    'x-forwarded-proto': 'https',
    'x-forwarded-host': 'evil.example',
    'x-forwarded-port': '8443',
    'x-forwarded-prefix': '/evil',
    'x-forwarded-server': 'evil.example',
    'x-real-ip': '203.0.113.9',
    'x-request-id': 'chosen-by-the-client'
  }
  const answer = await send(port, 'GET', '/x', { headers: forged })
  t.equal(answer.status, 200)
  const { headers } = JSON.parse(answer.body) as { headers: Record<string, string> }
  t.equal(headers['x-forwarded-for'], '127.0.0.1', 'X-Forwarded-For: the peer the gateway saw, the client\'s dropped')
  t.equal(headers['x-forwarded-proto'], 'http', 'X-Forwarded-Proto: the gateway\'s')
  t.equal(headers['x-forwarded-host'], `api.example.test:${port}`, 'X-Forwarded-Host: the Host the client sent')
  t.not(headers['x-request-id'], 'chosen-by-the-client', 'X-Request-Id: the gateway\'s')
  for (const name of ['forwarded', 'x-forwarded-port', 'x-forwarded-prefix', 'x-forwarded-server', 'x-real-ip']) {
    t.equal(headers[name], undefined, `${name}: removed`)
  }
  await stop('the fronting gateway', fronting)
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
    t.equal(await stop(`replica ${index + 1}`, replicas[index]), 0, `replica ${index + 1} exits 0 after draining`)
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

t.test('a body sent a byte a second → 408 problem from the gateway at 10 s, connection closed, with a token or without', async (t) => {
  for (const [index, { answer, bodyBytesSent, closedAfterMs }] of (await within('the slow sends', slowSends)).entries()) {
    const which = ['with a token', 'without'][index]
    t.equal(answer.status, 408, which)
    t.equal(answer.headers['content-type'], 'application/problem+json')
    t.equal(answer.headers.connection, 'close')
    t.equal(JSON.parse(answer.body).status, 408)
    t.match(answer.headers['x-request-id'], /^[0-9a-f-]{36}$/, `${which}: the request id`)
    t.equal(JSON.parse(answer.body).request_id, answer.headers['x-request-id'], `${which}: in the problem too`)
    t.ok(bodyBytesSent < 1000, `${which}: ${bodyBytesSent} of 1000 bytes sent`)
    // timeout http-request: 10 s for the whole request.
    t.ok(closedAfterMs !== undefined && closedAfterMs >= 9_500 && closedAfterMs < 15_000, `${which}: closed by the gateway after ${closedAfterMs} ms`)
  }
  for (const client of ['slow-with-token', 'slow-without-token']) {
    t.match(gateway.output(), new RegExp(`DELETE /resources/${RESOURCE}/authorized_clients/${client}/permissions 408 api/<NOSRV> `), `${client}: no replica received it`)
  }
})

t.test('the topology stops cleanly: replicas exit 0 on SIGTERM, the gateway on SIGTERM', async (t) => {
  // Together, as an orchestrator stopping the deployment does: each waits out SHUTDOWN_DELAY_MS.
  const exits = await Promise.all(replicas.map((replica, index) => stop(`replica ${index + 1}`, replica)))
  t.same(exits, [0, 0], 'both replicas exit 0')
  await stop('the gateway', gateway)
  await db.end()
})
