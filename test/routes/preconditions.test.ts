// Conditional requests (RFC 9110 §13): the list's ETag is the authorization's version; If-None-Match
// answers 304; If-Match guards DELETE and POST, checked and applied in one statement. Both headers
// are read as RFC 9110 writes them: a malformed one is 400, a well-formed tag that names no version
// of ours never matches (and never reaches the database).
import fc from 'fast-check'
import t, { type Test } from 'tap'
import type { ObservedResponse } from '../support/contract.js'
import { fastCheckSeed, ordersFixture, ordersPath } from '../support/fixtures.js'
import { build } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { deleteToken, readToken, token } from '../support/tokens.js'

const logs = captureLogs()
// Warnings and errors only: a request the service cannot handle logs an error with its stack.
const harness = await build(t, { LOG_LEVEL: 'warn' }, { logs: logs.stream })
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
const errorLines = () => logs.lines.filter((line) => Number(line.level) >= 50)

/** Every authorization with its version and grants, and the size of the history: what a refused request must leave as it was. */
const databaseState = async () => (await harness.db.query(`
  SELECT a.resource_id, a.client_id, a.version::text,
    (SELECT array_agg(g.permission_id ORDER BY g.permission_id) FROM grants g
      WHERE g.resource_id = a.resource_id AND g.client_id = a.client_id) AS grants,
    (SELECT count(*)::int FROM permission_changes) AS history
  FROM authorizations a ORDER BY a.resource_id, a.client_id`)).rows

/** The 400 a malformed If-Match or If-None-Match answers: invalid-request, naming the header. */
function assertHeaderRefused (t: Test, res: ObservedResponse, header: 'if-match' | 'if-none-match', message: RegExp, label: string) {
  t.equal(res.status, 400, label)
  t.match(res.body, {
    type: '/problems/invalid-request',
    status: 400,
    detail: new RegExp(`^header/${header} `),
    errors: [{ location: 'header', pointer: `/${header}`, message }]
  }, label)
}
const malformed = /^must be \* or a comma-separated list of entity-tags/
const overLong = /^must NOT have more than 8192 characters$/

/** A list of stale tags, spaces, then `last`: exactly `length` characters. */
function listOfLength (length: number, last: string): string {
  const tail = `, ${last}`
  const room = length - tail.length - '"1"'.length
  const more = Math.floor(room / 4)
  return '"1"' + ',"1"'.repeat(more) + ' '.repeat(room - more * 4) + tail
}

t.test('GET answers a strong ETag, the same for every page, order and HEAD, different per authorization', async (t) => {
  const tag = await etag()
  t.match(tag, /^"[1-9]\d*"$/, 'a decimal version without leading zeros')
  t.equal((await list('?limit=2&offset=3&sort_by=description.desc')).headers.get('etag'), tag)
  t.equal((await harness.request(ordersPath(), { method: 'HEAD', token: readToken() })).headers.get('etag'), tag)
  t.not(await etag(ordersPath('app-b')), tag, 'another client\'s grants')
})

t.test('the ETag changes whenever the grants change, or what a page shows of them, by any writer, and only then', async (t) => {
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
  tags.push(await etag())
  t.not(tags[3], tags[2], 'a granted permission described anew: its pages read differently (migration 0009)')
  await harness.db.query("UPDATE permissions SET name = 'read:renamed' WHERE id = 'p_read_orders'")
  tags.push(await etag())
  await harness.db.query("UPDATE permissions SET name = 'read:renamed', description = 'renamed' WHERE id = 'p_read_orders'")
  t.equal(await etag(), tags[4], 'an update that changes nothing')
  await harness.db.query("DELETE FROM permissions WHERE id = 'p_create_orders'")
  tags.push(await etag())
  t.equal(new Set(tags).size, 6, `every change a new tag: ${tags.join(' ')}`)
})

