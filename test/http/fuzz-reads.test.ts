// Property-based tests (fast-check) of what a caller reads, against the running service over HTTP:
// generated query strings (the list and the change feed), path ids and problem type names. Every
// response is also checked against the spec by the harness (declared status, problem+json,
// schema). Properties: never a 5xx, and a 2xx exactly when the spec allows the input.
// test/http/fuzz-writes.test.ts generates bodies, media types and credentials.
import fc from 'fast-check'
import t from 'tap'
import { ordersPath } from '../support/fixtures.js'
import { problemTypes } from '../../src/problems.js'
import { readToken } from '../support/tokens.js'
import { RUNS, startFuzzing, validId } from './fuzz.js'

const { send, sent } = await startFuzzing(t)
const read = readToken()

// The spec's rules, restated independently of the service's code.
const decimal = /^-?\d+$/
const sortPattern = /^(id|name|description)(\.(asc|desc))?(,(id|name|description)(\.(asc|desc))?)*$/u
const within = (value: string, min: number, max: number) => decimal.test(value) && Number(value) >= min && Number(value) <= max

const listRules: Record<string, (value: string) => boolean> = {
  limit: (value) => within(value, 1, 500),
  offset: (value) => within(value, 0, 99999999999999),
  sort_by: (value) => sortPattern.test(value) && value.length <= 100
}
const feedRules: Record<string, (value: string) => boolean> = {
  after: (value) => /^[0-9]{1,18}$/.test(value),
  limit: (value) => within(value, 1, 500),
  resource_id: validId
}

function queryAllowed (pairs: Array<[string, string]>, rules = listRules): boolean {
  // A parameter the operation does not declare is refused, not ignored.
  if (pairs.some(([name]) => !Object.hasOwn(rules, name))) return false
  for (const [name, rule] of Object.entries(rules)) {
    const values = pairs.filter(([key]) => key === name).map(([, value]) => value)
    if (values.length > 1 || (values.length === 1 && !rule(values[0]))) return false
  }
  return true
}

const numberish = fc.oneof(
  fc.integer({ min: -10, max: 600 }).map(String),
  fc.bigInt({ min: -(10n ** 25n), max: 10n ** 25n }).map(String),
  fc.constantFrom('', ' 5', '5 ', '0x10', '1e2', '1.0', '+5', '-0', '007', '５', 'NaN', 'Infinity', '99999999999999', '100000000000000'),
  fc.double().map(String)
)
const sortish = fc.oneof(
  fc.array(fc.tuple(fc.constantFrom('id', 'name', 'description', 'NAME', 'password', 'p.name', ''), fc.constantFrom('', '.asc', '.desc', '.ASC', '.up', ' desc')), { minLength: 1, maxLength: 5 })
    .map((keys) => keys.map(([property, direction]) => property + direction).join(',')),
  fc.constantFrom('name;DROP TABLE grants', "name'--", 'name,', ',name', 'name.asc NULLS FIRST', '(SELECT 1)', 'id,'.repeat(40) + 'id'),
  fc.string({ unit: 'binary', maxLength: 40 })
)
const queryPair = fc.oneof(
  fc.tuple(fc.constant('limit'), numberish),
  fc.tuple(fc.constant('offset'), numberish),
  fc.tuple(fc.constant('sort_by'), sortish),
  fc.tuple(fc.constantFrom('LIMIT', 'page', '__proto__', 'constructor', 'access_token', fc.string({ unit: 'binary', maxLength: 10 }) as unknown as string), fc.string({ unit: 'binary', maxLength: 20 }))
)

t.test('GET with generated query strings: 200 exactly when the spec allows it, else a 400 problem', async (t) => {
  await fc.assert(fc.asyncProperty(fc.array(queryPair, { maxLength: 5 }), async (pairs) => {
    const query = pairs.map(([key, value]) => `${encodeURIComponent(key)}=${encodeURIComponent(value)}`).join('&')
    const res = await send(`${ordersPath()}?${query}`, { token: read })
    const expected = queryAllowed(pairs) ? 200 : 400
    if (res.status !== expected) throw new Error(`expected ${expected}, got ${res.status}: ${res.text.slice(0, 200)}`)
  }))
  t.pass(`${RUNS} query strings`)
})

