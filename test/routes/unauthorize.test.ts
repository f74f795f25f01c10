import t from 'tap'
import { ordersFixture, ordersPath, pathIdBounds } from '../support/fixtures.js'
import { build } from '../support/harness.js'
import { schemaErrors } from '../support/contract.js'
import { deleteToken, readToken, token } from '../support/tokens.js'

const harness = await build(t)

// Each test starts from the same grants: app-a holds 10 permissions of orders-api.
t.beforeEach(async () => {
  await harness.db.query('TRUNCATE resources, clients CASCADE')
  await harness.seed(ordersFixture())
})

const unauthorize = (ids: unknown, path = ordersPath()) =>
  harness.request(path, { method: 'DELETE', token: deleteToken(), json: ids })

async function grantsOf (client = 'app-a', resource = 'orders-api'): Promise<string[]> {
  const { rows } = await harness.db.query(
    'SELECT permission_id FROM grants WHERE resource_id = $1 AND client_id = $2 ORDER BY permission_id', [resource, client])
  return rows.map(({ permission_id: id }) => id)
}

t.test('DELETE granted ids → 204 with an empty body, and only they are removed', async (t) => {
  const before = await grantsOf()
  const res = await unauthorize(['p_read_orders', 'p_create_orders'])
  t.equal(res.status, 204)
  t.equal(res.text, '')
  t.same(await grantsOf(), before.filter((id) => id !== 'p_read_orders' && id !== 'p_create_orders'))
  t.same(await grantsOf('app-a', 'other-api'), ['p_other'], 'grants on other resources stay')
  const listed = await harness.request(ordersPath(), { token: readToken() })
  t.equal(listed.headers.get('x-total-count'), '8')
})

t.test('a retried DELETE, and ids of the resource that are not granted → 204, nothing else changes', async (t) => {
  t.equal((await unauthorize(['p_read_orders'])).status, 204)
  const after = await grantsOf()
  t.equal((await unauthorize(['p_read_orders'])).status, 204, 'retry')
  t.equal((await unauthorize(['p_update_refunds', 'p_delete_refunds'])).status, 204, 'permissions never granted')
  t.same(await grantsOf(), after)
})

t.test('duplicated ids are fine', async (t) => {
  const res = await unauthorize(['p_read_orders', 'p_read_orders', 'p_read_orders'])
  t.equal(res.status, 204)
  t.notOk((await grantsOf()).includes('p_read_orders'))
})

t.test('DELETE with an unknown permission id → 422 naming every unknown id once, nothing removed', async (t) => {
  const before = await grantsOf()
  const res = await unauthorize(['p_read_orders', 'p_typo', 'p_other', 'p_typo', 'p_missing'])
  t.equal(res.status, 422)
  t.match(res.body, {
    type: '/problems/unknown-permissions',
    status: 422,
    unknown_permission_ids: ['p_typo', 'p_other', 'p_missing'],
    detail: '3 ids are not permissions of the resource "orders-api"; nothing was removed.'
  })
  t.same(await grantsOf(), before, 'the known id was not removed either')
})

t.test('the last grant can go; the authorization stays and lists 200 []', async (t) => {
  const all = await grantsOf()
  t.equal((await unauthorize(all)).status, 204)
  t.same(await grantsOf(), [])
  const { rowCount } = await harness.db.query("SELECT 1 FROM authorizations WHERE resource_id = 'orders-api' AND client_id = 'app-a'")
  t.equal(rowCount, 1)
  const listed = await harness.request(ordersPath(), { token: readToken() })
  t.equal(listed.status, 200)
  t.same(listed.body, [])
})

