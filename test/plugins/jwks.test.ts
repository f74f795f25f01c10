// Keys that rotate: tokens verified against a JSON Web Key Set served by a real HTTP server here.
import { generateKeyPairSync, type KeyObject } from 'node:crypto'
import { once } from 'node:events'
import { createServer, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { gzipSync } from 'node:zlib'
import { createSigner } from 'fast-jwt'
import t, { type Test } from 'tap'
import { freePort } from '../../db/embedded-postgres.js'
import { fetchFailureOf, mayFetch, STALE_KEYS_FACTOR } from '../../plugins/auth/key-set.js'
import { ordersFixture, ordersPath } from '../support/fixtures.js'
import { build } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { craftedToken, inOneMinute, PRODUCTION_AUDIENCE, PRODUCTION_ISSUER } from '../support/tokens.js'

interface SigningKey { kid: string, alg: 'RS256' | 'ES256', privateKey: KeyObject, publicKey: KeyObject }

function signingKey (kid: string, alg: 'RS256' | 'ES256', modulusLength = 2048): SigningKey {
  const pair = alg === 'RS256'
    ? generateKeyPairSync('rsa', { modulusLength })
    : generateKeyPairSync('ec', { namedCurve: 'P-256' })
  return { kid, alg, ...pair }
}

const jwk = ({ kid, alg, publicKey }: SigningKey) => ({ ...publicKey.export({ format: 'jwk' }), kid, alg, use: 'sig' })

/** A read token signed by `signer`, whose header names `kid` (the signer's own unless told). */
function tokenFrom (signer: SigningKey, kid = signer.kid, header: Record<string, string> = {}, claims: Record<string, unknown> = {}): string {
  const sign = createSigner({ key: signer.privateKey.export({ type: 'pkcs8', format: 'pem' }) as string, algorithm: signer.alg, kid, header: { alg: signer.alg, ...header } })
  return sign({ scope: 'read:resource', exp: inOneMinute(), ...claims })
}

/** A key set server; `handler` returns the body, or undefined to answer 503. */
async function serve (handler: () => unknown): Promise<{ server: Server, url: string, requests: () => number, requestedAt: () => number[] }> {
  // When each request came (Date.now(), the clock the key set's ages are told by).
  const requestedAt: number[] = []
  const server = createServer((_request, response) => {
    requestedAt.push(Date.now())
    const body = handler()
    if (body === undefined) response.statusCode = 503
    response.setHeader('content-type', 'application/json')
    response.end(JSON.stringify(body ?? {}))
  }).listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => { server.closeAllConnections(); server.close() })
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/.well-known/jwks.json`, requests: () => requestedAt.length, requestedAt: () => [...requestedAt] }
}

/** A key set server that answers every request with `respond` (which may never answer). */
async function answering (respond: (response: ServerResponse) => void): Promise<{ url: string, requests: () => number }> {
  let requests = 0
  const server = createServer((_request, response) => { requests++; respond(response) }).listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => { server.closeAllConnections(); server.close() })
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/jwks.json`, requests: () => requests }
}

const first = signingKey('key-1', 'RS256')
const next = signingKey('key-2', 'ES256')
const stranger = signingKey('key-3', 'RS256')
let published = [jwk(first)]
const provider = await serve(() => ({ keys: published }))
const attacker = await serve(() => ({ keys: [jwk(stranger)] }))

const COOLDOWN_MS = 1000
const harness = await build(t, { JWT_SECRET: '', JWKS_URL: provider.url, JWKS_COOLDOWN_MS: String(COOLDOWN_MS) })
await harness.seed(ordersFixture())
const get = (token: string) => harness.request(ordersPath(), { token })

t.test('a token signed by a published key → 200; the key set is fetched once and cached', async (t) => {
  t.equal((await get(tokenFrom(first))).status, 200)
  t.equal((await get(tokenFrom(first))).status, 200)
  t.equal(provider.requests(), 1)
})

t.test('a shared identity provider: its tokens for another API, or from another issuer, are refused → 401', async (t) => {
  const issuer = 'https://idp.example/'
  const audience = 'client-permissions-service'
  const strict = await build(t, { JWT_SECRET: '', JWKS_URL: provider.url, JWT_ISSUER: issuer, JWT_AUDIENCE: audience })
  await strict.seed(ordersFixture())
  const withClaims = (claims: Record<string, unknown>) => strict.request(ordersPath(), { token: tokenFrom(first, first.kid, {}, claims) })
  t.equal((await withClaims({ iss: issuer, aud: audience })).status, 200, 'ours')
  for (const claims of [{ iss: issuer, aud: 'billing-api' }, { iss: issuer, aud: ['billing-api', 'reports-api'] }, { iss: issuer }, { iss: 'https://other-idp.example/', aud: audience }]) {
    const res = await withClaims(claims)
    t.equal(res.status, 401, JSON.stringify(claims))
    t.match(res.headers.get('www-authenticate'), /^Bearer error="invalid_token"/)
  }
})

