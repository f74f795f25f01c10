import { generateKeyPairSync, randomBytes } from 'node:crypto'
import { connect } from 'node:net'
import { createSigner } from 'fast-jwt'
import Fastify from 'fastify'
import t, { type Test } from 'tap'
import type { ObservedResponse } from '../support/contract.js'
import { ordersFixture, ordersPath } from '../support/fixtures.js'
import auth, { grantedScopes, issuedInTheFuture, publicRoute, tokenAcceptedUntil, VerifiedTokens } from '../../plugins/auth/index.js'
import { build, type Harness } from '../support/harness.js'
import { until } from '../support/waiting.js'
import { craftedToken, ecKeyPair, inOneMinute, now, readToken, rsaKeyPair, TEST_SECRET, token } from '../support/tokens.js'

const harness = await build(t)
await harness.seed(ordersFixture())

const OTHER_SECRET = randomBytes(32).toString('base64url')
const ISSUER = 'https://issuer.example/'
const AUDIENCE = 'client-permissions-service'

const problemType = (res: ObservedResponse) => (res.body as { type?: string }).type
const bearer = (value: string) => ({ authorization: `Bearer ${value}` })

/** GET on the orders collection of `on` (the default harness unless told) with these headers. */
const get = (headers: Record<string, string> = {}, query = '', on: Harness = harness) =>
  on.request(ordersPath() + query, { headers })

async function grantCount (on: Harness = harness): Promise<number> {
  const { rows } = await on.db.query('SELECT count(*)::int AS n FROM grants')
  return rows[0].n
}

function isMissingCredentials (t: Test, res: ObservedResponse, label: string) {
  t.equal(res.status, 401, label)
  t.equal(res.headers.get('www-authenticate'), 'Bearer', `${label}: no error parameter`)
  t.equal(problemType(res), '/problems/missing-credentials', label)
}

function isInvalidToken (t: Test, res: ObservedResponse, label: string, description?: string) {
  t.equal(res.status, 401, label)
  const challenge = res.headers.get('www-authenticate')
  t.match(challenge, /^Bearer error="invalid_token", error_description="[^"\\]+"$/, label)
  if (description) t.equal(challenge, `Bearer error="invalid_token", error_description="${description}"`, label)
  t.equal(problemType(res), '/problems/invalid-token', label)
}

function isInsufficientScope (t: Test, res: ObservedResponse, scope: string, label: string) {
  t.equal(res.status, 403, label)
  t.equal(res.headers.get('www-authenticate'), `Bearer error="insufficient_scope", scope="${scope}"`, label)
  t.equal(problemType(res), '/problems/insufficient-scope', label)
}

/** A service verifying with a public key only: JWT_SECRET is blanked, which loadConfig drops. */
async function buildWithPublicKey (t: Test, publicKey: string): Promise<Harness> {
  const withKey = await build(t, { JWT_SECRET: '', JWT_PUBLIC_KEY: publicKey })
  await withKey.seed(ordersFixture())
  return withKey
}

const readClaims = () => ({ scope: 'read:resource', exp: inOneMinute() })

/** A read token correctly signed with an algorithm other than the one the service pins. */
const signed = (algorithm: 'HS384' | 'HS512' | 'RS384' | 'RS512' | 'PS256', key: string) =>
  createSigner({ key, algorithm })(readClaims())

t.test('no Authorization header → 401, WWW-Authenticate "Bearer" without error, missing-credentials', async (t) => {
  isMissingCredentials(t, await get(), 'GET')
  isMissingCredentials(t, await harness.request(ordersPath(), { method: 'DELETE', json: ['p_read_orders'] }), 'DELETE')
})

t.test('a non-Bearer scheme (Basic, Digest, Token) → 401 missing-credentials without error', async (t) => {
  const headers = ['Basic dXNlcjpwYXNz', 'Basic xxx', 'Digest username="a"', `Token ${readToken()}`, `Bearerx${readToken()}`,
    `NotBearer ${readToken()}`]
  for (const authorization of headers) isMissingCredentials(t, await get({ authorization }), authorization.slice(0, 12))
})

t.test('unauthenticated requests with an invalid query or body → 401: auth runs before validation and parsing', async (t) => {
  isMissingCredentials(t, await get({}, '?limit=abc'), '?limit=abc')
  isMissingCredentials(t, await get({}, '?sort_by=password&offset=-1'), 'bad sort_by and offset')
  const deletes: Array<[string, { headers?: Record<string, string>, body?: string, json?: unknown }]> = [
    ['text/plain body', { headers: { 'content-type': 'text/plain' }, body: 'p_read_orders' }],
    ['non-array JSON body', { json: { ids: ['p_read_orders'] } }],
    ['empty array', { json: [] }],
    ['unparseable JSON', { headers: { 'content-type': 'application/json' }, body: '[' }],
    ['no body at all', {}]
  ]
  for (const [label, options] of deletes) {
    isMissingCredentials(t, await harness.request(ordersPath(), { method: 'DELETE', ...options }), label)
  }
  isInvalidToken(t, await get(bearer('garbage'), '?limit=abc'), 'a bad token with ?limit=abc')
  const [label, options] = deletes[0]
  isInvalidToken(t, await harness.request(ordersPath(), { method: 'DELETE', ...options, headers: { ...options.headers, ...bearer('garbage') } }), `bad token, ${label}`)
})