t.test('404 when the resource, the client or the authorization is missing, before any 422', async (t) => {
  const cases: Array<[string, string, string]> = [
    ['app-a', 'missing-api', '/problems/resource-not-found'],
    ['missing-app', 'orders-api', '/problems/client-not-found'],
    ['missing-app', 'missing-api', '/problems/resource-not-found'],
    ['app-c', 'orders-api', '/problems/client-not-authorized']
  ]
  for (const [client, resource, type] of cases) {
    const res = await unauthorize(['p_read_orders', 'p_typo'], ordersPath(client, resource))
    t.equal(res.status, 404, `${resource}/${client}`)
    t.equal((res.body as { type: string }).type, type)
  }
  t.same((await grantsOf()).length, 10)
})

t.test('bodies that break the contract → 400 invalid-request, nothing removed', async (t) => {
  const bodies: unknown[] = [
    [], {}, 'p_read_orders', null, 42, [1, 2], [''], ['a'.repeat(256)], [null], [['p_read_orders']],
    [{ id: 'p_read_orders' }], ['p_read\u0000orders'], ['\ud800'], Array.from({ length: 501 }, (_, i) => `p_${i}`), [true]
  ]
  for (const body of bodies) {
    const res = await unauthorize(body)
    t.equal(res.status, 400, JSON.stringify(body).slice(0, 60))
    t.match(res.body, { type: '/problems/invalid-request', errors: [{ location: 'body' }] })
  }
  t.equal((await grantsOf()).length, 10)
})

t.test('an id the database cannot hold is explained in the spec\'s words; only the first invalid id is reported', async (t) => {
  for (const [body, pointer] of [[['p_read_orders', 'p_read\u0000orders'], '/1'], [['\ud800', 'p_read\u0000orders', ''], '/0']] as const) {
    const res = await unauthorize(body)
    t.equal(res.status, 400, pointer)
    // One error however many ids are wrong: the validator stops at the first (bounded work per request).
    t.same((res.body as { errors: unknown[] }).errors,
      [{ location: 'body', pointer, message: 'must be text without NUL characters or unpaired surrogates' }], pointer)
  }
  t.equal((await grantsOf()).length, 10, 'nothing removed')
})

t.test('500 ids (the maximum) are accepted', async (t) => {
  const ids = [...await grantsOf(), ...Array.from({ length: 490 }, () => 'p_read_orders')]
  t.equal(ids.length, 500)
  t.equal((await unauthorize(ids)).status, 204)
  t.same(await grantsOf(), [])
})

t.test('every body that is not an array of ids is answered with the same sentence of what to send', async (t) => {
  const expected = 'a JSON array of 1 to 500 permission ids, such as ["perm_read_orders"]'
  const send = (headers: Record<string, string>, body?: string) =>
    harness.request(ordersPath(), { method: 'DELETE', token: deleteToken(), headers, body })
  const answers: Array<[string, Awaited<ReturnType<typeof send>>]> = [
    ['no body, no content type', await send({})],
    ['no body, JSON content type', await send({ 'content-type': 'application/json' })],
    ['an empty JSON body', await send({ 'content-type': 'application/json' }, '')],
    ['not JSON', await send({ 'content-type': 'application/json' }, 'perm_read_orders')],
    ['a JSON object', await send({ 'content-type': 'application/json' }, '{"ids":["p_read_orders"]}')],
    ['a JSON string', await send({ 'content-type': 'application/json' }, '"p_read_orders"')]
  ]
  for (const [label, res] of answers) {
    t.equal(res.status, 400, label)
    const { detail, errors } = res.body as { detail: string, errors?: Array<{ message: string }> }
    t.ok(detail.includes(expected) || errors?.[0].message === `must be ${expected}`, `${label}: ${detail}`)
  }
  t.equal((await grantsOf()).length, 10, 'nothing removed')
})

