import { request } from 'node:http'
import { connect } from 'node:net'
import t from 'tap'
import { ordersFixture, ordersPath } from '../support/fixtures.js'
import { build } from '../support/harness.js'
import { deleteToken, readToken } from '../support/tokens.js'

const harness = await build(t)
await harness.seed(ordersFixture())

t.test('an unknown route → 404 about:blank problem, even with a token', async (t) => {
  for (const path of ['/nothing', '/resources', '/resources/orders-api/authorized_clients/app-a', `${ordersPath()}/extra`]) {
    const res = await harness.request(path, { token: readToken() })
    t.equal(res.status, 404, path)
    t.match(res.body, { type: 'about:blank', title: 'Not Found', status: 404 })
  }
})

t.test('an unknown route with a body → 404 whatever the body, before it is read: not the 400, 413 or 415 a body of the API gets', async (t) => {
  const json = { 'content-type': 'application/json' }
  for (const [label, headers, body] of [
    ['JSON that does not parse', json, '{bad'],
    ['over 256 KiB', json, '['.repeat(300 * 1024)],
    ['content-encoded', { ...json, 'content-encoding': 'gzip' }, '[]'],
    ['in another charset', { 'content-type': 'application/json; charset=latin1' }, '[]'],
    ['of another media type', { 'content-type': 'text/plain' }, 'x']
  ] as const) {
    for (const [method, path] of [['POST', '/nothing'], ['PUT', '/'], ['POST', '/openapi.json'], ['DELETE', '/docs/static/index.css']]) {
      const res = await harness.request(path, { method, headers, body })
      t.equal(res.status, 404, `${method} ${path}, ${label}`)
      t.match(res.body, { type: 'about:blank', title: 'Not Found', status: 404 }, `${method} ${path}, ${label}`)
    }
  }
})

t.test('a method the spec does not define on a known path → 405 with Allow, before auth and body', async (t) => {
  // Fastify's own methods, and methods Node parses that Fastify does not route by itself.
  for (const method of ['PUT', 'PATCH', 'OPTIONS', 'TRACE', 'QUERY', 'PROPFIND', 'SEARCH', 'M-SEARCH', 'LOCK']) {
    const res = await harness.request(ordersPath(), {
      method, headers: { 'content-type': 'text/plain' }, body: 'x'.repeat(300 * 1024)
    })
    t.equal(res.status, 405, method)
    t.equal(res.headers.get('allow'), 'GET, POST, DELETE, HEAD')
    t.match(res.body, { type: 'about:blank', title: 'Method Not Allowed', status: 405 })
  }
  const elsewhere = await harness.request('/nothing', { method: 'PROPFIND' })
  t.equal(elsewhere.status, 404, 'on an unknown path, any method is 404')
  t.match(elsewhere.body, { type: 'about:blank', title: 'Not Found' })
  const health = await harness.request('/healthz', { method: 'DELETE' })
  t.equal(health.status, 405)
  t.equal(health.headers.get('allow'), 'GET, HEAD')
})

t.test('GET ignores a body of any type or size: no 415 or 413 on an operation that declares neither', async (t) => {
  // fetch refuses a GET with a body, so this one goes through node:http.
  for (const [contentType, size] of [['text/plain', 10], ['application/json', 300 * 1024]] as const) {
    const status = await new Promise<number>((resolve, reject) => {
      const headers = { authorization: `Bearer ${readToken()}`, 'content-type': contentType, 'content-length': String(size) }
      const req = request(harness.baseUrl + ordersPath(), { method: 'GET', headers }, (res) => {
        res.resume()
        resolve(res.statusCode!)
      })
      req.on('error', reject)
      req.end('x'.repeat(size))
    })
    t.equal(status, 200, contentType)
  }
})