t.test('authenticated but out of scope with an invalid query or body → 403 before validation', async (t) => {
  isInsufficientScope(t, await get(bearer(token({ scope: 'delete:resource' })), '?limit=abc'), 'read:resource', '?limit=abc')
  const res = await harness.request(ordersPath(), {
    method: 'DELETE', headers: { 'content-type': 'text/plain', ...bearer(readToken()) }, body: 'p_read_orders'
  })
  isInsufficientScope(t, res, 'delete:resource', 'text/plain DELETE with a read token')
})

t.test('the Bearer scheme is case-insensitive (bearer, BEARER, BeArEr), then one or more spaces (RFC 6750 §2.1) → 200', async (t) => {
  for (const scheme of ['Bearer', 'bearer', 'BEARER', 'BeArEr', 'Bearer  ']) {
    const res = await get({ authorization: `${scheme} ${readToken()}` })
    t.equal(res.status, 200, scheme)
    t.equal(res.headers.get('x-total-count'), '10', scheme)
  }
})

t.test('a malformed Bearer header (no token, two tokens, the scheme twice, illegal characters) → 401 invalid_token', async (t) => {
  const valid = readToken()
  const headers = ['Bearer', `Bearer ${valid} ${valid}`, 'Bearer a b', `Bearer Bearer ${valid}`, `Bearer x Bearer ${valid}`,
    `Bearer ${valid}!`, `Bearer ${valid},x`, `Bearer "${valid}"`, `Bearer ${valid.replace('.', '$')}`, `Bearer ${valid}=x`]
  for (const authorization of headers) {
    isInvalidToken(t, await get({ authorization }), authorization.slice(0, 40), 'The access token is invalid')
  }
})

t.test('a garbage token → 401 invalid_token, invalid-token problem', async (t) => {
  for (const garbage of ['garbage', 'a.b.c', 'eyJhbGciOiJIUzI1NiJ9.e30.', `${readToken()}x`]) {
    isInvalidToken(t, await get(bearer(garbage)), garbage.slice(0, 40), 'The access token is invalid')
  }
})

t.test('a token signed with another secret → 401 invalid_token', async (t) => {
  isInvalidToken(t, await get(bearer(token({ scope: 'read:resource' }, { key: OTHER_SECRET }))), 'other secret', 'The access token is invalid')
})

t.test('a hand-built HS256 token with the right secret → 200 (the crafted-token control)', async (t) => {
  const res = await get(bearer(craftedToken({ alg: 'HS256', typ: 'JWT' }, readClaims(), TEST_SECRET)))
  t.equal(res.status, 200)
})

t.test('expiry: exp 40 s in the past → 401 expired; 10 s in the past → 200 (30 s of clock skew)', async (t) => {
  const expired = await get(bearer(token({ scope: 'read:resource' }, { expiresIn: -40 })))
  isInvalidToken(t, expired, 'exp 40 s ago', 'The access token expired')
  const longExpired = await get(bearer(token({ scope: 'read:resource' }, { expiresIn: -3600 })))
  isInvalidToken(t, longExpired, 'exp an hour ago', 'The access token expired')
  const skewed = await get(bearer(token({ scope: 'read:resource' }, { expiresIn: -10 })))
  t.equal(skewed.status, 200, 'exp 10 s ago')
})

t.test('a token without exp → 401 invalid_token', async (t) => {
  isInvalidToken(t, await get(bearer(token({ scope: 'read:resource' }, { expiresIn: null }))), 'no exp', 'The access token is invalid')
})

t.test('not before: nbf 40 s ahead → 401 not valid yet (never 500); 10 s ahead → 200', async (t) => {
  const early = await get(bearer(token({ scope: 'read:resource', nbf: now() + 40 })))
  isInvalidToken(t, early, 'nbf in 40 s', 'The access token is not valid yet')
  const skewed = await get(bearer(token({ scope: 'read:resource', nbf: now() + 10 })))
  t.equal(skewed.status, 200, 'nbf in 10 s')
  const past = await get(bearer(token({ scope: 'read:resource', nbf: now() - 60 })))
  t.equal(past.status, 200, 'nbf a minute ago')
})

t.test('a token refused as not valid yet is accepted as soon as its nbf comes within the tolerance: the refusal is not kept', async (t) => {
  // nbf 31 s ahead (in whole seconds): refused under the 30 s tolerance until the next whole second,
  // which may be a millisecond away. An acceptance answered after that second began says nothing:
  // a new token then. One answered before it is the refusal not made.
  let early = ''
  let first: ObservedResponse | undefined
  for (let attempt = 0; attempt < 10 && first === undefined; attempt++) {
    const nbf = now() + 31
    early = token({ scope: 'read:resource', nbf })
    const answer = await get(bearer(early))
    if (answer.status !== 200 || Date.now() < (nbf - 30) * 1000) first = answer
  }
  if (!first) return t.fail('no answer came while the token was not valid yet, in ten tries')
  isInvalidToken(t, first, 'nbf in 31 s', 'The access token is not valid yet')
  await until('the same token accepted', async () => (await get(bearer(early))).status === 200, 10_000)
  t.pass('accepted once valid')
})

t.test('an unsigned alg:none token → 401 invalid_token', async (t) => {
  for (const alg of ['none', 'None', 'NONE']) {
    isInvalidToken(t, await get(bearer(craftedToken({ alg, typ: 'JWT' }, readClaims()))), alg)
  }
  // The same unsigned token with the HS256 header and no signature.
  isInvalidToken(t, await get(bearer(craftedToken({ alg: 'HS256', typ: 'JWT' }, readClaims()))), 'HS256 without signature')
})

