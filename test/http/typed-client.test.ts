// A consumer's view: openapi-fetch typed by the generated src/generated/openapi.ts drives the
// operations. That it compiles (npm run typecheck) is the proof that the paths, parameters, bodies
// and answers a consumer codes against are the spec's; that it passes, that the server keeps them.
import createClient from 'openapi-fetch'
import t from 'tap'
import type { paths } from '../../src/generated/openapi.js'
import { ordersFixture } from '../support/fixtures.js'
import { build } from '../support/harness.js'
import { token } from '../support/tokens.js'

const harness = await build(t)
await harness.seed(ordersFixture())
const client = createClient<paths>({
  baseUrl: harness.baseUrl,
  headers: { authorization: `Bearer ${token({ scope: 'read:resource delete:resource' })}` }
})
const target = { path: { resource_id: 'orders-api', client_id: 'app-a' } }
const permissionsPath = '/resources/{resource_id}/authorized_clients/{client_id}/permissions'

t.test('list: typed query, typed page, the headers the spec declares', async (t) => {
  const { data, error, response } = await client.GET(permissionsPath, {
    params: { ...target, query: { limit: 2, offset: 0, sort_by: 'name.desc' } }
  })
  t.equal(response.status, 200)
  t.notOk(error)
  // data is Permission[]: a wrong field name here would not compile.
  t.same(data?.map(({ id, name }) => ({ id, name })).length, 2)
  t.ok(data?.every((permission) => typeof permission.id === 'string' && permission.name.includes(':')))
  t.match(response.headers.get('x-total-count'), /^\d+$/)
  t.match(response.headers.get('link'), /rel="next"/)
})

t.test('unauthorize: a typed body of ids → 204; the list no longer has them', async (t) => {
  const before = await client.GET(permissionsPath, { params: { ...target, query: { limit: 500 } } })
  const removed = before.data!.slice(0, 2).map((permission) => permission.id)
  const { response, error } = await client.DELETE(permissionsPath, { params: target, body: removed })
  t.equal(response.status, 204)
  t.notOk(error)
  const after = await client.GET(permissionsPath, { params: { ...target, query: { limit: 500 } } })
  t.same(after.data!.map((permission) => permission.id), before.data!.slice(2).map((permission) => permission.id))
})

t.test('errors come back typed as the spec\'s problems', async (t) => {
  const unknown = await client.DELETE(permissionsPath, { params: target, body: ['not-a-permission'] })
  t.equal(unknown.response.status, 422)
  // error is UnknownPermissionsProblem for a 422: its unknown_permission_ids is typed.
  t.same(unknown.error?.unknown_permission_ids, ['not-a-permission'])
  const missing = await client.GET(permissionsPath, { params: { path: { resource_id: 'orders-api', client_id: 'nobody' } } })
  t.equal(missing.response.status, 404)
  t.equal(missing.error?.type, '/problems/client-not-found')
  t.equal(missing.error?.status, 404)
})

t.test('the change feed: a typed poll from a typed cursor, the next link; a cursor that is not an id comes back a typed problem', async (t) => {
  // A poller's client: of the feed's two media types it reads the JSON page (a stream is not a typed body).
  const poller = createClient<paths, 'application/json' | 'application/problem+json'>({
    baseUrl: harness.baseUrl,
    headers: { authorization: `Bearer ${token({ scope: 'read:resource' })}`, accept: 'application/json' }
  })
  const removed = await client.DELETE(permissionsPath, { params: target, body: ['p_read_invoices'] })
  t.equal(removed.response.status, 204)
  const poll = (after?: string) => poller.GET('/permission_changes', {
    params: { query: { limit: 500, resource_id: 'orders-api', ...(after === undefined ? {} : { after }) } }
  })
  // Readable once no older transaction is open anywhere on the shared test cluster.
  let polled = await poll()
  for (const deadline = Date.now() + 20_000; !polled.data?.some((entry) => entry.permission_ids.includes('p_read_invoices')) && Date.now() < deadline;) {
    await new Promise((resolve) => setTimeout(resolve, 100))
    polled = await poll()
  }
  t.equal(polled.response.status, 200)
  // data is FeedChange[]: a wrong field name here would not compile.
  const last = polled.data?.at(-1)
  t.same(last && { resource: last.resource_id, client: last.client_id, action: last.action, ids: last.permission_ids },
    { resource: 'orders-api', client: 'app-a', action: 'unauthorized', ids: ['p_read_invoices'] })
  // A page of one resource, not full: its link goes on from below the horizon, at or past its last change.
  const linked = /[?&]after=([0-9]+)&limit=500&resource_id=orders-api>; rel="next"$/.exec(polled.response.headers.get('link') ?? '')
  t.ok(linked !== null && last !== undefined && BigInt(linked[1]) >= BigInt(last.id), 'the next link, from at least the last change')
  t.same((await poll(last?.id)).data, [], 'nothing after the last change')
  const refused = await poll('not-an-id')
  t.equal(refused.response.status, 400)
  t.equal(refused.error?.type, '/problems/invalid-request')
})
