// POST: the inverse of DELETE, with the same body rules and the same 404 order.
import pg from 'pg'
import t from 'tap'
import { freePort } from '../../db/embedded-postgres.js'
import { seedDatabase } from '../../db/seed.js'
import { backendPid, lockWaiter, ownPostgres } from '../support/database.js'
import { historyPath, ordersFixture, ordersPath, tooLargeToGrant } from '../support/fixtures.js'
import { build } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { deleteToken, readToken, token } from '../support/tokens.js'

const harness = await build(t)
const createToken = () => token({ scope: 'create:resource' })

// Each test starts from the same grants: app-a holds 10 of orders-api's 12 permissions, app-b none.
t.beforeEach(async () => {
  await harness.db.query('TRUNCATE resources, clients CASCADE')
  await harness.seed(ordersFixture())
})

const grant = (ids: unknown, path = ordersPath(), options: { token?: string, headers?: Record<string, string> } = {}) =>
  harness.request(path, { method: 'POST', token: options.token ?? createToken(), json: ids, headers: options.headers })

async function grantsOf (client = 'app-a', resource = 'orders-api'): Promise<string[]> {
  const { rows } = await harness.db.query(
    'SELECT permission_id FROM grants WHERE resource_id = $1 AND client_id = $2 ORDER BY permission_id', [resource, client])
  return rows.map(({ permission_id: id }) => id)
}

t.test('POST ids not held → 204 with an empty body; the list shows them with their names and descriptions', async (t) => {
  const res = await grant(['p_update_refunds', 'p_delete_refunds'], ordersPath('app-a'))
  t.equal(res.status, 204)
  t.equal(res.text, '')
  t.equal((await grantsOf()).length, 12)
  const listed = await harness.request(`${ordersPath()}?sort_by=id`, { token: readToken() })
  t.equal(listed.headers.get('x-total-count'), '12')
  t.match(listed.body, [{ id: 'p_create_invoices', name: 'create:invoices', description: 'create invoices' }])
  t.ok((listed.body as Array<{ id: string }>).some(({ id }) => id === 'p_update_refunds'))
})

t.test('idempotent: ids already held, duplicates, and a retried POST → 204, nothing else changes', async (t) => {
  t.equal((await grant(['p_read_orders', 'p_read_orders'])).status, 204)
  t.equal((await grantsOf()).length, 10)
  t.equal((await grant(['p_update_refunds', 'p_update_refunds', 'p_read_orders'])).status, 204)
  t.equal((await grant(['p_update_refunds'])).status, 204, 'retry')
  t.equal((await grantsOf()).length, 11)
})

t.test('a client authorized with no grants can be granted some', async (t) => {
  t.equal((await grant(['p_read_orders'], ordersPath('app-b'))).status, 204)
  t.same(await grantsOf('app-b'), ['p_read_orders'])
})

t.test('ids that are not permissions of the resource → 422 naming each once in request order; nothing granted', async (t) => {
  const res = await grant(['p_update_refunds', 'nope', 'p_other', 'nope', 'also-nope'])
  t.equal(res.status, 422)
  t.match(res.body, {
    type: '/problems/unknown-permissions',
    unknown_permission_ids: ['nope', 'p_other', 'also-nope'],
    detail: '3 ids are not permissions of the resource "orders-api"; nothing was granted.'
  })
  t.equal((await grantsOf()).length, 10, 'p_update_refunds was not granted either')
})

t.test('the same 404 order as the other operations; the client must already be authorized', async (t) => {
  const cases: Array<[string, string]> = [
    [ordersPath('app-a', 'no-api'), '/problems/resource-not-found'],
    [ordersPath('no-app'), '/problems/client-not-found'],
    [ordersPath('no-app', 'no-api'), '/problems/resource-not-found'],
    [ordersPath('app-c'), '/problems/client-not-authorized']
  ]
  for (const [path, type] of cases) {
    const res = await grant(['p_read_orders'], path)
    t.equal(res.status, 404, path)
    t.equal((res.body as { type: string }).type, type, path)
  }
  t.same(await grantsOf('app-c'), [], 'authorizing is another operation')
})

t.test('needs create:resource: read and delete tokens → 403 scope="create:resource", nothing granted', async (t) => {
  for (const other of [readToken(), deleteToken()]) {
    const res = await grant(['p_update_refunds'], ordersPath(), { token: other })
    t.equal(res.status, 403)
    t.equal(res.headers.get('www-authenticate'), 'Bearer error="insufficient_scope", scope="create:resource"')
  }
  t.equal((await harness.request(ordersPath(), { method: 'POST', json: ['p_update_refunds'] })).status, 401)
  t.equal((await grantsOf()).length, 10)
})

