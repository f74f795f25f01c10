import { once } from 'node:events'
import { type AddressInfo, connect } from 'node:net'
import Fastify from 'fastify'
import t from 'tap'
import { ordersFixture, ordersPath } from '../support/fixtures.js'
import serviceApp from '../../src/app.js'
import { loadConfig } from '../../src/config.js'
import { createTestDatabase } from '../support/database.js'
import { build } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { openStream } from '../support/sse.js'
import { readToken, TEST_SECRET, token } from '../support/tokens.js'

/** Our metrics' HELP, as a scrape shows it (the replicas' are in test/system/replicas.test.ts). */
const OUR_HELP: Record<string, string> = {
  db_pool_connections: 'Connections of the pg pool, by state',
  db_errors_total: 'Database errors: unavailable (cannot connect or connection lost), query, idle_connection',
  requests_shed_total: 'Requests answered 503 overloaded, by reason: event_loop (lag), connection_wait (no pooled connection free in time), ' +
    'statement_timeout (the database cancelled a statement), feed_streams (FEED_MAX_STREAMS change feed streams open already)',
  feed_streams: 'Change feed streams (GET /permission_changes, text/event-stream) open on this instance',
  feed_listening: 'Whether the change feed\'s LISTEN connection (opened with the first stream) is listening: 1, else 0 (with feed_streams above 0, streams get changes by the 1 s poll only)',
  list_page_cache_reads_total: 'Pages of the list sent (a HEAD counts as its GET; a 304 or 412 sends none and is not counted), by outcome: hit (kept, the database sent only its version), miss (built by the database)',
  list_page_cache_bytes: 'Bytes of list pages kept (LIST_PAGE_CACHE_BYTES at most)'
}

