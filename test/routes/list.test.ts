import { get, request } from 'node:http'
import { connect } from 'node:net'
import t from 'tap'
import { listGrantedPermissions, listGrantedPermissionsSql } from '../../db/queries/list.js'
import { compareListed, ordersFixture, ordersPath, pathIdBounds, shelfFixture, type SortKey } from '../support/fixtures.js'
import { build } from '../support/harness.js'
import { readToken, token } from '../support/tokens.js'

const harness = await build(t)
await harness.seed(ordersFixture())
const fixture = ordersFixture()
const granted = fixture.permissions!.slice(0, 10)

type Item = { id: string, name: string, description?: string }
const list = (query = '', path = ordersPath()) => harness.request(path + query, { token: readToken() })
const byteOrder = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0)

function links (header: string | null): Record<string, URL> {
  const result: Record<string, URL> = {}
  for (const part of (header ?? '').split(', ')) {
    const match = /^<([^>]+)>; rel="(\w+)"$/.exec(part)
    if (match) result[match[2]] = new URL(match[1])
  }
  return result
}

t.test('GET with no query → 200, every grant by name ascending, X-Total-Count and first/last links', async (t) => {
  const res = await list()
  t.equal(res.status, 200)
  t.match(res.headers.get('content-type'), /^application\/json/)
  const names = (res.body as Item[]).map(({ name }) => name)
  t.same(names, granted.map(({ name }) => name).sort(byteOrder))
  t.equal(res.headers.get('x-total-count'), '10')
  const rels = links(res.headers.get('link'))
  t.same(Object.keys(rels).sort(), ['first', 'last'])
  t.equal(rels.first.search, '?limit=50&offset=0&sort_by=name.asc')
  t.equal(rels.last.search, '?limit=50&offset=0&sort_by=name.asc')
  t.equal(rels.first.pathname, ordersPath())
})

t.test('items carry only id, name and description; description is omitted when there is none', async (t) => {
  const res = await list('?sort_by=id')
  const items = res.body as Item[]
  const deleteOrders = items.find(({ id }) => id === 'p_delete_orders')
  t.same(deleteOrders, { id: 'p_delete_orders', name: 'delete:orders' })
  t.same(items.find(({ id }) => id === 'p_read_orders'), { id: 'p_read_orders', name: 'read:orders', description: 'read orders' })
  for (const item of items) t.same(Object.keys(item).filter((key) => !['id', 'name', 'description'].includes(key)), [])
})

t.test('limit and offset: offset is a page number, limit * offset records are skipped', async (t) => {
  const all = (await list('?limit=500')).body as Item[]
  const res = await list('?limit=3&offset=1')
  t.equal(res.status, 200)
  t.same(res.body, all.slice(3, 6))
  t.equal(res.headers.get('x-total-count'), '10')
  const rels = links(res.headers.get('link'))
  t.same(Object.keys(rels), ['first', 'prev', 'next', 'last'])
  t.equal(rels.prev.searchParams.get('offset'), '0')
  t.equal(rels.next.searchParams.get('offset'), '2')
  t.equal(rels.last.searchParams.get('offset'), '3')
  const lastPage = await list('?limit=3&offset=3')
  t.same(lastPage.body, all.slice(9))
  t.notOk(links(lastPage.headers.get('link')).next, 'no next link on the last page')
})

t.test('following the next links visits every grant exactly once, keeping limit and sort_by', async (t) => {
  const seen: string[] = []
  let url: string | undefined = `${ordersPath()}?limit=3&sort_by=description.desc`
  let pages = 0
  while (url && pages < 10) {
    const res = await harness.request(url, { token: readToken() })
    t.equal(res.status, 200)
    seen.push(...(res.body as Item[]).map(({ id }) => id))
    const next: URL | undefined = links(res.headers.get('link')).next
    if (next) {
      t.equal(next.searchParams.get('limit'), '3')
      t.equal(next.searchParams.get('sort_by'), 'description.desc')
    }
    url = next ? next.pathname + next.search : undefined
    pages++
  }
  t.equal(pages, 4)
  t.same([...seen].sort(), granted.map(({ id }) => id).sort(), 'no item twice, none skipped')
})

t.test('a sort_by of several keys is kept in each link with its commas percent-encoded: a reader splitting on commas gets each link whole', async (t) => {
  const res = await list('?limit=3&offset=1&sort_by=description.desc,name')
  const header = res.headers.get('link')!
  // The Host's check (links.ts) keeps commas out of <...> for such readers; sort_by must too.
  const pieces = header.split(',')
  t.equal(pieces.length, 4, 'first, prev, next and last: as many pieces as a naive splitter finds')
  for (const piece of pieces) t.match(piece.trim(), /^<[^<>]+>; rel="(first|prev|next|last)"$/, piece)
  const rels = links(header)
  t.same(Object.keys(rels), ['first', 'prev', 'next', 'last'])
  for (const url of Object.values(rels)) t.equal(url.searchParams.get('sort_by'), 'description.desc,name', 'the same order, once decoded')
  const next = await harness.request(rels.next.pathname + rels.next.search, { token: readToken() })
  t.same(next.body, (await list('?limit=3&offset=2&sort_by=description.desc,name')).body, 'the next link leads to the next page of that order')
})