t.test('a crit header naming an unknown extension → 401 invalid_token, even when correctly signed', async (t) => {
  const header = { alg: 'HS256', typ: 'JWT', crit: ['urn:example:unknown'], 'urn:example:unknown': true }
  isInvalidToken(t, await get(bearer(craftedToken(header, readClaims(), TEST_SECRET))), 'crit')
})

t.test('with JWT_SECRET only HS256 verifies: RS256, ES256, HS384 and HS512 tokens → 401', async (t) => {
  isInvalidToken(t, await get(bearer(token({ scope: 'read:resource' }, { algorithm: 'RS256' }))), 'RS256')
  isInvalidToken(t, await get(bearer(token({ scope: 'read:resource' }, { algorithm: 'ES256' }))), 'ES256')
  for (const algorithm of ['HS384', 'HS512'] as const) {
    isInvalidToken(t, await get(bearer(signed(algorithm, TEST_SECRET))), `${algorithm} with the right secret`)
  }
})

t.test('JWT_PUBLIC_KEY (RSA): RS256 → 200; HS256 keyed with the public key, HS256 with the old secret, ES256, RS384/RS512/PS256, another RSA key → 401', async (t) => {
  const rs = await buildWithPublicKey(t, rsaKeyPair().publicKey)
  const ok = await get(bearer(token({ scope: 'read:resource' }, { algorithm: 'RS256' })), '', rs)
  t.equal(ok.status, 200, 'RS256')
  t.equal(ok.headers.get('x-total-count'), '10')
  const confused = craftedToken({ alg: 'HS256', typ: 'JWT' }, readClaims(), rsaKeyPair().publicKey)
  isInvalidToken(t, await get(bearer(confused), '', rs), 'HS256 keyed with the RSA public key PEM')
  isInvalidToken(t, await get(bearer(readToken()), '', rs), 'HS256 with the test secret (JWT_SECRET was dropped)')
  isInvalidToken(t, await get(bearer(token({ scope: 'read:resource' }, { algorithm: 'ES256' })), '', rs), 'ES256')
  for (const algorithm of ['RS384', 'RS512', 'PS256'] as const) {
    isInvalidToken(t, await get(bearer(signed(algorithm, rsaKeyPair().privateKey)), '', rs), `${algorithm} with the right key`)
  }
  const stranger = generateKeyPairSync('rsa', { modulusLength: 2048, privateKeyEncoding: { type: 'pkcs8', format: 'pem' }, publicKeyEncoding: { type: 'spki', format: 'pem' } })
  isInvalidToken(t, await get(bearer(token({ scope: 'read:resource' }, { algorithm: 'RS256', key: stranger.privateKey })), '', rs), 'RS256 with another RSA key')
})

t.test('JWT_PUBLIC_KEY (P-256): ES256 → 200; RS256 and HS256 keyed with the public key → 401', async (t) => {
  const es = await buildWithPublicKey(t, ecKeyPair().publicKey)
  const ok = await get(bearer(token({ scope: 'read:resource' }, { algorithm: 'ES256' })), '', es)
  t.equal(ok.status, 200, 'ES256')
  isInvalidToken(t, await get(bearer(token({ scope: 'read:resource' }, { algorithm: 'RS256' })), '', es), 'RS256')
  const confused = craftedToken({ alg: 'HS256', typ: 'JWT' }, readClaims(), ecKeyPair().publicKey)
  isInvalidToken(t, await get(bearer(confused), '', es), 'HS256 keyed with the EC public key PEM')
  isInvalidToken(t, await get(bearer(readToken()), '', es), 'HS256 with the test secret')
})

t.test('a JWT_PUBLIC_KEY whose newlines are literal "\\n" escapes still verifies RS256 → 200', async (t) => {
  const flattened = rsaKeyPair().publicKey.trim().replaceAll('\n', '\\n')
  t.notMatch(flattened, /\n/, 'the key is on one line')
  t.match(flattened, /\\n/)
  const rs = await buildWithPublicKey(t, flattened)
  const ok = await get(bearer(token({ scope: 'read:resource' }, { algorithm: 'RS256' })), '', rs)
  t.equal(ok.status, 200)
  isInvalidToken(t, await get(bearer(craftedToken({ alg: 'HS256', typ: 'JWT' }, readClaims(), rsaKeyPair().publicKey)), '', rs), 'HS256 confusion')
})