t.test('a DELETE or POST answers 204 with the ETag the grants now have: a later If-Match with it holds', async (t) => {
  const before = await etag()
  const removed = await change('DELETE', ['p_read_orders'], { 'if-match': before })
  t.equal(removed.status, 204)
  t.not(removed.headers.get('etag'), before, 'a new version')
  t.equal(removed.headers.get('etag'), await etag(), 'the one a GET now shows')
  const granted = await change('POST', ['p_read_orders'], { 'if-match': removed.headers.get('etag')! })
  t.equal(granted.status, 204, 'chained on the DELETE\'s tag, without a GET between')
  t.equal(granted.headers.get('etag'), await etag())
  const unchanged = await change('POST', ['p_read_orders'])
  t.equal(unchanged.headers.get('etag'), granted.headers.get('etag'), 'a change that changed nothing: the same tag')
  t.equal(removed.headers.get('consistency-token'), null, 'no Consistency-Token without replicas')
})

t.test('Consistency-Token without replicas: a token is checked, then ignored; a malformed one → 400 naming the header', async (t) => {
  t.equal((await list('', { 'consistency-token': '0/3000148' })).status, 200)
  t.equal((await change('DELETE', ['p_read_orders'], { 'consistency-token': 'FFFFFFFF/FFFFFFFF' })).status, 204)
  for (const token of ['3000148', '0/', '0/3000148 x', 'G/1', '0/123456789', '-1/0', '0/1/2']) {
    for (const res of [await list('', { 'consistency-token': token }), await change('POST', ['p_read_orders'], { 'consistency-token': token })]) {
      t.equal(res.status, 400, token)
      t.match(res.body, { type: '/problems/invalid-request', errors: [{ location: 'header', pointer: '/consistency-token' }] }, token)
    }
  }
})

t.test('If-None-Match naming the current tag (weak or strong, anywhere in a list, or *) → 304 with the ETag and no body', async (t) => {
  const tag = await etag()
  const version = tag.slice(1, -1)
  const lists = [`"1", ${tag}`, `"1",${tag}`, `"1" ,\t${tag}`, `, ,${tag},`, `"1",, W/${tag} ,`, `"a,b", ${tag}`, `W/"", ${tag}`]
  for (const header of [tag, `W/${tag}`, '*', ...lists]) {
    const res = await list('?limit=5', { 'if-none-match': header })
    t.equal(res.status, 304, header)
    t.equal(res.text, '', header)
    t.equal(res.headers.get('etag'), tag, header)
  }
  const head = await harness.request(ordersPath(), { method: 'HEAD', token: readToken(), headers: { 'if-none-match': tag } })
  t.equal(head.status, 304, 'HEAD')
  t.equal(head.headers.get('content-length'), null, 'HEAD\'s 304 as GET\'s: no Content-Length (RFC 9110 §8.6: it would have to be the 200\'s)')
  const [getPage, headPage] = await Promise.all([list(), harness.request(ordersPath(), { method: 'HEAD', token: readToken() })])
  t.equal(headPage.headers.get('content-length'), getPage.headers.get('content-length'), 'HEAD\'s 200 says the length GET\'s body has')
  const others = ['"1"', '""', `"0${version}"`, `"${version}0"`, `"1", W/"0${version}"`, '"9223372036854775808"', '"-1"']
  for (const header of others) t.equal((await list('', { 'if-none-match': header })).status, 200, `${header} names another version`)
  await change('DELETE', ['p_read_orders'])
  t.equal((await list('', { 'if-none-match': tag })).status, 200, 'after a change the old tag no longer matches')
  t.equal((await list('', { 'if-none-match': '*' }, ordersPath('app-c'))).status, 404, 'not authorized: 404, not 304')
})

t.test('a malformed If-None-Match → 400 naming the header, on GET and HEAD', async (t) => {
  const tag = await etag()
  const version = tag.slice(1, -1)
  const headers = [
    version, `${tag} junk`, `${tag}junk`, `${tag} ${tag}`, `*, ${tag}`, `${tag}, *`, `"${version}`, `${version}"`,
    `W/${version}`, `w/${tag}`, `W ${tag}`, `'${version}'`, '"a"b"', '"a b"', '"a\\"b"', ',', ', ,', '**', `${tag};`
  ]
  for (const header of headers) {
    assertHeaderRefused(t, await list('', { 'if-none-match': header }), 'if-none-match', malformed, header)
    const head = await harness.request(ordersPath(), { method: 'HEAD', token: readToken(), headers: { 'if-none-match': header } })
    t.equal(head.status, 400, `HEAD ${header}`)
  }
})

