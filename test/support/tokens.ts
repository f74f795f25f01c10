// Real signed JWTs for the tests: HS256 with the test secret, RS256 and ES256 with key pairs made
// here, and hand-built hostile tokens.
import { createHmac, generateKeyPairSync, type KeyPairSyncResult, randomBytes } from 'node:crypto'
import { createSigner } from 'fast-jwt'

// Made for each test process, never written down: production refuses every secret published in
// this repository (src/config.ts), and the servers the tests start in production mode get this one.
export const TEST_SECRET = randomBytes(32).toString('base64url')
type PemKeyPair = KeyPairSyncResult<string, string>

/** Made on first use: an RSA key costs a test process about half a second, and most sign HS256 only. */
function onFirstUse (make: () => PemKeyPair): () => PemKeyPair {
  let pair: PemKeyPair | undefined
  return () => (pair ??= make())
}
export const rsaKeyPair = onFirstUse(() => generateKeyPairSync('rsa', { modulusLength: 2048, publicKeyEncoding: { type: 'spki', format: 'pem' }, privateKeyEncoding: { type: 'pkcs8', format: 'pem' } }))
export const ecKeyPair = onFirstUse(() => generateKeyPairSync('ec', { namedCurve: 'P-256', publicKeyEncoding: { type: 'spki', format: 'pem' }, privateKeyEncoding: { type: 'pkcs8', format: 'pem' } }))

const now = () => Math.floor(Date.now() / 1000)

export interface TokenOptions {
  algorithm?: 'HS256' | 'RS256' | 'ES256'
  key?: string
  /** Seconds until expiry; `null` leaves `exp` out. */
  expiresIn?: number | null
}

/** A token signed with `algorithm` (HS256 with the test secret unless `key` is given). */
export function token (claims: Record<string, unknown>, { algorithm = 'HS256', key, expiresIn = 300 }: TokenOptions = {}): string {
  const signingKey = key ?? { HS256: () => TEST_SECRET, RS256: () => rsaKeyPair().privateKey, ES256: () => ecKeyPair().privateKey }[algorithm]()
  const sign = createSigner({ key: signingKey, algorithm, noTimestamp: false })
  return sign({ ...(expiresIn === null ? {} : { exp: now() + expiresIn }), ...claims })
}

const base64url = (value: unknown) => Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString('base64url')

/**
 * A token built by hand: any header, any payload, HMAC-signed with `hmacKey` or unsigned. A payload
 * given as text is signed as written: JSON.stringify cannot write `1e400` (Infinity once parsed).
 */
export function craftedToken (header: Record<string, unknown>, payload: Record<string, unknown> | string, hmacKey?: string): string {
  const input = `${base64url(header)}.${base64url(payload)}`
  const signature = hmacKey ? createHmac('sha256', hmacKey).update(input).digest('base64url') : ''
  return `${input}.${signature}`
}

/** What production requires to be configured (JWT_ISSUER, JWT_AUDIENCE), and the claims that match it. */
export const PRODUCTION_ISSUER = 'https://issuer.example/'
export const PRODUCTION_AUDIENCE = 'client-permissions-service'
export const productionClaims = { iss: PRODUCTION_ISSUER, aud: PRODUCTION_AUDIENCE }

export const readToken = () => token({ scope: 'read:resource' })
export const deleteToken = () => token({ scope: 'delete:resource' })
export const inOneMinute = () => now() + 60
export { now }
