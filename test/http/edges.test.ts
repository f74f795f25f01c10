// The less-travelled edges of the HTTP layer: requests written on a socket as given (no client
// normalizes them), and what each gets back.
import { connect } from 'node:net'
import t from 'tap'
import { ordersFixture, ordersPath } from '../support/fixtures.js'
import { build } from '../support/harness.js'
import { readToken } from '../support/tokens.js'

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