t.test('If-None-Match of up to 8192 characters is read; longer (8193 characters, 68 KB) → 400', async (t) => {
  const tag = await etag()
  const longest = listOfLength(8192, tag)
  t.equal(longest.length, 8192)
  t.equal((await list('', { 'if-none-match': longest })).status, 304, 'the current tag at the end of 8192 characters')
  assertHeaderRefused(t, await list('', { 'if-none-match': listOfLength(8193, tag) }), 'if-none-match', overLong, '8193 characters')
  assertHeaderRefused(t, await list('', { 'if-none-match': `${tag}, ${'"1", '.repeat(14_000)}"1"` }), 'if-none-match', overLong, '68 KB')
})

t.test('GET and HEAD honour If-Match (RFC 9110 §13.1.1): a page of another version than the one named → 412, so a walk through the pages reads one version or stops', async (t) => {
  const tag = await etag()
  const version = tag.slice(1, -1)
  const first = await list('?limit=3', { 'if-match': tag })
  t.equal(first.status, 200, 'the current tag')
  t.equal(first.headers.get('etag'), tag)
  for (const header of ['*', `"1", ${tag}`, `W/${tag}, ${tag}`]) t.equal((await list('?limit=3&offset=1', { 'if-match': header })).status, 200, header)
  for (const header of ['"1"', `W/${tag}`, `"0${version}"`, '"9223372036854775808"']) {
    const res = await list('?limit=3&offset=1', { 'if-match': header })
    t.equal(res.status, 412, `${header}: strong comparison, a version of ours`)
    // A reader's 412, not a writer's: what to do is read the list again from its first page.
    t.match(res.body, { type: '/problems/precondition-failed', detail: /this page would show another version of them\. Read the list again from its first page\.$/ }, header)
  }
  t.equal((await list('?limit=3', { 'if-match': tag, 'if-none-match': tag })).status, 304, 'If-Match holds: If-None-Match decides next')
  t.equal((await list('?limit=3', { 'if-match': '"1"', 'if-none-match': tag })).status, 412, 'If-Match first (RFC 9110 §13.2.2)')
  t.equal((await change('DELETE', ['p_read_orders'])).status, 204)
  const next = await list('?limit=3&offset=1', { 'if-match': tag })
  t.equal(next.status, 412, 'the grants changed after the first page: the second is not served from another version')
  const head = await harness.request(`${ordersPath()}?limit=3&offset=1`, { method: 'HEAD', token: readToken(), headers: { 'if-match': tag } })
  t.equal(head.status, 412, 'HEAD')
  t.equal((await list('', { 'if-match': '*' }, ordersPath('app-c'))).status, 404, 'not authorized: 404 first, * included')
  t.equal((await list('', { 'if-match': tag }, ordersPath('app-c'))).status, 404)
  assertHeaderRefused(t, await list('', { 'if-match': version }), 'if-match', malformed, 'unquoted')
})

t.test('If-Match: a stale tag, a weak one, or one that names no version of ours → 412 precondition-failed and nothing changes', async (t) => {
  const stale = await etag()
  await change('DELETE', ['p_read_orders'])
  const current = await etag()
  const version = current.slice(1, -1)
  const before = await databaseState()
  const headers = [
    stale, `W/${current}`, `W/"", W/${current}`, '"abc"', '""', `"x${version}"`, `"${version}x"`, `"0${version}"`, `"00${version}"`,
    `"+${version}"`, `"-${version}"`, `"${version}.0"`, '"0"', '"-1"', '"9223372036854775807"',
    '"9223372036854775808"', '"9999999999999999999"', '"18446744073709551616"', `"${'9'.repeat(100)}"`, `"1", ${stale},, W/${current}`
  ]
  for (const method of ['DELETE', 'POST'] as const) {
    for (const header of headers) {
      const res = await change(method, ['p_create_orders', 'p_update_refunds'], { 'if-match': header })
      t.equal(res.status, 412, `${method} If-Match: ${header}`)
      // A weak tag naming the current version (a proxy that compressed the list may have weakened
      // it) is not "changed since": the detail says why such a tag never matches.
      t.match(res.body, { type: '/problems/precondition-failed', status: 412, detail: /or the tag is weak \(W\/\), which If-Match never matches/ })
    }
  }
  t.same(await databaseState(), before, 'nothing changed, no history written')
  t.same(errorLines(), [], 'no error logged')
})

