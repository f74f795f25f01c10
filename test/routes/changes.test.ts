// The change history: written with each change in its transaction, listed newest first by cursor,
// announced on the permission_changes channel at commit, pruned by age.
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import pg from 'pg'
import t from 'tap'
import { listPermissionChanges, pruneChanges } from '../../db/queries/history.js'
import { historyPath, ordersFixture, ordersPath } from '../support/fixtures.js'
import { build, type Harness } from '../support/harness.js'
import { nodeArgsOf } from '../support/node-args.js'
import { captureLogs } from '../support/logs.js'
import { readToken, token } from '../support/tokens.js'

const writer = (claims: Record<string, unknown> = { sub: 'alice', client_id: 'console' }) =>
  token({ scope: 'delete:resource create:resource', ...claims })

interface Change { id: string, at: string, action: string, permission_ids: string[], actor: Record<string, string>, request_id: string }

// Each test on a database of its own: the history is append-only (migration 0006), so it cannot be
// emptied between tests.
let harness: Harness
t.beforeEach(async (t) => {
  harness = await build(t)
  await harness.seed(ordersFixture())
})

const change = (method: 'DELETE' | 'POST', ids: string[], options: { token?: string, headers?: Record<string, string>, path?: string } = {}) =>
  harness.request(options.path ?? ordersPath(), { method, token: options.token ?? writer(), json: ids, headers: options.headers })
const history = async (query = '', path = historyPath()) => {
  const res = await harness.request(path + query, { token: readToken() })
  return { ...res, changes: res.body as Change[] }
}

t.test('each change is recorded: action, the ids changed, the actor from the token, the request id; newest first', async (t) => {
  const started = Date.now()
  const removed = await change('DELETE', ['p_read_orders', 'p_create_orders'], { headers: { 'x-request-id': 'trace-1' } })
  t.equal(removed.status, 204)
  const granted = await change('POST', ['p_update_refunds'], { token: writer({ sub: 'bob', azp: 'batch-job' }) })
  t.equal(granted.status, 204)
  const { status, changes } = await history()
  t.equal(status, 200)
  t.match(changes, [
    { action: 'granted', permission_ids: ['p_update_refunds'], actor: { sub: 'bob', client_id: 'batch-job' }, request_id: granted.headers.get('x-request-id') },
    { action: 'unauthorized', permission_ids: ['p_read_orders', 'p_create_orders'], actor: { sub: 'alice', client_id: 'console' }, request_id: 'trace-1' }
  ])
  t.ok(BigInt(changes[0].id) > BigInt(changes[1].id), 'ids increase with time')
  for (const recorded of changes) {
    t.ok(Math.abs(Date.parse(recorded.at) - started) < 60_000, `${recorded.at} is now, RFC 3339`)
  }
})

t.test('the history with and without the WAL position (replicas or not): the same page from the same cursor', async (t) => {
  for (const id of ['p_read_orders', 'p_create_orders']) t.equal((await change('DELETE', [id])).status, 204)
  const input = { resourceId: 'orders-api', clientId: 'app-a', limit: 1 }
  const client = await harness.app.db.connect()
  try {
    const newest = await listPermissionChanges(client, input, { prepared: true, position: true })
    t.match(newest.position, /^[0-9A-F]+\/[0-9A-F]+$/, 'the position of the state it read')
    t.same(newest.changes.map(({ permissionIds }) => permissionIds), [['p_create_orders']])
    const before = newest.changes[0].id
    const positioned = await listPermissionChanges(client, { ...input, before }, { prepared: true, position: true })
    const plain = await listPermissionChanges(client, { ...input, before }, { prepared: true })
    t.same(positioned.changes.map(({ permissionIds }) => permissionIds), [['p_read_orders']], 'the page before the cursor')
    t.same(positioned.changes, plain.changes, 'as read without the position')
    t.equal(plain.position, undefined)
  } finally {
    client.release()
  }
})

t.test('only the ids actually changed, in request order, each once; a token without sub or client: actor {}', async (t) => {
  await change('DELETE', ['p_update_refunds', 'p_read_invoices', 'p_read_orders', 'p_read_invoices'], { token: token({ scope: 'delete:resource' }) })
  await change('POST', ['p_read_orders', 'p_read_invoices', 'p_delete_refunds', 'p_read_orders'])
  const { changes } = await history()
  t.same(changes.map(({ action, permission_ids: ids }) => [action, ids]), [
    ['granted', ['p_read_orders', 'p_read_invoices', 'p_delete_refunds']],
    ['unauthorized', ['p_read_invoices', 'p_read_orders']]
  ])
  t.same(changes[1].actor, {})
})