t.test('an RSA key under 2048 bits in the key set (RFC 7518 §3.3) verifies nothing → 401, as JWT_PUBLIC_KEY refuses one', async (t) => {
  const weak = signingKey('weak', 'RS256', 2040)
  const weakProvider = await serve(() => ({ keys: [jwk(weak), jwk(first)] }))
  const strict = await build(t, { JWT_SECRET: '', JWKS_URL: weakProvider.url })
  await strict.seed(ordersFixture())
  const res = await strict.request(ordersPath(), { token: tokenFrom(weak) })
  t.equal(res.status, 401)
  t.match(res.headers.get('www-authenticate'), /^Bearer error="invalid_token"/)
  t.equal((await strict.request(ordersPath(), { token: tokenFrom(first) })).status, 200, 'a key of 2048 bits beside it still verifies')
})

t.test('keys published for something else verify nothing → 401: oct (HS256 with the published secret), use enc, key_ops without verify, another alg, another curve, another RSA alg', async (t) => {
  const claims = { scope: 'read:resource', exp: inOneMinute() }
  const signed = (privateKey: KeyObject, algorithm: 'RS256' | 'PS256' | 'ES384', kid: string) =>
    createSigner({ key: privateKey.export({ type: 'pkcs8', format: 'pem' }) as string, algorithm, kid })(claims)
  // An RSA key the main set does not hold (an RSA key costs a fifth of a second to make).
  const rsa = stranger
  const p384 = generateKeyPairSync('ec', { namedCurve: 'P-384' })
  const rsaJwk = rsa.publicKey.export({ format: 'jwk' })
  const published = [
    { kty: 'oct', k: Buffer.from('published-secret').toString('base64url'), kid: 'oct', alg: 'HS256' },
    { ...rsaJwk, kid: 'enc', use: 'enc' },
    { ...rsaJwk, kid: 'encrypt-only', key_ops: ['encrypt'] },
    { ...rsaJwk, kid: 'rs384', alg: 'RS384' },
    { ...p384.publicKey.export({ format: 'jwk' }), kid: 'p384' },
    { ...rsaJwk, kid: 'verify', key_ops: ['verify'], use: 'sig' }
  ]
  const odd = await serve(() => ({ keys: published }))
  const app = await build(t, { JWT_SECRET: '', JWKS_URL: odd.url })
  await app.seed(ordersFixture())
  const status = async (token: string) => (await app.request(ordersPath(), { token })).status
  t.equal(await status(signed(rsa.privateKey, 'RS256', 'verify')), 200, 'the same RSA key, published to verify, does')
  t.equal(await status(craftedToken({ alg: 'HS256', typ: 'JWT', kid: 'oct' }, claims, 'published-secret')), 401, 'HS256 with the published oct key')
  t.equal(await status(craftedToken({ alg: 'none', typ: 'JWT', kid: 'verify' }, claims)), 401, 'alg none')
  for (const kid of ['enc', 'encrypt-only', 'rs384']) t.equal(await status(signed(rsa.privateKey, 'RS256', kid)), 401, kid)
  t.equal(await status(signed(rsa.privateKey, 'PS256', 'verify')), 401, 'PS256 with a key published without alg')
  t.equal(await status(signed(p384.privateKey, 'ES384', 'p384')), 401, 'ES384 with a P-384 key')
})

t.test('a token whose kid names one key but was signed by another → 401 invalid_token', async (t) => {
  const res = await get(tokenFrom(stranger, first.kid))
  t.equal(res.status, 401)
  t.match(res.headers.get('www-authenticate'), /error="invalid_token"/)
})

t.test('algorithm confusion: HS256 keyed with the published public key → 401', async (t) => {
  const pem = first.publicKey.export({ type: 'spki', format: 'pem' }) as string
  const res = await get(craftedToken({ alg: 'HS256', typ: 'JWT', kid: first.kid }, { scope: 'read:resource', exp: inOneMinute() }, pem))
  t.equal(res.status, 401)
})

t.test('jku and x5u headers are never followed', async (t) => {
  const res = await get(tokenFrom(stranger, stranger.kid, { jku: attacker.url, x5u: attacker.url }))
  t.equal(res.status, 401)
  t.equal(attacker.requests(), 0, 'the attacker\'s key set was never fetched')
})

t.test('a key published after start is accepted within the cooldown, without a restart', async (t) => {
  published = [jwk(first), jwk(next)]
  const before = provider.requests()
  let status = 0
  // Bounded by the configuration: ten cooldowns is plenty for one refetch.
  for (let attempt = 0; attempt < 40 && status !== 200; attempt++) {
    status = (await get(tokenFrom(next))).status
    if (status !== 200) await sleep(COOLDOWN_MS / 4)
  }
  t.equal(status, 200, 'the ES256 key from the refetched set verifies')
  t.ok(provider.requests() > before, 'the set was fetched again for the unknown kid')
  t.equal((await get(tokenFrom(first))).status, 200, 'the older key still works')
})

t.test('unknown kids cannot make the service hammer the identity provider: one refetch per cooldown at most', async (t) => {
  const before = provider.requests()
  const started = Date.now()
  for (let i = 0; i < 30; i++) {
    t.equal((await get(tokenFrom(stranger, `random-${i}`))).status, 401)
  }
  const allowed = 1 + Math.floor((Date.now() - started) / COOLDOWN_MS)
  t.ok(provider.requests() - before <= allowed, `${provider.requests() - before} refetches for 30 unknown kids (at most ${allowed})`)
})

