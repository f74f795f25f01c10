// The bench's tokens, as an identity provider issues them: RS256, verified by the service with the
// public key; issuer and audience as production requires them, since their checks are part of what
// a request costs. A new key pair for each run (benchTokens, called by the bench's main).
import { generateKeyPairSync } from 'node:crypto'
import { createSigner } from 'fast-jwt'

export interface BenchTokens {
  /** What the services are started with: JWT_PUBLIC_KEY, JWT_ISSUER, JWT_AUDIENCE. */
  publicKey: string
  issuer: string
  audience: string
  /** An Authorization header carrying `scope`, signed now. */
  bearer: (scope: string) => string
  /** Headers of the read, unauthorize (DELETE) and grant (POST) requests. */
  readHeaders: Record<string, string>
  deleteHeaders: Record<string, string>
  grantHeaders: Record<string, string>
}

export function benchTokens (): BenchTokens {
  const keys = generateKeyPairSync('rsa', { modulusLength: 2048, publicKeyEncoding: { type: 'spki', format: 'pem' }, privateKeyEncoding: { type: 'pkcs8', format: 'pem' } })
  const issuer = 'https://bench.invalid/'
  const audience = 'client-permissions-service'
  const sign = createSigner({ key: keys.privateKey, algorithm: 'RS256', expiresIn: 3_600_000, iss: issuer, aud: audience })
  const bearer = (scope: string) => `Bearer ${sign({ scope, sub: 'bench' })}`
  return {
    publicKey: keys.publicKey,
    issuer,
    audience,
    bearer,
    readHeaders: { authorization: bearer('read:resource') },
    deleteHeaders: { authorization: bearer('delete:resource'), 'content-type': 'application/json' },
    grantHeaders: { authorization: bearer('create:resource'), 'content-type': 'application/json' }
  }
}