t.test('malformed or missing bodies → 400 malformed-body or invalid-request', async (t) => {
  const send = (body: string | undefined, headers: Record<string, string> = { 'content-type': 'application/json' }) =>
    harness.request(ordersPath(), { method: 'DELETE', token: deleteToken(), headers, body })
  const truncated = await send('["p_read_orders"')
  t.equal(truncated.status, 400)
  t.equal((truncated.body as { type: string }).type, '/problems/malformed-body')
  const empty = await send('')
  t.equal(empty.status, 400)
  t.equal((empty.body as { type: string }).type, '/problems/malformed-body')
  const missing = await send(undefined, {})
  t.equal(missing.status, 400)
  t.equal((missing.body as { type: string }).type, '/problems/malformed-body', 'no body and no content type: as an empty body')
  const poisoned = await send('[{"__proto__": {"x": 1}}]')
  t.equal(poisoned.status, 400)
  t.equal((await grantsOf()).length, 10)
})

t.test('other content types → 415, nothing removed', async (t) => {
  for (const contentType of ['text/plain', 'application/x-www-form-urlencoded', 'application/xml', 'multipart/form-data; boundary=x', 'application/jsonx']) {
    const res = await harness.request(ordersPath(), {
      method: 'DELETE', token: deleteToken(), headers: { 'content-type': contentType }, body: '["p_read_orders"]'
    })
    t.equal(res.status, 415, contentType)
    t.equal((res.body as { type: string }).type, 'about:blank')
  }
  const charset = await harness.request(ordersPath(), {
    method: 'DELETE', token: deleteToken(), headers: { 'content-type': 'application/json; charset=utf-8' }, body: '["p_read_orders"]'
  })
  t.equal(charset.status, 204, 'application/json with a charset is JSON')
  t.equal((await grantsOf()).length, 9)
})

t.test('JSON in another charset or content-encoded → 415; bytes that are not UTF-8 → 400; nothing removed', async (t) => {
  const send = (headers: Record<string, string>, body: string | Blob = '["p_read_orders"]') =>
    harness.request(ordersPath(), { method: 'DELETE', token: deleteToken(), headers, body })
  for (const contentType of ['application/json; charset=utf-16', 'application/json;charset=latin1', 'application/json; charset="iso-8859-1"']) {
    const res = await send({ 'content-type': contentType })
    t.equal(res.status, 415, contentType)
    t.equal((res.body as { detail: string }).detail, 'The body must be application/json in UTF-8.', contentType)
  }
  const gzip = await send({ 'content-type': 'application/json', 'content-encoding': 'gzip' })
  t.equal(gzip.status, 415, 'gzip')
  t.equal((gzip.body as { detail: string }).detail, 'The body must not be content-encoded.')
  t.equal(gzip.headers.get('accept-encoding'), 'identity', 'the codings it takes: none (RFC 9110 §15.5.16)')
  // A header the answer carries is one the spec declares for it, so a client can learn of it (the
  // harness's contract check reads only the headers the spec names somewhere).
  const declared = '/paths/~1resources~1{resource_id}~1authorized_clients~1{client_id}~1permissions/delete/responses/415/headers/Accept-Encoding/schema'
  t.equal(schemaErrors(declared, gzip.headers.get('accept-encoding')), undefined, 'the spec declares Accept-Encoding on the 415')
  const invalid = await send({ 'content-type': 'application/json' }, new Blob([new Uint8Array([0x5b, 0x22, 0xff, 0xfe, 0x22, 0x5d])]))
  t.equal(invalid.status, 400)
  t.match(invalid.body, { type: '/problems/malformed-body', detail: 'The body is not valid UTF-8.' })
  t.equal((await grantsOf()).length, 10)
  const quotedUtf8 = await send({ 'content-type': 'application/json; charset="UTF-8"', 'content-encoding': 'identity' })
  t.equal(quotedUtf8.status, 204, 'UTF-8, quoted and in capitals, unencoded: accepted')
  // utf8 is a common alias; a parameter that only looks like charset is not one.
  for (const contentType of ['application/json; charset=utf8', 'application/json; charsetx=latin1', 'application/json; foo="a;charset=latin1"', 'application/json;', 'application/json;;charset=utf-8']) {
    await harness.seed(ordersFixture())
    t.equal((await send({ 'content-type': contentType })).status, 204, contentType)
  }
  // RFC 8259 §8.1: a parser may ignore a byte order mark. One leading BOM is read past; a second
  // is not JSON.
  const bom = [0xef, 0xbb, 0xbf]
  const ids = [...new TextEncoder().encode('["p_read_orders"]')]
  await harness.seed(ordersFixture())
  t.equal((await send({ 'content-type': 'application/json' }, new Blob([new Uint8Array([...bom, ...ids])]))).status, 204, 'a leading BOM')
  t.notOk((await grantsOf()).includes('p_read_orders'), 'removed')
  await harness.seed(ordersFixture())
  const twice = await send({ 'content-type': 'application/json' }, new Blob([new Uint8Array([...bom, ...bom, ...ids])]))
  t.equal(twice.status, 400, 'two BOMs')
  t.match(twice.body, { type: '/problems/malformed-body' })
  t.ok((await grantsOf()).includes('p_read_orders'), 'nothing removed')
})

