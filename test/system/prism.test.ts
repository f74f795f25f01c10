// A validator we did not write: the real service (real PostgreSQL) behind Stoplight Prism in
// validation-proxy mode. Every request of the scenario goes through Prism; a request or response it
// flags (an sl-violations header, or an error of its own in place of the service's answer) fails.
import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import { join } from 'node:path'
import t from 'tap'
import { freePort } from '../../db/embedded-postgres.js'
import { pruneChanges } from '../../db/queries/history.js'
import { seedDatabase } from '../../db/seed.js'
import { projectRoot, specPath } from '../../src/project-root.js'
import { ordersFixture, ordersPath } from '../support/fixtures.js'
import { endsWithTest } from '../support/at-exit.js'
import { ownPostgres } from '../support/database.js'
import { build } from '../support/harness.js'
import { deleteToken, readToken, token } from '../support/tokens.js'

// A database of its own, so the scenario can break it (500) and stop it (503).
const database = await ownPostgres(t)
const harness = await build(t, { DATABASE_URL: database.url })
await seedDatabase(harness.app.db, ordersFixture())
// The first change of the feed, recorded so by another writer 40 days ago: pruned later, a cursor
// below it answers 410 (a prune deletes the first changes of the feed only, so it goes before the
// scenario records any).
const { rows: old } = await harness.app.db.query<{ id: string }>(`
  INSERT INTO permission_changes (at, resource_id, client_id, action, permission_ids, request_id)
  VALUES (now() - interval '40 days', 'orders-api', 'app-a', 'granted', '{p_read_orders}', 'old')
  RETURNING id::text`)

const prismPort = await freePort()
const prism: ChildProcess = endsWithTest(spawn(join(projectRoot, 'node_modules', '.bin', 'prism'), [
  'proxy', specPath, harness.baseUrl, '--errors', '--host', '127.0.0.1', '--port', String(prismPort)
], { stdio: ['ignore', 'pipe', 'pipe'] }))
let prismLog = ''
prism.stdout!.on('data', (chunk) => { prismLog += chunk })
prism.stderr!.on('data', (chunk) => { prismLog += chunk })
t.teardown(async () => {
  prism.kill('SIGTERM')
  if (prism.exitCode === null) await once(prism, 'exit')
})
for (let waited = 0; !prismLog.includes('Prism is listening'); waited += 100) {
  if (waited > 60_000 || prism.exitCode !== null) throw new Error(`Prism did not start:\n${prismLog}`)
  await new Promise((resolve) => setTimeout(resolve, 100))
}

const reached = new Map<string, Set<number>>([['GET', new Set()], ['DELETE', new Set()], ['POST', new Set()], ['history', new Set()], ['feed', new Set()]])
const feedPath = '/permission_changes'

/** One request through Prism: fails on anything Prism flags; returns the service's answer. */
async function viaPrism (path: string, init: { method?: string, authorization?: string, contentType?: string, body?: string, headers?: Record<string, string> } = {}) {
  const method = init.method ?? 'GET'
  const headers: Record<string, string> = { ...init.headers }
  if (init.authorization) headers.authorization = init.authorization
  if (init.contentType) headers['content-type'] = init.contentType
  const res = await fetch(`http://127.0.0.1:${prismPort}${path}`, { method, headers, body: init.body })
  const text = await res.text()
  const violations = res.headers.get('sl-violations')
  if (violations) throw new Error(`Prism flagged ${method} ${path} → ${res.status}: ${violations}`)
  if (text.includes('stoplight.io/prism/errors')) throw new Error(`Prism answered in place of the service: ${text}`)
  reached.get(path.startsWith(feedPath) ? 'feed' : path.includes('/permission_changes') ? 'history' : method)?.add(res.status)
  return { status: res.status, text, etag: res.headers.get('etag'), link: res.headers.get('link') }
}

const bearer = (value: string) => `Bearer ${value}`
const path = ordersPath()