t.test('nothing is recorded for a change that changes nothing or is refused (404, 412, 422)', async (t) => {
  await change('DELETE', ['p_update_refunds'])
  await change('POST', ['p_read_orders'])
  t.equal((await change('DELETE', ['nope'])).status, 422)
  t.equal((await change('POST', ['p_update_refunds', 'nope'])).status, 422)
  t.equal((await change('DELETE', ['p_read_orders'], { headers: { 'if-match': '"1"' } })).status, 412)
  t.equal((await change('POST', ['p_read_orders'], { path: ordersPath('app-c') })).status, 404)
  t.same((await history()).changes, [])
  t.same((await harness.db.query('SELECT count(*)::int AS n FROM permission_changes')).rows, [{ n: 0 }])
})

t.test('each change is logged with how many ids it changed and its change id; one that changes nothing has no id', async (t) => {
  const { stream, lines } = captureLogs()
  const logged = await build(t, { LOG_LEVEL: 'info' }, { logs: stream })
  await logged.seed(ordersFixture())
  const send = (method: 'DELETE' | 'POST', ids: string[]) => logged.request(ordersPath(), { method, token: writer(), json: ids })
  t.equal((await send('DELETE', ['p_read_orders', 'p_create_orders'])).status, 204)
  t.equal((await send('DELETE', ['p_read_orders'])).status, 204)
  t.equal((await send('POST', ['p_read_orders'])).status, 204)
  const recorded = (await logged.db.query<{ id: string }>('SELECT id::text FROM permission_changes ORDER BY id')).rows.map(({ id }) => id)
  t.equal(recorded.length, 2)
  const target = { resourceId: 'orders-api', clientId: 'app-a' }
  t.same(lines.filter(({ msg }) => /^permissions /.test(String(msg)))
    .map(({ msg, resourceId, clientId, removed, granted, changeId }) => ({ msg, resourceId, clientId, removed, granted, changeId })), [
    { msg: 'permissions unauthorized', ...target, removed: 2, granted: undefined, changeId: recorded[0] },
    { msg: 'permissions unauthorized', ...target, removed: 0, granted: undefined, changeId: undefined },
    { msg: 'permissions granted', ...target, removed: undefined, granted: 1, changeId: recorded[1] }
  ])
})

t.test('paged by a cursor: limit, before, and Link rel=next while older changes exist', async (t) => {
  const ids = ['p_read_orders', 'p_create_orders', 'p_update_orders', 'p_delete_orders', 'p_read_invoices']
  for (const id of ids) await change('DELETE', [id])
  const seen: string[][] = []
  let next: string | undefined = `${historyPath()}?limit=2`
  for (let pages = 0; next && pages < 10; pages++) {
    const res = await harness.request(next, { token: readToken() })
    t.equal(res.status, 200)
    seen.push((res.body as Change[]).map((recorded) => recorded.permission_ids[0]))
    const link = res.headers.get('link')
    next = link ? new URL(/^<([^>]+)>; rel="next"$/.exec(link)![1]).pathname + new URL(/^<([^>]+)>/.exec(link)![1]).search : undefined
  }
  t.same(seen, [['p_read_invoices', 'p_delete_orders'], ['p_update_orders', 'p_create_orders'], ['p_read_orders']])
  const three = await history('?limit=3')
  t.match(three.headers.get('link'), new RegExp(`[?&]before=${three.changes[2].id}>; rel="next"$`), 'the cursor is the page\'s last (oldest) change')
  const { headers, changes } = await history('?limit=5')
  t.equal(changes.length, 5)
  t.equal(headers.get('link'), null, 'no next link when nothing older remains')
  t.same((await history(`?before=${changes[4].id}`)).changes, [])
  for (const query of ['?limit=0', '?limit=501', '?before=abc', '?before=-1', `?before=${'9'.repeat(19)}`]) {
    t.equal((await history(query)).status, 400, query)
  }
})

t.test('the history outlives what it describes; without history, the list\'s 404s in its order', async (t) => {
  await change('DELETE', ['p_read_orders'])
  await harness.db.query("DELETE FROM authorizations WHERE resource_id = 'orders-api' AND client_id = 'app-a'")
  await harness.db.query("DELETE FROM permissions WHERE id = 'p_read_orders'")
  t.match((await history()).changes, [{ action: 'unauthorized', permission_ids: ['p_read_orders'] }], 'authorization and permission gone')
  for (const [path, type] of [
    [historyPath('app-c'), '/problems/client-not-authorized'],
    [historyPath('nobody'), '/problems/client-not-found'],
    [historyPath('app-a', 'no-api'), '/problems/resource-not-found']
  ]) {
    const res = await history('', path)
    t.equal(res.status, 404, path)
    t.equal((res.body as { type: string }).type, type, path)
  }
  t.equal((await history('', historyPath('app-b'))).status, 200, 'authorized, no change yet: []')
  await harness.db.query("DELETE FROM resources WHERE id = 'orders-api'")
  t.equal((await history()).status, 200, 'resource gone')
})

