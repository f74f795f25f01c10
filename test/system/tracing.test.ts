// Tracing with real processes: src/server.ts configured by the OTEL_* variables alone, exporting
// with the real OTLP exporter to a real OTLP/HTTP endpoint (test/support/otlp-receiver.ts), whose requests
// are decoded here. A caller's trace is continued; the statement's span sits below the request's,
// with its text and never its values; the auth outcome and the problem type are on the request's
// span; every log line of a traced request names the trace. And with no exporter configured, no
// part of the SDK is loaded (only the API, which prom-client uses anyway).
import { type ChildProcess, spawn, spawnSync } from 'node:child_process'
import { createPublicKey } from 'node:crypto'
import { once } from 'node:events'
import { createServer, get, request, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { pathToFileURL } from 'node:url'
import pg from 'pg'
import t from 'tap'
import { freePort } from '../../db/embedded-postgres.js'
import { migrateDatabase } from '../../db/migrate.js'
import { seedDatabase } from '../../db/seed.js'
import { migrationsDir, projectRoot } from '../../src/project-root.js'
import { endsWithTest } from '../support/at-exit.js'
import { historyPath, ordersFixture, ordersPath, tooLargeToGrant } from '../support/fixtures.js'
import { backendPid, createTestDatabase, lockWaiter } from '../support/database.js'
import { loaderArgs, runnableOf } from '../support/node-args.js'
import { productionServerEnv, serverProcess } from '../support/server-process.js'
import { callerTraceparent, otlpReceiver, type ReceivedSpan } from '../support/otlp-receiver.js'
import { ecKeyPair, productionClaims, TEST_SECRET, token } from '../support/tokens.js'

const SERVER_KIND = 2

const databaseUrl = await createTestDatabase(t)
const db = new pg.Pool({ connectionString: databaseUrl, max: 1 })
t.teardown(() => db.end())
await migrateDatabase(db, migrationsDir)
await seedDatabase(db, ordersFixture())

interface Running { child: ChildProcess, output: () => string, url: string }

/** src/server.ts in production with `env` added, once it listens. */
async function startServer (env: Record<string, string>): Promise<Running> {
  const child = endsWithTest(spawn(serverProcess.command, serverProcess.args, {
    env: { ...productionServerEnv(databaseUrl), ...env },
    stdio: ['ignore', 'pipe', 'pipe']
  }))
  let output = ''
  child.stdout!.on('data', (chunk) => { output += chunk })
  child.stderr!.on('data', (chunk) => { output += chunk })
  t.teardown(() => { if (child.exitCode === null) child.kill('SIGKILL') })
  for (const started = Date.now(); Date.now() - started < 60_000; await sleep(100)) {
    const url = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(output)?.[1]
    if (url) return { child, output: () => output, url }
    if (child.exitCode !== null) break
  }
  throw new Error(`the server did not listen: ${output}`)
}

async function stop ({ child }: Running): Promise<number | null> {
  const exited = once(child, 'exit') as Promise<[number | null]>
  child.kill('SIGTERM')
  return (await exited)[0]
}

const reader = token({ scope: 'read:resource', ...productionClaims }, { expiresIn: 600 })
const writerWithoutRead = token({ scope: 'delete:resource', ...productionClaims }, { expiresIn: 600 })
// The route as Fastify writes it (http.route).
const LIST_ROUTE = 'GET /resources/:resource_id/authorized_clients/:client_id/permissions'

/** The log lines of one request (its reqId), parsed. */
const linesOf = (output: string, requestId: string) => output.split('\n').filter((line) => line.startsWith('{'))
  .map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.reqId === requestId)

/** Its lines once the one saying `last` is in: the process's stdout is read after the answer may have come. */
async function requestLines (server: Running, requestId: string, last = 'request completed') {
  for (const started = Date.now(); Date.now() - started < 5_000; await sleep(20)) {
    if (linesOf(server.output(), requestId).some((line) => line.msg === last)) break
  }
  return linesOf(server.output(), requestId)
}