t.test('JWT_ISSUER and JWT_AUDIENCE set', async (t) => {
  const strict = await build(t, { JWT_ISSUER: ISSUER, JWT_AUDIENCE: AUDIENCE })
  await strict.seed(ordersFixture())
  const withClaims = (claims: Record<string, unknown>) => get(bearer(token({ scope: 'read:resource', ...claims })), '', strict)

  t.test('the right iss and aud → 200', async (t) => {
    t.equal((await withClaims({ iss: ISSUER, aud: AUDIENCE })).status, 200, 'aud as a string')
    t.equal((await withClaims({ iss: ISSUER, aud: ['someone-else', AUDIENCE] })).status, 200, 'aud as an array')
  })

  t.test('a wrong iss or aud → 401 invalid_token', async (t) => {
    isInvalidToken(t, await withClaims({ iss: 'https://evil.example/', aud: AUDIENCE }), 'wrong iss')
    isInvalidToken(t, await withClaims({ iss: ISSUER.slice(0, -1), aud: AUDIENCE }), 'iss without the trailing slash')
    isInvalidToken(t, await withClaims({ iss: ISSUER, aud: 'someone-else' }), 'wrong aud')
    isInvalidToken(t, await withClaims({ iss: ISSUER, aud: ['someone-else'] }), 'aud array without ours')
  })

  // fast-jwt only checks allowedIss/allowedAud when the claim is present; requiredClaims is ['exp'].
  t.test('a missing iss → 401 invalid_token', async (t) => {
    isInvalidToken(t, await withClaims({ aud: AUDIENCE }), 'no iss')
  })

  t.test('a missing aud → 401 invalid_token', async (t) => {
    isInvalidToken(t, await withClaims({ iss: ISSUER }), 'no aud')
  })

  // fast-jwt reads aud as a string or an array, and iss, exp and nbf as one value of one type.
  t.test('claims of the wrong shape → 401 invalid_token: iss in an array, aud empty, exp or nbf as text or null', async (t) => {
    const crafted = (claims: Record<string, unknown>) => get(bearer(craftedToken({ alg: 'HS256', typ: 'JWT' },
      { scope: 'read:resource', iss: ISSUER, aud: AUDIENCE, exp: inOneMinute(), ...claims }, TEST_SECRET)), '', strict)
    t.equal((await crafted({})).status, 200, 'the control')
    for (const claims of [{ iss: [ISSUER] }, { iss: null }, { aud: [] }, { aud: [''] }, { aud: null },
      { exp: String(inOneMinute()) }, { exp: null }, { nbf: '0' }, { nbf: null }]) {
      isInvalidToken(t, await crafted(claims), JSON.stringify(claims))
    }
  })
})

t.test('JWT_AUDIENCE lists several audiences: a token whose aud holds any of them → 200, none of them → 401', async (t) => {
  const multi = await build(t, { JWT_ISSUER: ISSUER, JWT_AUDIENCE: `${AUDIENCE}, https://permissions.example/ ,legacy-name` })
  await multi.seed(ordersFixture())
  const withAud = (aud: unknown) => get(bearer(token({ scope: 'read:resource', iss: ISSUER, aud })), '', multi)
  for (const aud of [AUDIENCE, 'https://permissions.example/', 'legacy-name', ['another-api', 'legacy-name']]) {
    t.equal((await withAud(aud)).status, 200, JSON.stringify(aud))
  }
  for (const aud of ['another-api', ['another-api', 'a-third-api'], `${AUDIENCE},legacy-name`, ' legacy-name', 'LEGACY-NAME', '']) {
    isInvalidToken(t, await withAud(aud), JSON.stringify(aud))
  }
})

t.test('JWT_TYPE=at+jwt: typ at+jwt or application/at+jwt, any case → 200; JWT, id token types or none → 401', async (t) => {
  const typed = await build(t, { JWT_TYPE: 'at+jwt' })
  await typed.seed(ordersFixture())
  const withTyp = (typ?: string) => get(bearer(craftedToken({ alg: 'HS256', ...(typ === undefined ? {} : { typ }) }, readClaims(), TEST_SECRET)), '', typed)
  for (const typ of ['at+jwt', 'AT+JWT', 'application/at+jwt', 'Application/At+JWT']) t.equal((await withTyp(typ)).status, 200, typ)
  for (const typ of [undefined, 'JWT', 'jwt', 'id_token+jwt', 'at+jwt ', 'application/jwt', 'x-at+jwt']) {
    isInvalidToken(t, await withTyp(typ), `typ ${typ}`)
  }
  t.equal((await withTyp('JWT')).status, 401)
  t.equal((await get(bearer(craftedToken({ alg: 'HS256', typ: 'JWT' }, readClaims(), TEST_SECRET)))).status, 200, 'without JWT_TYPE, typ JWT is fine')
})

t.test('deny by default: a route registered without scopes needs a valid token; only a route declared public does not', async (t) => {
  const extended = await build(t, {}, {
    extend: async (fastify) => {
      fastify.get('/forgotten', async () => ({ secret: 'data' }))
      fastify.get('/empty-scopes', { config: { scopes: [] } }, async () => ({ secret: 'data' }))
      fastify.get('/not-quite-public', { config: { public: 'yes' as unknown as boolean } }, async () => ({ secret: 'data' }))
      fastify.get('/declared-public', { config: { public: true } }, async () => ({ open: true }))
      await fastify.register(async (child) => { child.get('/nested', async () => ({ secret: 'data' })) }, { prefix: '/plugin' })
    }
  })
  for (const path of ['/forgotten', '/empty-scopes', '/not-quite-public', '/plugin/nested']) {
    isMissingCredentials(t, await extended.request(path), path)
    isInvalidToken(t, await extended.request(path, { headers: bearer('garbage') }), `${path} with a bad token`)
    const withToken = await extended.request(path, { token: token({}) })
    t.equal(withToken.status, 200, `${path}: any valid token, no scope needed`)
    t.equal((await extended.request(path, { method: 'HEAD' })).status, 401, `HEAD ${path}`)
  }
  const open = await extended.request('/declared-public')
  t.equal(open.status, 200)
  t.same(open.body, { open: true })
})

t.test('unknown paths answer 404 with or without a token; a spec path\'s other methods answer 405 without one', async (t) => {
  for (const headers of [{}, bearer('garbage'), bearer(readToken())]) {
    const res = await harness.request('/no/such/path', { headers })
    t.equal(res.status, 404)
    t.equal(problemType(res), 'about:blank')
  }
  const put = await harness.request(ordersPath(), { method: 'PUT' })
  t.equal(put.status, 405)
  t.match(put.headers.get('allow'), /DELETE/)
})