t.test('while the key set cannot be fetched, cached keys still verify', async (t) => {
  provider.server.closeAllConnections()
  provider.server.close()
  t.equal((await get(tokenFrom(first))).status, 200)
  t.equal((await get(tokenFrom(stranger, 'another-unknown'))).status, 401)
})

t.test('the provider failing for longer than the cache lives: the last keys still verify, fetches stay rare', async (t) => {
  let failing = false
  const flaky = await serve(() => failing ? undefined : { keys: [jwk(first)] })
  const short = await build(t, { JWT_SECRET: '', JWKS_URL: flaky.url, JWKS_CACHE_MAX_AGE_MS: '1000' })
  await short.seed(ordersFixture())
  const getShort = (token: string) => short.request(ordersPath(), { token })
  t.equal((await getShort(tokenFrom(first))).status, 200)
  failing = true
  await sleep(1_200) // past the cache's age: jose alone would now refuse every token
  const before = flaky.requests()
  for (let i = 0; i < 10; i++) t.equal((await getShort(tokenFrom(first))).status, 200, 'a known key still verifies')
  t.equal((await getShort(tokenFrom(stranger))).status, 401, 'an unknown kid is still refused')
  t.ok(flaky.requests() - before <= 1, `${flaky.requests() - before} fetches for 11 tokens during the outage`)
})

/** Waits for `done` (the service's next step seen from outside), polling; fails the test after about 10 s. */
async function until (t: Test, done: () => boolean, what: string): Promise<void> {
  for (let attempt = 0; attempt < 200 && !done(); attempt++) await sleep(50)
  t.ok(done(), what)
}

t.test('keys older than the cache max age still verify at once while the provider hangs on the refetch; only an unknown kid waits for it, whose answer replaces the keys', async (t) => {
  let keys = [jwk(first)]
  const refetches: Array<{ response: ServerResponse, closed: boolean }> = []
  // The first fetch is answered; every later one is held until the test releases it.
  let fetches = 0
  const hanging = await answering((response) => {
    if (++fetches === 1) { response.end(JSON.stringify({ keys })); return }
    const refetch = { response, closed: false }
    response.once('close', () => { refetch.closed = true })
    refetches.push(refetch)
  })
  const app = await build(t, { JWT_SECRET: '', JWKS_URL: hanging.url, JWKS_CACHE_MAX_AGE_MS: '1000' })
  await app.seed(ordersFixture())
  const getApp = (token: string) => app.request(ordersPath(), { token })
  t.equal((await getApp(tokenFrom(first))).status, 200, 'the first fetch answered')
  await sleep(1_100) // past the cache's age
  t.equal((await getApp(tokenFrom(first))).status, 200, 'a held key verifies at once, its set aged out')
  await until(t, () => refetches.length === 1, 'the set is fetched again, in the background')
  t.notOk(refetches[0].closed, 'the answer came while that refetch was held (not after it timed out)')
  for (let i = 0; i < 5; i++) t.equal((await getApp(tokenFrom(first))).status, 200, 'and so do later requests')
  t.equal(hanging.requests(), 2, 'one refetch at a time')
  // A kid the held set lacks waits for the refetch: only its answer holds the key.
  const unknownKid = getApp(tokenFrom(next))
  await sleep(200) // lets the request reach the key set before the refetch is answered
  keys = [jwk(next)]
  refetches[0].response.end(JSON.stringify({ keys }))
  t.equal((await unknownKid).status, 200, 'an unknown kid is verified with the key the refetch brought')
  t.equal((await getApp(tokenFrom(first))).status, 401, 'the refetched set replaced the old one: its withdrawn key no longer verifies')
  t.equal(hanging.requests(), 2, 'by that one refetch')
})

t.test(`the provider down for ${STALE_KEYS_FACTOR} times the cache max age: the last keys are no longer trusted → 503 keys-unavailable, until a fetch succeeds`, async (t) => {
  let failing = false
  const flaky = await serve(() => failing ? undefined : { keys: [jwk(first)] })
  const MAX_AGE_MS = 1000
  const app = await build(t, { JWT_SECRET: '', JWKS_URL: flaky.url, JWKS_CACHE_MAX_AGE_MS: String(MAX_AGE_MS), JWKS_COOLDOWN_MS: '100' })
  await app.seed(ordersFixture())
  const getApp = (token: string) => app.request(ordersPath(), { token })
  t.equal((await getApp(tokenFrom(first))).status, 200)
  failing = true
  await sleep(MAX_AGE_MS + 100)
  t.equal((await getApp(tokenFrom(first))).status, 200, 'past the max age, within the bound: the last keys verify')
  await sleep(STALE_KEYS_FACTOR * MAX_AGE_MS)
  const res = await getApp(tokenFrom(first))
  t.equal(res.status, 503, 'past the bound: keys unavailable')
  t.match(res.body, { type: '/problems/keys-unavailable', status: 503 })
  failing = false
  await sleep(150) // past the failed fetch's cooldown
  t.equal((await getApp(tokenFrom(first))).status, 200, 'the provider back: a fetch, and the key verifies again')
})