t.test('a database error → 500 that names no table, SQL or stack; nothing half-applied', async (t) => {
  // A table both statements read (the list no longer reads permissions: grants carry descriptions).
  await harness.db.query('ALTER TABLE authorizations RENAME TO authorizations_moved')
  t.teardown(() => harness.db.query('ALTER TABLE authorizations_moved RENAME TO authorizations'))
  for (const res of [
    await harness.request(ordersPath(), { token: readToken() }),
    await harness.request(ordersPath(), { method: 'DELETE', token: deleteToken(), json: ['p_read_orders'] })
  ]) {
    t.equal(res.status, 500)
    t.match(res.body, { type: 'about:blank', title: 'Internal Server Error', status: 500 })
    t.notMatch(res.text, /authorizations|permissions|relation|SELECT|grants|\.ts|at /i)
  }
  const { rows } = await harness.db.query("SELECT count(*)::int AS n FROM grants WHERE client_id = 'app-a'")
  t.equal(rows[0].n, 11)
})

t.test('requests the HTTP parser rejects get problems too: 431 for huge headers, 400 for malformed HTTP', async (t) => {
  const huge = await harness.request(ordersPath(), { token: 'x'.repeat(130 * 1024) })
  t.equal(huge.status, 431)
  t.match(huge.body, { type: 'about:blank', title: 'Request Header Fields Too Large', status: 431 })
  const raw = await new Promise<string>((resolve, reject) => {
    const socket = connect(new URL(harness.baseUrl).port as unknown as number, '127.0.0.1', () => {
      socket.end('GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n')
    })
    let data = ''
    socket.on('data', (chunk) => { data += chunk })
    socket.on('end', () => resolve(data))
    socket.on('error', reject)
  })
  t.match(raw, /^HTTP\/1\.1 400 Bad Request\r\n/)
  t.match(raw, /Content-Type: application\/problem\+json/)
  const body = JSON.parse(raw.slice(raw.indexOf('\r\n\r\n') + 4))
  t.same(body, { type: 'about:blank', title: 'Bad Request', status: 400, detail: 'The request is not valid HTTP.' })
})

/** A request written on a socket of its own, as given; the whole answer, head and body. */
function rawRequest (text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(Number(new URL(harness.baseUrl).port), '127.0.0.1', () => socket.end(text))
    let data = ''
    socket.on('data', (chunk) => { data += chunk })
    socket.on('end', () => resolve(data))
    socket.on('error', reject)
  })
}
const bodyOf = (answer: string) => JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as unknown

t.test('Host (RFC 9112 §3.2): HTTP/1.1 without one, or any request with two → 400 problem; HTTP/1.0 without one is served', async (t) => {
  const hostRequired = { type: 'about:blank', title: 'Bad Request', status: 400, detail: 'An HTTP/1.1 request needs exactly one Host header (RFC 9112 §3.2).' }
  for (const [label, request] of [
    ['HTTP/1.1 without Host', 'GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n'],
    ['two Host lines', 'GET /healthz HTTP/1.1\r\nHost: a.example\r\nhost: b.example\r\nConnection: close\r\n\r\n'],
    ['HTTP/1.0 with two Host lines', 'GET /healthz HTTP/1.0\r\nHost: a.example\r\nHost: b.example\r\n\r\n']
  ]) {
    const answer = await rawRequest(request)
    t.match(answer, /^HTTP\/1\.1 400 Bad Request\r\n/, label)
    t.match(answer, /content-type: application\/problem\+json/i, label)
    t.match(bodyOf(answer), hostRequired, label)
  }
  t.match(await rawRequest('GET /healthz HTTP/1.0\r\n\r\n'), /^HTTP\/1\.1 200 OK\r\n/, 'HTTP/1.0 needs none')
})

t.test('an Expect other than 100-continue is ignored (RFC 9110 §10.1.1): the request is served, not a bare 417', async (t) => {
  const answer = await rawRequest('GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: something-else\r\nConnection: close\r\n\r\n')
  t.match(answer, /^HTTP\/1\.1 200 OK\r\n/)
  t.match(bodyOf(answer), { status: 'ok' })
})

t.test('a URL with broken percent-encoding → 400 problem, not the router\'s own JSON', async (t) => {
  for (const id of ['%', '%E0%A4%A', '%ED%A0%80', '%FF']) {
    const res = await harness.request(`/resources/${id}/authorized_clients/app-a/permissions`, { token: readToken() })
    t.equal(res.status, 400, id)
    t.match(res.body, { type: 'about:blank', title: 'Bad Request', status: 400 })
  }
})