t.test('JWT_ISSUER and JWT_AUDIENCE not set: any iss and aud, or none → 200', async (t) => {
  for (const claims of [{ iss: 'https://anyone.example/', aud: 'anything' }, { iss: ISSUER }, {}]) {
    const res = await get(bearer(token({ scope: 'read:resource', ...claims })))
    t.equal(res.status, 200, JSON.stringify(claims))
  }
})

t.test('by default (JWT_SCOPE_CLAIMS "scope scp") scopes come from scope (space-delimited) or, without it, scp (array or string) → 200', async (t) => {
  const grants: Array<Record<string, unknown>> = [
    { scope: 'read:resource' },
    { scope: 'openid read:resource profile' },
    { scope: 'read:resource delete:resource' },
    { scp: ['read:resource'] },
    { scp: ['openid', 'read:resource'] },
    { scp: 'read:resource' },
    { scp: 'openid read:resource' },
    { scope: 'read:resource', scp: ['openid'] },
    { scope: 'read:resource', permissions: [] }
  ]
  for (const claims of grants) {
    const res = await get(bearer(token(claims)))
    t.equal(res.status, 200, JSON.stringify(claims))
  }
})

t.test('a token without the exact read:resource scope → 403 insufficient_scope with scope="read:resource"', async (t) => {
  const lacking: Array<Record<string, unknown>> = [
    {},
    { scope: '' },
    { scope: 'read:resources' },
    { scope: 'Read:Resource' },
    { scope: 'read:resource:extra' },
    { scope: 'read' },
    { scope: 'delete:resource' },
    { scope: 'openid,read:resource' },
    { scope: ['read:resource'] },
    { scp: ['read:resources', 'openid'] },
    { permissions: 'read:resource' },
    { permissions: [['read:resource']] },
    { 'read:resource': true }
  ]
  for (const claims of lacking) {
    isInsufficientScope(t, await get(bearer(token(claims))), 'read:resource', JSON.stringify(claims))
  }
  const body = (await get(bearer(token({ scope: 'openid' })))).body as Record<string, unknown>
  t.equal(body.required_scope, 'read:resource')
})

t.test('DELETE needs delete:resource: a read token → 403 scope="delete:resource" and nothing is removed', async (t) => {
  const before = await grantCount()
  t.equal(before, 11)
  const attempt = (authorization?: string) => harness.request(ordersPath(), {
    method: 'DELETE', json: ['p_read_orders'], headers: authorization ? { authorization } : {}
  })
  isInsufficientScope(t, await attempt(`Bearer ${readToken()}`), 'delete:resource', 'read token')
  isInsufficientScope(t, await attempt(`Bearer ${token({ scope: 'openid delete:resources' })}`), 'delete:resource', 'near miss')
  isMissingCredentials(t, await attempt(), 'no token')
  isInvalidToken(t, await attempt(`Bearer ${token({ scope: 'delete:resource' }, { expiresIn: -60 })}`), 'expired delete token')
  t.equal(await grantCount(), before, 'no grant was removed')
  const list = await get(bearer(readToken()), '?limit=500')
  t.ok((list.body as Array<{ id: string }>).some(({ id }) => id === 'p_read_orders'), 'p_read_orders is still granted')

  // Control: the same request with the delete scope does remove the grant.
  const allowed = await attempt(`Bearer ${token({ scope: 'read:resource delete:resource' })}`)
  t.equal(allowed.status, 204)
  t.equal(await grantCount(), before - 1)
})

t.test('permissions never widens scope by default: scope read:resource with permissions delete:resource → DELETE 403, nothing removed', async (t) => {
  const before = await grantCount()
  const narrowed = token({ scope: 'read:resource', permissions: ['delete:resource', 'read:resource'] })
  const res = await harness.request(ordersPath(), { method: 'DELETE', json: ['p_update_orders'], token: narrowed })
  isInsufficientScope(t, res, 'delete:resource', 'DELETE')
  t.equal(await grantCount(), before, 'no grant was removed')
  t.equal((await get(bearer(narrowed))).status, 200, 'what scope grants still works')
})

t.test('a token that carries scope is judged by scope alone: scp or permissions holding the scope → 403; permissions is not read by default', async (t) => {
  const lacking: Array<Record<string, unknown>> = [
    { scope: 'openid', scp: ['read:resource'] },
    { scope: 'openid', scp: 'read:resource' },
    { scope: 'openid', permissions: ['read:resource'] },
    { scope: '', scp: ['read:resource'] },
    { permissions: ['read:resource'] }
  ]
  for (const claims of lacking) {
    isInsufficientScope(t, await get(bearer(token(claims))), 'read:resource', JSON.stringify(claims))
  }
})

t.test('a scope claim of the wrong type grants nothing and does not hand over to the next claim → 403', async (t) => {
  const malformed: Array<Record<string, unknown>> = [
    { scope: 123, scp: ['read:resource'] },
    { scope: null, scp: 'read:resource' },
    { scope: true, scp: ['read:resource'] },
    { scope: ['read:resource'], scp: ['read:resource'] },
    { scope: { 'read:resource': true }, scp: ['read:resource'] },
    { scp: 42 },
    { scp: { 0: 'read:resource' } },
    { scp: [42, ['read:resource'], null] }
  ]
  for (const claims of malformed) {
    isInsufficientScope(t, await get(bearer(token(claims))), 'read:resource', JSON.stringify(claims))
  }
})

