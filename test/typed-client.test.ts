// A consumer's view: openapi-fetch typed by the generated src/generated/openapi.ts drives both
// operations. That it compiles (npm run typecheck) is the proof that the paths, parameters, bodies
// and answers a consumer codes against are the spec's; that it passes, that the server keeps them.
import createClient from 'openapi-fetch'
import t from 'tap'
import type { paths } from '../src/generated/openapi.js'
import { ordersFixture } from './fixtures.js'
import { build } from './helper.js'
import { token } from './tokens.js'

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