t.test('a key the provider withdrew stops verifying once the cache ages out, even right after a token the key set could not serve', async (t) => {
  // Tokens the set cannot serve through no fault of the provider's: an unknown kid, a kid two
  // published keys share, an alg no key set can hold. None may count as a failed fetch, which would
  // keep the old keys for a cooldown (here far longer than the cache's age).
  const twin = signingKey('twin', 'ES256')
  const twinsTwin = signingKey('twin', 'ES256')
  // Nor may a published key that cannot be imported: a private key (a provider's blunder), an EC
  // point off its curve.
  const leaked = signingKey('leaked', 'ES256')
  const privateJwk = { ...leaked.privateKey.export({ format: 'jwk' }), kid: leaked.kid, alg: leaked.alg, use: 'sig' }
  const offCurve = { kty: 'EC', crv: 'P-256', x: 'AAAA', y: 'AAAA', kid: 'off-curve', alg: 'ES256', use: 'sig' }
  const faults: Array<[string, string]> = [
    ['an unknown kid', tokenFrom(stranger, 'nobody')],
    ['a kid two keys share', tokenFrom(twin)],
    ['an HMAC alg', craftedToken({ alg: 'HS256', typ: 'JWT', kid: first.kid }, { scope: 'read:resource', exp: inOneMinute() }, 'secret')],
    ['a published private key', tokenFrom(leaked)],
    ['a published EC point off its curve', tokenFrom(next, offCurve.kid)]
  ]
  // Each fault gets its own provider and app, built one after another (apps share prom-client's
  // registry while they register their metrics), then run at once to share the wait.
  const MAX_AGE_MS = 1000
  const scenarios = []
  for (const [fault, refused] of faults) {
    const keySet: { keys: object[] } = { keys: [jwk(first), jwk(twin), jwk(twinsTwin), privateJwk, offCurve] }
    const rotating = await serve(() => ({ keys: keySet.keys }))
    const app = await build(t, { JWT_SECRET: '', JWKS_URL: rotating.url, JWKS_CACHE_MAX_AGE_MS: String(MAX_AGE_MS), JWKS_COOLDOWN_MS: '60000' })
    await app.seed(ordersFixture())
    scenarios.push({ fault, refused, keySet, rotating, app })
  }
  await Promise.all(scenarios.map(async ({ fault, refused, keySet, rotating, app }) => {
    const getApp = (token: string) => app.request(ordersPath(), { token })
    // The same token before and after: one verified once is not kept past its key's withdrawal.
    const token = tokenFrom(first)
    t.equal((await getApp(token)).status, 200, fault)
    keySet.keys = [jwk(next)]
    t.equal((await getApp(refused)).status, 401, `${fault} is refused`)
    await sleep(MAX_AGE_MS + 200) // past the cache's age
    // The first request after it is verified with the held keys while the set is fetched again;
    // once that fetch is answered, the withdrawn key verifies nothing.
    let status = 200
    for (let attempt = 0; attempt < 100 && status !== 401; attempt++) {
      status = (await getApp(token)).status
      if (status !== 401) await sleep(50)
    }
    t.equal(status, 401, `after ${fault}, the withdrawn key no longer verifies a token it verified before`)
    t.equal((await getApp(tokenFrom(first))).status, 401, `after ${fault}, nor a new one`)
    t.equal((await getApp(tokenFrom(next))).status, 200, `after ${fault}, the key published instead does`)
    // Fetched again once its age passed, and never sooner than its age after the fetch before (a
    // fetch for a token the set could not serve would be): a third fetch, another age after the
    // second, is that of a process stalled meanwhile (five apps in it, on two cores shared with
    // other test files), and as it should be.
    const fetches = rotating.requestedAt()
    t.ok(fetches.length >= 2, `after ${fault}, the set was fetched again once its age passed`)
    const apart = fetches.slice(1).map((at, index) => at - fetches[index])
    t.ok(apart.every((gap) => gap >= MAX_AGE_MS), `after ${fault}, each fetch at least its age after the one before: ${apart.join(', ')} ms apart`)
  }))
})

t.test('a kid two published keys share, past the cooldown: 401 at once, and no fetch (the set is not missing a key, it has one too many)', async (t) => {
  const twin = signingKey('twin', 'ES256')
  const twinsTwin = signingKey('twin', 'ES256')
  const provider = await serve(() => ({ keys: [jwk(first), jwk(twin), jwk(twinsTwin)] }))
  const app = await build(t, { JWT_SECRET: '', JWKS_URL: provider.url, JWKS_COOLDOWN_MS: '100' })
  t.not((await app.request(ordersPath(), { token: tokenFrom(first) })).status, 401, 'the set fetched, its key verifies')
  const fetched = provider.requests()
  await sleep(150) // past the cooldown: an unknown kid now would fetch again
  t.equal((await app.request(ordersPath(), { token: tokenFrom(twin) })).status, 401)
  t.equal(provider.requests(), fetched, 'no fetch for it')
})