t.test('JWT_SCOPE_CLAIMS=permissions (Auth0 RBAC): permissions alone decides, and only as an array', async (t) => {
  const rbac = await build(t, { JWT_SCOPE_CLAIMS: 'permissions' })
  await rbac.seed(ordersFixture())
  const claimed = token({ scope: 'read:resource', permissions: ['delete:resource'] })
  const res = await rbac.request(ordersPath(), { method: 'DELETE', json: ['p_update_orders'], token: claimed })
  t.equal(res.status, 204, 'permissions grants the DELETE')
  t.equal(await grantCount(rbac), 10, 'and the grant is removed')
  isInsufficientScope(t, await get(bearer(claimed), '', rbac), 'read:resource', 'scope is not read')
  t.equal((await get(bearer(token({ permissions: ['openid', 'read:resource'] })), '', rbac)).status, 200, 'permissions holds read:resource')
  for (const claims of [{ scope: 'read:resource' }, { scp: ['read:resource'] }, { permissions: 'read:resource' }, { permissions: [] }]) {
    isInsufficientScope(t, await get(bearer(token(claims)), '', rbac), 'read:resource', JSON.stringify(claims))
  }
})

t.test('JWT_SCOPE_CLAIMS="scope permissions": permissions counts only for a token without scope', async (t) => {
  const fallback = await build(t, { JWT_SCOPE_CLAIMS: 'scope permissions' })
  await fallback.seed(ordersFixture())
  t.equal((await get(bearer(token({ permissions: ['read:resource'] })), '', fallback)).status, 200, 'no scope: permissions')
  t.equal((await get(bearer(token({ scope: 'read:resource', permissions: [] })), '', fallback)).status, 200, 'scope')
  for (const claims of [{ scope: 'openid', permissions: ['read:resource'] }, { scope: 7, permissions: ['read:resource'] }, { scp: ['read:resource'] }]) {
    isInsufficientScope(t, await get(bearer(token(claims)), '', fallback), 'read:resource', JSON.stringify(claims))
  }
})

t.test('the auth plugin refuses to start with a scope claim it does not know (it would be read in any shape)', async (t) => {
  const app = Fastify({ logger: false })
  app.register(auth, { key: { kind: 'secret', algorithms: ['HS256'], secret: TEST_SECRET }, audiences: [], scopeClaims: ['scope', 'roles'] })
  await t.rejects(async () => { await app.ready() }, { message: 'roles cannot carry scopes (only scope, scp, permissions)' })
  await app.close()
})

t.test('JWT_MAX_LIFETIME_S=3600: exp − iat up to an hour and 30 s (the clock tolerance) → 200; longer → 401 invalid_token', async (t) => {
  const capped = await build(t, { JWT_MAX_LIFETIME_S: '3600' })
  await capped.seed(ordersFixture())
  const iat = now() - 10
  const living = (lifetime: number) => get(bearer(token({ scope: 'read:resource', iat, exp: iat + lifetime }, { expiresIn: null })), '', capped)
  for (const lifetime of [60, 3600, 3630]) t.equal((await living(lifetime)).status, 200, `${lifetime} s`)
  for (const lifetime of [3631, 86_400, 10 * 365 * 86_400]) {
    isInvalidToken(t, await living(lifetime), `${lifetime} s`, 'The access token lives longer than this service accepts')
  }
  const issuedLongAgo = token({ scope: 'read:resource', iat: now() - 86_400, exp: inOneMinute() }, { expiresIn: null })
  isInvalidToken(t, await get(bearer(issuedLongAgo), '', capped), 'issued a day ago, a minute left', 'The access token lives longer than this service accepts')

  // Without iat the lifetime left counts: exp − now.
  const withoutIat = (expiresIn: number) => get(bearer(craftedToken({ alg: 'HS256', typ: 'JWT' }, { scope: 'read:resource', exp: now() + expiresIn }, TEST_SECRET)), '', capped)
  for (const expiresIn of [60, 3600]) t.equal((await withoutIat(expiresIn)).status, 200, `no iat, exp in ${expiresIn} s`)
  for (const expiresIn of [3700, 86_400]) {
    isInvalidToken(t, await withoutIat(expiresIn), `no iat, exp in ${expiresIn} s`, 'The access token lives longer than this service accepts')
  }
})

t.test('JWT_MAX_LIFETIME_S unset: any lifetime → 200', async (t) => {
  const year = 365 * 86_400
  t.equal((await get(bearer(token({ scope: 'read:resource' }, { expiresIn: 10 * year })))).status, 200, 'ten years')
  t.equal((await get(bearer(token({ scope: 'read:resource', iat: now() - year, exp: now() + year }, { expiresIn: null })))).status, 200, 'issued a year ago')
  const withoutIat = craftedToken({ alg: 'HS256', typ: 'JWT' }, { scope: 'read:resource', exp: now() + year }, TEST_SECRET)
  t.equal((await get(bearer(withoutIat))).status, 200, 'no iat, a year left')
})

t.test('public routes need no token: /healthz, /readyz, /openapi.json, /docs/ → 200', async (t) => {
  for (const path of ['/healthz', '/readyz', '/openapi.json', '/docs/']) {
    const res = await harness.request(path)
    t.equal(res.status, 200, path)
    t.equal(res.headers.get('www-authenticate'), null, `${path}: no challenge`)
    const withBadToken = await harness.request(path, { headers: bearer('garbage') })
    t.equal(withBadToken.status, 200, `${path} ignores a bad token`)
  }
})

