import { once } from 'node:events'
import { readdir } from 'node:fs/promises'
import { connect } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import t from 'tap'
import { migrationsDir } from '../../src/project-root.js'
import { ordersFixture, ordersPath } from '../support/fixtures.js'
import { createTestDatabase } from '../support/database.js'
import { build } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { deleteToken, readToken } from '../support/tokens.js'

const { stream, lines: logs, waitFor } = captureLogs()
const harness = await build(t, { LOG_LEVEL: 'info' }, { logs: stream })
await harness.seed(ordersFixture())
const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

t.test('a sane X-Request-Id from the gateway is echoed and put in the problem body', async (t) => {
  const res = await harness.request(ordersPath('missing-app'), { token: readToken(), headers: { 'x-request-id': 'gw-1234.abc' } })
  t.equal(res.status, 404)
  t.equal(res.headers.get('x-request-id'), 'gw-1234.abc')
  t.equal((res.body as { request_id: string }).request_id, 'gw-1234.abc')
})

t.test('no or an insane X-Request-Id → a new UUID, echoed', async (t) => {
  for (const given of [undefined, 'has space', 'x'.repeat(129), 'quote"d', 'ünïcode']) {
    const res = await harness.request('/healthz', { headers: given === undefined ? {} : { 'x-request-id': given } })
    t.match(res.headers.get('x-request-id'), uuid, String(given))
  }
  const problem = await harness.request(ordersPath())
  t.equal((problem.body as { request_id: string }).request_id, problem.headers.get('x-request-id'))
})

t.test('a body malformed on the wire, answered on the socket before Fastify could: the request\'s id on that 400 too', async (t) => {
  const socket = connect(Number(new URL(harness.baseUrl).port), '127.0.0.1')
  socket.on('error', () => {})
  t.teardown(() => { socket.destroy() })
  await once(socket, 'connect')
  let received = ''
  socket.setEncoding('utf8').on('data', (chunk) => { received += chunk })
  const closed = once(socket, 'close')
  socket.write(`DELETE ${ordersPath()} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${deleteToken()}\r\n` +
    'X-Request-Id: bad-chunk-1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n["p_\r\n')
  // Its headers have been read: the request has its id.
  await waitFor((line) => line.reqId === 'bad-chunk-1', 'the DELETE request')
  socket.write('zz\r\n')
  await closed
  t.match(received, /^HTTP\/1\.1 400 /)
  t.match(received, /\r\nX-Request-Id: bad-chunk-1\r\n/i, 'echoed as on every answer')
  t.match(JSON.parse(received.slice(received.indexOf('\r\n\r\n') + 4)), { status: 400, request_id: 'bad-chunk-1' })
  // Its body's read then fails: logged as what the client was told, not as a time-out.
  const told = await waitFor((line) => line.reqId === 'bad-chunk-1' && typeof line.status === 'number', 'the answer logged')
  t.equal(told.status, 400)
})

t.test('log lines are JSON with the request id, route, status and latency; tokens never appear', async (t) => {
  const secretish = readToken()
  const res = await harness.request(`${ordersPath()}?limit=2&access_token=${secretish}`, {
    token: secretish, headers: { 'x-request-id': 'trace-me', cookie: 'session=s3cr3t' }
  })
  // A token in the query string is not a parameter of the operation (RFC 6750 §2.3 is not
  // supported): refused, and still kept out of the logs.
  t.equal(res.status, 400)
  // The completion line is written after the response is sent.
  await waitFor((line) => line.reqId === 'trace-me' && line.res !== undefined, 'the request completed')
  const mine = logs.filter((line) => line.reqId === 'trace-me')
  t.ok(mine.length >= 2, 'incoming and completed lines')
  const incoming = mine.find((line) => line.req) as { req: { route: string, url: string } }
  t.equal(incoming.req.route, '/resources/:resource_id/authorized_clients/:client_id/permissions')
  t.match(incoming.req.url, /access_token=\[redacted\]/)
  const completed = mine.find((line) => line.res) as { res: { statusCode: number, route: string }, responseTime: number }
  t.equal(completed.res.statusCode, 400)
  t.equal(completed.res.route, incoming.req.route, 'the completion line names the route too')
  t.type(completed.responseTime, 'number')
  const everything = JSON.stringify(logs)
  t.notOk(everything.includes(secretish), 'the token is in no log line')
  t.notOk(everything.includes('s3cr3t'), 'cookies are in no log line')
})