t.test('a token whose alg no key may verify (none, HS256, PS256, RS384): 401 at once, the key set not asked: never 503 while the provider is down, no fetch past the cooldown', async (t) => {
  const claims = { scope: 'read:resource', exp: inOneMinute() }
  const pem = first.publicKey.export({ type: 'spki', format: 'pem' }) as string
  const privatePem = first.privateKey.export({ type: 'pkcs8', format: 'pem' }) as string
  const tokens = {
    none: craftedToken({ alg: 'none', typ: 'JWT', kid: first.kid }, claims),
    'HS256 keyed with the public key': craftedToken({ alg: 'HS256', typ: 'JWT', kid: first.kid }, claims, pem),
    PS256: createSigner({ key: privatePem, algorithm: 'PS256', kid: first.kid })(claims),
    RS384: createSigner({ key: privatePem, algorithm: 'RS384', kid: first.kid })(claims)
  }
  const down = await serve(() => undefined)
  const fresh = await build(t, { JWT_SECRET: '', JWKS_URL: down.url })
  for (const [label, token] of Object.entries(tokens)) {
    const res = await fresh.request(ordersPath(), { token })
    t.equal(res.status, 401, `provider down, ${label}: the token's fault, not the provider's`)
    t.equal(res.headers.get('www-authenticate'), 'Bearer error="invalid_token", error_description="The access token is invalid"', label)
  }
  t.equal(down.requests(), 0, 'the provider was never asked')

  const up = await serve(() => ({ keys: [jwk(first)] }))
  const app = await build(t, { JWT_SECRET: '', JWKS_URL: up.url, JWKS_COOLDOWN_MS: '100' })
  await app.seed(ordersFixture())
  t.equal((await app.request(ordersPath(), { token: tokenFrom(first) })).status, 200, 'the set fetched, its key verifies')
  const fetched = up.requests()
  await sleep(150) // past the cooldown: a kid the set lacked would fetch again now
  for (const [label, token] of Object.entries(tokens)) t.equal((await app.request(ordersPath(), { token })).status, 401, `set held, ${label}`)
  t.equal(up.requests(), fetched, 'no fetch for them')
})

t.test('no key set was ever fetched and the provider is down → 503 keys-unavailable, not 401; within the failed fetch\'s cooldown, at once, without a fetch', async (t) => {
  const down = await serve(() => undefined)
  const fresh = await build(t, { JWT_SECRET: '', JWKS_URL: down.url, JWKS_COOLDOWN_MS: '60000' })
  const res = await fresh.request(ordersPath(), { token: tokenFrom(first) })
  t.equal(res.status, 503)
  t.equal(res.headers.get('retry-after'), '5')
  t.match(res.body, { type: '/problems/keys-unavailable', status: 503 })
  t.equal(down.requests(), 1)
  t.equal((await fresh.request(ordersPath(), { token: tokenFrom(first) })).status, 503, 'again, within the cooldown')
  t.equal(down.requests(), 1, 'not fetched again within the cooldown')
})

t.test('a stall of the event loop past JWKS_FETCH_TIMEOUT_MS, the provider having answered in time: the token verifies → 200, no failed fetch', async (t) => {
  // The key set waits in the socket while the loop is blocked (a long synchronous task, a GC
  // pause); the fetch's deadline, expired meanwhile, must read it before it gives up, or every
  // token waits out a cooldown with 503 keys-unavailable.
  const blocked = new Int32Array(new SharedArrayBuffer(4))
  const lagging = await answering((response) => {
    response.setHeader('content-type', 'application/json')
    response.end(JSON.stringify({ keys: [jwk(first)] }))
    Atomics.wait(blocked, 0, 0, 1000)
  })
  const logs = captureLogs()
  const app = await build(t, { JWT_SECRET: '', JWKS_URL: lagging.url, JWKS_FETCH_TIMEOUT_MS: '300', LOG_LEVEL: 'warn' }, { logs: logs.stream })
  await app.seed(ordersFixture())
  const res = await app.request(ordersPath(), { token: tokenFrom(first) })
  t.equal(res.status, 200, 'the provider answered at once')
  t.same(fetchFailures(logs.lines), [], 'no failed fetch logged')
  t.equal(lagging.requests(), 1)
})

t.test('a provider that negotiates content (406 unless asked for JSON) is asked for a key set: application/jwk-set+json or application/json → 200', async (t) => {
  const accepts: string[] = []
  const negotiating = await answering((response) => {
    const accept = response.req.headers.accept ?? ''
    accepts.push(accept)
    if (/application\/(jwk-set\+)?json/.test(accept)) {
      response.setHeader('content-type', 'application/jwk-set+json')
      response.end(JSON.stringify({ keys: [jwk(first)] }))
    } else {
      response.statusCode = 406
      response.end()
    }
  })
  const app = await build(t, { JWT_SECRET: '', JWKS_URL: negotiating.url })
  await app.seed(ordersFixture())
  t.equal((await app.request(ordersPath(), { token: tokenFrom(first) })).status, 200)
  t.equal(accepts.length, 1, 'one fetch')
  t.match(accepts[0], /application\/jwk-set\+json/, 'asking for a key set')
})