t.test('a token in the query string (?access_token=) is not accepted → 401 missing-credentials', async (t) => {
  isMissingCredentials(t, await get({}, `?access_token=${readToken()}`), 'access_token')
  isMissingCredentials(t, await get({}, `?limit=5&access_token=${encodeURIComponent(`Bearer ${readToken()}`)}`), 'Bearer in access_token')
})

t.test('a token issued in the future (beyond the clock skew) or with a non-numeric iat → 401 invalid_token', async (t) => {
  isInvalidToken(t, await get(bearer(token({ scope: 'read:resource', iat: now() + 120 }))), 'iat in 2 minutes', 'The access token was issued in the future')
  isInvalidToken(t, await get(bearer(token({ scope: 'read:resource', iat: 'yesterday' }))), 'iat as text')
  t.equal((await get(bearer(token({ scope: 'read:resource', iat: now() + 10 })))).status, 200, 'iat 10 s ahead: within the skew')
})

t.test('a NumericDate that is not finite (exp, nbf or iat of 1e400, parsed as Infinity) → 401 invalid_token', async (t) => {
  // RFC 7519 §2: a NumericDate is a number of seconds; 1e400 is none, and an exp of it never expires.
  const withText = (claims: string) => craftedToken({ alg: 'HS256', typ: 'JWT' }, `{"scope":"read:resource",${claims}}`, TEST_SECRET)
  const exp = `"exp":${inOneMinute()}`
  for (const claims of ['"exp":1e400', '"exp":-1e400', `${exp},"nbf":-1e400`, `${exp},"nbf":1e400`, `${exp},"iat":-1e400`, `${exp},"iat":1e400`]) {
    isInvalidToken(t, await get(bearer(withText(claims))), claims, 'The access token is invalid')
  }
  // The same claims, finite (a fraction of a second too), are fine.
  for (const claims of [exp, `"exp":${inOneMinute()}.5`, `${exp},"nbf":${now() - 10}.25,"iat":${now() - 10}.25`, `${exp},"nbf":-1e300,"iat":-1e300`]) {
    t.equal((await get(bearer(withText(claims)))).status, 200, claims)
  }
  // Under a lifetime cap too (exp − iat = Infinity was refused there, as living too long).
  const capped = await build(t, { JWT_MAX_LIFETIME_S: '3600' })
  await capped.seed(ordersFixture())
  isInvalidToken(t, await get(bearer(withText('"exp":1e400')), '', capped), 'capped, exp 1e400', 'The access token is invalid')
})

t.test('a 100 KB token reaches authentication and gets a Bearer challenge, not a bare 431', async (t) => {
  const padding = 'x'.repeat(75_000) // about 100 KB once base64url-encoded
  const huge = token({ scope: 'read:resource', padding })
  t.ok(huge.length >= 100_000, `${huge.length} characters`)
  const signedByOther = craftedToken({ alg: 'HS256', typ: 'JWT' }, { ...readClaims(), padding }, OTHER_SECRET)
  isInvalidToken(t, await get(bearer(signedByOther)), '100 KB, wrong signature')
  t.equal((await get(bearer(huge))).status, 200, 'a genuine 100 KB token is simply verified')
})

t.test('a token accepted once is kept by its text: the same answers, scopes and actor the second time', async (t) => {
  // One token, a second use within the minute: answered from what the first use verified.
  const reader = token({ scope: 'read:resource', sub: 'kept-reader' })
  t.equal((await get(bearer(reader))).status, 200, 'first use')
  t.equal((await get(bearer(reader))).status, 200, 'second use')
  // Its scopes are kept with it: a read token stays refused a DELETE, first use or not.
  for (const use of ['first', 'second']) {
    const res = await harness.request(ordersPath(), { method: 'DELETE', headers: { ...bearer(reader), 'content-type': 'application/json' }, body: JSON.stringify(['p_read_orders']) })
    t.equal(res.status, 403, `${use} DELETE with the read token`)
  }
  // Its claims are the request's, as a full check leaves them: the history's actor.
  const writer = token({ scope: 'delete:resource create:resource read:resource', sub: 'kept-writer', client_id: 'kept-app' })
  for (const [method, ids] of [['POST', ['p_delete_refunds']], ['DELETE', ['p_delete_refunds']]] as const) {
    const res = await harness.request(ordersPath(), { method, headers: { ...bearer(writer), 'content-type': 'application/json' }, body: JSON.stringify(ids) })
    t.equal(res.status, 204, method)
  }
  const { rows } = await harness.db.query<{ actor_sub: string, actor_client_id: string }>(
    "SELECT actor_sub, actor_client_id FROM permission_changes WHERE actor_sub = 'kept-writer' ORDER BY id")
  t.same(rows, [{ actor_sub: 'kept-writer', actor_client_id: 'kept-app' }, { actor_sub: 'kept-writer', actor_client_id: 'kept-app' }],
    'both changes name the token\'s actor, the second from the kept claims')
  // A token refused is not kept: the same garbage is refused every time.
  for (const use of ['first', 'second']) isInvalidToken(t, await get(bearer('a.b.c')), `${use} use of a garbage token`)
})

