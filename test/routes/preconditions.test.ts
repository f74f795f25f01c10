// Conditional requests (RFC 9110 §13): the list's ETag is the authorization's version; If-None-Match
// answers 304; If-Match guards DELETE and POST, checked and applied in one statement.
import t from 'tap'
import { ordersFixture, ordersPath } from '../fixtures.js'
import { build } from '../helper.js'
import { readToken, token } from '../tokens.js'

const harness = await build(t)
const writer = () => token({ scope: 'read:resource delete:resource create:resource' })

t.beforeEach(async () => {
  await harness.db.query('TRUNCATE resources, clients CASCADE')
  await harness.seed(ordersFixture())
})

const list = (query = '', headers: Record<string, string> = {}, path = ordersPath()) =>
  harness.request(path + query, { token: readToken(), headers })
const etag = async (path = ordersPath()) => (await list('', {}, path)).headers.get('etag')!
const change = (method: 'DELETE' | 'POST', ids: string[], headers: Record<string, string> = {}, path = ordersPath()) =>
  harness.request(path, { method, token: writer(), json: ids, headers })
const grantCount = async () => (await harness.db.query("SELECT count(*)::int AS n FROM grants WHERE client_id = 'app-a' AND resource_id = 'orders-api'")).rows[0].n

t.test('GET answers a strong ETag, the same for every page, order and HEAD, different per authorization', async (t) => {
  const tag = await etag()
  t.match(tag, /^"\d+"$/)
  t.equal((await list('?limit=2&offset=3&sort_by=description.desc')).headers.get('etag'), tag)
  t.equal((await harness.request(ordersPath(), { method: 'HEAD', token: readToken() })).headers.get('etag'), tag)
  t.not(await etag(ordersPath('app-b')), tag, 'another client\'s grants')
})

t.test('the ETag changes whenever the grants change, by any writer, and only then', async (t) => {
  const tags = [await etag()]
  t.equal((await change('DELETE', ['p_read_orders'])).status, 204)
  tags.push(await etag())
  t.equal((await change('DELETE', ['p_read_orders'])).status, 204, 'a DELETE that removes nothing')
  t.equal(await etag(), tags[1], 'unchanged')
  t.equal((await change('POST', ['p_read_orders'])).status, 204)
  tags.push(await etag())
  t.equal((await change('POST', ['p_read_orders'])).status, 204, 'a POST that grants nothing new')
  t.equal(await etag(), tags[2], 'unchanged')
  t.equal((await change('DELETE', ['nope'])).status, 422)
  t.equal(await etag(), tags[2], 'a refused change changes nothing')
  await harness.db.query("UPDATE permissions SET description = 'renamed' WHERE id = 'p_read_orders'")
  t.equal(await etag(), tags[2], 'a permission\'s description is not a change of the grants')
  await harness.db.query("DELETE FROM permissions WHERE id = 'p_create_orders'")
  tags.push(await etag())
  t.equal(new Set(tags).size, 4, `every change a new tag: ${tags.join(' ')}`)
})

t.test('If-None-Match with the current tag (weak or strong, in a list, or *) → 304 with the ETag and no body', async (t) => {
  const tag = await etag()
  for (const header of [tag, `W/${tag}`, `"1", ${tag}`, '*']) {
    const res = await list('?limit=5', { 'if-none-match': header })
    t.equal(res.status, 304, header)
    t.equal(res.text, '', header)
    t.equal(res.headers.get('etag'), tag, header)
  }
  for (const header of ['"1"', tag.slice(1, -1), '""']) t.equal((await list('', { 'if-none-match': header })).status, 200, header)
  await change('DELETE', ['p_read_orders'])
  t.equal((await list('', { 'if-none-match': tag })).status, 200, 'after a change the old tag no longer matches')
  t.equal((await list('', { 'if-none-match': '*' }, ordersPath('app-c'))).status, 404, 'not authorized: 404, not 304')
})

t.test('If-Match: a stale tag → 412 precondition-failed and nothing changes; the current tag or * → 204', async (t) => {
  const stale = await etag()
  await change('DELETE', ['p_read_orders'])
  const current = await etag()
  for (const method of ['DELETE', 'POST'] as const) {
    // A tag of ours is digits only: one with anything around its digits names no version.
    for (const header of [stale, `W/${current}`, '"abc"', 'garbage', `"x${current.slice(1, -1)}"`, `"${current.slice(1, -1)}x"`]) {
      const res = await change(method, ['p_create_orders', 'p_update_refunds'], { 'if-match': header })
      t.equal(res.status, 412, `${method} If-Match: ${header}`)
      t.match(res.body, { type: '/problems/precondition-failed', status: 412 })
    }
  }
  t.equal(await grantCount(), 9, 'nothing changed')
  t.equal(await etag(), current)
  t.equal((await change('DELETE', ['p_create_orders'], { 'if-match': `${stale}, ${current}` })).status, 204)
  t.equal((await change('POST', ['p_update_refunds'], { 'if-match': '*' })).status, 204)
  t.equal(await grantCount(), 9)
})

t.test('order of refusals: 404 before 412 before 422', async (t) => {
  t.equal((await change('DELETE', ['p_read_orders'], { 'if-match': '"1"' }, ordersPath('app-c'))).status, 404)
  t.equal((await change('POST', ['nope'], { 'if-match': '"1"' })).status, 412)
  t.equal((await change('POST', ['nope'], { 'if-match': await etag() })).status, 422)
})

t.test('two DELETEs with the same If-Match at once: exactly one 204, the other 412', async (t) => {
  for (let round = 0; round < 5; round++) {
    await harness.db.query('TRUNCATE resources, clients CASCADE')
    await harness.seed(ordersFixture())
    const tag = await etag()
    const answers = await Promise.all([
      change('DELETE', ['p_read_orders'], { 'if-match': tag }),
      change('DELETE', ['p_create_orders'], { 'if-match': tag })
    ])
    t.same(answers.map((res) => res.status).sort(), [204, 412], `round ${round}`)
    t.equal(await grantCount(), 9, 'one removal only')
  }
  const tag = await etag()
  const mixed = await Promise.all([
    change('DELETE', ['p_read_invoices'], { 'if-match': tag }),
    change('POST', ['p_update_refunds'], { 'if-match': tag })
  ])
  t.same(mixed.map((res) => res.status).sort(), [204, 412], 'a DELETE and a POST on the same tag')
})