t.test('sort_by orders by each key in turn and always finishes with id', async (t) => {
  const expected = [...granted].sort((a, b) => {
    // description.desc puts missing descriptions first (PostgreSQL: NULLS FIRST when descending).
    if ((a.description ?? null) !== (b.description ?? null)) {
      if (a.description === undefined) return -1
      if (b.description === undefined) return 1
      return byteOrder(b.description, a.description!)
    }
    return byteOrder(a.name, b.name) || byteOrder(a.id, b.id)
  })
  const res = await list('?sort_by=description.desc,name')
  t.same((res.body as Item[]).map(({ id }) => id), expected.map(({ id }) => id))

  const byIdDesc = await list('?sort_by=id.desc')
  t.same((byIdDesc.body as Item[]).map(({ id }) => id), granted.map(({ id }) => id).sort(byteOrder).reverse())

  const ascending = await list('?sort_by=description')
  const descriptions = (ascending.body as Item[]).map(({ description }) => description)
  const missing = granted.filter(({ description }) => description === undefined).length
  t.equal(missing, 2)
  t.same(descriptions.slice(-missing), [undefined, undefined], 'missing descriptions sort last ascending')
  t.notOk(descriptions.slice(0, -missing).includes(undefined))
})

t.test('a repeated sort property keeps its first direction', async (t) => {
  const res = await list('?sort_by=name.desc,name.asc')
  t.same((res.body as Item[]).map(({ name }) => name), granted.map(({ name }) => name).sort(byteOrder).reverse())
})

t.test('the largest offset (limit 500, offset 99999999999999 skips 5·10^16 rows) → 200 []', async (t) => {
  const res = await list('?limit=500&offset=99999999999999')
  t.equal(res.status, 200)
  t.same(res.body, [])
  t.equal(res.headers.get('x-total-count'), '10')
  const rels = links(res.headers.get('link'))
  t.equal(rels.prev.searchParams.get('offset'), '0', 'prev points at the last page that exists')
  t.notOk(rels.next)
  const pastEnd = await list('?limit=3&offset=7')
  t.same(pastEnd.body, [])
  t.equal(links(pastEnd.headers.get('link')).prev.searchParams.get('offset'), '3')
})

t.test('limit and offset out of bounds or not integers → 400 invalid-request naming the parameter', async (t) => {
  const cases: Array<[string, string]> = [
    ['limit=0', '/limit'], ['limit=501', '/limit'], ['limit=-1', '/limit'], ['limit=1.5', '/limit'],
    ['limit=abc', '/limit'], ['limit=', '/limit'], ['limit=0x10', '/limit'], ['limit=1e2', '/limit'],
    ['limit=%205', '/limit'], ['limit=1&limit=2', '/limit'],
    ['offset=-1', '/offset'], ['offset=100000000000000', '/offset'], ['offset=99999999999999999999', '/offset'],
    ['offset=1.0', '/offset']
  ]
  for (const [query, pointer] of cases) {
    const res = await list(`?${query}`)
    t.equal(res.status, 400, query)
    const body = res.body as { type: string, errors: Array<{ location: string, pointer: string }> }
    t.equal(body.type, '/problems/invalid-request', query)
    t.has(body.errors[0], { location: 'query', pointer }, query)
  }
})

t.test('a limit that is not plain decimal digits is refused in the words of any other non-integer', async (t) => {
  for (const query of ['limit=abc', 'limit=0x10', 'limit=1e2', 'limit=%205']) {
    const res = await list(`?${query}`)
    t.same((res.body as { errors: unknown[] }).errors, [{ location: 'query', pointer: '/limit', message: 'must be integer' }], query)
  }
})

