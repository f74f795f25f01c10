// The less-travelled edges of the HTTP layer: requests written on a socket as given (no client
// normalizes them), and what each gets back.
import { connect } from 'node:net'
import t from 'tap'
import { ordersFixture, ordersPath } from '../support/fixtures.js'
import { build } from '../support/harness.js'
import { deleteToken, readToken, token } from '../support/tokens.js'
import { until } from '../support/waiting.js'

const harness = await build(t)
await harness.seed(ordersFixture())
const port = Number(new URL(harness.baseUrl).port)

/**
 * Bytes written on a socket of their own, as given; everything answered until the server closes.
 * Not half-closed after them: Node's server ends a connection its client half-closed at once, answers
 * under way or not.
 */
function rawRequest (text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(text))
    let data = ''
    socket.on('data', (chunk) => { data += chunk })
    socket.on('end', () => resolve(data))
    socket.on('error', reject)
  })
}
const headOf = (answer: string) => answer.slice(0, answer.indexOf('\r\n\r\n'))
const bodyOf = (answer: string) => JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as Record<string, unknown>
const granted = async (permissionId: string) =>
  (await harness.db.query("SELECT 1 FROM grants WHERE client_id = 'app-a' AND permission_id = $1", [permissionId])).rowCount === 1

t.test('a URL whose percent-encoding is broken: the 400 carries X-Request-Id, as its body\'s request_id', async (t) => {
  const answer = await rawRequest('GET /resources/%FF/authorized_clients/app-a/permissions HTTP/1.1\r\nHost: x\r\nX-Request-Id: gw-bad-url\r\nConnection: close\r\n\r\n')
  t.match(answer, /^HTTP\/1\.1 400 Bad Request\r\n/)
  t.equal(bodyOf(answer).request_id, 'gw-bad-url')
  t.match(headOf(answer), /\r\nx-request-id: gw-bad-url\r\n/i)
})

t.test('a query string whose percent-encoding is broken → 400, as the same in the path is; not taken as literal text', async (t) => {
  for (const value of ['%', 'a%2', '%FF', '%ED%A0%80', '%E0%A4%A']) {
    const res = await harness.request(`/permission_changes?resource_id=${value}`, { token: readToken() })
    t.equal(res.status, 400, value)
    t.match(res.body, { status: 400 }, value)
  }
})

t.test('two Authorization lines are one comma-joined field (RFC 9110 §5.3): refused as one list of credentials is', async (t) => {
  const token = readToken()
  const joined = await rawRequest(`GET ${ordersPath()} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}, Bearer x\r\nConnection: close\r\n\r\n`)
  t.match(joined, /^HTTP\/1\.1 401 /)
  const twoLines = await rawRequest(`GET ${ordersPath()} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nAuthorization: Bearer x\r\nConnection: close\r\n\r\n`)
  t.match(twoLines, /^HTTP\/1\.1 401 /)
  t.match(headOf(twoLines), /\r\nwww-authenticate: Bearer error="invalid_token"/i)
  t.match(bodyOf(twoLines), { type: '/problems/invalid-token', status: 401 })
})

t.test('a change followed on its connection by a request that is not HTTP still gets its own answer first', async (t) => {
  const body = '["p_read_orders"]'
  const answer = await rawRequest(
    `DELETE ${ordersPath()} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${deleteToken()}\r\n` +
    `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}` +
    // A pipelined request the parser refuses (a lower-case method).
    'get /healthz HTTP/1.1\r\nHost: x\r\n\r\n')
  // The DELETE is applied whatever it was answered (today, while the 400 has already closed the connection).
  await until('the DELETE to be applied', async () => !(await granted('p_read_orders')), 5000)
  t.match(answer, /^HTTP\/1\.1 204 No Content\r\n/, 'and its 204 was sent, not replaced by the 400')
  t.match(answer, /\r\n\r\nHTTP\/1\.1 400 Bad Request\r\n/, 'the malformed request is answered after it')
  // With another request between them, each is answered in order: 204, 200, then the 400.
  const answers = await rawRequest(
    `POST ${ordersPath()} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token({ scope: 'create:resource' })}\r\n` +
    `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}` +
    'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n' +
    'get /healthz HTTP/1.1\r\nHost: x\r\n\r\n')
  t.same(answers.match(/HTTP\/1\.1 \d{3}/g), ['HTTP/1.1 204', 'HTTP/1.1 200', 'HTTP/1.1 400'])
  t.ok(await granted('p_read_orders'))
})

t.test('two Content-Type lines are one field (RFC 9110 §5.3): refused 415 as the one-line list is, and nothing changes', async (t) => {
  const body = '["p_read_orders"]'
  const change = (contentType: string) => rawRequest(
    `DELETE ${ordersPath()} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${deleteToken()}\r\n${contentType}` +
    `Content-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`)
  t.match(await change('Content-Type: application/json, text/plain\r\n'), /^HTTP\/1\.1 415 /, 'one line')
  const twoLines = await change('Content-Type: application/json\r\nContent-Type: text/plain\r\n')
  t.match(twoLines, /^HTTP\/1\.1 415 /, 'two lines')
  t.match(bodyOf(twoLines), { type: 'about:blank', status: 415, detail: 'The body must be application/json.' })
  t.ok(await granted('p_read_orders'), 'nothing was removed')
})

t.test('CONNECT, which Fastify does not route, gets a 404 problem like the other such methods, not a connection dropped unanswered', async (t) => {
  for (const target of ['orders.example:443', ordersPath()]) {
    const answer = await rawRequest(`CONNECT ${target} HTTP/1.1\r\nHost: orders.example:443\r\nX-Request-Id: gw-connect\r\n\r\n`)
    t.match(answer, /^HTTP\/1\.1 404 Not Found\r\n/, target)
    t.match(headOf(answer), /\r\ncontent-type: application\/problem\+json/i, target)
    t.match(headOf(answer), /\r\nx-request-id: gw-connect\r\n/i, target)
    t.match(bodyOf(answer), { type: 'about:blank', status: 404, request_id: 'gw-connect' }, target)
  }
})

t.test('a body sent with a transfer coding other than chunked → 400 malformed-body, nothing changes; chunked alone is read', async (t) => {
  const body = '["p_read_orders"]'
  const change = (transferEncoding: string) => rawRequest(
    `DELETE ${ordersPath()} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${deleteToken()}\r\nContent-Type: application/json\r\n` +
    `Transfer-Encoding: ${transferEncoding}\r\nConnection: close\r\n\r\n${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`)
  // Node's parser takes any codings before a final chunked, and undoes only chunked: the rest were
  // read as if the body had none (RFC 9112 §6.1: a coding the server does not understand is refused).
  for (const codings of ['gzip, chunked', 'deflate,chunked', 'identity, chunked']) {
    const answer = await change(codings)
    t.match(answer, /^HTTP\/1\.1 400 /, codings)
    t.match(bodyOf(answer), { type: '/problems/malformed-body', detail: 'The body must not be sent with a transfer coding other than chunked.' }, codings)
  }
  t.ok(await granted('p_read_orders'), 'nothing was removed')
  t.match(await change('Chunked'), /^HTTP\/1\.1 204 /, 'chunked alone, in any case')
  t.notOk(await granted('p_read_orders'))
})