t.test('the body rules of DELETE: not an array, empty, over 500 ids, too large, not JSON → 400/413/415', async (t) => {
  const send = (body: string, contentType = 'application/json') =>
    harness.request(ordersPath(), { method: 'POST', token: createToken(), headers: { 'content-type': contentType }, body })
  t.equal((await send('{"ids":[]}')).status, 400)
  t.equal((await send('[]')).status, 400)
  t.equal((await send(JSON.stringify(Array.from({ length: 501 }, (_, i) => `p${i}`)))).status, 400)
  t.equal((await send('[1, 2]')).status, 400)
  t.equal((await send('')).status, 400)
  t.equal((await send('["p_update_refunds"]', 'text/plain')).status, 415)
  t.equal((await send(JSON.stringify(['x'.repeat(300 * 1024)]))).status, 413)
  t.equal((await grantsOf()).length, 10)
})

t.test('each statement is prepared once per connection under its own name; none with DATABASE_PREPARED_STATEMENTS=false', async (t) => {
  // One pooled connection: the one that then reads pg_prepared_statements, which is per session.
  // Every statement fastify.queries runs (plugins/db.ts binds the setting once): the routes' and
  // the feed streams' shared reader's.
  for (const prepared of [true, false]) {
    const app = await build(t, { DATABASE_POOL_MAX: '1', DATABASE_PREPARED_STATEMENTS: String(prepared) })
    await app.seed(ordersFixture())
    // One statement per order that decides differently: keys after a unique one (name) add none.
    for (const sortBy of ['name', 'name,id.desc', 'description.desc,name']) {
      t.equal((await app.request(`${ordersPath()}?sort_by=${sortBy}`, { token: readToken() })).status, 200, sortBy)
    }
    t.equal((await app.request(ordersPath(), { method: 'DELETE', token: deleteToken(), json: ['p_read_orders'] })).status, 204)
    t.equal((await app.request(ordersPath(), { method: 'POST', token: createToken(), json: ['p_read_orders'] })).status, 204)
    t.equal((await app.request(historyPath(), { token: readToken() })).status, 200)
    t.equal((await app.request('/permission_changes?resource_id=orders-api', { token: readToken() })).status, 200)
    // What a stream reads (the feed plugin's reader, on the primary); no stream is open, so nothing else reads the feed.
    await app.app.feed.read({ limit: 10 })
    const { rows } = await app.app.db.query<{ name: string }>('SELECT name FROM pg_prepared_statements ORDER BY name')
    t.same(rows.map(({ name }) => name), prepared
      ? ['change history', 'feed', 'feed by resource', 'grant', 'list description.desc,name.asc', 'list name.asc', 'unauthorize', 'version after change']
      : [], `prepared=${prepared}`)
  }
})

t.test('a grant too large for the database\'s indexes → 422 grant-too-large, nothing granted, the next request served', async (t) => {
  const { resource, client, permission } = await tooLargeToGrant(harness.db)
  const res = await grant([permission], ordersPath(client, resource))
  t.equal(res.status, 422)
  t.match(res.headers.get('content-type'), 'application/problem+json')
  t.match(res.body, {
    type: '/problems/grant-too-large',
    title: 'Grant too large',
    detail: /too long together to be stored; nothing was granted/
  })
  t.notMatch(JSON.stringify(res.body), /index row|btree|maximum/i, 'the database\'s words stay in the log')
  t.same(await grantsOf(client, resource), [])
  const { rows: [{ count }] } = await harness.db.query('SELECT count(*)::int AS count FROM permission_changes WHERE resource_id = $1', [resource])
  t.equal(count, 0, 'no history')
  t.equal((await grant(['p_update_refunds'])).status, 204, 'the service goes on')
})

t.test('a grant too large is logged at info with its ids and the database\'s words, which the 422 leaves out', async (t) => {
  const logs = captureLogs()
  const logged = await build(t, { LOG_LEVEL: 'info' }, { logs: logs.stream })
  const { resource, client, permission } = await tooLargeToGrant(logged.db)
  const res = await logged.request(ordersPath(client, resource), { method: 'POST', token: createToken(), json: [permission] })
  t.equal(res.status, 422)
  const line = await logs.waitFor((line) => line.msg === 'grant too large to store', 'the grant too large')
  t.match(line, { level: 30, resourceId: resource, clientId: client, reason: /index row/ })
})