t.test('sort_by outside the allow-list, injections included → 400, nothing runs', async (t) => {
  const attempts = [
    'password', 'NAME', 'name.up', 'name.asc.desc', 'name,', ',name', '', ' name', 'name ,id',
    'name;DROP TABLE grants', 'name.asc NULLS FIRST', '(SELECT 1)', 'p.name', 'name--', 'id,name.ascending',
    'name%00', 'name.asc,' + 'id,'.repeat(40) + 'id'
  ]
  for (const sortBy of attempts) {
    const res = await list(`?sort_by=${encodeURIComponent(sortBy)}`)
    t.equal(res.status, 400, JSON.stringify(sortBy))
    const { errors } = res.body as { errors: Array<{ pointer: string, message: string }> }
    t.equal(errors[0].pointer, '/sort_by')
    if (sortBy !== '' && !sortBy.startsWith('name.asc,id')) {
      t.equal(errors[0].message, 'must be comma-separated sort keys, each id, name or description, optionally followed by .asc or .desc (for example name.desc,id)', 'in words, not a regular expression')
    }
  }
  const repeated = await list('?sort_by=name&sort_by=id')
  t.equal(repeated.status, 400, 'sort_by given twice')
  const { rows } = await harness.db.query('SELECT count(*)::int AS n FROM grants')
  t.equal(rows[0].n, 11, 'the grants are all still there')
})

t.test('404 problems say which part is missing', async (t) => {
  const cases: Array<[string, string, string]> = [
    ['app-a', 'missing-api', '/problems/resource-not-found'],
    ['missing-app', 'orders-api', '/problems/client-not-found'],
    ['missing-app', 'missing-api', '/problems/resource-not-found'],
    ['app-c', 'orders-api', '/problems/client-not-authorized']
  ]
  for (const [client, resource, type] of cases) {
    const res = await list('', ordersPath(client, resource))
    t.equal(res.status, 404, `${resource}/${client}`)
    t.equal((res.body as { type: string }).type, type)
  }
})

t.test('authorized with no grants → 200 [] with a total of 0', async (t) => {
  const res = await list('', ordersPath('app-b'))
  t.equal(res.status, 200)
  t.same(res.body, [])
  t.equal(res.headers.get('x-total-count'), '0')
  const rels = links(res.headers.get('link'))
  t.equal(rels.last.searchParams.get('offset'), '0')
})

t.test('grants on other resources and of other clients are not listed', async (t) => {
  const res = await list('?limit=500')
  t.notOk((res.body as Item[]).some(({ id }) => id === 'p_other'))
  const other = await list('', ordersPath('app-a', 'other-api'))
  t.same((other.body as Item[]).map(({ id }) => id), ['p_other'])
})

t.test('ids: 255 characters reach the database, longer ones → 400, never a router 404', async (t) => {
  const atLimit = await list('', ordersPath('app-a', 'r'.repeat(255)))
  t.equal(atLimit.status, 404)
  t.equal((atLimit.body as { type: string }).type, '/problems/resource-not-found')
  // Up to what a request line can hold (the 128 KiB of headers), 16 KiB and 64 KiB past the router's
  // default bound among them, and percent-encoded characters of four bytes (12 characters each).
  for (const id of ['a'.repeat(256), 'a'.repeat(1000), 'a'.repeat(16 * 1024 + 1), 'a'.repeat(64 * 1024), '😀'.repeat(1366)]) {
    const res = await list('', ordersPath(id))
    t.equal(res.status, 400, `${id.length} characters`)
    t.equal((res.body as { errors: Array<{ location: string, pointer: string }> }).errors[0].pointer, '/client_id')
  }
})

t.test('ids . and .. (sent as they are: URL resolution would drop them) → 400; ... is an id like any other', async (t) => {
  // node:http sends the path as it is; the harness, like fetch, would resolve the dot segments.
  const { port } = new URL(harness.baseUrl)
  const raw = (path: string) => new Promise<{ status: number, body: unknown }>((resolve, reject) => {
    get({ host: '127.0.0.1', port, path, headers: { authorization: `Bearer ${readToken()}` } }, (res) => {
      let text = ''
      res.setEncoding('utf8').on('data', (chunk: string) => { text += chunk }).on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(text) }))
    }).on('error', reject)
  })
  for (const [path, pointer] of [
    ['/resources/%2E%2E/authorized_clients/app-a/permissions', '/resource_id'],
    ['/resources/orders-api/authorized_clients/./permissions', '/client_id']
  ]) {
    const res = await raw(path)
    t.equal(res.status, 400, path)
    t.match(res.body, { errors: [{ location: 'path', pointer }] })
  }
  t.equal((await list('', ordersPath('...'))).status, 404, '... is a client not found')
})

t.test('ids PostgreSQL cannot store (NUL) → 400 before any query', async (t) => {
  const res = await list('', '/resources/orders%00api/authorized_clients/app-a/permissions')
  t.equal(res.status, 400)
  t.match(res.body, { errors: [{ location: 'path', pointer: '/resource_id' }] })
})

