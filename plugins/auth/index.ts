// Bearer JWT authentication (RFC 6750) with @fastify/jwt, denying by default: one onRequest hook
// over every route asks for a valid token, and the scopes the route's config names (the generated
// operations carry them from the spec's `security`), unless the route is declared `public`. An
// unauthenticated request is answered 401 before its parameters are even looked at.
// https://github.com/fastify/fastify-jwt
import fastifyJwt, { type TokenOrHeader } from '@fastify/jwt'
import type { FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { TokenError } from 'fast-jwt'
import { headerLines } from '../../src/header-lines.js'
import { Problem, problemNameOf, problems } from '../../src/problems.js'
import { requestSpan } from '../../src/tracing.js'
import type { JwtKey } from './key.js'
import { KeySetUnavailable, keySetResolver } from './key-set.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Scopes a token must carry for this route, besides being valid. */
    scopes?: readonly string[]
    /** No token needed: set only on purpose (probes, docs, the spec, metrics). */
    public?: boolean
  }
}

export interface AuthOptions {
  key: JwtKey
  issuer?: string
  /** A token matches if its aud holds any of these; none: aud is not checked. */
  audiences: readonly string[]
  /** The typ header tokens must carry (lower case, without "application/"), when set. */
  type?: string
  /** The claims that carry scopes, in order: the first one a token carries is its scopes. */
  scopeClaims: readonly string[]
  /** The longest lifetime a token may have, in seconds; undefined: any. */
  maxLifetimeS?: number
}

/** Route config for a route anyone may call. */
export const publicRoute = { public: true } as const

// Clocks of the token issuer and of this service may disagree a little.
const CLOCK_TOLERANCE_MS = 30_000

/**
 * Until when (ms since the epoch) the request's token is accepted: its `exp`, with the tolerance
 * every check allows; Infinity without a token (a public route). What a request opens, a change
 * feed stream, lives no longer.
 */
export function tokenAcceptedUntil (request: FastifyRequest): number {
  const exp = (request.user as { exp?: unknown } | undefined)?.exp
  return typeof exp === 'number' ? exp * 1000 + CLOCK_TOLERANCE_MS : Infinity
}

// The claims that hold a NumericDate (RFC 7519 §4.1.4-6).
const NUMERIC_DATE_CLAIMS = ['exp', 'nbf', 'iat'] as const

const TOKEN_CACHE_SIZE = 1000
const TOKEN_CACHE_TTL_MS = 60_000
// A longer token is verified every time rather than kept by its text (the headers may hold 128 KiB: maxHeaderSize in src/app.ts).
const CACHED_TOKEN_MAX_LENGTH = 4096

// RFC 6750 §2.1: the scheme is case-insensitive; the token is a b64token.
const bearerCredentials = /^Bearer +([A-Za-z0-9\-._~+/]+=*) *$/i

// The claims that may carry scopes, as JWT_SCOPE_CLAIMS names them.
const SCOPE_CLAIMS: ReadonlySet<string> = new Set(['scope', 'scp', 'permissions'])
const NO_SCOPES: ReadonlySet<string> = new Set()

/**
 * Scopes granted by a token: those of the first of `scopeClaims` it carries, and no later claim's
 * (Auth0's `permissions` would otherwise widen the `scope` a client asked to narrow). `scope` is a
 * space-delimited string (RFC 9068), `scp` one or an array, `permissions` an array. A claim carried
 * in another shape (`scope: 123`) grants nothing and still ends the search: a malformed claim must
 * not hand the decision to a wider one.
 */
export function grantedScopes (claims: Record<string, unknown>, scopeClaims: readonly string[]): ReadonlySet<string> {
  for (const claim of scopeClaims) {
    const value = claims[claim]
    if (value === undefined) continue
    const scopes = new Set<string>()
    // A string for scope, an array for permissions, either for scp.
    if (typeof value === 'string' && claim !== 'permissions') for (const scope of value.split(' ')) { if (scope) scopes.add(scope) }
    else if (Array.isArray(value) && claim !== 'scope') for (const scope of value) { if (typeof scope === 'string') scopes.add(scope) }
    return scopes
  }
  return NO_SCOPES
}

/**
 * The Authorization field as RFC 9110 §5.3 reads it: several lines are one value, joined by commas
 * (which no Bearer credentials match). Node keeps only the first line in request.headers, so a
 * second token, which a gateway may have checked instead, would otherwise go unseen.
 */
function authorizationOf (request: FastifyRequest): string {
  // No line: '', as missing as the field is.
  return headerLines(request.raw, 'authorization').join(', ')
}

export interface VerifiedToken { claims: Record<string, unknown>, scopes: ReadonlySet<string>, until: number }

/**
 * Tokens this service accepted lately, by their text, with their claims and scopes: a token seen
 * again is not decoded, hashed and looked up through @fastify/jwt and fast-jwt's cache again (about
 * 20 µs a request). Kept until the token's exp (without the clock tolerance, so never past what a
 * full check would accept) and at most TOKEN_CACHE_TTL_MS, as fast-jwt's cache keeps them. Only
 * accepted tokens: a refused one is checked in full every time (fast-jwt's cache keeps those). The
 * oldest goes first when full. Only with a key of the configuration's own (JWT_SECRET,
 * JWT_PUBLIC_KEY): with a key set, every request asks the set for its key, so that a key the
 * provider withdrew stops verifying once the set is fetched again, tokens it verified before too.
 */
