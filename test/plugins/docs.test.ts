import { readFile } from 'node:fs/promises'
import { get } from 'node:http'
import { connect } from 'node:net'
import t from 'tap'
import { parse } from 'yaml'
import { specPath } from '../../src/project-root.js'
import { build } from '../support/harness.js'

const harness = await build(t)

t.test('GET /openapi.json serves openapi/openapi.yaml itself, without a token', async (t) => {
  const res = await harness.request('/openapi.json')
  t.equal(res.status, 200)
  t.match(res.headers.get('content-type'), /^application\/json/)
  t.same(res.body, parse(await readFile(specPath, 'utf8')))
})

t.test('GET /openapi.json carries a strong ETag: a client holding it gets 304, no body; a changed tag gets the document', async (t) => {
  const first = await harness.request('/openapi.json')
  const tag = first.headers.get('etag')
  t.match(tag, /^"[A-Za-z0-9_-]{43}"$/)
  t.equal(first.headers.get('cache-control'), 'no-cache', 'kept, but asked again each time')
  for (const header of [tag!, `W/${tag}`, `"other", ${tag}`, '*']) {
    const again = await harness.request('/openapi.json', { headers: { 'if-none-match': header } })
    t.equal(again.status, 304, header)
    t.equal(again.headers.get('etag'), tag, `${header}: the same tag`)
    t.equal(again.text, '', `${header}: no body`)
  }
  const other = await harness.request('/openapi.json', { headers: { 'if-none-match': '"other"' } })
  t.equal(other.status, 200)
  t.same(other.body, first.body)
})

t.test('GET /docs serves Swagger UI reading the document from /docs/json, the same as /openapi.json, without a token', async (t) => {
  const page = await fetch(`${harness.baseUrl}/docs/`)
  t.equal(page.status, 200)
  t.match(await page.text(), /swagger-ui/)
  const initializer = await fetch(`${harness.baseUrl}/docs/static/swagger-initializer.js`)
  t.equal(initializer.status, 200)
  const script = await initializer.text()
  // @fastify/swagger-ui sets the UI's url after uiConfig's, to its own route: a url in uiConfig is never read.
  t.match(script, /url: resolveUrl\('\.\/json'\)/)
  t.notMatch(script, /openapi\.json/, 'no url in uiConfig that the UI would not read')
  t.same((await harness.request('/docs/json')).body, (await harness.request('/openapi.json')).body)
  // Never another document or configuration named in the page's URL (?url=, ?configUrl=): a link to
  // the docs could otherwise show an attacker's API, with its "Authorize" collecting tokens.
  t.match(script, /"queryConfigEnabled":\s*false/)
  // A pasted token survives a reload of the page; operations show their operationId.
  t.match(script, /"persistAuthorization":\s*true/)
  t.match(script, /"displayOperationId":\s*true/)
  const bundle = await fetch(`${harness.baseUrl}/docs/static/swagger-ui-bundle.js`)
  t.equal(bundle.status, 200, 'the UI is served locally, no CDN')
  // Read to the end: a response left unread keeps its connection busy, and closing the server waits for it.
  t.ok((await bundle.arrayBuffer()).byteLength > 100_000)
})

t.test('the served document declares the bearer scheme and each operation\'s scope', async (t) => {
  const doc = (await harness.request('/openapi.json')).body as {
    components: { securitySchemes: Record<string, { type: string, scheme: string }> }
    paths: Record<string, Record<string, { security: Array<Record<string, string[]>> }>>
  }
  t.match(doc.components.securitySchemes.bearerAuth, { type: 'http', scheme: 'bearer' })
  const item = doc.paths['/resources/{resource_id}/authorized_clients/{client_id}/permissions']
  t.same(item.get.security, [{ bearerAuth: ['read:resource'] }])
  t.same(item.delete.security, [{ bearerAuth: ['delete:resource'] }])
  t.same(item.post.security, [{ bearerAuth: ['create:resource'] }])
  t.same(doc.paths['/resources/{resource_id}/authorized_clients/{client_id}/permission_changes'].get.security, [{ bearerAuth: ['read:resource'] }])
  t.same(doc.paths['/permission_changes'].get.security, [{ bearerAuth: ['read:resource'] }], 'the change feed')
})