t.test('If-Match and If-None-Match are ignored, whatever their value: the same page, no ETag (docs/contract.md)', async (t) => {
  await change('DELETE', ['p_read_orders'])
  const plain = await history()
  t.equal(plain.status, 200)
  t.equal(plain.headers.get('etag'), null)
  const conditions: Array<Record<string, string>> = [
    { 'if-match': '"1"' }, { 'if-match': '*' }, { 'if-match': 'junk' }, { 'if-none-match': '*' }, { 'if-none-match': 'W/"1"' }, { 'if-none-match': 'junk' }
  ]
  for (const headers of conditions) {
    const res = await harness.request(historyPath(), { token: readToken(), headers })
    t.equal(res.status, 200, JSON.stringify(headers))
    t.same(res.body, plain.body, JSON.stringify(headers))
    t.equal(res.headers.get('etag'), null, JSON.stringify(headers))
  }
})

t.test('needs read:resource', async (t) => {
  t.equal((await harness.request(historyPath())).status, 401)
  t.equal((await harness.request(historyPath(), { token: token({ scope: 'delete:resource' }) })).status, 403)
})

t.test('each change is announced at commit on the permission_changes channel, with its id', async (t) => {
  const listener = new pg.Client({ connectionString: (harness.db as unknown as { options: { connectionString: string } }).options.connectionString })
  await listener.connect()
  t.teardown(() => listener.end())
  const received: Array<Record<string, string>> = []
  listener.on('notification', (message) => { if (message.channel === 'permission_changes') received.push(JSON.parse(message.payload!)) })
  await listener.query('LISTEN permission_changes')
  await change('DELETE', ['p_read_orders'])
  await change('DELETE', ['p_read_orders'])
  await change('POST', ['nope'])
  const { changes } = await history()
  // A listener gets notifications in the order their transactions committed: once this one, sent
  // after the three requests were answered, has come, any of theirs has come before it.
  await harness.db.query('SELECT pg_notify($1, $2)', ['permission_changes', JSON.stringify({ last: true })])
  for (let waited = 0; !received.some(({ last }) => last) && waited < 5_000; waited += 50) await new Promise((resolve) => setTimeout(resolve, 50))
  t.same(received, [{ id: changes[0].id, resource_id: 'orders-api', client_id: 'app-a', action: 'unauthorized' }, { last: true }], 'one, for the one change')
})

t.test('pruning: changes older than the given age go, newer ones stay; the command says how many', async (t) => {
  // The history cannot be aged by an UPDATE (migration 0006): the older changes are recorded so.
  await harness.db.query(`
    INSERT INTO permission_changes (at, resource_id, client_id, action, permission_ids, request_id) VALUES
      (now() - interval '40 days', 'orders-api', 'app-a', 'unauthorized', '{p_read_orders}', 'req-40'),
      (now() - interval '2 days', 'orders-api', 'app-a', 'unauthorized', '{p_create_orders}', 'req-2')`)
  await change('DELETE', ['p_update_orders'])
  t.equal(await pruneChanges(harness.db, 60), 0)
  t.equal(await pruneChanges(harness.db, 30), 1)
  t.same((await history()).changes.map((recorded) => recorded.permission_ids), [['p_update_orders'], ['p_create_orders']])
  const databaseUrl = (harness.db as unknown as { options: { connectionString: string } }).options.connectionString
  const run = promisify(execFile)
  const prune = nodeArgsOf('scripts/db-prune-changes.ts')
  const { stdout } = await run(process.execPath, [...prune, '--older-than', '1'], { env: { PATH: process.env.PATH, DATABASE_URL: databaseUrl } })
  t.equal(stdout.trim(), 'Pruned 1 change recorded more than 1 day ago.')
  t.same((await history()).changes.map((recorded) => recorded.permission_ids), [['p_update_orders']], 'today\'s change stays')
  const refused = await run(process.execPath, [...prune, '--older-than', '0'], { env: { PATH: process.env.PATH, DATABASE_URL: databaseUrl } })
    .catch((error: { code: number, stderr: string }) => error)
  t.match(refused, { code: 2, stderr: /--older-than must be a whole number of days, from 1 to 36500/ })
})