t.test('a body item of the wrong type, beside a query parameter of the same name given twice → 400 about the body item, whose value was given once', async (t) => {
  // The body is validated before the query: its error names /0, as ?0= would.
  const res = await harness.request(`${ordersPath()}?0=a&0=b`, { method: 'DELETE', token: deleteToken(), json: [1] })
  t.equal(res.status, 400)
  const { errors } = res.body as { errors: Array<{ location: string, pointer: string, message: string }> }
  t.match(errors, [{ location: 'body', pointer: '/0' }])
  t.notMatch(errors[0].message, /more than once/)
  t.equal((await grantsOf()).length, 10)
})

t.test('a Content-Type whose parameters are not name=value → 400 naming the header, nothing removed', async (t) => {
  for (const contentType of ['application/json; charset', 'application/json; charset="utf-8', 'application/json; charset=latin1 x']) {
    const res = await harness.request(ordersPath(), {
      method: 'DELETE', token: deleteToken(), headers: { 'content-type': contentType }, body: '["p_read_orders"]'
    })
    t.equal(res.status, 400, contentType)
    t.match(res.body, { type: '/problems/invalid-request', errors: [{ location: 'header', pointer: '/content-type', message: /^must be a media type with parameters of the form name=value/ }] }, contentType)
  }
  t.equal((await grantsOf()).length, 10)
})

t.test('bodies over 256 KiB → 413, nothing removed', async (t) => {
  const huge = JSON.stringify(Array.from({ length: 1100 }, (_, i) => `p_${i}_${'x'.repeat(240)}`))
  t.ok(huge.length > 256 * 1024)
  const res = await harness.request(ordersPath(), {
    method: 'DELETE', token: deleteToken(), headers: { 'content-type': 'application/json' }, body: huge
  })
  t.equal(res.status, 413)
  t.equal((res.body as { title: string }).title, 'Content Too Large', 'the RFC 9110 phrase')
  t.equal((await grantsOf()).length, 10)
})

t.test('concurrent DELETEs of overlapping ids all answer 204 and leave exactly the rest', async (t) => {
  const results = await Promise.all([
    unauthorize(['p_read_orders', 'p_create_orders']),
    unauthorize(['p_create_orders', 'p_update_orders']),
    unauthorize(['p_read_orders', 'p_update_orders', 'p_delete_orders'])
  ])
  t.same(results.map(({ status }) => status), [204, 204, 204])
  t.same(await grantsOf(), ['p_create_invoices', 'p_delete_invoices', 'p_read_invoices', 'p_update_invoices', 'p_create_refunds', 'p_read_refunds'].sort())
})