t.test('the probes write no request lines; every other route does, HEAD and the probe paths\' 405 included', async (t) => {
  for (const [method, path, id] of [['GET', '/healthz', 'probe-live'], ['GET', '/readyz', 'probe-ready'], ['HEAD', '/readyz', 'probe-head']]) {
    t.equal((await harness.request(path, { method, headers: { 'x-request-id': id } })).status, 200, `${method} ${path}`)
  }
  t.equal((await harness.request('/readyz', { method: 'POST', headers: { 'x-request-id': 'probe-post' } })).status, 405)
  t.equal((await harness.request(ordersPath(), { method: 'HEAD', token: readToken(), headers: { 'x-request-id': 'list-head' } })).status, 200)
  // Lines are written in order: once the last request's completion line is there, a probe's would be too.
  await waitFor((line) => line.reqId === 'list-head' && line.res !== undefined, 'the last request completed')
  t.same(logs.filter((line) => String(line.reqId).startsWith('probe-') && line.reqId !== 'probe-post'), [], 'no line for a probe answered')
  t.ok(logs.some((line) => line.reqId === 'probe-post' && line.res !== undefined), 'a refused method on a probe path is logged')
  t.ok(logs.some((line) => line.reqId === 'list-head' && line.req !== undefined), 'an operation\'s HEAD is logged')
})

t.test('a removal leaves an audit line: who lost what on which resource, and how many grants', async (t) => {
  const res = await harness.request(ordersPath(), {
    method: 'DELETE', token: deleteToken(), json: ['p_read_orders', 'p_read_orders'], headers: { 'x-request-id': 'audit-me' }
  })
  t.equal(res.status, 204)
  await waitFor((line) => line.reqId === 'audit-me' && line.res !== undefined, 'the request completed')
  const audit = logs.filter((line) => line.reqId === 'audit-me' && line.msg === 'permissions unauthorized')
  t.match(audit, [{ level: 30, resourceId: 'orders-api', clientId: 'app-a', removed: 1 }])
})

t.test('a start logs the migrations it applied, and none when the database is up to date; a close drains, then ends every connection', async (t) => {
  const url = await createTestDatabase(t)
  const first = captureLogs()
  const migrating = await build(t, { DATABASE_URL: url, LOG_LEVEL: 'info' }, { logs: first.stream })
  const migrations = (await readdir(migrationsDir)).filter((name) => name.endsWith('.sql')).sort()
  const applied = first.lines.find((line) => line.msg === 'database migrated')
  t.equal(applied?.level, 30)
  t.same(applied?.migrations, ['0_create-migrations-table.sql', ...migrations], 'postgres-migrations\' own table, then ours in order')
  const second = captureLogs()
  const upToDate = await build(t, { DATABASE_URL: url, LOG_LEVEL: 'info' }, { logs: second.stream })
  t.notOk(second.lines.some((line) => line.msg === 'database migrated'), 'nothing applied, nothing said')

  t.equal(upToDate.app.draining, false)
  await Promise.all([migrating.app.close(), upToDate.app.close()])
  t.equal(upToDate.app.draining, true, 'closing drained first')
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  t.teardown(() => client.end())
  const others = async () => Number((await client.query<{ n: string }>('SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()')).rows[0].n)
  // A backend leaves pg_stat_activity shortly after its client hung up: wait for that, briefly.
  for (let attempt = 0; attempt < 50 && await others() > 0; attempt++) await sleep(20)
  t.equal(await others(), 0, 'the pool and the readiness probe\'s connection are closed')
})

t.test('a token in the query string under any name, or none, is in no log line; other parameters are kept', async (t) => {
  const secretish = readToken()
  const opaque = 'opaque-s3cr3t-value'
  const urls = [
    `/no-such-path?authorization=Bearer%20${secretish}`,
    `${ordersPath()}?limit=2&token=${secretish}`,
    `${ordersPath()}?access%5Ftoken=${secretish}`,
    `${ordersPath()}?${secretish}`,
    `${ordersPath()}?limit=2&API-Key=${opaque}&Password=${opaque}&client_secret=${opaque}`
  ]
  for (const [i, url] of urls.entries()) {
    const res = await harness.request(url, { headers: { 'x-request-id': `query-secret-${i}` } })
    t.ok(res.status >= 400, url)
    await waitFor((line) => line.reqId === `query-secret-${i}` && line.res !== undefined, `request ${i} completed`)
  }
  const mine = logs.filter((line) => String(line.reqId).startsWith('query-secret-'))
  const everything = JSON.stringify(mine)
  t.notOk(everything.includes(secretish.split('.')[2]), 'no token, whatever the parameter\'s name')
  t.notOk(everything.includes(opaque), 'no value of a parameter named as a credential')
  const incoming = mine.find((line) => line.reqId === 'query-secret-1') as { req: { url: string } }
  t.equal(incoming.req.url, `${ordersPath()}?limit=2&token=[redacted]`, 'the rest of the URL as sent')
})
