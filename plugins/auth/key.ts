// What tokens are checked against, chosen from the configuration: the verification key (a secret,
// a public key pinned to its algorithm, or the identity provider's key set, never JWKS over plain
// http to another host in production), the issuer, the audiences, the typ and the scope claims.
import { createPrivateKey, createPublicKey } from 'node:crypto'
import { isIPv4 } from 'node:net'
import { audiencesOf, type Config, isProduction } from '../../src/config.js'
import type { AuthOptions } from './index.js'
import { MIN_RSA_BITS } from './key-set.js'

/**
 * How tokens are verified: a shared HS256 secret, a public key pinned to its one algorithm, or the
 * identity provider's key set (RS256 and ES256 keys, chosen by the token's kid).
 */
export type JwtKey =
  | { kind: 'secret', algorithms: ['HS256'], secret: string }
  | { kind: 'public-key', algorithms: ['RS256'] | ['ES256'], publicKey: string }
  | { kind: 'jwks', algorithms: ['RS256', 'ES256'], url: string, cacheMaxAgeMs: number, cooldownMs: number, fetchTimeoutMs: number }

/** JWT_SCOPE_CLAIMS's claims, in order. */
export function scopeClaimsOf (config: Pick<Config, 'JWT_SCOPE_CLAIMS'>): string[] {
  return config.JWT_SCOPE_CLAIMS.split(' ').filter(Boolean)
}