t.test('ids with slashes, spaces and unicode are matched exactly', async (t) => {
  await harness.seed({
    resources: [{ id: 'team/api v2' }],
    clients: [{ id: 'клиент-😀' }],
    permissions: [{ id: 'p/ü', resource_id: 'team/api v2', name: 'read:ü' }],
    authorizations: [{ resource_id: 'team/api v2', client_id: 'клиент-😀', permission_ids: ['p/ü'] }]
  })
  const res = await list('', ordersPath('клиент-😀', 'team/api v2'))
  t.equal(res.status, 200)
  t.same(res.body, [{ id: 'p/ü', name: 'read:ü' }])
  const link = links(res.headers.get('link')).first
  const followed = await harness.request(link.pathname + link.search, { token: readToken() })
  t.same(followed.body, res.body, 'the first link leads to the same page')
})

/** A GET through node:http, where the Host header and the request target are the test's to choose. */
function rawGet (path: string, headers: Record<string, string>, baseUrl = harness.baseUrl): Promise<{ status: number, link: string }> {
  return new Promise((resolve, reject) => {
    const req = request(baseUrl, { path, headers: { authorization: `Bearer ${readToken()}`, ...headers } }, (res) => {
      res.resume()
      res.on('end', () => resolve({ status: res.statusCode!, link: String(res.headers.link) }))
    })
    req.on('error', reject)
    req.end()
  })
}