t.test('traced over OTLP/HTTP with JSON: the caller\'s trace continued down to the SQL, attributes, logs', async (t) => {
  const receiver = await otlpReceiver(t)
  const server = await startServer({
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    OTEL_SERVICE_NAME: 'permissions-under-test',
    // Spans leave the batch within 100 ms instead of 5 s.
    OTEL_BSP_SCHEDULE_DELAY: '100',
    LOG_LEVEL: 'info',
    // Every stream refused, 503: an answer 5xx without a failure of the database.
    FEED_MAX_STREAMS: '0'
  })

  t.test('a list with a caller\'s traceparent: the request span is its child, the statement\'s span below', async (t) => {
    const caller = callerTraceparent()
    const answer = await fetch(`${server.url}${ordersPath()}`, {
      headers: { authorization: `Bearer ${reader}`, traceparent: caller.traceparent, tracestate: 'caller=1' }
    })
    t.equal(answer.status, 200)
    const inTrace = (spans: ReceivedSpan[]) => spans.filter((span) => span.traceId === caller.traceId)
    const spans = inTrace(await receiver.until('the request\'s and the statement\'s spans',
      (spans) => inTrace(spans).some((span) => span.kind === SERVER_KIND) && inTrace(spans).some((span) => span.attributes['db.system'] === 'postgresql' || span.attributes['db.system.name'] === 'postgresql')))
    const request = spans.find((span) => span.kind === SERVER_KIND)!
    t.equal(request.name, LIST_ROUTE, 'named after the route')
    t.equal(request.parentSpanId, caller.parentSpanId, 'the caller\'s span is its parent')
    t.equal(request.traceState, 'caller=1', 'the caller\'s tracestate carried on')
    t.match(request.attributes, { 'auth.outcome': 'allowed', 'http.request.method': 'GET', 'http.response.status_code': 200 })
    t.notOk('problem.type' in request.attributes, 'no problem')
    t.equal(request.resource['service.name'], 'permissions-under-test', 'OTEL_SERVICE_NAME')
    t.type(request.resource['service.instance.id'], 'string', 'replicas told apart')

    // Below the request: each span's parent is in the trace, up to the request span.
    const byId = new Map(spans.map((span) => [span.spanId, span]))
    const ancestors = (span: ReceivedSpan): string[] => {
      const parent = byId.get(span.parentSpanId)
      return parent ? [parent.spanId, ...ancestors(parent)] : []
    }
    const statements = spans.filter((span) => span.attributes['db.system'] === 'postgresql' || span.attributes['db.system.name'] === 'postgresql')
    t.ok(statements.length >= 1, `${statements.length} statement span(s): ${statements.map((span) => span.name).join(', ')}`)
    for (const statement of statements) {
      t.ok(ancestors(statement).includes(request.spanId), `${statement.name}: below the request span`)
      const text = String(statement.attributes['db.statement'] ?? statement.attributes['db.query.text'] ?? '')
      t.match(text, /\$1/, `${statement.name}: the statement's text, with its placeholders`)
      // The values (the path's ids) are never in a span.
      t.notMatch(JSON.stringify(statement.attributes), /orders-api|app-a/, `${statement.name}: no value of the request`)
    }

    const lines = await requestLines(server, answer.headers.get('x-request-id')!)
    t.ok(lines.length >= 2, `${lines.length} log lines of the request`)
    for (const line of lines) t.match(line, { trace_id: caller.traceId, span_id: request.spanId }, `"${String(line.msg)}" names the trace`)
    t.same(lines.map((line) => line.msg).filter((msg) => msg === 'incoming request' || msg === 'request completed'), ['incoming request', 'request completed'],
      'the request\'s own lines, once each')
  })

  t.test('every operation, requests interleaved: each statement below its own request\'s span, none outside one', async (t) => {
    // The context is handed on by hand, not kept across awaits (src/tracing.ts): a statement that
    // lost it would have no span (requireParentSpan), and one given another request's context would
    // sit in that request's trace.
    const everyScope = token({ scope: 'read:resource delete:resource create:resource', ...productionClaims }, { expiresIn: 600 })
    const send = async (method: string, path: string, body?: string[]) => {
      const caller = callerTraceparent()
      const answer = await fetch(`${server.url}${path}`, {
        method,
        headers: { authorization: `Bearer ${everyScope}`, traceparent: caller.traceparent, ...(body ? { 'content-type': 'application/json' } : {}) },
        ...(body ? { body: JSON.stringify(body) } : {})
      })
      await answer.arrayBuffer()
      return { method, path, status: answer.status, traceId: caller.traceId }
    }
    const removed = await send('DELETE', ordersPath(), ['p_read_orders'])
    const granted = await send('POST', ordersPath(), ['p_read_orders'])
    const reads = await Promise.all([
      ...Array.from({ length: 6 }, () => send('GET', ordersPath())),
      send('GET', historyPath()),
      send('GET', '/permission_changes?limit=5'),
      send('GET', ordersPath('app-b'))
    ])
    const sent = [removed, granted, ...reads]
    t.same(sent.map(({ status }) => status), [204, 204, 200, 200, 200, 200, 200, 200, 200, 200, 200])

    const isStatement = (span: ReceivedSpan) => span.attributes['db.system'] === 'postgresql' || span.attributes['db.system.name'] === 'postgresql'
    const traces = new Set(sent.map(({ traceId }) => traceId))
    const spans = await receiver.until('every request\'s spans and statements', (spans) => sent.every(({ traceId }) =>
      spans.some((span) => span.traceId === traceId && span.kind === SERVER_KIND) && spans.some((span) => span.traceId === traceId && isStatement(span))))
    for (const { method, path, traceId } of sent) {
      const own = spans.filter((span) => span.traceId === traceId)
      const request = own.find((span) => span.kind === SERVER_KIND)!
      const statements = own.filter(isStatement)
      t.ok(statements.length >= 1 && statements.every((span) => span.parentSpanId === request.spanId),
        `${method} ${path}: ${statements.length} statement span(s) (${statements.map((span) => span.name).join(', ')}), each a child of its request's span`)
      // The change's BEGIN takes its locks with the ids written into its text (db/queries/change.ts).
      t.notMatch(JSON.stringify(statements), /orders-api|app-a|app-b/, `${method} ${path}: no value of the request in its statements`)
    }
    // The six lists, interleaved, one statement each: none lost, none in another request's trace.
    for (const { traceId } of reads.slice(0, 6)) t.equal(spans.filter((span) => span.traceId === traceId && isStatement(span)).length, 1)
    t.same(spans.filter((span) => isStatement(span) && !traces.has(span.traceId) && !spans.some((other) => other.traceId === span.traceId && other.kind === SERVER_KIND)), [],
      'no statement span outside a request')
  })

  t.test('a POST that PostgreSQL fails to break a deadlock, run again: the second attempt\'s statements below the request span too', async (t) => {
    // As test/db/atomicity.test.ts provokes it: the POST holds cycle-c2's authorization and waits
    // for cycle-p1's row, which an administrator holds; the administrator then waits for the
    // authorization (migration 0010). PostgreSQL breaks the cycle by failing the POST, whose
    // deadlock_timeout (1 s, the default) is the shorter, and the change is run again from BEGIN.
    // The administrator still holds cycle-p1's row then: a second attempt that took the
    // authorization before the administrator woke up (the change pauses first, so rarely) would
    // close the same cycle again, and make a third. So a guard queues for the authorization's
    // advisory lock behind the first attempt: PostgreSQL grants it the lock as that attempt rolls
    // back, and the second waits for it until the administrator has committed.
    await db.query(`
      INSERT INTO resources (id) VALUES ('cycle-api');
      INSERT INTO permissions (id, resource_id, name) VALUES ('cycle-p1', 'cycle-api', 'read:cycle'), ('cycle-p2', 'cycle-api', 'write:cycle');
      INSERT INTO clients (id) VALUES ('cycle-c1'), ('cycle-c2');
      INSERT INTO authorizations (resource_id, client_id) VALUES ('cycle-api', 'cycle-c1'), ('cycle-api', 'cycle-c2');
      INSERT INTO grants (resource_id, client_id, permission_id) VALUES ('cycle-api', 'cycle-c1', 'cycle-p1'), ('cycle-api', 'cycle-c2', 'cycle-p2')`)
    const admin = new pg.Client({ connectionString: databaseUrl })
    await admin.connect()
    t.teardown(() => admin.end())
    await admin.query("BEGIN; SET LOCAL deadlock_timeout = '10s'; UPDATE permissions SET description = 'first' WHERE id = 'cycle-p1'")
    const caller = callerTraceparent()
    const creator = token({ scope: 'create:resource', ...productionClaims }, { expiresIn: 600 })
    const pending = fetch(`${server.url}/resources/cycle-api/authorized_clients/cycle-c2/permissions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${creator}`, traceparent: caller.traceparent, 'content-type': 'application/json' },
      body: JSON.stringify(['cycle-p1'])
    })
    t.ok(await lockWaiter(db, { statement: '%INSERT INTO grants%' }), 'the POST waits for the administrator')
    const guard = new pg.Client({ connectionString: databaseUrl })
    await guard.connect()
    t.teardown(() => guard.end())
    const guarded = guard.query("BEGIN; SET LOCAL deadlock_timeout = '10s'; SELECT pg_advisory_xact_lock(hashtext('cycle-api'), hashtext('cycle-c2'))")
    t.ok(await lockWaiter(db, { pid: backendPid(guard) }), 'the guard waits for the first attempt\'s advisory lock')
    await admin.query("UPDATE permissions SET description = 'second' WHERE id = 'cycle-p2'")
    await admin.query('COMMIT')
    await guarded
    await guard.query('COMMIT')
    t.equal((await pending).status, 204)

    const isStatement = (span: ReceivedSpan) => span.attributes['db.system'] === 'postgresql' || span.attributes['db.system.name'] === 'postgresql'
    // The request span ends after its last statement: once it is in, so are they.
    const spans = (await receiver.until('the POST\'s span', (spans) => spans.some((span) => span.traceId === caller.traceId && span.kind === SERVER_KIND)))
      .filter((span) => span.traceId === caller.traceId)
    const request = spans.find((span) => span.kind === SERVER_KIND)!
    const statements = spans.filter(isStatement)
    const names = statements.map(({ name }) => name)
    t.equal(names.filter((name) => name.startsWith('pg.query:grant')).length, 2, `the grant's statement twice, the failed attempt and the one run again: ${names.join(', ')}`)
    t.ok(names.some((name) => name.startsWith('pg.query:COMMIT')), 'the second attempt\'s COMMIT')
    t.ok(statements.every((span) => span.parentSpanId === request.spanId), 'each a child of the request\'s span')
  })

  t.test('a token in the query string (which the logs redact) is not in the span either: url.path is the path alone', async (t) => {
    const caller = callerTraceparent()
    const answer = await fetch(`${server.url}${ordersPath()}?access_token=not-for-traces&limit=5`, { headers: { traceparent: caller.traceparent } })
    t.equal(answer.status, 401, 'a token in the query is no credential (RFC 6750 §2.3 is not supported)')
    const spans = (await receiver.until('its span', (spans) => spans.some((span) => span.traceId === caller.traceId && span.kind === SERVER_KIND)))
      .filter((span) => span.traceId === caller.traceId)
    t.equal(spans.find((span) => span.kind === SERVER_KIND)!.attributes['url.path'], ordersPath())
    t.notMatch(JSON.stringify(spans), /not-for-traces/)
  })

  t.test('a token after a # or shaped like a JWT in the path, both of which the logs redact: not in url.path either', async (t) => {
    // fetch() drops a fragment: sent as Node's parser takes it, and the router (a # ends the path).
    const send = (path: string, traceparent: string) => new Promise<number>((resolve, reject) => {
      get(`${server.url}/`, { path, headers: { traceparent } }, (answer) => { answer.resume().on('end', () => resolve(answer.statusCode!)) }).on('error', reject)
    })
    const jwtShaped = 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmVkLWZvci10cmFjZXM'
    const fragment = callerTraceparent()
    t.ok(await send(`${ordersPath()}#access_token=fragment-for-traces`, fragment.traceparent) >= 400, 'a fragment with a token, routed')
    const inPath = callerTraceparent()
    t.ok(await send(ordersPath('app-a', jwtShaped), inPath.traceparent) >= 400, 'a JWT as the resource id')
    const requestOf = (spans: ReceivedSpan[], traceId: string) => spans.find((span) => span.traceId === traceId && span.kind === SERVER_KIND)
    const spans = await receiver.until('both spans', (spans) => requestOf(spans, fragment.traceId) !== undefined && requestOf(spans, inPath.traceId) !== undefined)
    t.equal(requestOf(spans, fragment.traceId)!.attributes['url.path'], ordersPath(), 'the path alone, without the fragment')
    t.equal(requestOf(spans, inPath.traceId)!.attributes['url.path'], '/resources/[redacted]/authorized_clients/app-a/permissions', 'the JWT redacted, as in the logs')
    t.notMatch(JSON.stringify(spans.filter((span) => span.traceId === fragment.traceId || span.traceId === inPath.traceId)), /fragment-for-traces|c2lnbmVkLWZvci10cmFjZXM/)
  })

  t.test('a URL Fastify cannot decode, answered before any hook: not traced, one line naming the request', async (t) => {
    const answer = await fetch(`${server.url}/resources/%E0%A4%A/authorized_clients/app-a/permissions`)
    t.equal(answer.status, 400)
    // No hook ran, so no X-Request-Id header: the problem body names the request.
    const { request_id: requestId } = await answer.json() as { request_id: string }
    const lines = await requestLines(server, requestId, 'Bad Request')
    t.match(lines, [{ msg: 'Bad Request', code: 'FST_ERR_BAD_URL', req: { method: 'GET', url: '/resources/%E0%A4%A/authorized_clients/app-a/permissions' } }])
  })

  t.test('refused for its scope: auth.outcome and problem.type on the request span, no statement', async (t) => {
    const caller = callerTraceparent()
    const answer = await fetch(`${server.url}${ordersPath()}`, { headers: { authorization: `Bearer ${writerWithoutRead}`, traceparent: caller.traceparent } })
    t.equal(answer.status, 403)
    const spans = (await receiver.until('the refused request\'s span',
      (spans) => spans.some((span) => span.traceId === caller.traceId && span.kind === SERVER_KIND))).filter((span) => span.traceId === caller.traceId)
    const request = spans.find((span) => span.kind === SERVER_KIND)!
    t.match(request.attributes, { 'auth.outcome': 'insufficient-scope', 'problem.type': '/problems/insufficient-scope', 'http.response.status_code': 403 })
    // HTTP's conventions: a server span's status is left unset for a 4xx, the client's doing.
    t.same(request.status, { code: 0 }, 'a 4xx: status unset')
    t.same(request.events, [], 'no exception recorded for a refusal')
    t.same(spans.filter((span) => 'db.system' in span.attributes || 'db.system.name' in span.attributes), [], 'no statement ran')
  })

  t.test('a 4xx thrown by the handler after its statement: status unset; a 5xx: error', async (t) => {
    const missing = callerTraceparent()
    const notFound = await fetch(`${server.url}${ordersPath('app-b', 'no-such-resource')}`, { headers: { authorization: `Bearer ${reader}`, traceparent: missing.traceparent } })
    t.equal(notFound.status, 404)
    const refused = callerTraceparent()
    const stream = await fetch(`${server.url}/permission_changes`, { headers: { authorization: `Bearer ${reader}`, accept: 'text/event-stream', traceparent: refused.traceparent } })
    t.equal(stream.status, 503, 'FEED_MAX_STREAMS=0: every stream refused')
    const requestOf = (spans: ReceivedSpan[], traceId: string) => spans.find((span) => span.traceId === traceId && span.kind === SERVER_KIND)
    const spans = await receiver.until('both request spans', (spans) => requestOf(spans, missing.traceId) !== undefined && requestOf(spans, refused.traceId) !== undefined)
    const four = requestOf(spans, missing.traceId)!
    t.match(four.attributes, { 'problem.type': '/problems/resource-not-found', 'http.response.status_code': 404 })
    t.same(four.status, { code: 0 }, 'a 4xx: status unset')
    t.same(four.events, [], 'no exception recorded for a 404')
    const five = requestOf(spans, refused.traceId)!
    t.match(five.attributes, { 'problem.type': '/problems/overloaded', 'http.response.status_code': 503 })
    t.match(five.status, { code: 2, message: /streams the change feed to 0 consumers/ }, 'a 5xx: error, with what failed')
    t.same(five.events, ['exception'], 'the exception recorded')
  })

  t.test('a URL no route matches: its 404 leaves the span\'s status unset, as a routed 404 does', async (t) => {
    const caller = callerTraceparent()
    const answer = await fetch(`${server.url}/no/such/path`, { headers: { traceparent: caller.traceparent } })
    t.equal(answer.status, 404)
    const spans = await receiver.until('its span', (spans) => spans.some((span) => span.traceId === caller.traceId && span.kind === SERVER_KIND))
    const request = spans.find((span) => span.traceId === caller.traceId && span.kind === SERVER_KIND)!
    t.match(request.attributes, { 'http.response.status_code': 404, 'url.path': '/no/such/path' })
    t.same(request.status, { code: 0 }, 'a 4xx: status unset')
    t.same(request.events, [], 'no exception recorded')
  })

  t.test('without a token, and without a traceparent: a trace of its own, missing-credentials', async (t) => {
    const before = new Set(receiver.spans().map((span) => span.spanId))
    const answer = await fetch(`${server.url}${ordersPath()}`)
    t.equal(answer.status, 401)
    const requestId = answer.headers.get('x-request-id')!
    const spans = await receiver.until('a new root span', (spans) => spans.some((span) => !before.has(span.spanId) && span.kind === SERVER_KIND && span.parentSpanId === ''))
    const request = spans.find((span) => !before.has(span.spanId) && span.kind === SERVER_KIND && span.parentSpanId === '')!
    t.match(request.attributes, { 'auth.outcome': 'missing-credentials', 'problem.type': '/problems/missing-credentials' })
    t.same(request.status, { code: 0 }, 'a 401: status unset')
    for (const line of await requestLines(server, requestId)) t.equal(line.trace_id, request.traceId, `"${String(line.msg)}" names its trace`)
  })

  t.test('a malformed traceparent is ignored: served, in a trace of its own', async (t) => {
    const before = new Set(receiver.spans().map((span) => span.spanId))
    const caller = callerTraceparent()
    const malformed = ['garbage', `00-${'0'.repeat(32)}-${caller.parentSpanId}-01`, `ff-${caller.traceId}-${caller.parentSpanId}-01`, `00-${caller.traceId}-${caller.parentSpanId}`]
    for (const traceparent of malformed) {
      t.equal((await fetch(`${server.url}${ordersPath()}`, { headers: { authorization: `Bearer ${reader}`, traceparent } })).status, 200, traceparent)
    }
    const roots = (spans: ReceivedSpan[]) => spans.filter((span) => !before.has(span.spanId) && span.kind === SERVER_KIND && span.parentSpanId === '')
    const spans = roots(await receiver.until('a root span each', (spans) => roots(spans).length >= malformed.length))
    t.notOk(spans.some((span) => span.traceId === caller.traceId), 'none continues the malformed ones\' trace')
  })

  t.test('probes are not traced', async (t) => {
    const before = receiver.spans().length
    t.equal((await fetch(`${server.url}/readyz`)).status, 200)
    t.equal((await fetch(`${server.url}/healthz`)).status, 200)
    // A traced request after them: once its span has arrived, theirs would have too.
    const caller = callerTraceparent()
    await fetch(`${server.url}${ordersPath()}`, { headers: { authorization: `Bearer ${reader}`, traceparent: caller.traceparent } })
    const spans = await receiver.until('the marker request', (spans) => spans.some((span) => span.traceId === caller.traceId && span.kind === SERVER_KIND))
    t.same(spans.slice(before).filter((span) => /readyz|healthz/.test(span.name) || /readyz|healthz/.test(String(span.attributes['url.path']))), [])
  })

  t.test('SIGTERM: exits 0 with the batch sent', async (t) => {
    t.equal(await stop(server), 0)
    t.ok(receiver.requests.every(({ path }) => path === '/v1/traces'), 'every export to /v1/traces')
    for (const line of server.output().split('\n').filter(Boolean)) {
      t.doesNotThrow(() => JSON.parse(line), `a JSON log line, no warning beside them: ${line.slice(0, 80)}`)
    }
  })
})