t.test('a key set response too big to be one (16 MiB, a gzip bomb, a body that never ends) is cut at 1 MiB → 503, not read on to the timeout', async (t) => {
  const MiB = 1024 * 1024
  const padded = (bytes: number) => JSON.stringify({ keys: [jwk(first)], padding: ' '.repeat(bytes) })
  const bomb = gzipSync(padded(64 * MiB))
  let endlessSent = 0
  const cases: Array<[string, (response: ServerResponse) => void]> = [
    ['16 MiB', (response) => response.end(padded(16 * MiB))],
    ['64 MiB gzipped to ' + String(bomb.length) + ' bytes', (response) => { response.setHeader('content-encoding', 'gzip'); response.end(bomb) }],
    ['64 MiB, then nothing, never ending', (response) => {
      // Spaces inside the set: JSON that never closes. At most 64 MiB, so a service that reads on
      // waits for its timeout rather than running out of memory.
      const chunk = Buffer.alloc(64 * 1024, ' ')
      response.write('{"keys": [')
      const pump = () => {
        while (endlessSent < 64 * MiB && !response.destroyed) {
          endlessSent += chunk.length
          if (!response.write(chunk)) { response.once('drain', pump); return }
        }
      }
      pump()
    }]
  ]
  for (const [label, respond] of cases) {
    const huge = await answering(respond)
    const app = await build(t, { JWT_SECRET: '', JWKS_URL: huge.url, JWKS_FETCH_TIMEOUT_MS: '20000' })
    const started = Date.now()
    const res = await app.request(ordersPath(), { token: tokenFrom(first) })
    t.equal(res.status, 503, `${label}: keys unavailable`)
    t.ok(Date.now() - started < 10_000, `${label}: answered in ${Date.now() - started} ms, long before the fetch's timeout`)
    await app.app.close()
  }
  t.ok(endlessSent < 16 * MiB, `${endlessSent} bytes of the endless body were sent before the service stopped reading`)
})

const FETCH_FAILED = 'the key set could not be fetched'
const fetchFailures = (lines: Array<Record<string, unknown>>) => lines.filter((line) => line.msg === FETCH_FAILED)

t.test('a Content-Length over 1 MiB is refused before the body is read → 503 at once; a key set of exactly 1 MiB, counted or chunked, verifies → 200', async (t) => {
  const MiB = 1024 * 1024
  const unpadded = JSON.stringify({ keys: [jwk(first)], padding: '' })
  const exactlyOneMiB = JSON.stringify({ keys: [jwk(first)], padding: ' '.repeat(MiB - unpadded.length) })
  t.equal(Buffer.byteLength(exactlyOneMiB), MiB)
  const cases: Array<[string, (response: ServerResponse) => void, number]> = [
    // The headers and nothing more: a service that waited for the body would wait for its timeout.
    ['Content-Length 1 MiB + 1, no body sent', (response) => { response.writeHead(200, { 'content-length': String(MiB + 1) }); response.flushHeaders() }, 503],
    ['exactly 1 MiB, with its Content-Length', (response) => response.end(exactlyOneMiB), 200],
    ['exactly 1 MiB, chunked', (response) => { response.write(exactlyOneMiB.slice(0, 1000)); response.end(exactlyOneMiB.slice(1000)) }, 200]
  ]
  for (const [label, respond, status] of cases) {
    const server = await answering(respond)
    const app = await build(t, { JWT_SECRET: '', JWKS_URL: server.url, JWKS_FETCH_TIMEOUT_MS: '20000' })
    await app.seed(ordersFixture())
    const started = Date.now()
    t.equal((await app.request(ordersPath(), { token: tokenFrom(first) })).status, status, label)
    t.ok(Date.now() - started < 10_000, `${label}: answered in ${Date.now() - started} ms, long before the fetch's timeout`)
    await app.app.close()
  }
})

t.test('a key set answer that is JSON but not a key set is a failed fetch, logged: 503 before any set was fetched (never 401), and the last set still verifies after', async (t) => {
  // jose would refuse each of these too, but as the token's fault: a 401 while the provider is broken.
  const shapes = ['null', '"keys"', '[]', '{}', '{"keys":"x"}', '{"keys":{}}', '{"keys":[1]}', '{"keys":[null]}', '{"keys":[[]]}',
    JSON.stringify({ keys: [jwk(first), 1] })]
  let body = ''
  const shaped = await answering((response) => response.end(body))
  const logs = captureLogs()
  const COOLDOWN = 100
  const app = await build(t, { JWT_SECRET: '', JWKS_URL: shaped.url, JWKS_COOLDOWN_MS: String(COOLDOWN), JWKS_CACHE_MAX_AGE_MS: '1000', LOG_LEVEL: 'warn' }, { logs: logs.stream })
  await app.seed(ordersFixture())
  const status = async () => (await app.request(ordersPath(), { token: tokenFrom(first) })).status
  const notAKeySet = (shape: string) => {
    const failures = fetchFailures(logs.lines)
    t.match(failures.at(-1), { level: 40, url: shaped.url, reason: /^The JSON Web Key Set HTTP response is not a key set/, code: 'ERR_JOSE_GENERIC' }, `${shape}: logged`)
    return failures.length
  }
  let lines = 0
  for (const shape of shapes) {
    body = shape
    await sleep(COOLDOWN + 50) // past the last failure's cooldown: fetched again
    t.equal(await status(), 503, `${shape} before any set: keys unavailable`)
    t.equal(notAKeySet(shape), ++lines, `${shape}: one line`)
  }
  body = JSON.stringify({ keys: [jwk(first)] })
  await sleep(COOLDOWN + 50)
  t.equal(await status(), 200, 'a key set at last')
  await sleep(1_100) // past the cache's age: each request below fetches the set again, in the background
  for (const shape of shapes) {
    body = shape
    await sleep(COOLDOWN + 50)
    t.equal(await status(), 200, `${shape} after a set: the last one verifies`)
    await until(t, () => fetchFailures(logs.lines).length > lines, `${shape} after a set: the fetch failed`)
    t.equal(notAKeySet(shape), ++lines, `${shape} after a set: one line`)
  }
})