/** JWT_TYPE as fast-jwt compares it: lower case, without "application/". */
export function tokenTypeOf (config: Pick<Config, 'JWT_TYPE'>): string | undefined {
  // Stryker disable next-line Regex: JWT_TYPE's pattern admits application/ only at the start
  return config.JWT_TYPE?.toLowerCase().replace(/^application\//, '')
}

/** Loopback hosts: a key set fetched from them never leaves the machine (or the pod's sidecar). */
function isLoopback (hostname: string): boolean {
  return hostname === 'localhost' || hostname === '[::1]' || (isIPv4(hostname) && hostname.startsWith('127.'))
}

/** True when JWKS_URL is plain http to a host that is not loopback (allowed only by JWKS_ALLOW_HTTP). */
export function jwksOverNetworkHttp (config: Pick<Config, 'JWKS_URL'>): boolean {
  if (!config.JWKS_URL?.startsWith('http://')) return false
  return !isLoopback(new URL(config.JWKS_URL).hostname)
}

/**
 * The verification key the configuration names. Algorithms are pinned to the key's type, so a
 * token signed HS256 with the public key as its secret (algorithm confusion) can never verify.
 */
export function jwtKeyOf (config: Config): JwtKey | undefined {
  if (config.JWT_SECRET) {
    // A PEM is a key of RS256 or ES256, never an HS256 secret (anyone holding a public key could
    // sign with it). fast-jwt would refuse it only when the auth plugin registers, in words that
    // name no setting; its test for a PEM is this one: a BEGIN line anywhere.
    if (/-----BEGIN [A-Z0-9 ]+?-----/.test(config.JWT_SECRET)) {
      throw new Error('Invalid configuration: JWT_SECRET holds a PEM key, not a shared secret: a public key goes in JWT_PUBLIC_KEY')
    }
    // The same for a public key as a JWK, or a whole key set (fast-jwt's test: an RSA, EC or OKP kty).
    if (isAsymmetricJwkJson(config.JWT_SECRET)) {
      throw new Error('Invalid configuration: JWT_SECRET holds a JSON Web Key, not a shared secret: a public key goes in JWT_PUBLIC_KEY (as PEM), a key set\'s URL in JWKS_URL')
    }
    return { kind: 'secret', algorithms: ['HS256'], secret: config.JWT_SECRET }
  }
  if (config.JWKS_URL) {
    // The schema checks only the https?:// prefix; URL's own error ("Invalid URL") names no setting.
    // The value is not repeated: a URL that does not parse may still hold a password.
    let url: URL
    try {
      url = new URL(config.JWKS_URL)
    } catch {
      throw new Error('Invalid configuration: JWKS_URL is not a URL')
    }
    // fetch refuses a URL with credentials, so such a key set never loads; and the URL is logged.
    const { username, password } = url
    if (username || password) throw new Error('Invalid configuration: JWKS_URL must not hold a user name or password (a key set is public)')
    if (isProduction(config) && jwksOverNetworkHttp(config) && !config.JWKS_ALLOW_HTTP) {
      throw new Error('Invalid configuration: JWKS_URL must be https:// in production, or http:// on a loopback host ' +
        '(set JWKS_ALLOW_HTTP=true to allow plain http to another host)')
    }
    return {
      kind: 'jwks',
      algorithms: ['RS256', 'ES256'],
      url: config.JWKS_URL,
      cacheMaxAgeMs: config.JWKS_CACHE_MAX_AGE_MS,
      cooldownMs: config.JWKS_COOLDOWN_MS,
      fetchTimeoutMs: config.JWKS_FETCH_TIMEOUT_MS
    }
  }
  if (!config.JWT_PUBLIC_KEY) return undefined
  // Container platforms often flatten a PEM's newlines to "\n".
  const publicKey = config.JWT_PUBLIC_KEY.replaceAll('\\n', '\n')
  // Node would derive the public key from a private one and take it: the signing secret would then
  // sit in this service's environment, which only ever verifies.
  if (isPrivateKey(publicKey)) throw new Error('Invalid configuration: JWT_PUBLIC_KEY holds a private key: give the public key only (the service never signs)')
  let key
  try {
    key = createPublicKey(publicKey)
  } catch {
    throw new Error('Invalid configuration: JWT_PUBLIC_KEY is not a PEM public key')
  }
  if (key.asymmetricKeyType === 'rsa') {
    // RFC 7518 §3.3; the key set's keys (JWKS_URL) are held to the same (key-set.ts).
    // Stryker disable next-line OptionalChaining: Node describes every RSA key it loads, its modulus length included
    const bits = key.asymmetricKeyDetails?.modulusLength ?? 0
    if (bits < MIN_RSA_BITS) throw new Error(`Invalid configuration: JWT_PUBLIC_KEY is an RSA key of ${bits} bits; RS256 needs ${MIN_RSA_BITS} or more`)
    return { kind: 'public-key', algorithms: ['RS256'], publicKey }
  }
  // Only an EC key has a curve.
  // Stryker disable next-line OptionalChaining: Node describes every key it loads (an Ed25519 key with no fields)
  if (key.asymmetricKeyDetails?.namedCurve === 'prime256v1') {
    return { kind: 'public-key', algorithms: ['ES256'], publicKey }
  }
  throw new Error('Invalid configuration: JWT_PUBLIC_KEY must be an RSA key (RS256) or a P-256 EC key (ES256)')
}

/** The auth plugin's options from the configuration; throws when no key is named, or one is unusable. */
export function authOptionsOf (config: Config): AuthOptions {
  const key = jwtKeyOf(config)
  if (!key) throw new Error('one of JWKS_URL, JWT_PUBLIC_KEY or JWT_SECRET is required')
  return {
    key,
    issuer: config.JWT_ISSUER,
    audiences: audiencesOf(config),
    type: tokenTypeOf(config),
    scopeClaims: scopeClaimsOf(config),
    maxLifetimeS: config.JWT_MAX_LIFETIME_S
  }
}

/** Whether `secret` is JSON of an asymmetric JWK, an array of them or a key set holding one, as fast-jwt refuses as an HMAC secret. */
function isAsymmetricJwkJson (secret: string): boolean {
  let parsed: unknown
  // Stryker disable BlockStatement: the catch's is equivalent: with nothing parsed, every test below is false too (the try's, emptied, fails the refusal tests)
  try {
    parsed = JSON.parse(secret)
  } catch {
    return false
  }
  // Stryker restore BlockStatement
  const isAsymmetric = (jwk: unknown) => ['RSA', 'EC', 'OKP'].includes((jwk as { kty?: unknown } | null)?.kty as string)
  const keys = (parsed as { keys?: unknown } | null)?.keys
  return isAsymmetric(parsed) || (Array.isArray(parsed) && parsed.some(isAsymmetric)) || (Array.isArray(keys) && keys.some(isAsymmetric))
}

/** Whether `pem` is a private key Node can read (a public key is not). */
function isPrivateKey (pem: string): boolean {
  try {
    createPrivateKey(pem)
    return true
    // Stryker disable next-line BlockStatement: emptied, the function returns undefined, as falsy as false to its one caller
  } catch {
    return false
  }
}