t.test('a statement sent outside any request (the feed\'s shared reader) on a connection a traced request hands over: not in that request\'s trace', async (t) => {
  const receiver = await otlpReceiver(t)
  // One connection: the reader waits in the pool's queue behind the lists, and pg-pool hands it
  // the connection inside the callback of a list's statement, where the list's context is active.
  const server = await startServer({ OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_BSP_SCHEDULE_DELAY: '100', DATABASE_POOL_MAX: '1' })
  // A live stream: the shared reader reads the feed each second, so at least twice while the lists
  // below keep the one connection busy (each read is handed it by a list's callback).
  const streaming = new AbortController()
  t.teardown(() => streaming.abort())
  const stream = await fetch(`${server.url}/permission_changes`, { headers: { authorization: `Bearer ${reader}`, accept: 'text/event-stream' }, signal: streaming.signal })
  t.equal(stream.status, 200)
  stream.body!.pipeTo(new WritableStream()).catch(() => {})
  const sent: string[] = []
  const until = Date.now() + 2200
  await Promise.all(Array.from({ length: 4 }, async () => {
    while (Date.now() < until) {
      const caller = callerTraceparent()
      sent.push(caller.traceId)
      await (await fetch(`${server.url}${ordersPath()}`, { headers: { authorization: `Bearer ${reader}`, traceparent: caller.traceparent } })).arrayBuffer()
    }
  }))
  const isStatement = (span: ReceivedSpan) => span.attributes['db.system'] === 'postgresql' || span.attributes['db.system.name'] === 'postgresql'
  const spans = await receiver.until('every list\'s statement', (spans) => sent.every((traceId) => spans.some((span) => span.traceId === traceId && isStatement(span))))
  const lists = new Set(sent)
  t.same(spans.filter((span) => lists.has(span.traceId) && isStatement(span) && !span.name.startsWith('pg.query:list')).map(({ name, traceId }) => ({ name, traceId })), [],
    `${sent.length} lists: no other statement in their traces`)
})