t.test('a key set that redirects (to a host of the attacker\'s, as SSRF would) or trickles a byte at a time → 503; the redirect is not followed', async (t) => {
  const before = attacker.requests()
  const redirecting = await answering((response) => { response.statusCode = 302; response.setHeader('location', attacker.url); response.end() })
  const trickling = await answering((response) => {
    response.write('{')
    const timer = setInterval(() => response.write(' '), 100)
    response.once('close', () => clearInterval(timer))
  })
  for (const [label, url] of [['a redirect', redirecting.url], ['a trickle', trickling.url]]) {
    const app = await build(t, { JWT_SECRET: '', JWKS_URL: url, JWKS_FETCH_TIMEOUT_MS: '1000' })
    const started = Date.now()
    t.equal((await app.request(ordersPath(), { token: tokenFrom(stranger) })).status, 503, `${label}: keys unavailable`)
    t.ok(Date.now() - started < 5_000, `${label}: answered within the fetch's timeout (${Date.now() - started} ms)`)
    await app.app.close()
  }
  t.equal(attacker.requests(), before, 'the redirect\'s target was never fetched')
})

t.test('kid tricks (path and SQL injection, keys a server might load from them) and an embedded jwk header: nothing but the published set is used → 401', async (t) => {
  // Where a kid is read (here), as an HS256 secret a naive server would load from it, and as a
  // stranger's RS256 key: neither verifies.
  const claims = { scope: 'read:resource', exp: inOneMinute() }
  for (const [kid, loaded] of [['../../../../../dev/null', ''], ["x' UNION SELECT 'attacker-secret' --", 'attacker-secret'], ['/proc/self/environ', 'x']] as const) {
    t.equal((await get(craftedToken({ alg: 'HS256', typ: 'JWT', kid }, claims, loaded))).status, 401, `HS256 ${kid}`)
    t.equal((await get(tokenFrom(stranger, kid))).status, 401, `RS256 ${kid}`)
  }
  for (const kid of ['../../../../etc/passwd', "key-1' OR '1'='1", 'key-1\u0000', '']) {
    t.equal((await get(tokenFrom(stranger, kid))).status, 401, JSON.stringify(kid))
  }
  const embedded = tokenFrom(stranger, stranger.kid, { jwk: JSON.stringify(jwk(stranger)) })
  t.equal((await get(embedded)).status, 401, 'a key carried in the token is not trusted')
})

t.test('production JWKS over plain http: on a loopback host it starts quietly; elsewhere only with JWKS_ALLOW_HTTP=true, warning', async (t) => {
  // Refused without JWKS_ALLOW_HTTP: test/src/config.test.ts. Nothing is fetched at start.
  const production = { NODE_ENV: 'production', JWT_SECRET: '', JWT_ISSUER: PRODUCTION_ISSUER, JWT_AUDIENCE: PRODUCTION_AUDIENCE, LOG_LEVEL: 'warn' }
  const cases: Array<[string, Record<string, string>, boolean]> = [
    ['loopback', { JWKS_URL: 'http://127.0.0.1:9/jwks.json' }, false],
    ['localhost', { JWKS_URL: 'http://localhost:9/jwks.json' }, false],
    ['another host, allowed', { JWKS_URL: 'http://idp.invalid/jwks.json', JWKS_ALLOW_HTTP: 'true' }, true]
  ]
  for (const [label, env, warns] of cases) {
    const logs = captureLogs()
    const harness = await build(t, { ...production, ...env }, { logs: logs.stream })
    t.equal((await harness.request('/readyz')).status, 200, `${label}: started`)
    const warning = logs.lines.find((line) => /JWKS_URL is plain http/.test(String(line.msg)))
    if (warns) t.match(warning, { level: 40, url: env.JWKS_URL }, `${label}: one warning line at start`)
    else t.notOk(warning, `${label}: no warning`)
    await harness.app.close()
  }
})