// Only the database's limit is the caller's to fix: any other failure of the grant keeps its own answer.
t.test('a grant whose database connection is lost as it waits → 503 database-unavailable, not 422 grant-too-large; nothing granted', async (t) => {
  // Another transaction holds the authorization's advisory lock: the POST waits for it, in its first statement.
  const locker = await harness.db.connect()
  t.teardown(() => locker.release())
  await locker.query("BEGIN; SELECT pg_advisory_xact_lock(hashtext('orders-api'), hashtext('app-a'))")
  const pending = grant(['p_update_refunds'])
  const pid = await lockWaiter(harness.db, { statement: '%pg_advisory_xact_lock%', except: [backendPid(locker)] })
  t.ok(pid, 'the POST waits for the lock')
  await harness.db.query('SELECT pg_terminate_backend($1)', [pid])
  const res = await pending
  t.equal(res.status, 503)
  t.match(res.body, { type: '/problems/database-unavailable' })
  await locker.query('ROLLBACK')
  t.notOk((await grantsOf()).includes('p_update_refunds'), 'nothing granted')
})

// The database's limits refuse a row in the change statement; a COMMIT it refuses for its own
// (here PostgreSQL's NOTIFY queue, full while a listener sits in a transaction: a change's history
// row announces itself at COMMIT) is no fault of the ids, and a retry may well succeed.
t.test('a COMMIT refused for a full NOTIFY queue → 500 logged at error, as for DELETE, not 422 grant-too-large; nothing granted', async (t) => {
  const server = await ownPostgres(t)
  const admin = new pg.Client({ connectionString: server.url })
  await admin.connect()
  // The smallest queue PostgreSQL takes (64 pages of 8 kB), instead of 8 GB to fill.
  await admin.query('ALTER SYSTEM SET max_notify_queue_pages = 64')
  await admin.end()
  await server.stop()
  await server.start()
  const logs = captureLogs()
  const own = await build(t, { DATABASE_URL: server.url, LOG_LEVEL: 'info' }, { logs: logs.stream })
  await seedDatabase(own.app.db, ordersFixture())
  // A listener in a transaction reads no notification until it ends: the queue's tail stays.
  const stuck = new pg.Client({ connectionString: server.url })
  await stuck.connect()
  t.teardown(() => stuck.end())
  await stuck.query('LISTEN anything')
  await stuck.query('BEGIN')
  // On the test's own server (own.db is the harness's template copy, which this app does not use).
  const db = new pg.Client({ connectionString: server.url })
  await db.connect()
  t.teardown(() => db.end())
  let full: (Error & { code?: string }) | undefined
  for (let batch = 0; full === undefined && batch < 100; batch++) {
    full = await db.query("SELECT pg_notify('filler', repeat('x', 7900) || i) FROM generate_series(1, 8) AS i").then(() => undefined, (error: Error) => error)
  }
  t.match(full, { code: '54000', message: /NOTIFY queue/ }, 'the queue is full')
  const send = (method: 'POST' | 'DELETE', ids: string[]) =>
    own.request(ordersPath(), { method, token: token({ scope: 'create:resource delete:resource' }), json: ids })
  const removed = await send('DELETE', ['p_read_orders'])
  const granted = await send('POST', ['p_update_refunds'])
  t.same([granted.status, (granted.body as { type: string }).type], [removed.status, (removed.body as { type: string }).type], 'POST answers as DELETE does')
  t.equal(granted.status, 500)
  await logs.waitFor((line) => line.level === 50 && /NOTIFY queue/.test(JSON.stringify(line)) && line.reqId === granted.headers.get('x-request-id'), 'the grant\'s refusal logged at error')
  t.notOk(logs.lines.some((line) => line.msg === 'grant too large to store'), 'not taken for a grant too large')
  const { rows } = await db.query("SELECT permission_id FROM grants WHERE client_id = 'app-a' AND permission_id IN ('p_read_orders', 'p_update_refunds') ORDER BY 1")
  t.same(rows.map(({ permission_id: id }) => id), ['p_read_orders'], 'nothing changed')
  await stuck.query('COMMIT')
})

t.test('with replicas, a grant too large answers its 422 with a Consistency-Token, as every other refusal of a change', async (t) => {
  // A replica nobody listens on: down, so the primary answers everything, with positions.
  const replicated = await build(t, { DATABASE_REPLICA_URLS: `postgres://u:p@127.0.0.1:${await freePort()}/db` })
  await replicated.seed(ordersFixture())
  const { resource, client, permission } = await tooLargeToGrant(replicated.db)
  const post = (ids: string[], path = ordersPath()) => replicated.request(path, { method: 'POST', token: createToken(), json: ids })
  const unknown = await post(['nope'])
  t.equal(unknown.status, 422)
  t.match(unknown.headers.get('consistency-token'), /^[0-9A-F]+\/[0-9A-F]+$/, 'unknown-permissions')
  const tooLarge = await post([permission], ordersPath(client, resource))
  t.match(tooLarge.body, { type: '/problems/grant-too-large' })
  t.match(tooLarge.headers.get('consistency-token'), /^[0-9A-F]+\/[0-9A-F]+$/, 'grant-too-large')
})