t.test('a stream\'s consumer gone while its token waits for the key set, before the handler runs: the request span still ends', async (t) => {
  const receiver = await otlpReceiver(t)
  // The token waits for the key set's fetch, held here until the consumer is gone.
  const held: ServerResponse[] = []
  const jwk = { ...createPublicKey(ecKeyPair().publicKey).export({ format: 'jwk' }), alg: 'ES256', use: 'sig' }
  const keys = createServer((_request, response) => { held.push(response) }).listen(0, '127.0.0.1')
  await once(keys, 'listening')
  t.teardown(() => { keys.closeAllConnections(); keys.close() })
  const server = await startServer({
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    OTEL_BSP_SCHEDULE_DELAY: '100',
    JWT_SECRET: '',
    JWKS_URL: `http://127.0.0.1:${(keys.address() as AddressInfo).port}/jwks.json`
  })
  const caller = callerTraceparent()
  const req = request(`${server.url}/permission_changes`, {
    agent: false,
    headers: { accept: 'text/event-stream', traceparent: caller.traceparent, authorization: `Bearer ${token({ scope: 'read:resource', ...productionClaims }, { algorithm: 'ES256', expiresIn: 600 })}` }
  })
  req.on('error', () => {})
  req.end()
  for (const started = Date.now(); held.length === 0 && Date.now() - started < 10_000;) await sleep(20)
  t.equal(held.length, 1, 'the key set asked for')
  req.destroy()
  // The server sees the consumer gone (there is nothing of it to wait for in another process).
  await sleep(500)
  held[0].setHeader('content-type', 'application/json')
  held[0].end(JSON.stringify({ keys: [jwk] }))
  // A list after it, in a trace of its own.
  const after = callerTraceparent()
  t.equal((await fetch(`${server.url}${ordersPath()}`, { headers: { authorization: `Bearer ${token({ scope: 'read:resource', ...productionClaims }, { algorithm: 'ES256', expiresIn: 600 })}`, traceparent: after.traceparent } })).status, 200)
  // Exported after the stream's would have been: spans leave in the order they end.
  const spans = await receiver.until('the list after it', (spans) => spans.some((span) => span.traceId === after.traceId && span.kind === SERVER_KIND))
  t.match(spans.find((span) => span.traceId === caller.traceId && span.kind === SERVER_KIND), { name: 'GET /permission_changes', parentSpanId: caller.parentSpanId },
    'ended, and exported')
})