t.test('GET through Prism: 200, 400, 401, 403, 404, 500, 503', async (t) => {
  t.equal((await viaPrism(`${path}?limit=3&offset=1&sort_by=description.desc,name`, { authorization: bearer(readToken()) })).status, 200)
  t.equal((await viaPrism(`${path}?offset=1.0`, { authorization: bearer(readToken()) })).status, 400, 'an integer as the spec reads it, not as the service does')
  t.equal((await viaPrism(path, { authorization: bearer('not-a-jwt') })).status, 401)
  t.equal((await viaPrism(path, { authorization: bearer(token({ scope: 'openid' })) })).status, 403)
  t.equal((await viaPrism(ordersPath('app-a', 'missing-api'), { authorization: bearer(readToken()) })).status, 404)
})

t.test('DELETE through Prism: 204, 401, 403, 404, 413, 422', async (t) => {
  const json = 'application/json'
  t.equal((await viaPrism(path, { method: 'DELETE', authorization: bearer(deleteToken()), contentType: json, body: '["p_read_orders"]' })).status, 204)
  t.equal((await viaPrism(path, { method: 'DELETE', authorization: bearer(deleteToken()), contentType: json, body: '["p_typo"]' })).status, 422)
  t.equal((await viaPrism(path, { method: 'DELETE', authorization: bearer('x'), contentType: json, body: '["p_read_orders"]' })).status, 401)
  t.equal((await viaPrism(path, { method: 'DELETE', authorization: bearer(readToken()), contentType: json, body: '["p_read_orders"]' })).status, 403)
  t.equal((await viaPrism(ordersPath('missing-app'), { method: 'DELETE', authorization: bearer(deleteToken()), contentType: json, body: '["p_read_orders"]' })).status, 404)
  // Within the spec (500 ids of 255 characters), yet past the 256 KiB the service accepts.
  const big = JSON.stringify(Array.from({ length: 500 }, (_, i) => `${i}-${'😀'.repeat(250)}`))
  t.equal((await viaPrism(path, { method: 'DELETE', authorization: bearer(deleteToken()), contentType: json, body: big })).status, 413)
})

t.test('POST, conditional requests and the history through Prism: 204, 304, 412, 422, 404, 403, 401', async (t) => {
  const json = 'application/json'
  const writer = bearer(token({ scope: 'read:resource delete:resource create:resource', sub: 'prism' }))
  t.equal((await viaPrism(path, { method: 'POST', authorization: writer, contentType: json, body: '["p_update_refunds"]' })).status, 204)
  t.equal((await viaPrism(path, { method: 'POST', authorization: writer, contentType: json, body: '["p_typo"]' })).status, 422)
  t.equal((await viaPrism(path, { method: 'POST', authorization: bearer(deleteToken()), contentType: json, body: '["p_read_orders"]' })).status, 403)
  t.equal((await viaPrism(ordersPath('app-c'), { method: 'POST', authorization: writer, contentType: json, body: '["p_read_orders"]' })).status, 404)
  const { etag } = await viaPrism(path, { authorization: writer })
  t.match(etag, /^"\d+"$/)
  t.equal((await viaPrism(path, { authorization: writer, headers: { 'if-none-match': etag! } })).status, 304)
  for (const method of ['POST', 'DELETE']) {
    t.equal((await viaPrism(path, { method, authorization: writer, contentType: json, body: '["p_update_refunds"]', headers: { 'if-match': '"0"' } })).status, 412, method)
  }
  t.equal((await viaPrism(path, { method: 'DELETE', authorization: writer, contentType: json, body: '["p_update_refunds"]', headers: { 'if-match': etag! } })).status, 204)
  const history = '/resources/orders-api/authorized_clients/app-a/permission_changes'
  const listed = await viaPrism(`${history}?limit=1`, { authorization: writer })
  t.equal(listed.status, 200)
  t.match(JSON.parse(listed.text), [{ action: 'unauthorized', permission_ids: ['p_update_refunds'], actor: { sub: 'prism' } }])
  t.equal((await viaPrism('/resources/orders-api/authorized_clients/app-c/permission_changes', { authorization: writer })).status, 404)
  t.equal((await viaPrism(history, { authorization: bearer(deleteToken()) })).status, 403)
  t.equal((await viaPrism(history, { authorization: bearer('not-a-jwt') })).status, 401)
})

