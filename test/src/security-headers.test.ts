// src/security-headers.ts: every answer, whatever route or error made it, tells a browser not to sniff its media type and,
// unless it brings a policy of its own (Swagger UI's, a problem type's page), not to run, load or
// frame anything (OWASP REST Security cheat sheet, "Security headers").
import { connect } from 'node:net'
import t from 'tap'
import { ordersFixture, ordersPath } from '../support/fixtures.js'
import { build } from '../support/harness.js'
import { readToken } from '../support/tokens.js'

const harness = await build(t)
await harness.seed(ordersFixture())
const API_POLICY = "default-src 'none'; frame-ancestors 'none'"

t.test('nosniff on every answer: JSON, problems, HTML, static files, redirects, 404s and 405s', async (t) => {
  const answers: Array<[string, Awaited<ReturnType<typeof harness.request>>]> = [
    ['list 200', await harness.request(ordersPath(), { token: readToken() })],
    ['401', await harness.request(ordersPath())],
    ['400', await harness.request(`${ordersPath()}?limit=0`, { token: readToken() })],
    ['405', await harness.request(ordersPath(), { method: 'PUT', token: readToken() })],
    ['healthz', await harness.request('/healthz')],
    ['readyz', await harness.request('/readyz')],
    ['openapi.json', await harness.request('/openapi.json')],
    ['docs', await harness.request('/docs/')],
    ['static file', await harness.request('/docs/static/index.css')],
    ['static 404', await harness.request('/docs/static/nope.js')],
    ['static 403', await harness.request('/docs/static/..%5c..%5cpackage.json')],
    ['redirect', await harness.request('/')],
    ['unknown route', await harness.request('/nowhere')],
    ['broken URL', await harness.request('/docs/%')],
    ['problem page', await harness.request('/problems/overloaded')]
  ]
  for (const [name, res] of answers) t.equal(res.headers.get('x-content-type-options'), 'nosniff', `${name} (${res.status})`)
})

t.test('an answer without a policy of its own may not be framed, nor load or run anything', async (t) => {
  for (const path of ['/healthz', '/openapi.json', '/nowhere', '/', ordersPath()]) {
    const res = await harness.request(path, { token: readToken() })
    t.equal(res.headers.get('content-security-policy'), API_POLICY, `${path} (${res.status})`)
  }
  // Swagger UI and the problem pages keep theirs.
  t.match((await harness.request('/docs/')).headers.get('content-security-policy'), /script-src 'self'/)
  t.match((await harness.request('/problems/overloaded')).headers.get('content-security-policy'), /style-src 'sha256-/)
})

t.test('the answers Node\'s HTTP parser refuses, written on the socket, carry nosniff, the policy and a Date too', async (t) => {
  const { port } = new URL(harness.baseUrl)
  const answer = await new Promise<string>((resolve, reject) => {
    let text = ''
    const socket = connect(Number(port), '127.0.0.1', () => socket.write('GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n'))
    socket.setEncoding('utf8')
    socket.on('data', (chunk: string) => { text += chunk })
    socket.on('end', () => resolve(text))
    socket.on('error', reject)
  })
  t.match(answer, /^HTTP\/1\.1 400 /)
  t.match(answer, /\r\nX-Content-Type-Options: nosniff\r\n/i)
  t.match(answer, new RegExp(`\\r\\nContent-Security-Policy: ${API_POLICY}\\r\\n`, 'i'))
  // RFC 9110 §6.6.1: an origin server with a clock sends Date in every 4xx, as Node does on the others.
  const date = /\r\nDate: ([^\r]+)\r\n/i.exec(answer)?.[1]
  t.ok(date && new Date(date).toUTCString() === date, `an IMF-fixdate: ${date}`)
})