t.test('a failed fetch of the key set is logged as a warning naming JWKS_URL and why (refused, 500, 204, not JSON, too large, timed out), never the token', async (t) => {
  const cases: Array<[string, string, RegExp, string]> = [
    ['a closed port', `http://127.0.0.1:${await freePort()}/jwks.json`, /^fetch failed: connect ECONNREFUSED 127\.0\.0\.1:\d+$/, 'ECONNREFUSED'],
    ['a 500', (await answering((response) => { response.statusCode = 500; response.end('{"keys":[]}') })).url, /Expected 200 OK/, 'ERR_JOSE_GENERIC'],
    ['not JSON', (await answering((response) => response.end('<html>maintenance</html>'))).url, /Failed to parse the JSON Web Key Set HTTP response as JSON: .*JSON/, 'ERR_JOSE_GENERIC'],
    // A 204 has no body at all to discard.
    ['a 204', (await answering((response) => { response.statusCode = 204; response.end() })).url, /^Expected 200 OK from the JSON Web Key Set HTTP response, got 204$/, 'ERR_JOSE_GENERIC'],
    ['too large', (await answering((response) => response.end(' '.repeat(1024 * 1024 + 1)))).url, /^The JSON Web Key Set HTTP response is larger than 1048576 bytes$/, 'ERR_JOSE_GENERIC'],
    ['no answer', (await answering(() => {})).url, /^request timed out: .*timeout/, 'ERR_JWKS_TIMEOUT']
  ]
  for (const [label, url, reason, code] of cases) {
    const logs = captureLogs()
    // A short bound only where nothing answers: under load a 500 may take longer than 200 ms.
    const fetchTimeoutMs = label === 'no answer' ? '200' : '5000'
    const app = await build(t, { JWT_SECRET: '', JWKS_URL: url, JWKS_FETCH_TIMEOUT_MS: fetchTimeoutMs, LOG_LEVEL: 'warn' }, { logs: logs.stream })
    const token = tokenFrom(first)
    t.equal((await app.request(ordersPath(), { token })).status, 503, `${label}: keys unavailable`)
    const failures = fetchFailures(logs.lines)
    t.equal(failures.length, 1, `${label}: one line`)
    t.match(failures[0], { level: 40, url, reason, code }, label)
    t.notOk(logs.lines.some((line) => JSON.stringify(line).includes(token.split('.')[2])), `${label}: the token is not logged`)
    await app.app.close()
  }
})

t.test('failed fetches are logged once each: requests waiting on one fetch share a line, and there is at most one fetch per cooldown', async (t) => {
  const silent = await answering(() => {})
  const logs = captureLogs()
  const COOLDOWN = 1000
  const app = await build(t, { JWT_SECRET: '', JWKS_URL: silent.url, JWKS_FETCH_TIMEOUT_MS: '300', JWKS_COOLDOWN_MS: String(COOLDOWN), LOG_LEVEL: 'warn' }, { logs: logs.stream })
  const attempt = async () => (await app.request(ordersPath(), { token: tokenFrom(first) })).status
  t.same(await Promise.all(Array.from({ length: 10 }, attempt)), Array(10).fill(503), 'ten requests at once')
  t.equal(silent.requests(), 1, 'one fetch')
  t.equal(fetchFailures(logs.lines).length, 1, 'one line for it')
  await sleep(COOLDOWN + 200)
  t.equal(await attempt(), 503)
  t.equal(silent.requests(), 2, 'after the cooldown, a fetch again')
  t.equal(fetchFailures(logs.lines).length, 2, 'and its own line')
})

t.test("a failed fetch's log fields: the messages down its causes, the first code, three levels at most", async (t) => {
  // fetch's shape: "fetch failed", its cause naming the address and the reason.
  const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' })
  t.same(fetchFailureOf(new TypeError('fetch failed', { cause: refused })), { reason: 'fetch failed: connect ECONNREFUSED 127.0.0.1:1', code: 'ECONNREFUSED' })
  const outer = Object.assign(new Error('outer'), { code: 'OUTER' })
  outer.cause = Object.assign(new Error('inner'), { code: 'INNER' })
  t.same(fetchFailureOf(outer), { reason: 'outer: inner', code: 'OUTER' }, 'the first code among them')
  t.same(fetchFailureOf(Object.assign(new Error(''), { code: 42, cause: { message: 7, code: 'LATER' } })), { reason: 'Error', code: 'LATER' },
    'an empty or non-text message is left out, a non-text code skipped; with no message at all, the error as text')
  t.same(fetchFailureOf({ message: '', cause: { message: 'inner' } }), { reason: 'inner', code: undefined }, 'an empty message adds no separator')
  const deep = { message: 'one', cause: { message: 'two', cause: { message: 'three', cause: { message: 'four', code: 'DEEP' } } } }
  t.same(fetchFailureOf(deep), { reason: 'one: two: three', code: undefined }, 'three levels, no further')
  const looping: { message: string, cause?: unknown } = { message: 'again' }
  looping.cause = looping
  t.same(fetchFailureOf(looping), { reason: 'again: again: again', code: undefined }, 'a cause chain that loops ends')
  t.same(fetchFailureOf('a string'), { reason: 'a string', code: undefined }, 'not an object: as text')
})

t.test('mayFetch: after a failed fetch, the key set is fetched again once its cooldown has passed, at its last millisecond too', async (t) => {
  const at = 1_800_000_000_000
  t.equal(mayFetch(at, -Infinity, 1000), true, 'no fetch failed yet')
  t.equal(mayFetch(at + 999, at, 1000), false, 'within the cooldown')
  t.equal(mayFetch(at + 1000, at, 1000), true, 'exactly the cooldown after')
  t.equal(mayFetch(at + 1001, at, 1000), true, 'after')
})