t.test('body ids at their bound: 255 characters reach the database (204 removed, or 422 when unknown), 256 → 400', async (t) => {
  const long = 'p'.repeat(255)
  await harness.seed({
    permissions: [{ id: long, resource_id: 'orders-api', name: 'read:long' }],
    authorizations: [{ resource_id: 'orders-api', client_id: 'app-a', permission_ids: [...await grantsOf(), long] }]
  })
  t.ok((await grantsOf()).includes(long))
  const unknown = await unauthorize(['q'.repeat(255)])
  t.equal(unknown.status, 422)
  t.match(unknown.body, { type: '/problems/unknown-permissions', unknown_permission_ids: ['q'.repeat(255)] })
  const tooLong = await unauthorize([long + 'p'])
  t.equal(tooLong.status, 400)
  t.match(tooLong.body, { type: '/problems/invalid-request', errors: [{ location: 'body', pointer: '/0' }] })
  t.ok((await grantsOf()).includes(long), 'nothing removed by the refusals')
  t.equal((await unauthorize([long])).status, 204)
  t.notOk((await grantsOf()).includes(long))
})

t.test('body sizes at their bounds: 1 id → 204, 500 → 204, [] and 501 → 400 invalid-request at the body', async (t) => {
  t.equal((await unauthorize(['p_read_orders'])).status, 204, 'one id, the minimum')
  t.equal((await grantsOf()).length, 9)
  const granted = await grantsOf()
  const fiveHundred = Array.from({ length: 500 }, (_, i) => granted[i % granted.length])
  t.equal((await unauthorize(fiveHundred)).status, 204, '500 ids, the maximum')
  t.same(await grantsOf(), [])
  await harness.seed(ordersFixture())
  for (const body of [[], [...fiveHundred, 'p_read_orders']]) {
    const res = await unauthorize(body)
    t.equal(res.status, 400, `${body.length} ids`)
    t.match(res.body, { type: '/problems/invalid-request', errors: [{ location: 'body', pointer: '' }] }, `${body.length} ids`)
  }
  t.equal((await grantsOf()).length, 10, 'nothing removed by the refusals')
})

t.test('path ids at their bounds: 255 characters → 404 (looked up), 256 or none → 400 naming the parameter, nothing removed', async (t) => {
  for (const [resource, client, status, expected] of pathIdBounds) {
    const label = `${resource.length} and ${client.length} characters`
    const res = await unauthorize(['p_read_orders'], ordersPath(client, resource))
    t.equal(res.status, status, label)
    if (status === 404) t.equal((res.body as { type: string }).type, expected, label)
    else t.match(res.body, { type: '/problems/invalid-request', errors: [{ location: 'path', pointer: expected }] }, label)
  }
  t.equal((await grantsOf()).length, 10)
})

t.test('a body of exactly 256 KiB is read (204); one byte more → 413, nothing removed', async (t) => {
  const sized = (bytes: number) => {
    const head = '["p_read_orders"'
    return head + ' '.repeat(bytes - head.length - 1) + ']'
  }
  const send = (body: string) => harness.request(ordersPath(), { method: 'DELETE', token: deleteToken(), headers: { 'content-type': 'application/json' }, body })
  const over = await send(sized(256 * 1024 + 1))
  t.equal(over.status, 413)
  t.match(over.body, { type: 'about:blank', title: 'Content Too Large' })
  t.equal((await grantsOf()).length, 10, 'nothing removed')
  const atBound = await send(sized(256 * 1024))
  t.equal(atBound.status, 204)
  t.notOk((await grantsOf()).includes('p_read_orders'))
})

t.test('DELETE needs delete:resource itself: a token with only create:resource or read:resource → 403, nothing removed', async (t) => {
  for (const scope of ['create:resource', 'read:resource create:resource']) {
    const res = await harness.request(ordersPath(), { method: 'DELETE', token: token({ scope }), json: ['p_read_orders'] })
    t.equal(res.status, 403, scope)
    t.match(res.body, { type: '/problems/insufficient-scope', required_scope: 'delete:resource' }, scope)
  }
  t.equal((await grantsOf()).length, 10)
})