const afterish = fc.oneof(
  numberish,
  fc.bigInt({ min: 0n, max: 10n ** 19n }).map(String),
  fc.constantFrom('0', '9'.repeat(18), '9'.repeat(19), '0'.repeat(18), '0'.repeat(19), '١٢', '1 ', '١')
)
const resourceIdish = fc.oneof(
  fc.constantFrom('orders-api', 'other-api', '', ' ', '\u0000', 'a\u0000b', 'x'.repeat(255), 'x'.repeat(256), 'team/api v2&x=ü'),
  fc.string({ unit: 'binary', maxLength: 300 }),
  fc.string({ unit: 'grapheme', minLength: 250, maxLength: 260 })
)
const feedPair = fc.oneof(
  fc.tuple(fc.constant('after'), afterish),
  fc.tuple(fc.constant('limit'), numberish),
  fc.tuple(fc.constant('resource_id'), resourceIdish),
  fc.tuple(fc.constantFrom('offset', 'sort_by', 'page', 'resource', 'AFTER', 'Last-Event-ID', '__proto__', 'access_token', fc.string({ unit: 'binary', maxLength: 10 }) as unknown as string), fc.string({ unit: 'binary', maxLength: 20 }))
)

t.test('the change feed with generated query strings: 200 exactly when the spec allows it, else a 400 problem', async (t) => {
  await fc.assert(fc.asyncProperty(fc.array(feedPair, { maxLength: 5 }), async (pairs) => {
    const query = pairs.map(([key, value]) => `${encodeURIComponent(key)}=${encodeURIComponent(value)}`).join('&')
    // No prune ever runs here: no cursor is below the mark, so no 410.
    const res = await send(`/permission_changes?${query}`, { token: read })
    const expected = queryAllowed(pairs, feedRules) ? 200 : 400
    if (res.status !== expected) throw new Error(`${query}: expected ${expected}, got ${res.status}: ${res.text.slice(0, 200)}`)
  }))
  t.pass(`${RUNS} query strings`)
})

t.test('generated path ids: 400 when the spec refuses them, else 200 or a 404 problem; never a router 404', async (t) => {
  const id = fc.oneof(
    fc.string({ unit: 'binary', maxLength: 300 }),
    fc.string({ unit: 'grapheme', minLength: 250, maxLength: 260 }),
    fc.constantFrom('orders-api', 'app-a', 'a/b', '..', '%', ' ', '\u0000', 'x'.repeat(255), 'x'.repeat(256))
  )
  await fc.assert(fc.asyncProperty(id, id, async (resource, client) => {
    // "." and ".." are path segments every URL parser removes (RFC 3986 §5.2.4), even percent-encoded.
    fc.pre(![resource, client].some((value) => value === '.' || value === '..'))
    let path: string
    try {
      path = ordersPath(client, resource)
    } catch {
      fc.pre(false) // a lone surrogate cannot be percent-encoded
      return
    }
    const res = await send(path, { token: read })
    const allowed = validId(resource) && validId(client)
    const ok = allowed ? [200, 404].includes(res.status) : res.status === 400
    if (!ok) throw new Error(`${JSON.stringify([resource, client])}: got ${res.status} ${res.text.slice(0, 200)}`)
    if (res.status === 404 && !String((res.body as { type?: string }).type).startsWith('/problems/')) {
      throw new Error(`a router 404 for ${JSON.stringify([resource, client])}`)
    }
  }))
  t.pass(`${RUNS} pairs of ids`)
})

t.test('generated problem type names: 200 for a type of the catalogue, 400 when the spec refuses the name, else a 404 problem; no token needed', async (t) => {
  const namePattern = /^[a-z]+(-[a-z]+)*$/
  const name = fc.oneof(
    fc.constantFrom(...Object.keys(problemTypes), 'constructor', '__proto__', 'toString', 'Overloaded', 'overloaded-', 'a'.repeat(64), 'a'.repeat(65), '%', ' '),
    fc.stringMatching(/^[a-z-]{1,20}$/),
    fc.string({ unit: 'binary', maxLength: 70 })
  )
  await fc.assert(fc.asyncProperty(name, fc.constantFrom('text/html', 'application/json', '*/*'), async (value, accept) => {
    // "." and ".." are path segments every URL parser removes; "" names no segment at all.
    fc.pre(!['', '.', '..'].includes(value))
    let segment: string
    try {
      segment = encodeURIComponent(value)
    } catch {
      fc.pre(false) // a lone surrogate cannot be percent-encoded
      return
    }
    const res = await send(`/problems/${segment}`, { headers: { accept } })
    const expected = Object.hasOwn(problemTypes, value) ? 200 : namePattern.test(value) && value.length <= 64 ? 404 : 400
    if (res.status !== expected) throw new Error(`${JSON.stringify(value)}: expected ${expected}, got ${res.status} ${res.text.slice(0, 200)}`)
  }))
  t.pass(`${RUNS} names`)
})

t.test('every run of the four properties reached the service', async (t) => {
  t.ok(sent() >= 4 * RUNS, `${sent()} requests`)
})