t.test('VerifiedTokens: kept until the token\'s exp and at most a minute, the oldest dropped first when full', async (t) => {
  const at = 1_800_000_000_000
  const claims = (exp: number) => ({ exp, sub: 'x' })
  const scopes = new Set(['read:resource'])

  const tokens = new VerifiedTokens()
  tokens.add('expiring', claims(at / 1000 + 10), scopes, at)
  t.ok(tokens.get('expiring', at + 9_999), 'before exp')
  t.notOk(tokens.get('expiring', at + 10_000), 'at exp: checked in full again (which may still accept it, within the clock skew)')
  t.notOk(tokens.get('expiring', at + 1), 'and gone once found stale')

  tokens.add('long-lived', claims(at / 1000 + 3600), scopes, at)
  t.same(tokens.get('long-lived', at + 59_999), { claims: claims(at / 1000 + 3600), scopes, until: at + 60_000 }, 'within the minute')
  t.notOk(tokens.get('long-lived', at + 60_000), 'a minute after its check: a key withdrawn since stops working')

  t.notOk(tokens.get('never-added', at), 'a token never accepted')
  tokens.add('x'.repeat(4097), claims(at / 1000 + 3600), scopes, at)
  t.notOk(tokens.get('x'.repeat(4097), at), 'a token over 4 KiB is checked in full every time')
  tokens.add('x'.repeat(4096), claims(at / 1000 + 3600), scopes, at)
  t.ok(tokens.get('x'.repeat(4096), at), 'one of 4 KiB is kept')

  const full = new VerifiedTokens()
  for (let i = 0; i < 1000; i++) full.add(`token-${i}`, claims(at / 1000 + 3600), scopes, at)
  t.ok(full.get('token-0', at) && full.get('token-999', at), 'a thousand kept')
  full.add('token-1000', claims(at / 1000 + 3600), scopes, at)
  t.notOk(full.get('token-0', at), 'the thousand-and-first drops the oldest')
  t.ok(full.get('token-1', at) && full.get('token-1000', at), 'and only it')
})

t.test('tokenAcceptedUntil: the token\'s exp with the 30 s of clock skew, in ms, first use or kept; Infinity on a public route (no token)', async (t) => {
  const extended = await build(t, {}, {
    extend: async (fastify) => {
      fastify.get('/accepted-until', async (request) => ({ until: String(tokenAcceptedUntil(request)) }))
      fastify.get('/public/accepted-until', { config: publicRoute }, async (request) => ({ until: String(tokenAcceptedUntil(request)) }))
    }
  })
  const exp = inOneMinute()
  const timed = token({ exp })
  for (const use of ['first', 'second']) {
    t.same((await extended.request('/accepted-until', { token: timed })).body, { until: String(exp * 1000 + 30_000) }, `${use} use`)
  }
  t.same((await extended.request('/public/accepted-until')).body, { until: 'Infinity' }, 'public, no token')
  t.same((await extended.request('/public/accepted-until', { token: timed })).body, { until: 'Infinity' }, 'public, a token not looked at')
})

t.test('grantedScopes: the names of a space-delimited scope, none empty; of an array, only its strings', async (t) => {
  t.same([...grantedScopes({ scope: ' read:resource  delete:resource ' }, ['scope'])], ['read:resource', 'delete:resource'], 'spaces around and between')
  t.same([...grantedScopes({ scp: 'read:resource  openid' }, ['scp'])], ['read:resource', 'openid'], 'scp as a string')
  t.same([...grantedScopes({ scp: ['read:resource', 42, null, ['openid'], { openid: true }, 'openid'] }, ['scp'])], ['read:resource', 'openid'], 'scp as an array')
  t.same([...grantedScopes({ scope: '' }, ['scope', 'scp'])], [], 'an empty scope: none')
})

t.test('issuedInTheFuture: an iat up to exactly the 30 s of clock skew ahead is believed; a millisecond more is not', async (t) => {
  const at = 1_800_000_000_000
  t.equal(issuedInTheFuture({}, at), false, 'no iat')
  t.equal(issuedInTheFuture({ iat: at / 1000 }, at), false, 'now')
  t.equal(issuedInTheFuture({ iat: (at + 30_000) / 1000 }, at), false, 'exactly the skew ahead')
  t.equal(issuedInTheFuture({ iat: (at + 30_001) / 1000 }, at), true, 'a millisecond more')
})

t.test('two Authorization lines are one comma-joined field: neither line\'s token is taken, nor a token split across them, even one already accepted', async (t) => {
  const port = Number(new URL(harness.baseUrl).port)
  const raw = (authorizationLines: string[]) => new Promise<string>((resolve, reject) => {
    const lines = authorizationLines.map((line) => `Authorization: ${line}\r\n`).join('')
    const socket = connect(port, '127.0.0.1', () => socket.write(`GET ${ordersPath()} HTTP/1.1\r\nHost: x\r\n${lines}Connection: close\r\n\r\n`))
    let data = ''
    socket.on('data', (chunk) => { data += chunk })
    socket.on('end', () => resolve(data))
    socket.on('error', reject)
  })
  const valid = readToken()
  t.match(await raw([`Bearer ${valid}`]), /^HTTP\/1\.1 200 /, 'one line (the control)')
  const invalid = /^HTTP\/1\.1 401 [\s\S]*\r\nwww-authenticate: Bearer error="invalid_token", error_description="The access token is invalid"\r\n/i
  t.match(await raw([`Bearer ${valid}`, `Bearer ${valid}`]), invalid, 'the same token twice')
  t.match(await raw([`Bearer ${valid}`, 'Bearer x']), invalid, 'a valid token, then another')
  const cut = valid.length - 10
  t.match(await raw([`Bearer ${valid.slice(0, cut)}`, valid.slice(cut)]), invalid, 'the token kept since its first use, split across the lines')
})
