// The list's page cache (LIST_PAGE_CACHE_BYTES, src/page-cache.ts) through the service: a page read
// again is served as kept only when the database finds the authorization at the kept page's
// version, whatever changed the grants in between (another instance, SQL), and it is the very page
// the database builds.
import t from 'tap'
import type { ObservedResponse } from '../support/contract.js'
import { ordersFixture, ordersPath } from '../support/fixtures.js'
import { build, type Harness } from '../support/harness.js'
import { readToken, token } from '../support/tokens.js'

// Three instances on one database: one that writes, one that keeps no page, and the one read from,
// built last: prom-client's registry is the process's, and /metrics shows the last app's series.
const other = await build(t)
await other.seed(ordersFixture())
const shared = { url: other.db.options.connectionString!, drop: async () => {} }
const uncached = await build(t, { LIST_PAGE_CACHE_BYTES: '0' }, { database: shared })
const cached = await build(t, {}, { database: shared })

const list = (harness: Harness, query = '', headers: Record<string, string> = {}) =>
  harness.request(ordersPath() + query, { token: readToken(), headers })
const writer = () => token({ scope: 'read:resource delete:resource create:resource' })
const change = (harness: Harness, method: 'DELETE' | 'POST', ids: string[]) =>
  harness.request(ordersPath(), { method, token: writer(), json: ids })

/** The cache's counters as /metrics shows them. */
async function reads (harness: Harness): Promise<{ hit: number, miss: number, bytes: number }> {
  const text = (await harness.request('/metrics')).text
  const value = (series: string) => Number(new RegExp(`^${series} (\\d+)$`, 'm').exec(text)?.[1] ?? NaN)
  return { hit: value('list_page_cache_reads_total{outcome="hit"}'), miss: value('list_page_cache_reads_total{outcome="miss"}'), bytes: value('list_page_cache_bytes') }
}

const shown = (res: ObservedResponse) => ({
  status: res.status,
  body: res.text,
  etag: res.headers.get('etag'),
  total: res.headers.get('x-total-count'),
  link: res.headers.get('link')?.replaceAll(/http:\/\/127\.0\.0\.1:\d+/g, ''),
  type: res.headers.get('content-type')
})

t.test('a page read again is served as kept: the same bytes and headers as the database builds', async (t) => {
  const before = await reads(cached)
  const first = await list(cached, '?limit=3&offset=1&sort_by=description.desc')
  const again = await list(cached, '?limit=3&offset=1&sort_by=description.desc')
  const built = await list(uncached, '?limit=3&offset=1&sort_by=description.desc')
  t.equal(first.status, 200)
  t.same(shown(again), shown(first))
  t.same(shown(built), shown(first), 'as an instance that keeps no page answers it')
  const after = await reads(cached)
  t.same({ hit: after.hit - before.hit, miss: after.miss - before.miss }, { hit: 1, miss: 1 }, 'built once, then served as kept')
  t.ok(after.bytes > first.text.length, `${after.bytes} bytes kept`)
  t.equal(uncached.app.listPages, undefined, 'LIST_PAGE_CACHE_BYTES=0: no cache at all')
})

t.test('each query has its page: limit, page and order', async (t) => {
  const queries = ['?limit=2', '?limit=2&offset=1', '?limit=2&sort_by=id.desc', '?limit=3']
  const first = await Promise.all(queries.map(async (query) => (await list(cached, query)).text))
  t.equal(new Set(first).size, queries.length, 'four different pages')
  for (const [i, query] of queries.entries()) t.equal((await list(cached, query)).text, first[i], query)
})

t.test('sort_by spelled differently for one order shares one kept page', async (t) => {
  // The same order: no direction is ascending, a repeated property keeps its first, and keys after
  // a unique one (id, or name: unique per resource) decide nothing; description alone ends with id.
  for (const spellings of [['name', 'name.asc', 'name.asc,id.desc', 'name,name.desc'], ['description.desc', 'description.desc,id', 'description.desc,id.asc']]) {
    const before = await reads(cached)
    const pages: string[] = []
    for (const sortBy of spellings) pages.push((await list(cached, `?limit=4&offset=1&sort_by=${sortBy}`)).text)
    const after = await reads(cached)
    t.same(pages, spellings.map(() => pages[0]), 'the same page')
    t.same({ hit: after.hit - before.hit, miss: after.miss - before.miss }, { hit: spellings.length - 1, miss: 1 }, `${spellings.join(' ')}: built once`)
  }
  // The two grants without a description tie: their second key decides.
  const before = await reads(cached)
  t.not((await list(cached, '?limit=4&sort_by=description.desc,name.desc')).text, (await list(cached, '?limit=4&sort_by=description.desc')).text,
    'description.desc,name.desc is another order')
  t.equal((await reads(cached)).miss - before.miss, 2, 'with a page of its own')
})

