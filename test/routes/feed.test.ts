// The change feed, polled: every change across resources and clients, oldest first, from an
// exclusive cursor, in pages that always link to the next poll; a change behind an open transaction
// is held back, never skipped; a cursor behind a prune answers 410. (Streams are tested elsewhere.)
//
// The PostgreSQL cluster is shared with the test files running beside this one, and a transaction
// open in any of its databases holds the feed's horizon back (docs/change-feed.md): a change is
// waited for (settled) before it is expected, never assumed readable at once.
import pg from 'pg'
import t from 'tap'
import { pruneChanges } from '../../db/queries/history.js'
import { ordersFixture, ordersPath } from '../support/fixtures.js'
import { build, type Harness } from '../support/harness.js'
import { readToken, token } from '../support/tokens.js'

interface FeedEntry {
  id: string
  at: string
  resource_id: string
  client_id: string
  action: string
  permission_ids: string[]
  actor: Record<string, string>
  request_id: string
}

const FEED = '/permission_changes'
// Long enough for another test file's transaction to end on a loaded machine.
const SETTLE_DEADLINE_MS = 20_000

const writer = (claims: Record<string, unknown> = { sub: 'alice', client_id: 'console' }) =>
  token({ scope: 'delete:resource create:resource', ...claims })

// Each test on a database of its own: the history is append-only, so it cannot be emptied.
let harness: Harness
t.beforeEach(async (t) => {
  harness = await build(t)
  await harness.seed(ordersFixture())
})

const change = (method: 'DELETE' | 'POST', ids: string[], options: { token?: string, headers?: Record<string, string>, path?: string } = {}) =>
  harness.request(options.path ?? ordersPath(), { method, token: options.token ?? writer(), json: ids, headers: options.headers })

const poll = async (query = '', headers: Record<string, string> = {}) => {
  const res = await harness.request(FEED + query, { token: readToken(), headers })
  return { ...res, entries: res.body as FeedEntry[] }
}

/** The Link rel="next" of an answer, as a URL; fails when there is none. */
function nextOf (res: { headers: Headers }): URL {
  const match = /^<([^>]+)>; rel="next"$/.exec(res.headers.get('link') ?? '')
  if (!match) throw new Error(`no rel="next" link: ${res.headers.get('link')}`)
  return new URL(match[1])
}
const follow = (next: URL) => poll(next.search)