t.test('a grant too large, with replicas: the primary\'s position, asked after the failed change, below the request span too', async (t) => {
  const receiver = await otlpReceiver(t)
  // A replica nobody listens on: the answers of a change then carry positions (Consistency-Token).
  const server = await startServer({
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    OTEL_BSP_SCHEDULE_DELAY: '100',
    DATABASE_REPLICA_URLS: `postgres://u:p@127.0.0.1:${await freePort()}/db`
  })
  const { resource, client, permission } = await tooLargeToGrant(db)
  const caller = callerTraceparent()
  const creator = token({ scope: 'create:resource', ...productionClaims }, { expiresIn: 600 })
  const answer = await fetch(`${server.url}${ordersPath(client, resource)}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${creator}`, traceparent: caller.traceparent, 'content-type': 'application/json' },
    body: JSON.stringify([permission])
  })
  t.equal(answer.status, 422)
  t.match(answer.headers.get('consistency-token'), /^[0-9A-F]+\/[0-9A-F]+$/)
  const isStatement = (span: ReceivedSpan) => span.attributes['db.system'] === 'postgresql' || span.attributes['db.system.name'] === 'postgresql'
  const spans = (await receiver.until('the POST\'s span', (spans) => spans.some((span) => span.traceId === caller.traceId && span.kind === SERVER_KIND)))
    .filter((span) => span.traceId === caller.traceId)
  const request = spans.find((span) => span.kind === SERVER_KIND)!
  const statements = spans.filter(isStatement)
  const texts = statements.map((span) => String(span.attributes['db.statement'] ?? span.attributes['db.query.text']))
  t.ok(texts.some((text) => text.includes('pg_current_wal_insert_lsn') && !text.includes('COMMIT')), `the position's statement: ${statements.map(({ name }) => name).join(', ')}`)
  t.ok(statements.every((span) => span.parentSpanId === request.spanId), 'each a child of the request\'s span')
  t.equal(await stop(server), 0)
})