t.test('Link URLs use the Host header when it is a plain host, and are path-only otherwise', async (t) => {
  const compose = await rawGet(ordersPath(), { host: 'client_permissions:3000' })
  t.match(compose.link, /^<http:\/\/client_permissions:3000\/resources\/orders-api\//)
  const ipv6 = await rawGet(ordersPath(), { host: '[::1]:3000' })
  t.match(ipv6.link, /^<http:\/\/\[::1\]:3000\/resources\/orders-api\//)
  for (const host of ['evil>.example', '[zz]', '[]']) {
    const hostile = await rawGet(ordersPath(), { host })
    t.equal(hostile.status, 200, host)
    t.match(hostile.link, /^<\/resources\/orders-api\/authorized_clients\/app-a\/permissions\?/, host)
  }
})

t.test('a Host that is no URL\'s host (a bare %, brackets around no IPv6 address, a port past 65535) gets path-only links', async (t) => {
  for (const host of ['a%zz', '%', 'a%3Cb', '[::::]', '[1.2.3.4]', '[.]', 'a:99999', '[::1]:65536', '1.2.3.256']) {
    const res = await rawGet(ordersPath() + '?limit=2', { host })
    t.equal(res.status, 200, host)
    t.match(res.link, /^<\/resources\/orders-api\/authorized_clients\/app-a\/permissions\?/, host)
  }
  for (const host of ['api.example:65535', '[2001:db8::1]:8443', '[::ffff:127.0.0.1]', 'API.Example.COM.', 'client_permissions']) {
    const res = await rawGet(ordersPath() + '?limit=2', { host })
    const first = /^<([^>]+)>; rel="first"/.exec(res.link)![1]
    t.ok(URL.canParse(first), `${host}: ${first}`)
    t.ok(first.startsWith(`http://${host}/`), host)
  }
})

t.test('a Host that is no plain name (a comma, a semicolon, other sub-delims, percent-encoding, userinfo, a zone id, non-ASCII) gets path-only links', async (t) => {
  // RFC 3986 lets a reg-name hold these and a URL parser takes them, but a Link header read by a
  // naive splitter (on "," or ";") would come apart at them, and a percent-encoded name is another
  // name once decoded: none is the plain host[:port] a link may carry.
  const hosts = ['a,b', 'api.example,evil.example', 'a;rel=next', 'a=b', "a'b", 'a(b)', 'a*b', 'a!b', 'a$b', 'a&b', 'a+b', 'a~b',
    'a%41.example', '%65vil.example', 'a@evil.example', 'a\\evil', '[fe80::1%25eth0]', 'b\u00fccher.example', 'a:', 'a:80:80', '.', 'a..b']
  for (const host of hosts) {
    const res = await rawGet(ordersPath() + '?limit=2', { host })
    t.equal(res.status, 200, host)
    t.match(res.link, /^<\/resources\/orders-api\/authorized_clients\/app-a\/permissions\?/, host)
    t.equal(res.link.split(',').length, 3, `${host}: first, next and last, as many pieces as a naive splitter finds`)
  }
})

t.test('a Host longer than any DNS name (255) gets path-only links: a client cannot make each Link URL kilobytes long', async (t) => {
  const longest = `${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(61)}:65535`
  t.match((await rawGet(ordersPath() + '?limit=2', { host: longest })).link, `<http://${longest}/`, 'a 253-character name and a port: kept')
  for (const host of ['a.'.repeat(2000) + 'example', 'x'.repeat(256)]) {
    const res = await rawGet(ordersPath() + '?limit=2', { host })
    t.match(res.link, /^<\/resources\/orders-api\/authorized_clients\/app-a\/permissions\?/, `${host.length} characters`)
  }
})

t.test('behind a trusted proxy, Link URLs take X-Forwarded-Proto only when it is http or https', async (t) => {
  const proxied = await build(t, { TRUST_PROXY: 'true' })
  await proxied.seed(ordersFixture())
  const via = (headers: Record<string, string>) => rawGet(ordersPath() + '?limit=2', { 'x-forwarded-host': 'api.example.com', ...headers }, proxied.baseUrl)
  t.match((await via({ 'x-forwarded-proto': 'https' })).link, /^<https:\/\/api\.example\.com\/resources\/orders-api\//)
  t.match((await via({ 'x-forwarded-proto': 'HTTPS' })).link, /^<https:\/\/api\.example\.com\//, 'case-insensitive, written lower case')
  t.match((await via({ 'x-forwarded-proto': 'http, https' })).link, /^<https:\/\/api\.example\.com\//, 'the last (nearest) proxy\'s entry')
  // A gateway that appends passes on whatever the client put first; one that sets nothing passes it all.
  const forged = ['https://evil.example/x>; rel="next"; a="', 'javascript', 'https, javascript', 'ftp', 'http:', 'xhttp', 'httpsx']
  for (const proto of forged) {
    const res = await via({ 'x-forwarded-proto': proto })
    t.equal(res.status, 200, proto)
    t.match(res.link, /^<\/resources\/orders-api\/authorized_clients\/app-a\/permissions\?/, `path-only links for ${proto}`)
    t.notMatch(res.link, /evil|javascript|ftp/, proto)
    t.equal(res.link.split(', ').length, 3, `first, next and last, none injected by ${proto}`)
    t.same(Object.keys(links(res.link.replace(/<\//g, '<http://x/'))), ['first', 'next', 'last'], proto)
  }
  const untrusted = await rawGet(ordersPath(), { 'x-forwarded-proto': 'https', 'x-forwarded-host': 'api.example.com', host: 'localhost:3000' })
  t.match(untrusted.link, /^<http:\/\/localhost:3000\//, 'without TRUST_PROXY the forwarded headers are ignored')
})

t.test('behind a trusted proxy, X-Forwarded-Host is taken only as a plain host[:port], and only from a trusted peer', async (t) => {
  const proxied = await build(t, { TRUST_PROXY: 'true' })
  await proxied.seed(ordersFixture())
  const via = (host: string, baseUrl = proxied.baseUrl) => rawGet(ordersPath() + '?limit=2', { 'x-forwarded-proto': 'https', 'x-forwarded-host': host }, baseUrl)
  t.match((await via('evil.example, api.example.com')).link, /^<https:\/\/api\.example\.com\//, 'the last (nearest) proxy\'s entry')
  for (const host of ['a@evil.example', 'evil.example/x', 'evil.example\\x', 'evil.example#', 'evil.example?', '[fe80::1%25eth0]',
    'api.example.com:99999', 'a%41.example', 'api.example.com, a;rel=next', 'b\u00fccher.example', 'x'.repeat(300) + '>']) {
    const res = await via(host)
    t.equal(res.status, 200, host)
    t.match(res.link, /^<\/resources\/orders-api\/authorized_clients\/app-a\/permissions\?/, `${host.slice(0, 40)}: path-only`)
  }
  // Trusted addresses that are not this peer's: the forwarded headers are the client's own.
  const elsewhere = await build(t, { TRUST_PROXY: '10.0.0.1,192.0.2.0/24' })
  await elsewhere.seed(ordersFixture())
  const untrusted = await rawGet(ordersPath(), { 'x-forwarded-proto': 'https', 'x-forwarded-host': 'evil.example', 'x-forwarded-for': '10.0.0.1', host: 'api.example.com' }, elsewhere.baseUrl)
  t.match(untrusted.link, /^<http:\/\/api\.example\.com\//, 'a peer outside TRUST_PROXY: its Host and scheme, never its X-Forwarded-*')
})

t.test('an absolute-form request target names the host: the Host header is ignored (RFC 9112 §3.2.2), and a hostile authority gives path-only links', async (t) => {
  // A cache or proxy in front that keys on the target's authority would otherwise keep, under
  // http://api.example.com/..., links to the host a client put in Host.
  const absoluteForm = await rawGet(`http://api.example.com:8080${ordersPath()}`, { host: 'evil.example' })
  t.equal(absoluteForm.status, 200)
  t.match(absoluteForm.link, /^<http:\/\/api\.example\.com:8080\/resources\/orders-api\//)
  t.notMatch(absoluteForm.link, /evil/)
  for (const authority of ['a@evil.example', 'evil.example,api.example.com', 'evil.example;x']) {
    const res = await rawGet(`http://${authority}${ordersPath()}`, { host: 'evil.example' })
    t.equal(res.status, 200, authority)
    t.match(res.link, /^<\/resources\/orders-api\/authorized_clients\/app-a\/permissions\?/, `${authority}: path-only, not the Host header`)
  }
  // A target no URL parser reads is refused by the router (400), with no links.
  for (const authority of ['api.example.com:99999', '[zz]', '']) {
    const res = await rawGet(`http://${authority}${ordersPath()}`, { host: 'evil.example' })
    t.equal(res.status, 400, authority)
    t.equal(res.link, 'undefined', authority)
  }
  const upper = await rawGet(`HTTP://API.example.com${ordersPath()}`, { host: 'evil.example' })
  t.match(upper.link, /^<http:\/\/API\.example\.com\/resources\//, 'the scheme in any case; the host as sent')
})

/**
 * The Link header of a request written as it is (HTTP/1.0 without Host, say), read off the socket.
 * The socket is not half-closed after the request: Node takes a client's FIN as an abort of the
 * requests still in flight. HTTP/1.0 closes the connection after the answer.
 */
async function linkOfRaw (head: string): Promise<string | undefined> {
  const answer = await new Promise<string>((resolve, reject) => {
    const socket = connect(Number(new URL(harness.baseUrl).port), '127.0.0.1', () => socket.write(head))
    let data = ''
    socket.on('data', (chunk) => { data += chunk })
    socket.on('end', () => resolve(data))
    socket.on('error', reject)
  })
  return /^link: (.*)$/im.exec(answer)?.[1].trim()
}

t.test('an absolute-form target names the host of HTTP/1.0 without Host too', async (t) => {
  const link = await linkOfRaw(`GET http://api.example.com${ordersPath()} HTTP/1.0\r\nAuthorization: Bearer ${readToken()}\r\n\r\n`)
  t.match(link, /^<http:\/\/api\.example\.com\/resources\/orders-api\//)
  const originForm = await linkOfRaw(`GET ${ordersPath()} HTTP/1.0\r\nAuthorization: Bearer ${readToken()}\r\n\r\n`)
  t.match(originForm, /^<\/resources\/orders-api\//, 'an origin-form target without Host: path-only links')
})

t.test('behind a trusted proxy, its X-Forwarded-Host wins over an absolute-form target (the proxy\'s own hop)', async (t) => {
  const proxied = await build(t, { TRUST_PROXY: 'true' })
  await proxied.seed(ordersFixture())
  const res = await rawGet(`http://internal.example:8080${ordersPath()}`, { host: 'internal.example:8080', 'x-forwarded-host': 'api.example.com' }, proxied.baseUrl)
  t.match(res.link, /^<http:\/\/api\.example\.com\/resources\/orders-api\//)
})

t.test('a name of 255 characters with a port is linked: the bound is on the name, not the port', async (t) => {
  const name = [63, 63, 63, 63].map((length, index) => 'abcd'[index].repeat(length)).join('.')
  t.equal(name.length, 255)
  for (const host of [name, `${name}:8080`]) {
    t.match((await rawGet(ordersPath() + '?limit=2', { host })).link, `<http://${host}/`, `${host.length} characters`)
  }
  t.match((await rawGet(ordersPath() + '?limit=2', { host: `x${name}:8080` })).link, /^<\/resources\//, 'a 256-character name with a port: path-only')
})

t.test('Link URLs are rebuilt from the ids: nothing of the raw request line is copied', async (t) => {
  const id = 'a>;rel="x",<b'
  await harness.seed({ resources: [{ id }], authorizations: [{ resource_id: id, client_id: 'app-a', permission_ids: [] }] })
  const res = await list('', ordersPath('app-a', id))
  t.equal(res.status, 200)
  const rels = links(res.headers.get('link'))
  t.same(Object.keys(rels), ['first', 'last'], 'exactly the two links, none injected')
  t.equal(decodeURIComponent(rels.first.pathname.split('/')[2]), id)
})

t.test('HEAD needs the same token as GET', async (t) => {
  const anonymous = await harness.request(ordersPath(), { method: 'HEAD' })
  t.equal(anonymous.status, 401)
  const res = await harness.request(ordersPath(), { method: 'HEAD', token: readToken() })
  t.equal(res.status, 200)
  t.equal(res.headers.get('x-total-count'), '10')
})

t.test('list statements are prepared and planned once per connection, never re-planned per request', async (t) => {
  for (let i = 0; i < 8; i++) t.equal((await list('?limit=2&offset=1')).status, 200)
  // Requests one after another reuse one pooled connection; its statements are visible from it.
  const client = await harness.app.db.connect()
  try {
    const { rows } = await client.query<{ name: string, generic_plans: string, custom_plans: string }>(
      "SELECT name, generic_plans, custom_plans FROM pg_prepared_statements WHERE name LIKE 'list %'")
    t.ok(rows.length > 0, 'the list statement is a named prepared statement')
    for (const row of rows) {
      t.equal(row.custom_plans, '0', `${row.name}: no plan made for one request's values`)
      t.ok(Number(row.generic_plans) > 0, `${row.name}: runs on its generic plan`)
    }
  } finally {
    client.release()
  }
})

t.test('with and without the WAL position (replicas or not), the list is two statements: both prepared on one connection', async (t) => {
  const client = await harness.app.db.connect()
  try {
    const input = { resourceId: 'orders-api', clientId: 'app-a', limit: 2, page: 0, sort: [{ property: 'name' as const, direction: 'asc' as const }] }
    const plain = await listGrantedPermissions(client, input, { prepared: true })
    const positioned = await listGrantedPermissions(client, input, { prepared: true, position: true })
    t.equal(plain.position, undefined, 'no position asked, none read')
    t.match(positioned.position, /^[0-9A-F]+\/[0-9A-F]+$/, 'the position of the state it read')
    t.equal(positioned.permissionsJson, plain.permissionsJson)
  } finally {
    client.release()
  }
  t.notMatch(listGrantedPermissionsSql([{ property: 'id', direction: 'asc' }]), /position/, 'the statement reads no position unless asked')
})

t.test('every description order, ties and missing descriptions included, pages front, middle, back and past the end', async (t) => {
  const shelf = shelfFixture()
  await harness.seed(shelf)
  const held = new Set(shelf.authorizations![0].permission_ids)
  const permissions = shelf.permissions!.filter(({ id }) => held.has(id))
    .map(({ id, name, description }) => (description === undefined ? { id, name } : { id, name, description }))
  const orders: SortKey[][] = []
  for (const first of ['asc', 'desc'] as const) {
    orders.push([['description', first]])
    for (const property of ['id', 'name'] as const) {
      for (const second of ['asc', 'desc'] as const) orders.push([['description', first], [property, second]])
    }
  }
  // Keys after a unique one change nothing.
  orders.push([['description', 'desc'], ['name', 'asc'], ['id', 'desc']], [['name', 'desc'], ['description', 'asc']])
  for (const keys of orders) {
    const sortBy = keys.map(([property, direction]) => `${property}.${direction}`).join(',')
    const expected = [...permissions].sort((a, b) => compareListed(a, b, keys))
    for (const limit of [5, 8]) {
      // 37 grants: pages in the front half are read forwards, the others backwards from the end.
      for (let page = 0; page <= Math.ceil(permissions.length / limit); page++) {
        const res = await list(`?limit=${limit}&offset=${page}&sort_by=${sortBy}`, ordersPath('shelf-app', 'shelf-api'))
        t.equal(res.status, 200)
        t.strictSame(res.body, expected.slice(limit * page, limit * (page + 1)), `${sortBy}, limit ${limit}, page ${page}`)
      }
    }
  }
})

t.test('the page is JSON written by PostgreSQL: any text comes back as it was stored, byte for byte as JSON.stringify writes it', async (t) => {
  const hostile = ['quote " and backslash \\ and slash /', 'line\nbreak\ttab\u0001control\u001f', 'separator \u2028 and \u2029 and \u007f', 'emoji 🔑 and ü', '<script>&amp;</script>']
  const permissions = hostile.map((text, i) => ({ id: `${text} #${i}`, resource_id: 'text-api', name: `t${i}:text`, description: text }))
  await harness.seed({
    resources: [{ id: 'text-api' }],
    clients: [{ id: 'text-app' }],
    // One without a description: the key is left out, not null.
    permissions: [...permissions, { id: 'bare', resource_id: 'text-api', name: 'u:bare' }],
    authorizations: [{ resource_id: 'text-api', client_id: 'text-app', permission_ids: [...permissions.map(({ id }) => id), 'bare'] }]
  })
  const res = await list('', ordersPath('text-app', 'text-api'))
  t.equal(res.status, 200)
  const expected = [...permissions.map(({ id, name, description }) => ({ id, name, description })), { id: 'bare', name: 'u:bare' }]
  t.equal(res.text, JSON.stringify(expected))
  const empty = await list('?offset=5&limit=10', ordersPath('text-app', 'text-api'))
  t.equal(empty.text, '[]', 'a page past the end is an empty array')
})

t.test('limit at its bounds: 1 → one item, 500 → 500 of 501 grants, no limit → the default 50; 0 and 501 → 400', async (t) => {
  const permissions = Array.from({ length: 501 }, (_, i) => ({ id: `w_${String(i).padStart(3, '0')}`, resource_id: 'wide-api', name: `read:w${i}` }))
  await harness.seed({
    resources: [{ id: 'wide-api' }],
    clients: [{ id: 'wide-app' }],
    permissions,
    authorizations: [{ resource_id: 'wide-api', client_id: 'wide-app', permission_ids: permissions.map(({ id }) => id) }]
  })
  const wide = (query: string) => list(query, ordersPath('wide-app', 'wide-api'))
  const ids = permissions.map(({ id }) => id)
  const one = await wide('?limit=1&sort_by=id')
  t.equal(one.status, 200)
  t.same((one.body as Item[]).map(({ id }) => id), ids.slice(0, 1))
  const secondOfOne = await wide('?limit=1&offset=1&sort_by=id')
  t.same((secondOfOne.body as Item[]).map(({ id }) => id), ids.slice(1, 2), 'offset 1 with limit 1 skips 1 record')
  const most = await wide('?limit=500&sort_by=id')
  t.equal(most.status, 200)
  t.same((most.body as Item[]).map(({ id }) => id), ids.slice(0, 500), 'at most limit items, the 501st left for the next page')
  t.equal(most.headers.get('x-total-count'), '501')
  const rest = await wide('?limit=500&offset=1&sort_by=id')
  t.same((rest.body as Item[]).map(({ id }) => id), ids.slice(500), 'offset 1 with limit 500 skips 500 records')
  const defaults = await wide('?sort_by=id')
  t.same((defaults.body as Item[]).map(({ id }) => id), ids.slice(0, 50), 'the default limit is 50, the default offset 0')
  const firstPage = await wide('?sort_by=id&offset=0')
  t.same(firstPage.body, defaults.body, 'offset 0, its minimum, is the first page')
  const secondOfDefault = await wide('?sort_by=id&offset=1')
  t.same((secondOfDefault.body as Item[]).map(({ id }) => id), ids.slice(50, 100), 'offset without limit skips 50 (the default limit) * offset records')
  for (const limit of ['0', '501']) {
    const res = await wide(`?limit=${limit}`)
    t.equal(res.status, 400, `limit=${limit}`)
    t.match(res.body, { type: '/problems/invalid-request', errors: [{ location: 'query', pointer: '/limit' }] }, `limit=${limit}`)
  }
})

t.test('offset at its bounds: 99999999999999 → 200 [], one more → 400; 0 → 200, -1 → 400', async (t) => {
  for (const [query, status] of [['offset=99999999999999', 200], ['offset=99999999999998&limit=1', 200], ['offset=100000000000000', 400], ['offset=0', 200], ['offset=-1', 400]] as const) {
    const res = await list(`?${query}`)
    t.equal(res.status, status, query)
    if (status === 400) t.match(res.body, { type: '/problems/invalid-request', errors: [{ location: 'query', pointer: '/offset' }] }, query)
  }
})

t.test('sort_by up to 100 characters → 200; 101 characters of the same grammar → 400 naming sort_by', async (t) => {
  const atBound = 'name' + ',id'.repeat(32)
  const overBound = 'name.asc' + ',id'.repeat(31)
  t.equal(atBound.length, 100)
  t.equal(overBound.length, 101)
  const ok = await list(`?sort_by=${atBound}`)
  t.equal(ok.status, 200)
  t.same((ok.body as Item[]).map(({ name }) => name), granted.map(({ name }) => name).sort(byteOrder))
  const over = await list(`?sort_by=${overBound}`)
  t.equal(over.status, 400)
  t.match(over.body, { type: '/problems/invalid-request', errors: [{ location: 'query', pointer: '/sort_by' }] })
})

t.test('path ids at their bounds: 255 characters → 404 (looked up), 256 or none → 400 naming the parameter', async (t) => {
  for (const [resource, client, status, expected] of pathIdBounds) {
    const label = `${resource.length} and ${client.length} characters`
    const res = await list('', ordersPath(client, resource))
    t.equal(res.status, status, label)
    if (status === 404) t.equal((res.body as { type: string }).type, expected, label)
    else t.match(res.body, { type: '/problems/invalid-request', errors: [{ location: 'path', pointer: expected }] }, label)
  }
})

t.test('GET needs read:resource itself: a token with only delete:resource or create:resource → 403 naming it', async (t) => {
  for (const scope of ['delete:resource', 'create:resource', 'delete:resource create:resource']) {
    const res = await harness.request(ordersPath(), { token: token({ scope }) })
    t.equal(res.status, 403, scope)
    t.match(res.body, { type: '/problems/insufficient-scope', required_scope: 'read:resource' }, scope)
  }
})