t.test('If-Match past bigint → 412, nothing logged at error level, nothing changed', async (t) => {
  const before = await databaseState()
  const overflow = await change('DELETE', ['p_read_orders'], { 'if-match': '"9223372036854775808"' })
  t.equal(overflow.status, 412)
  t.match(overflow.body, { type: '/problems/precondition-failed' })
  t.same(errorLines(), [], 'no error-level log line')
  t.same(await databaseState(), before, 'nothing changed')
})

t.test('If-Match: the largest bigint is a version like any other; with a leading zero it is not', async (t) => {
  await harness.db.query("UPDATE authorizations SET version = 9223372036854775807 WHERE resource_id = 'orders-api' AND client_id = 'app-a'")
  const tag = await etag()
  t.equal(tag, '"9223372036854775807"')
  const before = await databaseState()
  t.equal((await change('DELETE', ['p_read_orders'], { 'if-match': '"09223372036854775807"' })).status, 412)
  t.same(await databaseState(), before, 'nothing changed')
  t.equal((await change('DELETE', ['p_read_orders'], { 'if-match': tag })).status, 204)
  t.equal(await grantCount(), 9)
  t.not(await etag(), tag, 'a new version')
})

t.test('If-Match: the current tag, alone or anywhere in a list (spaces, tabs and empty elements allowed), or * → 204', async (t) => {
  const shapes: Array<(current: string, stale: string) => string> = [
    (current) => current,
    (current, stale) => `${stale}, ${current}`,
    (current, stale) => `${stale},${current}`,
    (current, stale) => `${stale} ,\t${current}`,
    (current) => `, ,${current},`,
    (current, stale) => `"a,b", ${stale} ,, ${current} ,`,
    (current) => `W/${current}, ${current}`
  ]
  let count = await grantCount()
  for (const shape of shapes) {
    // DELETE takes p_read_orders away, POST gives it back.
    for (const method of ['DELETE', 'POST'] as const) {
      const stale = await etag()
      await change('POST', ['p_update_refunds'])
      await change('DELETE', ['p_update_refunds'])
      const header = shape(await etag(), stale)
      const res = await change(method, ['p_read_orders'], { 'if-match': header })
      t.equal(res.status, 204, `${method} If-Match: ${header}`)
      count += method === 'DELETE' ? -1 : 1
      t.equal(await grantCount(), count)
    }
  }
  t.equal((await change('DELETE', ['p_create_orders'], { 'if-match': '*' })).status, 204, '*')
  t.equal(await grantCount(), count - 1)
})

t.test('a malformed If-Match → 400 naming the header, and nothing changes', async (t) => {
  const current = await etag()
  const version = current.slice(1, -1)
  const before = await databaseState()
  const headers = [
    version, `${current} junk`, `${current}junk`, `${current} ${current}`, `*, ${current}`, `${current}, *`, `"${version}`, `${version}"`,
    `W/${version}`, `w/${current}`, `W ${current}`, `W/ ${current}`, `'${version}'`, '"a"b"', '"a b"', `"${version}\t"`, `" ${version}"`, '', ',', ' , , ', '**', '"*"*',
    `${current};`, `<${version}>`
  ]
  for (const method of ['DELETE', 'POST'] as const) {
    for (const header of headers) {
      assertHeaderRefused(t, await change(method, ['p_read_orders'], { 'if-match': header }), 'if-match', malformed, `${method} ${JSON.stringify(header)}`)
    }
  }
  t.same(await databaseState(), before, 'nothing changed')
})

