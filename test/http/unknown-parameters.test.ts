// A query parameter an operation does not have is refused, not ignored: a caller who guessed a name
// (page for offset, sort for sort_by) would otherwise get an answer to another question. The 400
// names each one, with a hint when the operation has a parameter close to it.
import t, { type Test } from 'tap'
import { ordersFixture, ordersPath } from '../support/fixtures.js'
import { build } from '../support/harness.js'
import { readToken, token as signed } from '../support/tokens.js'

const harness = await build(t)
await harness.seed(ordersFixture())
const history = '/resources/orders-api/authorized_clients/app-a/permission_changes'

interface ValidationProblem { type: string, detail: string, errors: Array<{ location: string, pointer: string, message: string }> }

async function refused (t: Test, path: string): Promise<ValidationProblem> {
  const res = await harness.request(path, { token: readToken() })
  t.equal(res.status, 400, path)
  return res.body as ValidationProblem
}

t.test('the list with ?page=2&limit=5 → 400 naming page: offset is the page number', async (t) => {
  const problem = await refused(t, `${ordersPath()}?page=2&limit=5`)
  t.equal(problem.type, '/problems/invalid-request')
  t.same(problem.errors, [{ location: 'query', pointer: '/page', message: 'is not a parameter of this operation (offset is the page number)' }])
  t.equal(problem.detail, 'query/page is not a parameter of this operation (offset is the page number)')
})

t.test('the list with ?sort=name.desc, ?order=…, ?orderBy=… → 400 naming it, pointing at sort_by', async (t) => {
  for (const name of ['sort', 'order', 'orderBy']) {
    const problem = await refused(t, `${ordersPath()}?${name}=name.desc`)
    t.same(problem.errors, [{ location: 'query', pointer: `/${name}`, message: 'is not a parameter of this operation (did you mean sort_by?)' }], name)
  }
})

t.test('the list with ?per_page, ?pageSize, ?size → limit is the page size; ?limt → did you mean limit?; ?sortBy → did you mean sort_by?', async (t) => {
  const cases: Array<[string, string]> = [
    ['per_page=5', 'limit is the page size'],
    ['pageSize=5', 'limit is the page size'],
    ['size=5', 'limit is the page size'],
    ['limt=5', 'did you mean limit?'],
    ['ofset=1', 'did you mean offset?'],
    ['sortBy=name', 'did you mean sort_by?'],
    ['LIMIT=5', 'did you mean limit?']
  ]
  for (const [query, hint] of cases) {
    const problem = await refused(t, `${ordersPath()}?${query}`)
    t.equal(problem.errors[0].message, `is not a parameter of this operation (${hint})`, query)
  }
})

t.test('every parameter the operation does not have is named, each with its own hint or none', async (t) => {
  const problem = await refused(t, `${ordersPath()}?page=2&limit=5&sort=name&access_token=x`)
  t.same(problem.errors, [
    { location: 'query', pointer: '/page', message: 'is not a parameter of this operation (offset is the page number)' },
    { location: 'query', pointer: '/sort', message: 'is not a parameter of this operation (did you mean sort_by?)' },
    { location: 'query', pointer: '/access_token', message: 'is not a parameter of this operation' }
  ])
})

t.test('the feed: ?cursor and ?since → after is the cursor; ?before, which it has no likeness of, gets no hint', async (t) => {
  for (const name of ['cursor', 'since']) {
    const problem = await refused(t, `/permission_changes?${name}=1`)
    t.same(problem.errors, [{ location: 'query', pointer: `/${name}`, message: 'is not a parameter of this operation (after is the cursor: the id of the last change seen)' }], name)
  }
  const before = await refused(t, '/permission_changes?before=1')
  t.same(before.errors, [{ location: 'query', pointer: '/before', message: 'is not a parameter of this operation' }])
  const resource = await refused(t, '/permission_changes?resourceId=orders-api')
  t.equal(resource.errors[0].message, 'is not a parameter of this operation (did you mean resource_id?)')
})

t.test('a history: ?cursor → before, its own cursor; ?page and ?since, which it has nothing for, get no hint', async (t) => {
  const cursor = await refused(t, `${history}?cursor=1`)
  t.equal(cursor.errors[0].message, 'is not a parameter of this operation (before is the cursor: the id of the last change seen)')
  for (const name of ['page', 'since', 'offset', 'sort_by']) {
    const problem = await refused(t, `${history}?${name}=1`)
    t.equal(problem.errors[0].message, 'is not a parameter of this operation', name)
  }
})

t.test('an operation with no query parameters refuses any: a DELETE or POST with ?dry_run=true → 400 naming it, and nothing changes', async (t) => {
  const token = signed({ scope: 'read:resource delete:resource create:resource' })
  const before = await harness.request(ordersPath(), { token: readToken() })
  for (const [method, ids] of [['DELETE', ['p_read_orders']], ['POST', ['p_update_refunds']]] as const) {
    const res = await harness.request(`${ordersPath()}?dry_run=true`, { method, token, json: [...ids] })
    t.equal(res.status, 400, method)
    t.same((res.body as ValidationProblem).errors, [{ location: 'query', pointer: '/dry_run', message: 'is not a parameter of this operation' }], method)
  }
  const after = await harness.request(ordersPath(), { token: readToken() })
  t.same(after.body, before.body, 'the grants are as they were')
  t.equal(after.headers.get('etag'), before.headers.get('etag'))
  const probe = await harness.request('/healthz?verbose=1')
  t.equal(probe.status, 400, 'the same for a public operation')
})

t.test('a parameter name holding / or ~ is named by a JSON Pointer (RFC 6901): ~1 and ~0', async (t) => {
  const problem = await refused(t, `${ordersPath()}?${encodeURIComponent('a/b~c')}=1`)
  t.same(problem.errors, [{ location: 'query', pointer: '/a~1b~0c', message: 'is not a parameter of this operation' }])
})

t.test('a parameter given more than once → 400 saying so, not that the values are of the wrong type', async (t) => {
  const repeated = 'is given more than once; send it once'
  for (const [path, name] of [
    [`${ordersPath()}?limit=5&limit=5`, 'limit'],
    [`${ordersPath()}?sort_by=id&sort_by=name`, 'sort_by'],
    ['/permission_changes?resource_id=a&resource_id=b', 'resource_id'],
    [`${history}?limit=1&before=1&limit=2`, 'limit']
  ]) {
    const problem = await refused(t, path)
    t.same(problem.errors, [{ location: 'query', pointer: `/${name}`, message: repeated }], path)
    t.equal(problem.detail, `query/${name} ${repeated}`, path)
  }
  // A value of the wrong type given once is still said to be one.
  t.same((await refused(t, `${ordersPath()}?limit=five`)).errors, [{ location: 'query', pointer: '/limit', message: 'must be integer' }])
})