t.test('a change by another instance, or by SQL, is on the next read: never a stale page', async (t) => {
  const read = async () => {
    const res = await list(cached, '?sort_by=id')
    return { etag: res.headers.get('etag'), items: res.body as Array<{ id: string, name: string, description?: string }> }
  }
  const start = await read()
  t.ok(start.items.some(({ id }) => id === 'p_read_orders'))
  t.equal((await read()).etag, start.etag, 'kept')

  t.equal((await change(other, 'DELETE', ['p_read_orders'])).status, 204)
  const removed = await read()
  t.not(removed.etag, start.etag)
  t.notOk(removed.items.some(({ id }) => id === 'p_read_orders'), 'removed by the other instance')

  t.equal((await change(other, 'POST', ['p_read_orders'])).status, 204)
  const granted = await read()
  t.same(granted.items, start.items, 'granted again')

  await cached.db.query("UPDATE permissions SET name = 'read:kept', description = 'kept anew' WHERE id = 'p_read_orders'")
  const renamed = await read()
  t.same(renamed.items.find(({ id }) => id === 'p_read_orders'), { id: 'p_read_orders', name: 'read:kept', description: 'kept anew' },
    'renamed and described anew in SQL (migration 0009 moves the version)')
  t.same((await read()).items, renamed.items)
})

t.test('If-None-Match: the current tag → 304 whether a page is kept or not; a stale one → the page', async (t) => {
  const { headers, text } = await list(cached)
  const etag = headers.get('etag')!
  const before = await reads(cached)
  t.equal((await list(cached, '', { 'if-none-match': etag })).status, 304)
  t.equal((await list(cached, '?limit=7', { 'if-none-match': '*' })).status, 304)
  t.equal((await list(cached, '', { 'if-match': '"1"' })).status, 412)
  t.same(await reads(cached), before, 'a 304 or 412 sends no page: neither hit nor miss (list_page_cache_reads_total counts pages sent)')
  t.equal((await list(uncached, '', { 'if-none-match': `"1", ${etag}` })).status, 304)
  const stale = await list(cached, '', { 'if-none-match': '"1"' })
  t.equal(stale.status, 200)
  t.equal(stale.text, text)
  const head = await cached.request(ordersPath(), { method: 'HEAD', token: readToken() })
  t.same([head.status, head.headers.get('etag'), head.text], [200, etag, ''], 'HEAD')
  t.equal((await reads(cached)).hit - before.hit, 2, 'the page sent again, and the HEAD: hits')
})

t.test('404s are not kept: a client authorized later gets its page', async (t) => {
  const path = ordersPath('app-c')
  t.equal((await cached.request(path, { token: readToken() })).status, 404)
  await cached.db.query("INSERT INTO authorizations (resource_id, client_id) VALUES ('orders-api', 'app-c')")
  await cached.db.query("INSERT INTO grants (resource_id, client_id, permission_id) VALUES ('orders-api', 'app-c', 'p_read_orders')")
  const res = await cached.request(path, { token: readToken() })
  t.equal(res.status, 200)
  t.same((res.body as Array<{ id: string }>).map(({ id }) => id), ['p_read_orders'])
})

t.test('data reset with TRUNCATE ... RESTART IDENTITY issues no version again: no page kept before it, and no tag, answers for the new data', async (t) => {
  const reset = await build(t)
  await reset.seed(ordersFixture())
  const read = (headers: Record<string, string> = {}) => reset.request(`${ordersPath()}?sort_by=id`, { token: readToken(), headers })
  const before = await read()
  t.equal(before.status, 200)
  await reset.db.query('TRUNCATE resources, clients RESTART IDENTITY CASCADE')
  const described = ordersFixture()
  described.permissions = described.permissions!.map((permission) => ({ ...permission, description: 'after the reset' }))
  await reset.seed(described)
  const after = await read()
  t.not(after.headers.get('etag'), before.headers.get('etag'), 'another version: the grants read differently')
  t.ok((after.body as Array<{ description?: string }>).every(({ description }) => description === 'after the reset'), 'the new data, not the page kept')
  t.equal((await read({ 'if-none-match': before.headers.get('etag')! })).status, 200, 'the old tag is no 304')
})