t.test('If-Match of up to 8192 characters is read; longer (8193 characters, 68 KB) → 400, nothing changes', async (t) => {
  const current = await etag()
  const before = await databaseState()
  for (const method of ['DELETE', 'POST'] as const) {
    assertHeaderRefused(t, await change(method, ['p_read_orders'], { 'if-match': listOfLength(8193, current) }), 'if-match', overLong, `${method} 8193 characters`)
    assertHeaderRefused(t, await change(method, ['p_read_orders'], { 'if-match': `${current}, ${'"1", '.repeat(14_000)}"1"` }), 'if-match', overLong, `${method} 68 KB`)
  }
  t.same(await databaseState(), before, 'nothing changed')
  const longest = listOfLength(8192, current)
  t.equal(longest.length, 8192)
  t.equal((await change('DELETE', ['p_read_orders'], { 'if-match': longest })).status, 204, 'the current tag at the end of 8192 characters')
  t.equal(await grantCount(), 9)
})

t.test('order of refusals: 401 and 403, then a malformed header (400), then 404, 412, 422', async (t) => {
  const bad = 'garbage'
  const anonymous = await harness.request(ordersPath(), { method: 'DELETE', json: ['p_read_orders'], headers: { 'if-match': bad } })
  t.equal(anonymous.status, 401, 'no token')
  t.equal((await harness.request(ordersPath(), { headers: { 'if-none-match': bad } })).status, 401, 'no token, GET')
  const reader = await harness.request(ordersPath(), { method: 'DELETE', token: readToken(), json: ['p_read_orders'], headers: { 'if-match': bad } })
  t.equal(reader.status, 403, 'a token without the scope')
  const withoutRead = await harness.request(ordersPath(), { token: deleteToken(), headers: { 'if-none-match': bad } })
  t.equal(withoutRead.status, 403, 'a token without the scope, GET')
  assertHeaderRefused(t, await change('DELETE', ['p_read_orders'], { 'if-match': bad }, ordersPath('app-c')), 'if-match', malformed, 'not authorized')
  assertHeaderRefused(t, await change('POST', ['nope'], { 'if-match': bad }, ordersPath('app-a', 'no-such-api')), 'if-match', malformed, 'no such resource')
  assertHeaderRefused(t, await list('', { 'if-none-match': bad }, ordersPath('no-such-app')), 'if-none-match', malformed, 'no such client')
  t.equal((await change('DELETE', ['p_read_orders'], { 'if-match': '"1"' }, ordersPath('app-c'))).status, 404)
  t.equal((await change('POST', ['nope'], { 'if-match': '"1"' })).status, 412)
  t.equal((await change('POST', ['nope'], { 'if-match': await etag() })).status, 422)
})

t.test('If-None-Match on a change (RFC 9110 §13.1.2): the current tag (weak or strong, in a list) or * → 412 and nothing changes; another tag → 204', async (t) => {
  const stale = await etag()
  await change('DELETE', ['p_read_orders'])
  const current = await etag()
  const before = await databaseState()
  for (const method of ['DELETE', 'POST'] as const) {
    for (const header of [current, `W/${current}`, `${stale}, ${current}`, '*']) {
      const res = await change(method, ['p_create_orders', 'p_update_refunds'], { 'if-none-match': header })
      t.equal(res.status, 412, `${method} If-None-Match: ${header}`)
      t.same(res.body, {
        type: '/problems/precondition-failed',
        title: 'Precondition failed',
        status: 412,
        detail: 'The client\'s grants on the resource are at a version If-None-Match names (* names any); nothing was changed.',
        request_id: res.headers.get('x-request-id')
      })
    }
  }
  t.same(await databaseState(), before, 'nothing changed, no history written')
  assertHeaderRefused(t, await change('DELETE', ['p_read_orders'], { 'if-none-match': 'garbage' }, ordersPath('app-c')), 'if-none-match', malformed, 'malformed: 400 before the 404')
  t.equal((await change('DELETE', ['p_read_orders'], { 'if-none-match': '*' }, ordersPath('app-c'))).status, 404, '* for a client not authorized: the 404 first')
  const both = await change('DELETE', ['p_create_orders'], { 'if-match': stale, 'if-none-match': current })
  t.match(both.body, { detail: /^If-Match names no current ETag/ }, 'both failing: If-Match is evaluated first')
  t.equal((await change('POST', ['nope'], { 'if-none-match': current })).status, 412, '412 before 422')
  const other = await change('DELETE', ['p_create_orders'], { 'if-none-match': `${stale}, "abc", W/"0${current.slice(1)}` })
  t.equal(other.status, 204, 'tags that name another version, or none of ours: the change is made')
  const matching = await change('POST', ['p_create_orders'], { 'if-match': other.headers.get('etag')!, 'if-none-match': stale })
  t.equal(matching.status, 204, 'If-Match holding and If-None-Match not naming the current version')
})