/** The whole feed once it holds at least `count` changes (the horizon may lag behind commits). */
async function settled (count: number, query = ''): Promise<FeedEntry[]> {
  const deadline = Date.now() + SETTLE_DEADLINE_MS
  for (;;) {
    const { status, entries } = await poll(`?limit=500${query}`)
    if (status !== 200) throw new Error(`the feed answered ${status}`)
    if (entries.length >= count) return entries
    if (Date.now() > deadline) throw new Error(`the feed holds ${entries.length} changes, not ${count}, after ${SETTLE_DEADLINE_MS} ms`)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

/** Rows recorded by another writer, in one statement (so one transaction): their ids, in order. */
async function recordedBySql (rows: Array<{ resource?: string, client?: string, ago?: string, requestId: string }>): Promise<string[]> {
  const values = rows.flatMap(({ resource = 'orders-api', client = 'app-a', ago = '0 seconds', requestId }) => [resource, client, ago, requestId])
  const tuples = rows.map((_, i) => `($${i * 4 + 1}, $${i * 4 + 2}, now() - $${i * 4 + 3}::interval, 'granted', '{p_sql}', 'batch', $${i * 4 + 4})`)
  const { rows: inserted } = await harness.db.query<{ id: string }>(`
    INSERT INTO permission_changes (resource_id, client_id, at, action, permission_ids, actor_client_id, request_id)
    VALUES ${tuples.join(', ')} RETURNING id::text`, values)
  return inserted.map(({ id }) => id)
}

const increasing = (ids: string[]) => ids.every((id, i) => i === 0 || BigInt(id) > BigInt(ids[i - 1]))

t.test('every change across resources and clients, oldest first, each with id, at, resource_id, client_id, action, permission_ids, actor, request_id', async (t) => {
  const started = Date.now()
  t.equal((await change('DELETE', ['p_read_orders', 'p_create_orders'], { headers: { 'x-request-id': 'trace-1' } })).status, 204)
  const [bySql] = await recordedBySql([{ resource: 'billing-api', client: 'app-z', requestId: 'batch-1' }])
  const other = await change('DELETE', ['p_other'], { path: ordersPath('app-a', 'other-api'), token: writer({ sub: 'bob', azp: 'batch-job' }) })
  t.equal(other.status, 204)
  const anonymous = await change('POST', ['p_read_orders'], { path: ordersPath('app-b'), token: token({ scope: 'create:resource' }) })
  t.equal(anonymous.status, 204)

  const entries = await settled(4)
  t.same(entries.map(({ id, at, ...rest }) => rest), [
    { resource_id: 'orders-api', client_id: 'app-a', action: 'unauthorized', permission_ids: ['p_read_orders', 'p_create_orders'], actor: { sub: 'alice', client_id: 'console' }, request_id: 'trace-1' },
    { resource_id: 'billing-api', client_id: 'app-z', action: 'granted', permission_ids: ['p_sql'], actor: { client_id: 'batch' }, request_id: 'batch-1' },
    { resource_id: 'other-api', client_id: 'app-a', action: 'unauthorized', permission_ids: ['p_other'], actor: { sub: 'bob', client_id: 'batch-job' }, request_id: other.headers.get('x-request-id') },
    { resource_id: 'orders-api', client_id: 'app-b', action: 'granted', permission_ids: ['p_read_orders'], actor: {}, request_id: anonymous.headers.get('x-request-id') }
  ], 'the changes in the order they were made, a writer\'s own SQL row among them; a token without sub or client: actor {}')
  t.equal(entries[1].id, bySql, 'the SQL writer\'s row with the id the database gave it')
  t.ok(increasing(entries.map(({ id }) => id)), 'ids increase along the feed')
  for (const { id, at } of entries) {
    t.match(id, /^[0-9]{1,18}$/)
    t.match(at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
    t.ok(Math.abs(Date.parse(at) - started) < 60_000, `${at} is now`)
  }
})

t.test('after is exclusive; limit pages; Link rel=next followed to the end, then [] with a next link from the same place', async (t) => {
  const empty = await poll()
  t.equal(empty.status, 200)
  t.same(empty.entries, [], 'nothing recorded yet: []')
  t.match(nextOf(empty).search, /^\?after=[0-9]{1,18}&limit=50$/, 'and a next link all the same, from where the feed stands (below its horizon)')

  for (const id of ['p_read_orders', 'p_create_orders', 'p_update_orders', 'p_delete_orders', 'p_read_invoices']) {
    t.equal((await change('DELETE', [id])).status, 204)
  }
  const ids = (await settled(5)).map(({ id }) => id)
  t.same((await poll(`?after=${ids[1]}`)).entries.map(({ id }) => id), ids.slice(2), 'after the second: the third on')
  t.same((await poll(`?after=${BigInt(ids[1]) - 1n}`)).entries.map(({ id }) => id), ids.slice(1), 'an id between two changes works as well')

  const pages: string[][] = []
  let res = await poll('?limit=2')
  for (let polls = 0; res.entries.length > 0 && polls < 10; polls++) {
    t.equal(res.status, 200)
    pages.push(res.entries.map(({ id }) => id))
    const next = nextOf(res)
    t.same(Object.fromEntries(next.searchParams), { after: res.entries.at(-1)!.id, limit: '2' }, 'the next link: after the page\'s last change, same limit')
    res = await follow(next)
  }
  t.same(pages, [ids.slice(0, 2), ids.slice(2, 4), ids.slice(4)])
  t.same(res.entries, [], 'past the end: []')
  t.same(Object.fromEntries(nextOf(res).searchParams), { after: ids[4], limit: '2' }, 'and the next link polls again from the same place')
  const again = await follow(nextOf(res))
  t.same(again.entries, [])
  t.equal(again.headers.get('link'), res.headers.get('link'))
  t.same((await poll(`?after=${'9'.repeat(18)}`)).entries, [], 'a cursor beyond every change: []')
})

t.test('limit: 50 by default, up to 500', async (t) => {
  await recordedBySql(Array.from({ length: 60 }, (_, i) => ({ requestId: `bulk-${i}` })))
  const all = await settled(60)
  const first = await poll()
  t.equal(first.entries.length, 50)
  t.same(Object.fromEntries(nextOf(first).searchParams), { after: all[49].id, limit: '50' })
  t.same((await follow(nextOf(first))).entries.map(({ request_id: id }) => id), Array.from({ length: 10 }, (_, i) => `bulk-${50 + i}`))
  t.equal((await poll('?limit=500')).entries.length, 60)
  t.equal((await poll('?limit=1')).entries.length, 1)
})

t.test('resource_id keeps one resource\'s changes, with after and limit, and the next link keeps it', async (t) => {
  t.equal((await change('DELETE', ['p_read_orders'])).status, 204)
  t.equal((await change('DELETE', ['p_other'], { path: ordersPath('app-a', 'other-api') })).status, 204)
  t.equal((await change('DELETE', ['p_create_orders'])).status, 204)
  t.equal((await change('POST', ['p_other'], { path: ordersPath('app-a', 'other-api') })).status, 204)
  // An id that needs encoding in a URL, recorded by another writer.
  await recordedBySql([{ resource: 'team/api v2&x=ü', requestId: 'odd' }])
  const all = await settled(5)
  const orders = all.filter(({ resource_id: resource }) => resource === 'orders-api')
  const other = all.filter(({ resource_id: resource }) => resource === 'other-api')
  t.equal(other.length, 2)

  t.same((await poll('?resource_id=orders-api')).entries, orders)
  t.same((await poll('?resource_id=other-api')).entries, other)
  t.same((await poll(`?resource_id=orders-api&after=${orders[0].id}`)).entries, orders.slice(1))
  const firstPage = await poll('?resource_id=other-api&limit=1')
  t.same(firstPage.entries, other.slice(0, 1))
  const next = nextOf(firstPage)
  t.same(Object.fromEntries(next.searchParams), { after: other[0].id, limit: '1', resource_id: 'other-api' }, 'the filter is kept in the link')
  const secondPage = await follow(next)
  t.same(secondPage.entries, other.slice(1), 'the next page skips the other resource\'s changes between')
  t.same((await follow(nextOf(secondPage))).entries, [])

  const odd = await poll(`?resource_id=${encodeURIComponent('team/api v2&x=ü')}`)
  t.same(odd.entries.map(({ request_id: id }) => id), ['odd'])
  t.equal(nextOf(odd).searchParams.get('resource_id'), 'team/api v2&x=ü', 'encoded in the link, read back as it was')
  t.same((await follow(nextOf(odd))).entries, [])
  const unknown = await poll('?resource_id=no-such-api')
  t.same(unknown.entries, [], 'a resource without changes (or unknown): []')
  t.match(Object.fromEntries(nextOf(unknown).searchParams), { after: /^[0-9]{1,18}$/, limit: '50', resource_id: 'no-such-api' })
})

t.test('400 invalid-request naming the parameter: after not an id, limit out of range or not an integer, an undeclared parameter, a malformed Last-Event-ID', async (t) => {
  const cases: Array<[query: string, headers: Record<string, string>, location: string, pointer: string]> = [
    ['?after=abc', {}, 'query', '/after'],
    ['?after=-1', {}, 'query', '/after'],
    [`?after=${'9'.repeat(19)}`, {}, 'query', '/after'],
    ['?after=', {}, 'query', '/after'],
    ['?after=1e3', {}, 'query', '/after'],
    ['?limit=0', {}, 'query', '/limit'],
    ['?limit=501', {}, 'query', '/limit'],
    ['?limit=1.5', {}, 'query', '/limit'],
    ['?limit=ten', {}, 'query', '/limit'],
    ['?resource_id=', {}, 'query', '/resource_id'],
    ['?page=2', {}, 'query', '/page'],
    ['?sort_by=id', {}, 'query', '/sort_by'],
    ['?resource=x', {}, 'query', '/resource'],
    ['?limit=10&offset=0', {}, 'query', '/offset'],
    ['', { 'last-event-id': 'abc' }, 'header', '/last-event-id'],
    ['', { 'last-event-id': '-1' }, 'header', '/last-event-id'],
    ['', { 'last-event-id': '9'.repeat(19) }, 'header', '/last-event-id']
  ]
  for (const [query, headers, location, pointer] of cases) {
    const label = `${query}${JSON.stringify(headers)}`
    const res = await poll(query, headers)
    t.equal(res.status, 400, label)
    t.match(res.headers.get('content-type'), /^application\/problem\+json/, label)
    t.match(res.body, { type: '/problems/invalid-request', status: 400, errors: [{ location, pointer }] }, label)
  }
  const undeclared = await poll('?page=2')
  t.match(undeclared.body, { errors: [{ message: 'is not a parameter of this operation' }] })
  t.equal((await poll('?after=1&after=2')).status, 400, 'one after, not two')
})

t.test('needs a token with read:resource: 401 without one, 403 with another scope', async (t) => {
  const anonymous = await harness.request(FEED)
  t.equal(anonymous.status, 401)
  t.match(anonymous.body, { type: '/problems/missing-credentials' })
  const forbidden = await harness.request(FEED, { token: token({ scope: 'delete:resource create:resource', sub: 'alice' }) })
  t.equal(forbidden.status, 403)
  t.match(forbidden.body, { type: '/problems/insufficient-scope' })
  t.equal((await harness.request(`${FEED}?after=abc`)).status, 401, 'authentication before validation')
})

t.test('after a prune, a cursor below the newest change it deleted → 410 changes-pruned with pruned_through; at the mark or without after → 200 from the oldest kept', async (t) => {
  // Recorded so by another writer (the history cannot be aged by an UPDATE), oldest first.
  const pruned = await recordedBySql([{ ago: '41 days', requestId: 'old-1' }, { ago: '40 days', requestId: 'old-2' }, { ago: '40 days', requestId: 'old-3' }])
  await recordedBySql([{ ago: '2 days', requestId: 'kept-2-days' }])
  t.equal((await change('DELETE', ['p_read_orders'], { headers: { 'x-request-id': 'kept-today' } })).status, 204)
  await settled(5)
  t.equal((await poll(`?after=${pruned[0]}`)).status, 200, 'before the prune, any cursor reads')

  t.equal(await pruneChanges(harness.db, 30), 3)
  const mark = pruned[2]
  t.same((await harness.db.query('SELECT through_id::text FROM permission_changes_pruned')).rows, [{ through_id: mark }], 'the newest pruned id is the mark')
  for (const after of ['0', pruned[0], pruned[1], String(BigInt(mark) - 1n)]) {
    const res = await poll(`?after=${after}`)
    t.equal(res.status, 410, `after=${after}`)
    t.match(res.headers.get('content-type'), /^application\/problem\+json/)
    t.match(res.body, { type: '/problems/changes-pruned', title: 'Changes pruned', status: 410, pruned_through: mark, detail: new RegExp(`^Changes after ${after} have been pruned \\(through ${mark}\\)`) }, `after=${after}`)
    t.equal(res.headers.get('link'), null, 'no next link to poll from a gap')
  }
  t.equal((await poll(`?after=${pruned[0]}&resource_id=orders-api&limit=1`)).status, 410, 'with a filter too')

  const atMark = await poll(`?after=${mark}`)
  t.equal(atMark.status, 200, 'a reader that has seen the mark has missed nothing')
  t.same(atMark.entries.map(({ request_id: id }) => id), ['kept-2-days', 'kept-today'])
  const fresh = await poll()
  t.equal(fresh.status, 200)
  t.same(fresh.entries, atMark.entries, 'without after: from the oldest change kept')
  t.equal((await follow(nextOf(fresh))).status, 200, 'and its next link reads on')
})

t.test('HEAD answers as GET does, without a body', async (t) => {
  t.equal((await change('DELETE', ['p_read_orders'])).status, 204)
  await settled(1)
  const get = await poll('?limit=5')
  const head = await harness.request(`${FEED}?limit=5`, { method: 'HEAD', token: readToken() })
  t.equal(head.status, 200)
  t.equal(head.text, '')
  t.equal(head.headers.get('link'), get.headers.get('link'))
  t.equal(head.headers.get('content-type'), get.headers.get('content-type'))
  const refused = await harness.request(`${FEED}?limit=0`, { method: 'HEAD', token: readToken() })
  t.equal(refused.status, 400)
  t.equal(refused.text, '')
  t.equal((await harness.request(FEED, { method: 'HEAD' })).status, 401)
})

t.test('If-Match and If-None-Match are ignored, whatever their value: the same page, no ETag (docs/contract.md)', async (t) => {
  t.equal((await change('DELETE', ['p_read_orders'])).status, 204)
  await settled(1)
  const plain = await poll('?limit=5')
  t.equal(plain.status, 200)
  t.equal(plain.headers.get('etag'), null)
  const conditions: Array<Record<string, string>> = [
    { 'if-match': '"1"' }, { 'if-match': '*' }, { 'if-match': 'junk' }, { 'if-none-match': '*' }, { 'if-none-match': 'W/"1"' }, { 'if-none-match': 'junk' }
  ]
  for (const headers of conditions) {
    const res = await poll('?limit=5', headers)
    t.equal(res.status, 200, JSON.stringify(headers))
    t.same(res.body, plain.body, JSON.stringify(headers))
    t.equal(res.headers.get('etag'), null, JSON.stringify(headers))
  }
})

t.test('Vary: Accept on a page, its HEAD and a 410 (a stream answers on the same URL): a cache keeps one apart from the other', async (t) => {
  const [old] = await recordedBySql([{ ago: '40 days', requestId: 'old' }])
  await recordedBySql([{ requestId: 'kept' }])
  await settled(2)
  t.equal(await pruneChanges(harness.db, 30), 1)
  for (const [what, res] of [
    ['a page', await poll()],
    ['a page for Accept: application/json', await poll('', { accept: 'application/json' })],
    ['HEAD', await harness.request(FEED, { method: 'HEAD', token: readToken() })],
    ['410', await poll(`?after=${BigInt(old) - 1n}`)]
  ] as const) {
    t.equal(res.headers.get('vary'), 'Accept', what)
  }
  t.equal((await harness.request(FEED)).headers.get('vary'), null, 'not on a 401, the same whatever Accept says')
})

t.test('the next link is absolute, on the host the request named; path-only for a Host that is not a plain host', async (t) => {
  // An empty feed: the links' after is where it stands.
  t.match((await poll()).headers.get('link'), new RegExp(`^<${harness.baseUrl}${FEED}\\?after=[0-9]+&limit=50>; rel="next"$`))
  const named = await poll('?limit=3&resource_id=orders-api', { host: 'feed.example:8443' })
  t.match(named.headers.get('link'), /^<http:\/\/feed\.example:8443\/permission_changes\?after=[0-9]+&limit=3&resource_id=orders-api>; rel="next"$/)
  const hostile = await poll('', { host: 'evil>.example' })
  t.equal(hostile.status, 200)
  t.match(hostile.headers.get('link'), /^<\/permission_changes\?after=[0-9]+&limit=50>; rel="next"$/)
})

t.test('a change behind a transaction still open is held back with every later one, then read in order once it commits: nothing skipped', async (t) => {
  t.equal((await change('DELETE', ['p_read_orders'], { headers: { 'x-request-id': 'before' } })).status, 204)
  const [before] = await settled(1)

  // Another writer's transaction, left open: its id is taken before the API's changes below.
  const other = new pg.Client({ connectionString: (harness.db as unknown as { options: { connectionString: string } }).options.connectionString })
  await other.connect()
  t.teardown(() => other.end())
  await other.query('BEGIN')
  const { rows: [held] } = await other.query<{ id: string }>(`
    INSERT INTO permission_changes (resource_id, client_id, action, permission_ids, actor_client_id, request_id)
    VALUES ('billing-api', 'app-z', 'granted', '{p_sql}', 'batch', 'held') RETURNING id::text`)
  t.ok(BigInt(held.id) > BigInt(before.id))

  const later = ['p_create_orders', 'p_update_orders', 'p_delete_orders']
  for (const id of later) t.equal((await change('DELETE', [id], { headers: { 'x-request-id': `after-${id}` } })).status, 204)
  t.equal((await harness.db.query<{ n: number }>('SELECT count(*)::int AS n FROM permission_changes')).rows[0].n, 4, 'the later changes are committed')
  const whileOpen = await poll()
  t.same(whileOpen.entries, [before], 'committed, yet held back behind the open transaction')
  const cursor = nextOf(whileOpen)
  t.equal(cursor.searchParams.get('after'), before.id)
  t.same((await poll(`?after=${before.id}`)).entries, [], 'nothing after the cursor yet')

  await other.query('COMMIT')
  const deadline = Date.now() + SETTLE_DEADLINE_MS
  let resumed = await follow(cursor)
  while (resumed.entries.length < 4 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 100))
    resumed = await follow(cursor)
  }
  t.same(resumed.entries.map(({ request_id: id }) => id), ['held', ...later.map((id) => `after-${id}`)],
    'the reader that polled while it was open gets the held change first, then the later ones')
  t.equal(resumed.entries[0].id, held.id)
  t.ok(increasing(resumed.entries.map(({ id }) => id)), 'ids strictly increasing')
  t.same((await poll()).entries, [before, ...resumed.entries], 'from the start: the same order')
})

t.test('entries are JSON written by PostgreSQL: any text comes back as it was recorded, the time as toISOString gives it', async (t) => {
  const hostile = ['quote " and backslash \\ and slash /', 'line\nbreak\ttab\u0001control', 'separator \u2028 and \u2029', 'emoji 🔑 and ü']
  const { rows: [row] } = await harness.db.query<{ id: string, at: Date }>(`
    INSERT INTO permission_changes (resource_id, client_id, action, permission_ids, actor_sub, actor_client_id, request_id)
    VALUES ($1, $2, 'unauthorized', $3, $4, NULL, $5) RETURNING id::text, at`, [hostile[0], hostile[1], hostile, hostile[2], hostile[3]])
  const [entry] = await settled(1)
  t.same(entry, {
    id: row.id,
    at: row.at.toISOString(),
    resource_id: hostile[0],
    client_id: hostile[1],
    action: 'unauthorized',
    permission_ids: hostile,
    actor: { sub: hostile[2] },
    request_id: hostile[3]
  })
})

t.test('a change whose time no RFC 3339 date-time shows (infinite, past year 9999, BC) is refused by the database, whoever writes it: the feed stays JSON', async (t) => {
  // Another writer's rows: the API always records now(). 'infinity' made the feed's entry NULL, and
  // the page holding it was not JSON for every consumer.
  for (const at of ['infinity', '-infinity', '10000-01-01 00:00:00+00', '0001-12-31 23:59:59+00 BC']) {
    await t.rejects(harness.db.query(`
      INSERT INTO permission_changes (resource_id, client_id, at, action, permission_ids, request_id)
      VALUES ('orders-api', 'app-a', $1::timestamptz, 'granted', '{p_sql}', 'odd-time')`, [at]), { code: '23514' }, at)
  }
  const edges = ['0001-01-01 00:00:00+00', '9999-12-31 23:59:59.999+00']
  for (const at of edges) {
    await harness.db.query(`
      INSERT INTO permission_changes (resource_id, client_id, at, action, permission_ids, request_id)
      VALUES ('orders-api', 'app-a', $1::timestamptz, 'granted', '{p_sql}', 'edge')`, [at])
  }
  const entries = await settled(2)
  t.same(entries.map(({ at }) => at), ['0001-01-01T00:00:00.000Z', '9999-12-31T23:59:59.999Z'], 'the first and last years shown are kept, as toISOString shows them')
})

t.test('a reader that started on an empty feed and follows its next link is answered 410 when changes recorded since were pruned, not the rest without them', async (t) => {
  const empty = await poll()
  t.same(empty.entries, [], 'nothing recorded yet')
  const next = nextOf(empty)
  // Recorded after that poll by another writer (as if long ago: the history cannot be aged), then pruned.
  const [gone] = await recordedBySql([{ ago: '40 days', requestId: 'recorded-then-pruned' }])
  await recordedBySql([{ ago: '2 days', requestId: 'kept' }])
  await settled(2)
  t.equal(await pruneChanges(harness.db, 30), 1)
  const resumed = await follow(next)
  t.equal(resumed.status, 410, 'the change recorded since its poll is gone: it is told so')
  t.match(resumed.body, { type: '/problems/changes-pruned', pruned_through: gone })
})

t.test('a reader of one resource that rarely changes, polling on, is not told 410 for a prune of other resources\' changes after its last one; one that missed a change of its own is', async (t) => {
  // Before the reader's first poll: an empty page's link (where the feed stands), from below what follows.
  const early = nextOf(await poll('?resource_id=quiet-api'))
  // The quiet resource's only change, then other resources' changes after it, all long ago.
  const [quiet] = await recordedBySql([{ resource: 'quiet-api', ago: '41 days', requestId: 'quiet' }])
  const others = await recordedBySql([{ ago: '40 days', requestId: 'other-1' }, { ago: '40 days', requestId: 'other-2' }])
  await settled(3)
  const page = await poll('?resource_id=quiet-api')
  t.same(page.entries.map(({ id }) => id), [quiet], 'its change')
  const again = await follow(nextOf(page))
  t.same(again.entries, [], 'nothing newer of its resource')
  await recordedBySql([{ ago: '2 days', requestId: 'kept' }])
  await settled(4)
  t.equal(await pruneChanges(harness.db, 30), 3)

  for (const [what, next] of [['the first page', nextOf(page)], ['the empty page after it', nextOf(again)]] as const) {
    const resumed = await follow(next)
    t.equal(resumed.status, 200, `from ${what}'s next link: it has seen every change of its resource that was pruned`)
    t.same(resumed.entries, [], what)
    t.ok(BigInt(next.searchParams.get('after')!) >= BigInt(others[1]), `${what}: the link is past the other resources' changes it was shown none of`)
  }
  const missed = await follow(early)
  t.equal(missed.status, 410, 'a reader whose cursor is below its resource\'s pruned change is told')
  t.match(missed.body, { type: '/problems/changes-pruned', pruned_through: others[1] })
})

t.test('many POSTs and DELETEs at once on several authorizations: the feed holds each change once, as the histories do, and replays to the grants', async (t) => {
  const orders = ['read', 'create', 'update', 'delete'].flatMap((verb) => ['orders', 'invoices', 'refunds'].map((noun) => `p_${verb}_${noun}`))
  const targets: Array<{ resource: string, client: string, ids: string[] }> = [
    { resource: 'orders-api', client: 'app-a', ids: orders },
    { resource: 'orders-api', client: 'app-b', ids: orders },
    { resource: 'other-api', client: 'app-a', ids: ['p_other'] }
  ]
  const key = (resource: string, client: string) => `${resource}/${client}`
  const grantsNow = async () => {
    const { rows } = await harness.db.query<{ resource_id: string, client_id: string, permission_id: string }>('SELECT resource_id, client_id, permission_id FROM grants')
    const held = new Map(targets.map(({ resource, client }) => [key(resource, client), new Set<string>()]))
    for (const row of rows) held.get(key(row.resource_id, row.client_id))?.add(row.permission_id)
    return held
  }
  const initial = await grantsNow()
  // A fixed pseudo-random sequence (a 32-bit LCG, its high bits), so a failure can be run again as it was.
  let seed = 20261127
  const next = (n: number) => { seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0; return (seed >>> 16) % n }
  const sent = Array.from({ length: 80 }, (_, i) => {
    const target = targets[next(targets.length)]
    const ids = Array.from({ length: 1 + next(4) }, () => target.ids[next(target.ids.length)])
    return { method: next(2) === 0 ? 'POST' as const : 'DELETE' as const, path: ordersPath(target.client, target.resource), ids, requestId: `concurrent-${i}` }
  })
  const answers = await Promise.all(sent.map(({ method, path, ids, requestId }) => change(method, ids, { path, headers: { 'x-request-id': requestId } })))
  t.same(answers.map(({ status }) => status), sent.map(() => 204), 'every change answered 204')

  const { rows: [{ n: recorded }] } = await harness.db.query<{ n: number }>('SELECT count(*)::int AS n FROM permission_changes')
  t.ok(recorded > sent.length / 4 && recorded <= sent.length, `${recorded} changes recorded`)
  await settled(recorded)
  // Read from the start in small pages by the next links, as a follower does.
  const feed: FeedEntry[] = []
  let res = await poll('?limit=7')
  while (res.entries.length > 0) {
    feed.push(...res.entries)
    res = await follow(nextOf(res))
  }
  t.equal(feed.length, recorded, 'every change, none doubled')
  t.ok(increasing(feed.map(({ id }) => id)), 'ids strictly increasing')
  t.equal(new Set(feed.map(({ request_id: id }) => id)).size, feed.length, 'one change per request at most')
  const byRequest = new Map(sent.map((request) => [request.requestId, request]))
  for (const entry of feed) {
    const request = byRequest.get(entry.request_id)!
    t.ok(request, `${entry.request_id} was sent`)
    t.equal(entry.action, request.method === 'POST' ? 'granted' : 'unauthorized', entry.request_id)
    t.equal(ordersPath(entry.client_id, entry.resource_id), request.path, entry.request_id)
    t.same(entry.permission_ids, [...new Set(request.ids)].filter((id) => entry.permission_ids.includes(id)), `${entry.request_id}: a subset of its ids, in request order, each once`)
  }

  // Each authorization's history is its part of the feed, newest first, entry for entry.
  for (const { resource, client } of targets) {
    const history = await harness.request(`/resources/${resource}/authorized_clients/${client}/permission_changes?limit=500`, { token: readToken() })
    const ofTarget = feed.filter((entry) => entry.resource_id === resource && entry.client_id === client)
      .map(({ resource_id: r, client_id: c, ...rest }) => rest).reverse()
    t.same(history.status === 404 ? [] : history.body, ofTarget, `${key(resource, client)}: the history is the feed's part`)
  }

  // Replayed from the grants before, in feed order, each change changes each of its ids: the grants now.
  const replayed = new Map([...initial].map(([k, held]) => [k, new Set(held)]))
  for (const entry of feed) {
    const held = replayed.get(key(entry.resource_id, entry.client_id))!
    for (const id of entry.permission_ids) {
      t.equal(held.has(id), entry.action === 'unauthorized', `${entry.request_id} ${entry.action} ${id}: it was ${entry.action === 'granted' ? 'not ' : ''}held`)
      if (entry.action === 'granted') held.add(id)
      else held.delete(id)
    }
  }
  const now = await grantsNow()
  for (const [k, held] of replayed) t.same([...held].sort(), [...now.get(k)!].sort(), `${k}: the replay ends at the grants`)
})

t.test('a page of one resource that is not full links on from just below the horizon when its cursor is below that, from its cursor when past it; never from a cursor as written with leading zeros when it is the same place', async (t) => {
  await recordedBySql([{ requestId: 'x' }])
  await settled(1)
  // A transaction holding an id keeps the horizon (the server's xmin) where it is while it is open:
  // the pages below end at the same place (an older transaction elsewhere ending could move it on).
  const pin = await harness.db.connect()
  try {
    await pin.query('BEGIN')
    await pin.query('SELECT pg_current_xact_id()')
    const below = BigInt(nextOf(await poll('?resource_id=quiet-api')).searchParams.get('after')!)
    t.ok(below > 0n, 'the horizon past the change recorded')
    // An empty page of limit 1 too: not full (no change), however small the limit.
    for (const after of ['0', `0${below}`, '0&limit=1']) {
      const res = await poll(`?resource_id=quiet-api&after=${after}`)
      t.equal(res.status, 200)
      const next = nextOf(res).searchParams.get('after')!
      t.match(next, /^[1-9][0-9]*$/, `after=${after}: the link names where the feed stands, as it names it`)
      t.ok(BigInt(next) >= below, `after=${after}: from just below the horizon (${next})`)
    }
    const past = await poll('?resource_id=quiet-api&after=999999999999999999')
    t.equal(nextOf(past).searchParams.get('after'), '999999999999999999', 'a cursor past the horizon stays')
  } finally {
    await pin.query('COMMIT')
    pin.release()
  }
})