/** What GET shows of a client's grants: every page of several orders (bodies, counts, links) and the ETag. */
async function shown (client = 'app-a'): Promise<{ pages: unknown[], etag: string }> {
  const pages: unknown[] = []
  let etag: string | undefined
  for (const query of ['', '?sort_by=id.desc', '?sort_by=description,id&limit=3', '?sort_by=description.desc,name&limit=3&offset=1', '?limit=3&offset=3', '?offset=9']) {
    const res = await harness.request(`${ordersPath(client)}${query}`, { token: readToken() })
    pages.push({ query, status: res.status, body: res.body, total: res.headers.get('x-total-count'), link: res.headers.get('link') })
    etag ??= res.headers.get('etag')!
  }
  return { pages, etag: etag! }
}

const removeAs = (ids: string[], client = 'app-a') =>
  harness.request(ordersPath(client), { method: 'DELETE', token: deleteToken(), json: ids })

t.test('the inverse of DELETE: a DELETE of X, then a POST of the ids it removed, restores every page GET shows; the ETag is a new one', async (t) => {
  const cases: Array<[string, string[]]> = [
    ['app-a', ['p_read_orders']],
    ['app-a', ['p_read_orders', 'p_delete_orders', 'p_read_orders', 'p_create_refunds']],
    // Held and not held: the DELETE removes the held ones, a POST of exactly those restores the grants.
    ['app-a', ['p_update_refunds', 'p_read_invoices', 'p_delete_refunds', 'p_delete_invoices']],
    ['app-a', ['p_read_orders', 'p_create_orders', 'p_update_orders', 'p_delete_orders', 'p_read_invoices', 'p_create_invoices', 'p_update_invoices', 'p_delete_invoices', 'p_read_refunds', 'p_create_refunds']],
    ['app-b', ['p_read_orders']]
  ]
  const seen = new Set<string>()
  for (const [client, ids] of cases) {
    const before = await shown(client)
    const held = new Set(await grantsOf(client))
    seen.add(before.etag)
    const removed = await removeAs(ids, client)
    t.equal(removed.status, 204, `DELETE ${ids}`)
    const heldOfX = [...new Set(ids.filter((id) => held.has(id)))]
    if (heldOfX.length > 0) {
      const restored = await grant(heldOfX, ordersPath(client))
      t.equal(restored.status, 204, `POST of the removed ids of ${ids}`)
      const after = await shown(client)
      t.same(after.pages, before.pages, `every page as before: ${client} ${ids}`)
      t.not(after.etag, before.etag, 'a new version: the grants changed twice, and a tag is never reused')
      t.notOk(seen.has(after.etag), 'never one seen before')
      seen.add(after.etag)
      seen.add(removed.headers.get('etag')!)
      const stale = await harness.request(ordersPath(client), { method: 'POST', token: createToken(), json: ['p_read_orders'], headers: { 'if-match': before.etag } })
      t.equal(stale.status, 412, 'the tag before the round trip names no current version')
    } else {
      t.equal(removed.headers.get('etag'), before.etag, 'nothing held: nothing changed, the same tag')
    }
  }
})

t.test('the inverse of POST: a POST of X, then a DELETE of the ids it granted, restores every page GET shows; POST of held ids then DELETE of none is no change', async (t) => {
  const cases: Array<[string, string[]]> = [
    ['app-a', ['p_update_refunds']],
    ['app-a', ['p_update_refunds', 'p_read_orders', 'p_update_refunds', 'p_delete_refunds']],
    ['app-b', ['p_delete_refunds', 'p_read_orders', 'p_read_orders']],
    ['app-b', ['p_read_orders', 'p_create_orders', 'p_update_orders', 'p_delete_orders', 'p_read_invoices', 'p_create_invoices', 'p_update_invoices', 'p_delete_invoices', 'p_read_refunds', 'p_create_refunds', 'p_update_refunds', 'p_delete_refunds']]
  ]
  for (const [client, ids] of cases) {
    const before = await shown(client)
    const held = new Set(await grantsOf(client))
    const granted = await grant(ids, ordersPath(client))
    t.equal(granted.status, 204, `POST ${ids}`)
    t.not(granted.headers.get('etag'), before.etag)
    const removed = await removeAs([...new Set(ids.filter((id) => !held.has(id)))], client)
    t.equal(removed.status, 204)
    const after = await shown(client)
    t.same(after.pages, before.pages, `every page as before: ${client} ${ids}`)
    t.not(after.etag, before.etag, 'a new version, never the old one')
    t.not(after.etag, granted.headers.get('etag'))
  }
  const before = await shown()
  t.equal((await grant(['p_read_orders', 'p_read_orders'])).headers.get('etag'), before.etag, 'a POST of held ids changes nothing')
  t.same(await shown(), before, 'nothing: the same pages and the same tag')
})