t.test('GET /metrics: Prometheus text with route histograms, pool gauges and database errors', async (t) => {
  const { stream, lines, waitFor } = captureLogs()
  const harness = await build(t, { LOG_LEVEL: 'info' }, { logs: stream })
  await harness.seed(ordersFixture())
  // Every series exists from the start, at 0, so a rate over it is defined before the first event.
  const fresh = await (await fetch(`${harness.baseUrl}/metrics`)).text()
  for (const kind of ['unavailable', 'query', 'idle_connection']) t.match(fresh, new RegExp(`db_errors_total\\{kind="${kind}"\\} 0`), kind)
  for (const reason of ['event_loop', 'connection_wait', 'statement_timeout', 'feed_streams']) t.match(fresh, new RegExp(`requests_shed_total\\{reason="${reason}"\\} 0`), reason)
  // Each of our metrics says in its HELP what it counts, every value of its label included: the
  // lines as /metrics shows them, whole.
  const help = (name: string) => new RegExp(`^# HELP ${name} (.*)$`, 'm').exec(fresh)?.[1]
  const cutHelp = 'Change feed streams cut since the start because their consumer read too slowly (FEED_STREAM_BUFFER_BYTES) or stopped reading (FEED_STALL_TIMEOUT_MS)'
  t.same(Object.fromEntries(Object.keys(OUR_HELP).map((name) => [name, help(name)])), OUR_HELP)
  t.equal(help('feed_streams_cut_total'), cutHelp)
  t.equal(help('feed_streams_cut'), `${cutHelp} (deprecated: feed_streams_cut_total)`)

  await harness.db.query('ALTER TABLE grants RENAME TO grants_moved')
  t.equal((await harness.request(ordersPath(), { token: readToken() })).status, 500)
  await harness.db.query('ALTER TABLE grants_moved RENAME TO grants')
  // pg drops a connection whose query failed; these open one again.
  await harness.request(ordersPath(), { token: readToken() })
  await harness.request(ordersPath('missing-app'), { token: readToken() })
  t.equal((await harness.request('/no-such-path')).status, 404)

  // Scraped twice: a scrape would be measured once it was answered, so only the second could show it.
  await (await fetch(`${harness.baseUrl}/metrics`)).text()
  const res = await fetch(`${harness.baseUrl}/metrics`)
  t.equal(res.status, 200)
  t.match(res.headers.get('content-type'), /^text\/plain/)
  const text = await res.text()
  const route = '/resources/:resource_id/authorized_clients/:client_id/permissions'
  t.match(text, new RegExp(`http_request_duration_seconds_count\\{method="GET",route="${route.replace(/[/:]/g, '\\$&')}",status_code="500"\\} 1`))
  t.match(text, new RegExp(`http_request_duration_seconds_count\\{method="GET",route="${route.replace(/[/:]/g, '\\$&')}",status_code="200"\\} 1`))
  t.match(text, new RegExp(`http_request_duration_seconds_count\\{method="GET",route="${route.replace(/[/:]/g, '\\$&')}",status_code="404"\\} 1`))
  t.match(text, /db_pool_connections\{state="total"\} [1-9]/)
  t.match(text, /db_pool_connections\{state="idle"\} [1-9]/)
  t.match(text, /db_pool_connections\{state="waiting"\} 0/)
  t.match(text, /db_errors_total\{kind="query"\} 1/)
  t.match(text, /db_errors_total\{kind="unavailable"\} 0/)
  t.match(text, /db_errors_total\{kind="idle_connection"\} 0/)
  // A 404 problem and a 500 are errors, not overload.
  for (const reason of ['event_loop', 'connection_wait', 'statement_timeout']) t.match(text, new RegExp(`requests_shed_total\\{reason="${reason}"\\} 0`), `nothing shed: ${reason}`)
  t.match(text, /process_resident_memory_bytes \d+/)
  t.notMatch(text, /route="\/metrics"/, 'the scrape itself is not measured')
  t.notMatch(text, /route="__unknown__"|no-such-path/, 'requests no route matched are not measured: their paths are the client\'s to choose')
  t.notMatch(text, /http_request_summary_seconds_count\{/, 'histograms only: summaries cannot be added up across replicas')
  t.equal(harness.app.metricsAddress, undefined, 'no listener of its own without METRICS_PORT')
  // Scrapes log at warn only: a request logged after them shows theirs would have arrived by now.
  await harness.request(`${ordersPath()}?after-scrapes`)
  await waitFor((line) => (line.req as { url?: string } | undefined)?.url === `${ordersPath()}?after-scrapes`, 'the request after the scrapes')
  t.notOk(lines.some((line) => JSON.stringify(line).includes('/metrics')), 'a scrape leaves no line at info')
})

t.test('a client that hangs up halfway through its body: its request is the client\'s doing, not a database outage', async (t) => {
  const { stream, waitFor } = captureLogs()
  const harness = await build(t, { LOG_LEVEL: 'info' }, { logs: stream })
  const socket = connect(Number(new URL(harness.baseUrl).port), '127.0.0.1')
  await once(socket, 'connect')
  socket.write(`DELETE ${ordersPath()} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${token({ scope: 'delete:resource' })}\r\n` +
    'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n["p_read')
  // The body has begun arriving: the hang-up comes while it is read.
  await waitFor((line) => (line.req as { method?: string } | undefined)?.method === 'DELETE', 'the DELETE request')
  socket.destroy()
  await waitFor((line) => line.status === 400, 'the aborted request answered')
  const text = await (await fetch(`${harness.baseUrl}/metrics`)).text()
  t.match(text, /db_errors_total\{kind="unavailable"\} 0/)
})

t.test('an idle pooled connection the server drops: logged as a warning, counted, and the next request is served', async (t) => {
  const { stream, waitFor } = captureLogs()
  const harness = await build(t, { LOG_LEVEL: 'warn' }, { logs: stream })
  await harness.seed(ordersFixture())
  t.equal((await harness.request(ordersPath(), { token: readToken() })).status, 200)
  // Every other connection to the test's database: the service's, now idle in its pool.
  await harness.db.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()')
  const line = await waitFor((line) => line.msg === 'idle database connection lost', 'the lost connection')
  t.match(line, { level: 40, code: '57P01' })
  const text = await (await fetch(`${harness.baseUrl}/metrics`)).text()
  t.match(text, /db_errors_total\{kind="idle_connection"\} [1-9]/)
  t.match(text, /db_errors_total\{kind="unavailable"\} 0/, 'not an outage')
  t.equal((await harness.request(ordersPath(), { token: readToken() })).status, 200)
})

// A stream's "duration" is how long its consumer stayed (an hour, with hourly tokens): in the
// histogram it would land in +Inf beside the polled pages of the same route, and every latency
// quantile or SLO over it would read the top bucket. Streams have their own metrics (feed_streams).
t.test('a change feed stream is not measured as a request: its lifetime is not in http_request_duration_seconds; a polled page is', async (t) => {
  const harness = await build(t, { FEED_HEARTBEAT_MS: '100' })
  t.equal((await harness.request('/permission_changes', { token: readToken() })).status, 200, 'a polled page')
  // Past its exp, inside the 30 s clock tolerance: accepted for a moment, then the stream ends
  // cleanly at a heartbeat, as every stream outliving its token does. The moment is one to two
  // seconds (exp is in whole seconds): a test process stalled longer between making the token and
  // the stream's check (six test files on two cores) is refused, a 401 (a series of its own), and
  // tries again with a new token.
  const openExpiring = async () => {
    const expiring = token({ scope: 'read:resource', exp: Math.floor(Date.now() / 1000) - 28 }, { expiresIn: null })
    const feed = await openStream(`${harness.baseUrl}/permission_changes`, { headers: { authorization: `Bearer ${expiring}` } })
    t.teardown(() => feed.close())
    return feed
  }
  let feed = await openExpiring()
  for (let attempt = 1; feed.status === 401 && attempt < 5; attempt++) feed = await openExpiring()
  t.equal(feed.status, 200, 'a stream')
  t.equal(await feed.finished, 'end', 'ended by the service, answered whole')
  const text = await (await fetch(`${harness.baseUrl}/metrics`)).text()
  t.match(text, /^http_request_duration_seconds_count\{method="GET",route="\/permission_changes",status_code="200"\} 1$/m, 'the polled page only')
  t.match(text, /^http_request_duration_seconds_bucket\{le="\+Inf",method="GET",route="\/permission_changes",status_code="200"\} 1$/m)
})

t.test('feed_streams_cut_total and feed_streams_cut: the feed\'s count of streams cut, the same on every scrape', async (t) => {
  const harness = await build(t)
  // What the stream does when it cuts a consumer (test/routes/feed-stream-pace.test.ts cuts real ones).
  harness.app.feed.tooSlow()
  harness.app.feed.tooSlow()
  for (const scrape of ['first', 'second']) {
    const text = await (await fetch(`${harness.baseUrl}/metrics`)).text()
    t.match(text, /^feed_streams_cut_total 2$/m, `${scrape} scrape: the counter`)
    t.match(text, /^feed_streams_cut 2$/m, `${scrape} scrape: the gauge under its first name`)
  }
})

t.test('LIST_PAGE_CACHE_BYTES=0: no page cache, no page cache metrics, and the scrape still answers', async (t) => {
  const harness = await build(t, { LIST_PAGE_CACHE_BYTES: '0' })
  t.equal(harness.app.listPages, undefined)
  const res = await fetch(`${harness.baseUrl}/metrics`)
  const text = await res.text()
  t.equal(res.status, 200)
  t.notMatch(text, /list_page_cache/)
  t.match(text, /^feed_streams 0$/m, 'the other metrics are there')
})

t.test('METRICS_ENABLED=false → no /metrics', async (t) => {
  const harness = await build(t, { METRICS_ENABLED: 'false' })
  t.equal((await harness.request('/metrics')).status, 404)
})

t.test('METRICS_PORT: /metrics on its own listener only; the API port answers 404; closed with the app', async (t) => {
  const { stream, lines } = captureLogs()
  const harness = await build(t, { METRICS_PORT: '0', LOG_LEVEL: 'info' }, { logs: stream })
  await harness.seed(ordersFixture())
  t.equal((await harness.request(ordersPath(), { token: readToken() })).status, 200)
  const address = harness.app.metricsAddress
  t.ok(address, 'bound')
  t.match(lines.find((line) => line.msg === 'metrics listening'), { level: 30, address: { port: address!.port } }, 'where, in the log')
  t.not(address!.port, new URL(harness.baseUrl).port, 'a port of its own')
  const scrape = await fetch(`http://127.0.0.1:${address!.port}/metrics`)
  t.equal(scrape.status, 200)
  t.match(scrape.headers.get('content-type'), /^text\/plain/)
  const text = await scrape.text()
  t.match(text, /http_request_duration_seconds_count\{method="GET",route="\/resources\/:resource_id\/authorized_clients\/:client_id\/permissions",status_code="200"\} 1/, 'the API port\'s requests are measured')
  t.match(text, /db_pool_connections\{state="total"\}/)
  t.notMatch(text, /route="\/metrics"/, 'the scrape itself is not measured')
  const onApiPort = await harness.request('/metrics')
  t.equal(onApiPort.status, 404, 'not on the API port, which the gateway forwards')
  const elsewhere = await fetch(`http://127.0.0.1:${address!.port}/resources`)
  t.equal(elsewhere.status, 404, 'the metrics port serves nothing else')
  t.match(elsewhere.headers.get('content-type'), /^application\/problem\+json/, 'its errors are problems, as the API port\'s are')
  t.match(await elsewhere.json(), { status: 404, title: 'Not Found', detail: 'There is nothing at this URL.', request_id: elsewhere.headers.get('x-request-id') })
  for (const [what, response] of [['the scrape', scrape], ['the 404', elsewhere]] as const) {
    t.equal(response.headers.get('x-content-type-options'), 'nosniff', `${what}: the API port's security headers`)
    t.equal(response.headers.get('content-security-policy'), "default-src 'none'; frame-ancestors 'none'", what)
  }
  const posted = await fetch(`http://127.0.0.1:${address!.port}/metrics`, { method: 'POST', body: '{', headers: { 'content-type': 'application/json' } })
  t.equal(posted.status, 404, 'nor takes anything: a POST is no scrape')
  t.match(posted.headers.get('content-type'), /^application\/problem\+json/)
  await posted.arrayBuffer()
  await harness.app.close()
  await t.rejects(fetch(`http://127.0.0.1:${address!.port}/metrics`), 'closed with the app')
})

/** The answer to `text` sent as is on a connection of its own to `port`, read until the server ends it. */
async function rawExchange (port: number, text: string): Promise<string> {
  const socket = connect(port, '127.0.0.1')
  await once(socket, 'connect')
  let answer = ''
  socket.setEncoding('utf8').on('data', (chunk: string) => { answer += chunk })
  socket.end(text)
  await once(socket, 'close')
  return answer
}

t.test('METRICS_PORT: what is no scrape is answered as on the API port, a problem with its request id and security headers; a failed scrape is logged', async (t) => {
  const { stream, lines, waitFor } = captureLogs()
  const harness = await build(t, { METRICS_PORT: '0', LOG_LEVEL: 'info' }, { logs: stream })
  const { port } = harness.app.metricsAddress!
  const securityHeaders = (what: string, headers: Headers) => {
    t.equal(headers.get('x-content-type-options'), 'nosniff', `${what}: the API port's security headers`)
    t.equal(headers.get('content-security-policy'), "default-src 'none'; frame-ancestors 'none'", what)
  }
  // A percent-encoding that decodes to nothing: Fastify's router refuses it before any hook.
  const broken = await fetch(`http://127.0.0.1:${port}/metrics%zz`)
  t.equal(broken.status, 400)
  t.match(broken.headers.get('content-type'), /^application\/problem\+json/, 'a broken URL: a problem')
  t.match(await broken.json(), { status: 400, request_id: broken.headers.get('x-request-id') ?? 'no X-Request-Id' })
  securityHeaders('a broken URL', broken.headers)
  // What Node's HTTP parser refuses: a header line without a colon, and headers past its limit.
  for (const [what, request, status] of [
    ['not HTTP', 'GET /metrics HTTP/1.1\r\nHost localhost\r\n\r\n', 400],
    ['headers too large', `GET /metrics?${'a'.repeat(20_000)} HTTP/1.1\r\nHost: localhost\r\n\r\n`, 431]
  ] as const) {
    const answer = await rawExchange(port, request)
    t.match(answer, new RegExp(`^HTTP/1.1 ${status} `), what)
    t.match(answer, /\r\nContent-Type: application\/problem\+json\r\n/i, `${what}: a problem`)
    t.match(answer, /\r\nX-Content-Type-Options: nosniff\r\n/i, `${what}: nosniff`)
  }
  // Its request id is the service's own rule's (X-Request-Id), not Fastify's request-id header.
  const named = await fetch(`http://127.0.0.1:${port}/nowhere`, { headers: { 'request-id': 'from-the-client' } })
  await named.arrayBuffer()
  t.not(named.headers.get('x-request-id'), 'from-the-client', 'a request-id header names nothing')
  // A collector that fails fails the scrape: a 500 whose detail says it has been logged, as it is.
  const { client } = harness.app.metrics
  new client.Gauge({ name: 'test_failing_collector', help: 'fails', collect () { throw new Error('the collector failed') } }) // eslint-disable-line no-new
  const failed = await fetch(`http://127.0.0.1:${port}/metrics`)
  t.equal(failed.status, 500)
  const body = await failed.json() as { detail: string, request_id: string }
  t.match(body, { detail: /It has been logged/, request_id: failed.headers.get('x-request-id') ?? 'no X-Request-Id' })
  const logged = await waitFor((line) => line.msg === 'request failed', 'the failed scrape logged')
  t.match(logged, { level: 50, reqId: body.request_id, err: { message: 'the collector failed' } })
  t.notOk(lines.some((line) => line.msg === 'incoming request' || line.msg === 'request completed'), 'a scrape leaves no line of its own')
  // Fastify's "Server listening at" is the API port's, which a supervisor or a person reads for it.
  const listening = lines.filter((line) => /^Server listening at/.test(String(line.msg))).map(({ msg }) => msg)
  t.same(listening, [`Server listening at ${harness.baseUrl}`], 'the metrics listener says where it listens once, as "metrics listening"')
})

t.test('METRICS_PORT with LOG_LEVEL=silent: a failed scrape is answered 500 and logs nothing, as the app logs nothing', async (t) => {
  const { stream, lines } = captureLogs()
  const harness = await build(t, { METRICS_PORT: '0', LOG_LEVEL: 'silent' }, { logs: stream })
  const { client } = harness.app.metrics
  new client.Gauge({ name: 'test_failing_collector_silent', help: 'fails', collect () { throw new Error('the collector failed') } }) // eslint-disable-line no-new
  const failed = await fetch(`http://127.0.0.1:${harness.app.metricsAddress!.port}/metrics`)
  t.equal(failed.status, 500)
  await failed.arrayBuffer()
  // The line would be written in the same turn as the answer: a moment is plenty to see none.
  await new Promise((resolve) => setImmediate(resolve))
  t.same(lines, [])
})

t.test('METRICS_PORT: an app closed before it was ready (a start stopped halfway) closes without its listener', async (t) => {
  const app = Fastify()
  app.register(serviceApp, { config: loadConfig({ DATABASE_URL: await createTestDatabase(t), JWT_SECRET: TEST_SECRET, METRICS_PORT: '0', LOG_LEVEL: 'silent' }) })
  await app.close()
  t.equal(app.metricsAddress, undefined, 'never bound')
})

t.test('METRICS_PORT already in use → the start fails with the bind error', async (t) => {
  const taken = Fastify()
  await taken.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => taken.close())
  const port = String((taken.server.address() as AddressInfo).port)
  await t.rejects(build(t, { METRICS_PORT: port }), { code: 'EADDRINUSE' })
})