t.test('If-Modified-Since, If-Unmodified-Since, If-Range and Range are ignored (no Last-Modified, no ranges): never a 304, 412 or 400 of their own', async (t) => {
  const past = 'Sun, 06 Nov 1994 08:49:37 GMT'
  const future = 'Fri, 31 Dec 9999 23:59:59 GMT'
  for (const headers of [{ 'if-modified-since': future }, { 'if-modified-since': 'garbage' }, { 'if-range': past }, { range: 'bytes=0-1' }, { range: 'garbage', 'if-range': '"1"' }] as Array<Record<string, string>>) {
    const res = await list('', headers)
    t.equal(res.status, 200, `GET ${JSON.stringify(headers)}`)
    t.equal(res.headers.get('content-range'), null, 'the whole page')
  }
  for (const method of ['DELETE', 'POST'] as const) {
    for (const headers of [{ 'if-unmodified-since': past }, { 'if-unmodified-since': 'garbage' }, { 'if-range': past, range: 'bytes=0-1' }] as Array<Record<string, string>>) {
      t.equal((await change(method, ['p_read_orders'], headers)).status, 204, `${method} ${JSON.stringify(headers)}`)
    }
    // RFC 9110 §13.2.2: with If-Match, If-Unmodified-Since is not evaluated either way.
    t.equal((await change(method, ['p_read_orders'], { 'if-match': await etag(), 'if-unmodified-since': past })).status, 204, `${method} current If-Match, If-Unmodified-Since in the past`)
    t.equal((await change(method, ['p_read_orders'], { 'if-match': '"1"', 'if-unmodified-since': future })).status, 412, `${method} stale If-Match, If-Unmodified-Since in the future`)
  }
  t.equal(await grantCount(), 10, 'each DELETE undone by its POST')
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

t.test('many writers at once on one tag, with and without If-Match: at most one conditional change applies, and first; the history replays to the grants; the ETags chain', async (t) => {
  // app-a holds p_{read,create,update,delete}_orders and _invoices and p_{read,create}_refunds: each
  // conditional request would change something at the tag it names, so once one has applied, every
  // other conditional one names a stale tag. The unconditional ones toggle p_read_orders.
  const conditional: Array<['DELETE' | 'POST', string[]]> = [
    ['DELETE', ['p_read_orders']], ['DELETE', ['p_read_orders', 'p_create_orders']], ['POST', ['p_update_refunds']],
    ['DELETE', ['p_read_invoices']], ['POST', ['p_delete_refunds', 'p_update_refunds']], ['POST', ['p_read_orders', 'p_delete_refunds']]
  ]
  const unconditional: Array<['DELETE' | 'POST', string[]]> = [
    ['DELETE', ['p_read_orders']], ['POST', ['p_read_orders']], ['DELETE', ['p_read_orders', 'p_update_refunds']], ['POST', ['p_read_orders']]
  ]
  const grantsOf = async () => (await harness.db.query("SELECT permission_id FROM grants WHERE resource_id = 'orders-api' AND client_id = 'app-a' ORDER BY permission_id")).rows.map((row) => row.permission_id as string)
  for (let round = 0; round < 8; round++) {
    await harness.db.query('TRUNCATE resources, clients CASCADE')
    await harness.seed(ordersFixture())
    // The history outlives the TRUNCATE of the grants: this round's changes are the newer ones.
    const { rows: [{ last }] } = await harness.db.query('SELECT coalesce(max(id), 0) AS last FROM permission_changes')
    const initial = await grantsOf()
    const tag = await etag()
    // Interleaved (3 is prime to their number), and rotated each round, so that each kind gets to go first.
    const requests = [...conditional.map(([method, ids]) => ({ method, ids, ifMatch: true })), ...unconditional.map(([method, ids]) => ({ method, ids, ifMatch: false }))]
    const order = requests.map((_, i) => requests[(i * 3 + round) % requests.length])
    const answers = await Promise.all(order.map(({ method, ids, ifMatch }) => change(method, ids, ifMatch ? { 'if-match': tag } : {})))
    const sent = new Map(answers.map((res, i) => [res.headers.get('x-request-id'), { res, ...order[i] }]))
    const history = (await harness.db.query("SELECT action, permission_ids, request_id FROM permission_changes WHERE resource_id = 'orders-api' AND client_id = 'app-a' AND id > $1 ORDER BY id", [last])).rows
    const winners = answers.filter((res, i) => order[i].ifMatch && res.status === 204)
    t.same(answers.filter((res, i) => order[i].ifMatch && res.status !== 204).map((res) => res.status), Array(conditional.length - winners.length).fill(412), `round ${round}: the other conditional ones 412`)
    t.ok(answers.every((res, i) => order[i].ifMatch || res.status === 204), `round ${round}: every unconditional one 204`)
    t.ok(winners.length <= 1, `round ${round}: at most one conditional change applied (${winners.length})`)
    if (winners.length === 1) t.equal(history[0]?.request_id, winners[0].headers.get('x-request-id'), `round ${round}: and it was the first change`)
    // Replayed in history order, each row changed what was there to change; each 204's ETag is the
    // version its change left, so the last one is the version a GET shows now.
    const grants = new Set(initial)
    let version = tag
    for (const { action, permission_ids: ids, request_id: requestId } of history) {
      const request = sent.get(requestId)!
      t.equal(action, request.method === 'DELETE' ? 'unauthorized' : 'granted', `round ${round}: the history names its request`)
      for (const id of ids as string[]) {
        t.equal(grants.has(id), action === 'unauthorized', `round ${round}: ${action} ${id} changed it`)
        if (action === 'granted') grants.add(id)
        else grants.delete(id)
      }
      t.not(request.res.headers.get('etag'), version, `round ${round}: a change, a new version`)
      version = request.res.headers.get('etag')!
    }
    t.same(await grantsOf(), [...grants].sort(), `round ${round}: the history replays to the grants`)
    t.equal(await etag(), version, `round ${round}: the last change's ETag is the current one`)
  }
  t.same(errorLines(), [], 'no error logged')
})

// RFC 9110's grammar for both headers, restated as a scanner rather than the spec's regular
// expression: `*`, the entity-tags of a list that names at least one, or undefined when malformed.
type Parsed = '*' | Array<{ weak: boolean, opaque: string }> | undefined
const isEtagc = (c: number) => c === 0x21 || (c >= 0x23 && c <= 0x7e) || (c >= 0x80 && c <= 0xff)
function parseConditional (sent: string): Parsed {
  // What reaches the service: Node drops a field value's leading and trailing whitespace.
  const header = sent.replace(/^[\t ]+|[\t ]+$/g, '')
  if (header === '*') return '*'
  const tags: Array<{ weak: boolean, opaque: string }> = []
  let i = 0
  const skipWhitespace = () => { while (header[i] === ' ' || header[i] === '\t') i++ }
  for (;;) {
    const weak = header.startsWith('W/"', i)
    if (weak || header[i] === '"') {
      const start = i + (weak ? 3 : 1)
      const end = header.indexOf('"', start)
      if (end < 0) return undefined
      const opaque = header.slice(start, end)
      if (![...opaque].every((c) => isEtagc(c.charCodeAt(0)))) return undefined
      tags.push({ weak, opaque })
      i = end + 1
    }
    skipWhitespace()
    if (i === header.length) break
    if (header[i] !== ',') return undefined
    i++
    skipWhitespace()
  }
  return tags.length > 0 ? tags : undefined
}

t.test('generated If-Match and If-None-Match: 400 exactly when RFC 9110 refuses them; else they match as it says, on the list and on a change; nothing changes', async (t) => {
  const seed = fastCheckSeed(t)
  // app-b holds nothing: a DELETE that applies is a no-op, so its version never moves.
  const path = ordersPath('app-b')
  const tag = await etag(path)
  const version = tag.slice(1, -1)
  const before = await databaseState()
  const opaque = fc.oneof(
    { weight: 2, arbitrary: fc.constant(version) },
    { weight: 2, arbitrary: fc.constantFrom(`0${version}`, '', '0', '9223372036854775807', '9223372036854775808', 'a,b', '*', 'W/', `${version} `) },
    { weight: 1, arbitrary: fc.bigInt({ min: 0n, max: 2n ** 70n }).map(String) },
    { weight: 1, arbitrary: fc.string({ unit: fc.constantFrom(...'0123456789aW/,*" \t\\\'\u00e9\u00ff'), maxLength: 8 }) }
  )
  // Mostly well-formed tags, so that matches are common; a malformed element now and then.
  const element = fc.oneof(
    { weight: 12, arbitrary: opaque.map((value) => `"${value}"`) },
    { weight: 6, arbitrary: opaque.map((value) => `W/"${value}"`) },
    { weight: 2, arbitrary: fc.constant('') },
    { weight: 1, arbitrary: opaque.map((value) => `w/"${value}"`) },
    { weight: 1, arbitrary: opaque },
    { weight: 1, arbitrary: opaque.map((value) => `"${value}`) }
  )
  const separator = fc.oneof(
    { weight: 6, arbitrary: fc.constantFrom(',', ', ', ' ,', ' , ', ',\t', '\t,\t') },
    { weight: 1, arbitrary: fc.constantFrom(' ', '', ';') }
  )
  const header = fc.oneof(
    { weight: 1, arbitrary: fc.constantFrom('*', ' * ', '*,*') },
    { weight: 8, arbitrary: fc.tuple(element, fc.array(fc.tuple(separator, element), { maxLength: 4 })).map(([first, rest]) => first + rest.map(([a, b]) => a + b).join('')) }
  )
  await fc.assert(fc.asyncProperty(header, async (value) => {
    const parsed = parseConditional(value)
    const deleted = await harness.request(path, { method: 'DELETE', token: writer(), json: ['p_read_orders'], headers: { 'if-match': value } })
    const strongMatch = parsed === '*' || (parsed?.some((tag) => !tag.weak && tag.opaque === version) ?? false)
    const expectedDelete = parsed === undefined ? 400 : strongMatch ? 204 : 412
    if (deleted.status !== expectedDelete) throw new Error(`If-Match ${JSON.stringify(value)}: expected ${expectedDelete}, got ${deleted.status} ${deleted.text.slice(0, 200)}`)
    if (deleted.status === 400 && !deleted.text.includes('"pointer":"/if-match"')) throw new Error(`a 400 that does not name If-Match: ${deleted.text}`)
    const weakMatch = parsed === '*' || (parsed?.some((tag) => tag.opaque === version) ?? false)
    const guarded = await harness.request(path, { method: 'DELETE', token: writer(), json: ['p_read_orders'], headers: { 'if-none-match': value } })
    const expectedGuarded = parsed === undefined ? 400 : weakMatch ? 412 : 204
    if (guarded.status !== expectedGuarded) throw new Error(`DELETE If-None-Match ${JSON.stringify(value)}: expected ${expectedGuarded}, got ${guarded.status} ${guarded.text.slice(0, 200)}`)
    const listed = await list('', { 'if-none-match': value }, path)
    const expectedList = parsed === undefined ? 400 : weakMatch ? 304 : 200
    if (listed.status !== expectedList) throw new Error(`If-None-Match ${JSON.stringify(value)}: expected ${expectedList}, got ${listed.status} ${listed.text.slice(0, 200)}`)
    if (listed.status === 400 && !listed.text.includes('"pointer":"/if-none-match"')) throw new Error(`a 400 that does not name If-None-Match: ${listed.text}`)
  }), { seed, numRuns: 400, endOnFailure: true })
  t.same(await databaseState(), before, 'nothing changed, no history written')
  t.same(errorLines(), [], 'no error logged')
})

t.test('no request of this file logged an error', async (t) => {
  t.same(errorLines(), [])
})