// Polling only: a stream never ends, and Prism validates an answer once it has the whole of it.
t.test('the change feed polled through Prism: 200 with its Link, 401, 403, 410', async (t) => {
  const reader = bearer(readToken())
  // The changes the scenario made before, readable once no older transaction is open on the server.
  let page = await viaPrism(`${feedPath}?limit=2&resource_id=orders-api`, { authorization: reader })
  for (const deadline = Date.now() + 20_000; JSON.parse(page.text).length < 2 && Date.now() < deadline;) {
    await new Promise((resolve) => setTimeout(resolve, 100))
    page = await viaPrism(`${feedPath}?limit=2&resource_id=orders-api`, { authorization: reader })
  }
  t.equal(page.status, 200)
  t.match(JSON.parse(page.text), [{ resource_id: 'orders-api', client_id: 'app-a' }, { resource_id: 'orders-api', client_id: 'app-a' }])
  const next = new URL(/^<([^>]+)>; rel="next"$/.exec(page.link ?? '')![1])
  t.equal((await viaPrism(next.pathname + next.search, { authorization: reader, headers: { accept: 'application/json' } })).status, 200)
  t.equal((await viaPrism(feedPath, { authorization: bearer('not-a-jwt') })).status, 401)
  t.equal((await viaPrism(feedPath, { authorization: bearer(deleteToken()) })).status, 403)
  t.equal(await pruneChanges(harness.app.db, 30), 1)
  const pruned = await viaPrism(`${feedPath}?after=${BigInt(old[0].id) - 1n}`, { authorization: reader })
  t.equal(pruned.status, 410)
  t.match(JSON.parse(pruned.text), { type: '/problems/changes-pruned', pruned_through: old[0].id })
})

t.test('a broken database (500) and a stopped one (503), through Prism', async (t) => {
  await harness.app.db.query('ALTER TABLE grants RENAME TO grants_moved')
  t.equal((await viaPrism(path, { authorization: bearer(readToken()) })).status, 500)
  t.equal((await viaPrism(path, { method: 'DELETE', authorization: bearer(deleteToken()), contentType: 'application/json', body: '["p_read_orders"]' })).status, 500)
  await harness.app.db.query('ALTER TABLE grants_moved RENAME TO grants')
  await harness.app.db.query('ALTER TABLE permission_changes_pruned RENAME TO permission_changes_pruned_moved')
  t.equal((await viaPrism(feedPath, { authorization: bearer(readToken()) })).status, 500)
  await harness.app.db.query('ALTER TABLE permission_changes_pruned_moved RENAME TO permission_changes_pruned')
  await database.stop()
  t.equal((await viaPrism(path, { authorization: bearer(readToken()) })).status, 503)
  t.equal((await viaPrism(path, { method: 'DELETE', authorization: bearer(deleteToken()), contentType: 'application/json', body: '["p_read_orders"]' })).status, 503)
  t.equal((await viaPrism(feedPath, { authorization: bearer(readToken()) })).status, 503)
  await database.start()
})

t.test('every documented status of the operations was reached, except the HTTP layer\'s own', async (t) => {
  // Not reachable through Prism without a flag: 408 and 431 come from Node's HTTP parser before any
  // route (Prism, itself a Node server, answers them itself); DELETE's 400 and 415 need a body or
  // a media type the spec refuses, which Prism flags (or re-encodes before forwarding).
  t.same([...reached.get('GET')!].sort(), [200, 304, 400, 401, 403, 404, 500, 503])
  t.same([...reached.get('DELETE')!].sort(), [204, 401, 403, 404, 412, 413, 422, 500, 503])
  t.same([...reached.get('POST')!].sort(), [204, 403, 404, 412, 422])
  // A query the spec refuses is answered by Prism itself (flagged), so the history's 400 is not here.
  t.same([...reached.get('history')!].sort(), [200, 401, 403, 404])
  t.same([...reached.get('feed')!].sort(), [200, 401, 403, 410, 500, 503])
})