export class VerifiedTokens {
  readonly #tokens = new Map<string, VerifiedToken>()

  /** The token as accepted, if it was within TOKEN_CACHE_TTL_MS of `now` and `now` is before its exp. */
  get (token: string, now: number): VerifiedToken | undefined {
    const verified = this.#tokens.get(token)
    if (verified === undefined || now < verified.until) return verified
    this.#tokens.delete(token)
    return undefined
  }

  /** Keeps a token accepted at `now` (its claims checked in full, exp among them); returns what get() will. */
  add (token: string, claims: Record<string, unknown>, scopes: ReadonlySet<string>, now: number): VerifiedToken {
    const verified = { claims, scopes, until: Math.min(now + TOKEN_CACHE_TTL_MS, (claims.exp as number) * 1000) }
    if (token.length > CACHED_TOKEN_MAX_LENGTH) return verified
    if (this.#tokens.size >= TOKEN_CACHE_SIZE) this.#tokens.delete(this.#tokens.keys().next().value!)
    this.#tokens.set(token, verified)
    return verified
  }
}

/** Whether the token's iat (a finite number, or absent) is later than `now` (ms) by more than the clock tolerance. */
export function issuedInTheFuture (claims: Record<string, unknown>, now: number): boolean {
  // Stryker disable next-line ConditionalExpression: without iat, undefined * 1000 is NaN, and the comparison false
  return claims.iat !== undefined && (claims.iat as number) * 1000 > now + CLOCK_TOLERANCE_MS
}

function invalidTokenDescription (error: unknown): string {
  const code = (error as { code?: string }).code
  // @fastify/jwt renames fast-jwt's expiry error; the others it passes on as fast-jwt's.
  if (code === 'FST_JWT_AUTHORIZATION_TOKEN_EXPIRED') return 'The access token expired'
  if (code === TokenError.codes.inactive) return 'The access token is not valid yet'
  return 'The access token is invalid'
}

// @fastify/jwt's key function; with decode.complete it is handed the decoded token. A token whose
// alg no key may verify (none, HS256, PS256…) is refused before the set is asked: it is the token's
// fault, so neither 503 keys-unavailable while the provider is down, nor a wait for a fetch.
function fromKeySet (publicKeyOf: ReturnType<typeof keySetResolver>, algorithms: readonly string[]) {
  return async (_request: FastifyRequest, token: TokenOrHeader) => {
    const header = 'header' in token ? token.header : token
    // Stryker disable next-line StringLiteral: never shown; the refusal's description is invalid-token's (invalidTokenDescription)
    if (!algorithms.includes(header.alg)) throw new TokenError(TokenError.codes.invalidAlgorithm, 'The token algorithm is invalid.')
    return publicKeyOf(header)
  }
}

// fast-jwt's TTL of a refusal time cannot change, beside its clock tolerance: about the tolerance.
// Stryker disable next-line UnaryOperator: kept 2 ms longer, a refusal changes no answer
const REFUSAL_CACHE_TTL = -1

export default fp<AuthOptions>(async function auth (fastify, { key, issuer, audiences, type, scopeClaims, maxLifetimeS }) {
  // grantedScopes would read any other claim in every shape: refused at start rather than guessed at.
  const unknownClaim = scopeClaims.find((claim) => !SCOPE_CLAIMS.has(claim))
  if (unknownClaim !== undefined) throw new Error(`${unknownClaim} cannot carry scopes (only ${[...SCOPE_CLAIMS].join(', ')})`)
  const audience = audiences.length > 0 ? [...audiences] : undefined
  await fastify.register(fastifyJwt, {
    secret: key.kind === 'secret'
      ? key.secret
      : key.kind === 'public-key'
        ? { public: key.publicKey }
        : fromKeySet(keySetResolver(key.url, key, fastify.log), key.algorithms),
    // A key function sees the token's header only when the token is decoded whole.
    decode: { complete: true },
    verify: {
      algorithms: key.algorithms,
      // fast-jwt checks iss and aud only when present: configured, they must also be required.
      requiredClaims: ['exp', ...(issuer ? ['iss'] : []), ...(audience ? ['aud'] : [])],
      clockTolerance: CLOCK_TOLERANCE_MS,
      // fast-jwt keeps a refusal for as long as the tolerance: a token refused as not valid yet
      // (nbf) would stay refused that long after it became valid, so that one is never kept. Other
      // refusals do not change with time, but a refusal costs no signature check to repeat (the
      // token's text decides); how long they are kept (about the tolerance) changes no answer.
      // Stryker disable next-line ConditionalExpression,ArrowFunction: keeping no refusal answers the same, slower (the nbf test kills keeping every one)
      errorCacheTTL: (error: TokenError) => error.code === TokenError.codes.inactive ? -Infinity : REFUSAL_CACHE_TTL,
      // Verified tokens are remembered (keyed by a hash of the token) until their exp/nbf change
      // the answer, and at most a minute, so a key withdrawn from the key set stops working soon.
      // Signature checks were most of the CPU of a request (RS256: ~40 µs).
      cache: TOKEN_CACHE_SIZE,
      cacheTTL: TOKEN_CACHE_TTL_MS,
      ...(issuer ? { allowedIss: issuer } : {}),
      ...(audience ? { allowedAud: audience } : {}),
      // fast-jwt compares the typ header lower-cased and without "application/" (RFC 8725 §3.11).
      ...(type ? { checkTyp: type } : {}),
      // The token is read by authenticate() below; @fastify/jwt only verifies it.
      // Stryker disable next-line OptionalChaining: jwtVerify() runs only after authenticate() matched the header
      extractToken: (request: FastifyRequest) => request.headers.authorization?.match(bearerCredentials)?.[1]
    }
  })

  // Stryker disable next-line ConditionalExpression: no cache answers the same, slower (the JWKS test covers the case that differs)
  const verifiedTokens = key.kind === 'jwks' ? undefined : new VerifiedTokens()

  async function authenticate (request: FastifyRequest, scopes: readonly string[]) {
    const authorization = authorizationOf(request)
    if (!authorization || !/^Bearer(\s|$)/i.test(authorization)) throw problems.missingCredentials()
    const token = bearerCredentials.exec(authorization)?.[1]
    if (token === undefined) throw problems.invalidToken('The access token is invalid')
    const now = Date.now()
    let verified = verifiedTokens?.get(token, now)
    // Stryker disable next-line ConditionalExpression: a full check every time answers the same, slower
    if (verified === undefined) {
      const claims = await verify(request, now)
      const scopes = grantedScopes(claims, scopeClaims)
      verified = verifiedTokens?.add(token, claims, scopes, now) ?? { claims, scopes, until: now }
    } else {
      // As jwtVerify() leaves it: the claims of the token (src/routes/permissions/actor.ts).
      request.user = verified.claims
    }
    if (!scopes.every((scope) => verified.scopes.has(scope))) throw problems.insufficientScope(scopes)
  }

  /** The token's claims, checked in full: signature, exp, nbf, iss, aud, typ, iat and lifetime. */
  async function verify (request: FastifyRequest, now: number): Promise<Record<string, unknown>> {
    let claims: Record<string, unknown>
    try {
      claims = await request.jwtVerify<Record<string, unknown>>()
    } catch (error) {
      if (error instanceof KeySetUnavailable) throw problems.keysUnavailable()
      throw problems.invalidToken(invalidTokenDescription(error))
    }
    // A NumericDate is a finite number (RFC 7519 §2). fast-jwt checks exp and nbf are numbers, not
    // that they are finite: `"exp": 1e400` is parsed as Infinity, a token that never expires.
    for (const claim of NUMERIC_DATE_CLAIMS) {
      if (claims[claim] !== undefined && !Number.isFinite(claims[claim])) throw problems.invalidToken('The access token is invalid')
    }
    // fast-jwt checks exp and nbf but not iat: a token issued in the future is not believable.
    if (issuedInTheFuture(claims, now)) {
      throw problems.invalidToken('The access token was issued in the future')
    }
    // A leaked token is good for its whole lifetime. Without iat it is counted from now, on this
    // service's clock: hence the same tolerance as exp and nbf get. exp is a finite number (above).
    // Stryker disable next-line ConditionalExpression: without a maximum, maxLifetimeS * 1000 is NaN, and the comparison below false
    if (maxLifetimeS !== undefined) {
      const issuedAtMs = typeof claims.iat === 'number' ? claims.iat * 1000 : now
      if ((claims.exp as number) * 1000 - issuedAtMs > maxLifetimeS * 1000 + CLOCK_TOLERANCE_MS) {
        throw problems.invalidToken('The access token lives longer than this service accepts')
      }
    }
    return claims
  }

  // Global, so it covers every route whenever and by whichever plugin it was registered. Nothing is
  // routed for a 404: the answer is the same with or without a token, and the paths are published.
  // The outcome goes on the request's span when it is traced: the problem's name when refused.
  fastify.addHook('onRequest', async function authorize (request) {
    const { config } = request.routeOptions
    if (config.public === true || request.is404) {
      // Stryker disable next-line all: traced only in test/system/tracing.test.ts (a process of its own)
      requestSpan(request)?.setAttribute('auth.outcome', 'public')
      return
    }
    try {
      await authenticate(request, config.scopes ?? [])
    } catch (error) {
      // Stryker disable next-line all: traced only in test/system/tracing.test.ts (a process of its own)
      requestSpan(request)?.setAttribute('auth.outcome', error instanceof Problem ? problemNameOf(error.type) : 'error')
      throw error
    }
    // Stryker disable next-line all: traced only in test/system/tracing.test.ts (a process of its own)
    requestSpan(request)?.setAttribute('auth.outcome', 'allowed')
  })
}, { name: 'auth' })