t.test('GET / points to the docs: 302 to /docs, without a token; other methods on / are 404', async (t) => {
  const root = await fetch(`${harness.baseUrl}/`, { redirect: 'manual' })
  t.equal(root.status, 302)
  t.equal(root.headers.get('location'), '/docs')
  await root.arrayBuffer()
  const followed = await fetch(`${harness.baseUrl}/`)
  t.equal(followed.status, 200)
  t.match(await followed.text(), /swagger-ui/)
  t.equal((await harness.request('/', { method: 'POST' })).status, 404)
})

t.test('Swagger UI\'s pages and files carry a Content-Security-Policy that forbids framing and inline script, and keeps plain http', async (t) => {
  for (const path of ['/docs/', '/docs/static/index.html', '/docs/static/swagger-initializer.js']) {
    const res = await fetch(`${harness.baseUrl}${path}`)
    await res.arrayBuffer()
    const policy = res.headers.get('content-security-policy') ?? ''
    // The whole policy, every directive: one left empty (`base-uri ;`) would be no restriction at all.
    t.equal(policy, "default-src 'self'; base-uri 'self'; connect-src 'self'; font-src 'self' data:; form-action 'self'; " +
      "frame-ancestors 'none'; img-src 'self' data:; object-src 'none'; script-src 'self'; script-src-attr 'none'; " +
      "style-src 'self' 'unsafe-inline';", path)
    t.notMatch(policy, /upgrade-insecure-requests/, path)
  }
})

t.test('a query on the docs page (?url=, ?utm_source=…) is dropped: 302 to the page without it, as Swagger UI would read its document from a URL in the query', async (t) => {
  // The UI's initializer makes its document's URL by appending "/./json" to the page's whole URL,
  // query included: /docs/?x=1 read /docs/?x=1/./json, the page's own HTML, and showed no API.
  // The page's other name too, which @fastify/swagger-ui sent to itself when it had a query: a loop.
  for (const [path, location] of [['/docs/?url=/healthz', '/docs/'], ['/docs?configUrl=/healthz&x=1', '/docs'], ['/docs/static/index.html?x=1', '/docs/']]) {
    const res = await fetch(`${harness.baseUrl}${path}`, { redirect: 'manual' })
    await res.arrayBuffer()
    t.equal(res.status, 302, path)
    t.equal(res.headers.get('location'), location, path)
    const followed = await fetch(`${harness.baseUrl}${path}`)
    t.match(await followed.text(), /swagger-ui/, `${path}: followed, the page`)
  }
  // An empty query too (fetch would drop it: sent as it is).
  const empty = await new Promise<{ status?: number, location?: string }>((resolve, reject) => {
    get({ host: '127.0.0.1', port: new URL(harness.baseUrl).port, path: '/docs?' }, (res) => { res.resume(); resolve({ status: res.statusCode, location: res.headers.location }) }).on('error', reject)
  })
  t.same(empty, { status: 302, location: '/docs' }, '/docs?')
  // A request line in absolute form (RFC 9112 §3.2.2, as to a proxy): the redirect names the path
  // alone, not the host the request named (which a cache keyed on it could hand to others).
  const absolute = await new Promise<string>((resolve, reject) => {
    const socket = connect(Number(new URL(harness.baseUrl).port), '127.0.0.1', () => {
      socket.end('GET http://evil.example/docs?x=1 HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n')
    })
    let text = ''
    socket.on('data', (chunk) => { text += chunk }).on('end', () => resolve(text)).on('error', reject)
  })
  t.match(absolute, /^HTTP\/1\.1 302 /, 'absolute form')
  t.match(absolute, /\r\nlocation: \/docs\r\n/i, 'to the path alone')
  // Only the page: the UI's other files, and the page itself without a query, are served as asked
  // (not followed: a redirect to the page would end in a 200 too).
  for (const path of ['/docs/json?x=1', '/docs/yaml?x=1', '/docs/static/swagger-initializer.js?x=1', '/docs/', '/docs']) {
    const res = await fetch(`${harness.baseUrl}${path}`, { redirect: 'manual' })
    await res.arrayBuffer()
    t.equal(res.status, 200, `${path}: only the page`)
  }
})