t.test('the default protocol, http/protobuf: the trace arrives as protobuf', async (t) => {
  const receiver = await otlpReceiver(t)
  const server = await startServer({ OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint, OTEL_BSP_SCHEDULE_DELAY: '100' })
  const caller = callerTraceparent()
  t.equal((await fetch(`${server.url}${ordersPath()}`, { headers: { authorization: `Bearer ${reader}`, traceparent: caller.traceparent } })).status, 200)
  const traceIdBytes = Buffer.from(caller.traceId, 'hex')
  for (const started = Date.now(); !receiver.requests.some(({ body }) => body.includes(traceIdBytes)) && Date.now() - started < 20_000;) await sleep(50)
  const request = receiver.requests.find(({ body }) => body.includes(traceIdBytes))
  t.ok(request, 'an export carrying the caller\'s trace id')
  t.equal(request?.contentType, 'application/x-protobuf')
  t.equal(request?.path, '/v1/traces')
  t.equal(await stop(server), 0)
})

t.test('SIGTERM with a collector that takes connections and never answers: the last batch is not waited for past its bound, the process exits 0', async (t) => {
  const silent = createServer(() => {}).listen(0, '127.0.0.1')
  await once(silent, 'listening')
  t.teardown(() => { silent.closeAllConnections(); silent.close() })
  // The batch held until the shutdown flushes it; the exporter's own timeout (10 s) is the default SHUTDOWN_TIMEOUT_MS's.
  const server = await startServer({ OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${(silent.address() as AddressInfo).port}`, OTEL_BSP_SCHEDULE_DELAY: '60000' })
  t.equal((await fetch(`${server.url}${ordersPath()}`, { headers: { authorization: `Bearer ${reader}` } })).status, 200)
  t.equal(await stop(server), 0, 'not killed by SHUTDOWN_TIMEOUT_MS (exit 1)')
  t.match(server.output(), /tracing: the last spans could not be sent/)
  t.match(server.output(), /"msg":"closed"/)
})

t.test('shed before any route matched (503 overloaded for an unknown URL): the span is an error, as a routed 5xx\'s is', async (t) => {
  const receiver = await otlpReceiver(t)
  const server = await startServer({
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    OTEL_BSP_SCHEDULE_DELAY: '100',
    // As test/plugins/pressure.test.ts: a lag of 700 ms is seen by the next sample, 300 ms apart.
    MAX_EVENT_LOOP_DELAY_MS: '50',
    EVENT_LOOP_SAMPLE_INTERVAL_MS: '300'
  })
  // The process stopped 700 ms with the request waiting for it: its event loop resumes late, and
  // the sample that sees the lag runs before the request is read. Again if a calm sample came first.
  let shed: { status: number, traceId: string } | undefined
  for (let attempt = 0; attempt < 5 && shed?.status !== 503; attempt++) {
    const caller = callerTraceparent()
    server.child.kill('SIGSTOP')
    const answer = fetch(`${server.url}/no/such/path`, { headers: { traceparent: caller.traceparent } })
    await sleep(700)
    server.child.kill('SIGCONT')
    shed = { status: (await answer).status, traceId: caller.traceId }
  }
  t.equal(shed?.status, 503, 'shed')
  const spans = await receiver.until('its span', (spans) => spans.some((span) => span.traceId === shed!.traceId && span.kind === SERVER_KIND))
  const request = spans.find((span) => span.traceId === shed!.traceId && span.kind === SERVER_KIND)!
  t.match(request.attributes, { 'problem.type': '/problems/overloaded', 'http.response.status_code': 503 })
  t.match(request.status, { code: 2, message: String }, 'a 5xx: error, with what failed')
  t.same(request.events, ['exception'], 'the exception recorded')
  t.equal(await stop(server), 0)
})

/** The lines of the process's stdout and stderr, each parsed: a line that is no JSON is kept as its text. */
const logLines = (output: string) => output.split('\n').filter(Boolean).map((line) => {
  try {
    return JSON.parse(line) as Record<string, unknown>
  } catch {
    return line
  }
})

/** Waits until some line of the output holds `check`; the lines then. */
async function untilLine (server: Running, what: string, check: (line: Record<string, unknown>) => boolean) {
  for (const started = Date.now(); Date.now() - started < 30_000; await sleep(50)) {
    const lines = logLines(server.output())
    if (lines.some((line) => typeof line === 'object' && check(line))) return lines
  }
  throw new Error(`timed out waiting for ${what}: ${server.output()}`)
}

const EXPORT_FAILED = 'tracing: spans could not be exported, and are dropped until an export succeeds'
const EXPORTS_AGAIN = 'tracing: spans are exported again'

t.test('a collector answering 503: one warning for the outage, a line when exports succeed again, requests served all along', async (t) => {
  let status = 503
  let answered = 0
  const collector = createServer((request, response) => {
    request.resume()
    request.on('end', () => {
      answered++
      response.writeHead(status, { 'content-type': 'application/json' }).end('{}')
    })
  }).listen(0, '127.0.0.1')
  await once(collector, 'listening')
  t.teardown(() => { collector.closeAllConnections(); collector.close() })
  const refused = () => answered
  const server = await startServer({
    OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${(collector.address() as AddressInfo).port}`,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    OTEL_BSP_SCHEDULE_DELAY: '100',
    // No retry of a 503 (the first backoff, 0.8 s at least, is past it): an export fails at its first answer.
    OTEL_EXPORTER_OTLP_TIMEOUT: '500'
  })
  // Three batches at least, each refused: the SDK reports each failed batch.
  for (let batch = 1; batch <= 3; batch++) {
    t.equal((await fetch(`${server.url}${ordersPath()}`, { headers: { authorization: `Bearer ${reader}` } })).status, 200, 'served while spans are dropped')
    for (const started = Date.now(); refused() < batch && Date.now() - started < 20_000;) await sleep(20)
  }
  t.ok(refused() >= 3, `${refused()} exports refused`)
  status = 200
  t.equal((await fetch(`${server.url}${ordersPath()}`, { headers: { authorization: `Bearer ${reader}` } })).status, 200)
  const lines = await untilLine(server, 'the line saying exports succeed again', (line) => line.msg === EXPORTS_AGAIN)
  const failures = lines.filter((line) => typeof line === 'object' && line.msg === EXPORT_FAILED)
  t.equal(failures.length, 1, 'one warning for the whole outage, not one per batch')
  // The SDK says each failed batch to its diagnostics as an error: not a line each either.
  t.same(lines.filter((line) => typeof line === 'object' && Number(line.level) >= 40), failures, 'no other warning or error')
  t.match(failures[0], { level: 40, err: { message: /retryable status|503/ } }, 'a warning, with what the exporter said')
  t.match(lines.find((line) => typeof line === 'object' && line.msg === EXPORTS_AGAIN), { level: 30, failedExports: Number })
  t.ok((lines.find((line) => typeof line === 'object' && line.msg === EXPORTS_AGAIN) as { failedExports: number }).failedExports >= 3,
    'the exports that failed counted')
  t.same(lines.filter((line) => typeof line !== 'object'), [], 'JSON lines only')
  t.equal(await stop(server), 0)
})