t.test('POST answers every body, header and query DELETE refuses exactly as DELETE does (status, type, errors), nothing changed', async (t) => {
  const long = JSON.stringify(Array.from({ length: 1100 }, (_, i) => `p_${i}_${'x'.repeat(240)}`))
  const sized = (bytes: number) => '["p_unknown"' + ' '.repeat(bytes - 12 - 1) + ']'
  const json = { 'content-type': 'application/json' }
  const cases: Array<[string, { headers?: Record<string, string>, body?: string | Blob, query?: string }]> = [
    ['no body, no content type', {}],
    ['no body, JSON content type', { headers: json }],
    ['an empty body', { headers: json, body: '' }],
    ['a body without a content type', { headers: {}, body: '["p_update_refunds"]' }],
    ['not JSON', { headers: json, body: 'p_update_refunds' }],
    ['truncated', { headers: json, body: '["p_update_refunds"' }],
    ['poisoned', { headers: json, body: '[{"__proto__": {"x": 1}}]' }],
    ...[[], {}, 'p_update_refunds', null, 42, [1, 2], [''], ['a'.repeat(256)], [null], [['p_update_refunds']], [{ id: 'p_update_refunds' }],
      ['p_update\u0000refunds'], ['\ud800'], ['p_update_refunds', '\ud800', ''], Array.from({ length: 501 }, () => 'p_update_refunds'), [true]]
      .map((body): [string, { headers: Record<string, string>, body: string }] => [JSON.stringify(body).slice(0, 40), { headers: json, body: JSON.stringify(body) }]),
    ...['text/plain', 'application/x-www-form-urlencoded', 'application/jsonx', 'application/json; charset=utf-16', 'application/json, text/plain',
      'application/json; charset', 'application/json; charset="utf-8', 'application/json; charset=latin1 x', 'application/json; charset=utf8']
      .map((contentType): [string, { headers: Record<string, string>, body: string }] => [contentType, { headers: { 'content-type': contentType }, body: '["p_unknown"]' }]),
    ['gzip', { headers: { ...json, 'content-encoding': 'gzip' }, body: '["p_unknown"]' }],
    ['not UTF-8', { headers: json, body: new Blob([new Uint8Array([0x5b, 0x22, 0xff, 0xfe, 0x22, 0x5d])]) }],
    ['over 256 KiB', { headers: json, body: long }],
    ['256 KiB + 1', { headers: json, body: sized(256 * 1024 + 1) }],
    ['256 KiB', { headers: json, body: sized(256 * 1024) }],
    ['a query parameter', { headers: json, body: '["p_unknown"]', query: '?dry_run=true' }],
    ['a malformed If-Match', { headers: { ...json, 'if-match': '8' }, body: '["p_unknown"]' }],
    ['a malformed If-None-Match', { headers: { ...json, 'if-none-match': '"4" junk' }, body: '["p_unknown"]' }]
  ]
  const token = { DELETE: deleteToken(), POST: createToken() }
  for (const [label, { headers = {}, body, query = '' }] of cases) {
    const answers = []
    for (const method of ['DELETE', 'POST'] as const) {
      const res = await harness.request(ordersPath() + query, { method, token: token[method], headers, body })
      const problem = res.body as { type?: string, title?: string, detail?: string, errors?: unknown }
      answers.push({
        status: res.status,
        type: problem.type,
        title: problem.title,
        detail: problem.detail?.replace('nothing was granted', 'nothing was removed'),
        errors: problem.errors,
        acceptEncoding: res.headers.get('accept-encoding')
      })
    }
    t.same(answers[1], answers[0], `${label}: ${JSON.stringify(answers[0]).slice(0, 160)}`)
    t.not(answers[0].status, 204, label)
  }
  t.equal((await grantsOf()).length, 10, 'nothing changed')
})
