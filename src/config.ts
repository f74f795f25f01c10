// The service's configuration: environment variables validated once, at boot, against a JSON
// schema (env-schema). Nothing else reads process.env.
import { createPublicKey } from 'node:crypto'
import envSchema from 'env-schema'

const schema = {
  type: 'object',
  properties: {
    NODE_ENV: { type: 'string', default: 'development' },
    HOST: { type: 'string', minLength: 1, default: '127.0.0.1' },
    PORT: { type: 'integer', minimum: 0, maximum: 65535, default: 3000 },
    DATABASE_URL: { type: 'string', pattern: '^postgres(ql)?://' },
    DATABASE_POOL_MAX: { type: 'integer', minimum: 1, maximum: 1000, default: 10 },
    // RFC 7518 §3.2: an HS256 key must be at least as long as the hash (256 bits).
    JWT_SECRET: { type: 'string', minLength: 32 },
    JWT_PUBLIC_KEY: { type: 'string', minLength: 1 },
    JWT_ISSUER: { type: 'string', minLength: 1 },
    JWT_AUDIENCE: { type: 'string', minLength: 1 },
    LOG_LEVEL: { type: 'string', enum: ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], default: 'info' },
    // Behind the API gateway: "true", or the gateway's addresses (comma-separated).
    TRUST_PROXY: { type: 'string', default: 'false' },
    // Above this event-loop lag, API calls are shed with 503; 0 turns shedding off.
    MAX_EVENT_LOOP_DELAY_MS: { type: 'integer', minimum: 0, default: 1000 },
    // On SIGTERM: how long readiness fails while requests are still served (for the gateway to
    // notice), and the bound on the whole shutdown after which the process exits anyway.
    SHUTDOWN_DELAY_MS: { type: 'integer', minimum: 0, default: 0 },
    SHUTDOWN_TIMEOUT_MS: { type: 'integer', minimum: 1000, default: 10000 },
    EMBEDDED_POSTGRES_PORT: { type: 'integer', minimum: 1, maximum: 65535, default: 54329 }
  },
  not: { required: ['JWT_SECRET', 'JWT_PUBLIC_KEY'] }
} as const

export interface Config {
  NODE_ENV: string
  HOST: string
  PORT: number
  DATABASE_URL?: string
  DATABASE_POOL_MAX: number
  JWT_SECRET?: string
  JWT_PUBLIC_KEY?: string
  JWT_ISSUER?: string
  JWT_AUDIENCE?: string
  LOG_LEVEL: string
  TRUST_PROXY: string
  MAX_EVENT_LOOP_DELAY_MS: number
  SHUTDOWN_DELAY_MS: number
  SHUTDOWN_TIMEOUT_MS: number
  EMBEDDED_POSTGRES_PORT: number
}

/** How tokens are verified: a shared HS256 secret, or a public key pinned to its one algorithm. */
export type JwtKey =
  | { algorithm: 'HS256', secret: string }
  | { algorithm: 'RS256' | 'ES256', publicKey: string }

export function loadConfig (env: Record<string, string | undefined> = process.env): Config {
  try {
    const data = Object.fromEntries(Object.entries(env).filter(([, value]) => value !== undefined && value !== ''))
    return envSchema<Config>({ schema, data, env: false, dotenv: false })
  } catch (error) {
    const message = (error as Error).message.replace('env must NOT be valid', 'set only one of JWT_SECRET and JWT_PUBLIC_KEY')
    throw new Error(`Invalid configuration: ${message}`)
  }
}

/**
 * The verification key the configuration names. Algorithms are pinned to the key's type, so a
 * token signed HS256 with the public key as its secret (algorithm confusion) can never verify.
 */
export function jwtKeyOf (config: Config): JwtKey | undefined {
  if (config.JWT_SECRET) return { algorithm: 'HS256', secret: config.JWT_SECRET }
  if (!config.JWT_PUBLIC_KEY) return undefined
  // Container platforms often flatten a PEM's newlines to "\n".
  const publicKey = config.JWT_PUBLIC_KEY.replaceAll('\\n', '\n')
  let key
  try {
    key = createPublicKey(publicKey)
  } catch {
    throw new Error('Invalid configuration: JWT_PUBLIC_KEY is not a PEM public key')
  }
  if (key.asymmetricKeyType === 'rsa') return { algorithm: 'RS256', publicKey }
  if (key.asymmetricKeyType === 'ec' && key.asymmetricKeyDetails?.namedCurve === 'prime256v1') {
    return { algorithm: 'ES256', publicKey }
  }
  throw new Error('Invalid configuration: JWT_PUBLIC_KEY must be an RSA key (RS256) or a P-256 EC key (ES256)')
}