t.test('a collector nobody listens on: a warning naming the refused connection, requests served, JSON lines only', async (t) => {
  const server = await startServer({
    OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${await freePort()}`,
    OTEL_BSP_SCHEDULE_DELAY: '100',
    OTEL_EXPORTER_OTLP_TIMEOUT: '500',
    // The exporter warns of it as it is made, before the service's log exists.
    OTEL_EXPORTER_OTLP_COMPRESSION: 'zip'
  })
  t.equal((await fetch(`${server.url}${ordersPath()}`, { headers: { authorization: `Bearer ${reader}` } })).status, 200)
  const lines = await untilLine(server, 'the export failure\'s warning', (line) => line.msg === EXPORT_FAILED)
  t.match(lines.find((line) => typeof line === 'object' && line.msg === EXPORT_FAILED), { level: 40, err: { message: /ECONNREFUSED/ } })
  t.equal((await fetch(`${server.url}${ordersPath()}`, { headers: { authorization: `Bearer ${reader}` } })).status, 200, 'still served')
  t.match(lines.find((line) => typeof line === 'object' && /OTEL_EXPORTER_OTLP_COMPRESSION/.test(String(line.msg))),
    { level: 40, msg: /^tracing: .*OTEL_EXPORTER_OTLP_COMPRESSION is invalid/ }, 'a diagnostic of the start, written once the log exists')
  t.equal(await stop(server), 0)
  t.same(logLines(server.output()).filter((line) => typeof line !== 'object'), [], 'JSON lines only')
})

t.test('settings it cannot honour: refused at start with one sentence naming the variable', async (t) => {
  for (const [env, sentence] of [
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }, /^OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported/],
    [{ OTEL_TRACES_EXPORTER: 'zipkin' }, /^OTEL_TRACES_EXPORTER=zipkin is not supported/],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_TRACES_SAMPLER: 'sometimes' }, /^OTEL_TRACES_SAMPLER=sometimes is not one of/],
    // The SDK would take each of these for its default, sampling every request, with no more
    // than a warning among its diagnostics.
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '5' },
      /^OTEL_TRACES_SAMPLER_ARG=5 is not a ratio from 0 to 1/],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0,1' },
      /^OTEL_TRACES_SAMPLER_ARG=0,1 is not a ratio from 0 to 1/],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_TRACES_SAMPLER: 'always_off ' }, /^OTEL_TRACES_SAMPLER=always_off {2}is not one of/],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_LOG_LEVEL: 'loud' }, /^OTEL_LOG_LEVEL=loud is not one of/]
  ] as const) {
    const result = spawnSync(serverProcess.command, serverProcess.args, {
      env: { PATH: process.env.PATH, NODE_ENV: 'production', DATABASE_URL: databaseUrl, JWT_SECRET: TEST_SECRET, ...env },
      encoding: 'utf8',
      timeout: 60_000
    })
    t.equal(result.status, 1, JSON.stringify(env))
    t.match(result.stderr, sentence)
    t.equal(result.stderr.trim().split('\n').length, 1, 'one line')
  }
})

t.test('no exporter configured: the whole service loads, and no part of the OpenTelemetry SDK with it', async (t) => {
  // The entry point's first step and then every module the service is made of (src/serve.ts
  // imports them all), in a process of its own; what Node's module cache holds after.
  const probe = `
    const { createRequire } = await import('node:module')
    const { startTracing } = await import(${JSON.stringify(pathToFileURL(runnableOf('src/tracing.ts')).href)})
    const started = await startTracing()
    await import(${JSON.stringify(pathToFileURL(runnableOf('src/serve.ts')).href)})
    const loaded = Object.keys(createRequire(import.meta.url).cache)
    console.log(JSON.stringify({ started: started !== undefined, pg: loaded.some((file) => file.includes('/node_modules/pg/')), sdk: loaded.filter((file) => /@opentelemetry\\/(?!api\\/)|@fastify\\/otel/.test(file)) }))`
  for (const env of [{}, { OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' }, { OTEL_SDK_DISABLED: 'true', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' }]) {
    const result = spawnSync(process.execPath, [...loaderArgs, '--input-type=module', '-e', probe], {
      env: { PATH: process.env.PATH, ...env }, cwd: projectRoot, encoding: 'utf8', timeout: 60_000
    })
    t.equal(result.status, 0, result.stderr)
    t.same(JSON.parse(result.stdout.trim().split('\n').at(-1)!), { started: false, pg: true, sdk: [] }, JSON.stringify(env))
  }
})
