// Property-based tests (fast-check) of what a caller sends, against the running service over HTTP:
// generated bodies and media types (DELETE, and POST under a stale If-Match) and credentials.
// Every response is also checked against the spec by the harness (declared status, problem+json,
// schema). Properties: never a 5xx, a 2xx (POST: 412) exactly when the spec allows the input, and
// nothing granted, removed or recorded. test/http/fuzz-reads.test.ts generates what is read.
import fc from 'fast-check'
import t from 'tap'
import { ordersFixture, ordersPath } from '../support/fixtures.js'
import { deleteToken, readToken, token } from '../support/tokens.js'
import { RUNS, startFuzzing, validId } from './fuzz.js'

const { harness, send, sent } = await startFuzzing(t)
const read = readToken()
const remove = deleteToken()

const permissionIds = ordersFixture().permissions!.filter(({ resource_id: resource }) => resource === 'orders-api').map(({ id }) => id)
const jsonContentTypes = ['application/json', 'application/json; charset=utf-8', 'application/json;charset=UTF-8']

// Bodies and content types for the two operations that take the same body, DELETE and POST.
const bodyArb = () => fc.oneof(
  fc.json({ maxDepth: 4 }),
  fc.array(fc.oneof(fc.constantFrom(...permissionIds), fc.string({ unit: 'binary', maxLength: 260 })), { minLength: 0, maxLength: 520 }).map((ids) => JSON.stringify(ids)),
  fc.array(fc.constantFrom(...permissionIds), { minLength: 1, maxLength: 20 }).map((ids) => JSON.stringify(ids)),
  fc.integer({ min: 1, max: 20_000 }).map((depth) => '['.repeat(depth) + ']'.repeat(depth)),
  fc.string({ unit: 'binary', maxLength: 50 })
)
const contentTypeArb = () => fc.oneof(fc.constantFrom(...jsonContentTypes, 'text/plain', 'application/x-www-form-urlencoded', 'application/json; charset=utf-16'), fc.string({ unit: 'grapheme-ascii', maxLength: 20 }))

t.test('POST with generated bodies and content types under a stale If-Match: 412 exactly when the spec allows the body, nothing granted', async (t) => {
  const before = (await harness.db.query('SELECT count(*)::int AS n FROM grants')).rows[0].n
  const grantor = token({ scope: 'create:resource' }, { expiresIn: 3600 })
  await fc.assert(fc.asyncProperty(bodyArb(), contentTypeArb(), async (text, type) => {
    if (!/^[\x20-\x7e]*$/.test(type)) return
    // No ETag is ever "0": a body the spec allows reaches the precondition and stops there.
    const headers: Record<string, string> = { 'if-match': '"0"' }
    if (type !== '') headers['content-type'] = type
    const res = await send(ordersPath('app-a'), { method: 'POST', token: grantor, headers, body: text })
    let parsed: unknown
    try { parsed = JSON.parse(text) } catch { parsed = Symbol('not JSON') }
    const allowed = jsonContentTypes.includes(type) && Array.isArray(parsed) && parsed.length >= 1 && parsed.length <= 500 && parsed.every(validId)
    if (allowed ? res.status !== 412 : (res.status < 400 || res.status >= 500 || res.status === 412)) {
      throw new Error(`${JSON.stringify(type)} ${text.slice(0, 80)}: got ${res.status} ${res.text.slice(0, 200)}`)
    }
  }))
  t.equal((await harness.db.query('SELECT count(*)::int AS n FROM grants')).rows[0].n, before, 'no grant was added')
  t.same((await harness.db.query('SELECT count(*)::int AS n FROM permission_changes')).rows, [{ n: 0 }], 'no change recorded')
})

t.test('DELETE with generated bodies and content types: 204/422 exactly when the spec allows it, nothing changes', async (t) => {
  const before = (await harness.db.query('SELECT count(*)::int AS n FROM grants')).rows[0].n
  const body = bodyArb()
  const contentType = contentTypeArb()
  await fc.assert(fc.asyncProperty(body, contentType, async (text, type) => {
    const headers: Record<string, string> = {}
    // fetch refuses some header values; those are the HTTP layer's business, not this property's.
    if (!/^[\x20-\x7e]*$/.test(type)) return
    if (type !== '') headers['content-type'] = type
    // app-b is authorized with no grants: a valid request is a no-op, so the data never changes.
    const res = await send(ordersPath('app-b'), { method: 'DELETE', token: remove, headers, body: text })
    let parsed: unknown
    try { parsed = JSON.parse(text) } catch { parsed = Symbol('not JSON') }
    const isJsonType = jsonContentTypes.includes(type)
    const allowed = isJsonType && Array.isArray(parsed) && parsed.length >= 1 && parsed.length <= 500 && parsed.every(validId)
    if (allowed) {
      const known = (parsed as string[]).every((id) => permissionIds.includes(id))
      if (res.status !== (known ? 204 : 422)) throw new Error(`expected ${known ? 204 : 422}, got ${res.status}: ${res.text.slice(0, 200)}`)
    } else if (res.status < 400 || res.status >= 500) {
      throw new Error(`${JSON.stringify(type)} ${text.slice(0, 80)}: got ${res.status}`)
    } else if (isJsonType && res.status === 415) {
      throw new Error(`application/json refused as 415: ${text.slice(0, 80)}`)
    }
  }))
  t.equal((await harness.db.query('SELECT count(*)::int AS n FROM grants')).rows[0].n, before, 'no grant was removed')
})

t.test('generated credentials: 401 with a Bearer challenge unless the token is real; a tampered token never passes', async (t) => {
  const credentials = fc.oneof(
    fc.string({ unit: 'binary-ascii', maxLength: 200 }).map((value) => value.replace(/[^\x20-\x7e]/g, '')),
    fc.string({ unit: 'binary-ascii', maxLength: 200 }).map((value) => `Bearer ${value.replace(/[^\x20-\x7e]/g, '')}`),
    fc.tuple(fc.integer({ min: 0, max: 10_000 }), fc.constantFrom(...'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'))
      .map(([at, replacement]) => {
        // Tamper with one character of the header or payload part (never a signature's padding bits).
        const [header, payload, signature] = read.split('.')
        const signed = `${header}.${payload}`
        const index = at % (signed.length - 1)
        if (signed[index] === '.' || signed[index] === replacement) return 'Bearer x'
        return `Bearer ${signed.slice(0, index)}${replacement}${signed.slice(index + 1)}.${signature}`
      })
  )
  await fc.assert(fc.asyncProperty(credentials, async (authorization) => {
    const res = await send(ordersPath(), { headers: { authorization } })
    if (res.status !== 401) throw new Error(`${authorization.slice(0, 60)}: got ${res.status}`)
    if (!/^Bearer( |$)/.test(res.headers.get('www-authenticate') ?? '')) throw new Error('no Bearer challenge')
  }))
  t.pass(`${RUNS} credentials`)
})

t.test('every run of the three properties reached the service', async (t) => {
  t.ok(sent() >= 3 * RUNS, `${sent()} requests`)
})
