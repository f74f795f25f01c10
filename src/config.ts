// The service's configuration: environment variables validated once, at boot, against a JSON
// schema (env-schema). Nothing else reads process.env.
import { compile as compileProxies } from '@fastify/proxy-addr'
import envSchema from 'env-schema'
import type { FromSchema, JSONSchema } from 'json-schema-to-ts'

const schema = {
  type: 'object',
  // Any other variable of the environment is left out of the configuration (env-schema's ajv
  // removes it), and out of its type.
  additionalProperties: false,
  properties: {
    // Production rules apply to every value but these (see isProduction).
    NODE_ENV: { type: 'string', default: 'development' },
    HOST: { type: 'string', minLength: 1, default: '127.0.0.1' },
    PORT: { type: 'integer', minimum: 0, maximum: 65535, default: 3000 },
    // How long a request (headers and body) may take to arrive before it is answered 408 and its
    // connection closed: a body sent a byte at a time must not hold a connection for ever.
    REQUEST_TIMEOUT_MS: { type: 'integer', minimum: 1000, maximum: 600000, default: 30000 },
    DATABASE_URL: { type: 'string', pattern: '^postgres(ql)?://' },
    DATABASE_POOL_MAX: { type: 'integer', minimum: 1, maximum: 1000, default: 10 },
    // How long a request waits for a database connection (a free pooled one, or a new one) before
    // it is answered 503: overloaded while the database answers, database-unavailable when not.
    DATABASE_CONNECTION_WAIT_MS: { type: 'integer', minimum: 1, maximum: 60000, default: 1000 },
    // Server-side bound on every statement (statement_timeout); its expiry answers 503 overloaded.
    DATABASE_STATEMENT_TIMEOUT_MS: { type: 'integer', minimum: 1, maximum: 600000, default: 5000 },
    // Client-side bound on a query the server does not answer at all (a hung server): 503
    // database-unavailable. Longer than the statement timeout, which a live server applies first.
    DATABASE_QUERY_TIMEOUT_MS: { type: 'integer', minimum: 1, maximum: 600000, default: 10000 },
    // "transaction" behind a transaction pooler (PgBouncer pool_mode=transaction): no session
    // settings are sent with connections (the pooler refuses them); put them on the role instead.
    DATABASE_POOLER: { type: 'string', enum: ['none', 'transaction'], default: 'none' },
    // Streaming replicas of DATABASE_URL, comma-separated: reads (GET and HEAD of the list, the
    // history and the change feed's polled pages) may be answered by one; writes never are. Unset:
    // every statement on DATABASE_URL.
    DATABASE_REPLICA_URLS: { type: 'string', pattern: '^ *postgres(ql)?://[^,]+( *, *postgres(ql)?://[^,]+)* *$' },
    // A read goes to a replica only while its lag is at most this (and, with a Consistency-Token, once it has replayed it): a
    // second, about what a caller without a token notices of a change made elsewhere, and well
    // above the probe's own resolution (DATABASE_REPLICA_PROBE_INTERVAL_MS).
    DATABASE_REPLICA_MAX_LAG_MS: { type: 'integer', minimum: 0, maximum: 3600000, default: 1000 },
    // How often each replica's replayed position (and the primary's) is probed; a probe that does
    // not answer within the interval (at least 1 s) marks the replica down until one does.
    DATABASE_REPLICA_PROBE_INTERVAL_MS: { type: 'integer', minimum: 50, maximum: 60000, default: 250 },
    // /readyz's bound on its own check of the database (connect and query).
    READINESS_TIMEOUT_MS: { type: 'integer', minimum: 1, maximum: 60000, default: 1000 },
    // Named prepared statements, planned once per connection. Turn off behind a PgBouncer in
    // transaction mode older than 1.21 (or without max_prepared_statements).
    DATABASE_PREPARED_STATEMENTS: { type: 'boolean', default: true },
    // Where migrations run, when DATABASE_URL goes through PgBouncer in transaction mode: the
    // migration lock is a session lock, so it needs a direct connection. Defaults to DATABASE_URL.
    MIGRATIONS_DATABASE_URL: { type: 'string', pattern: '^postgres(ql)?://' },
    // How long the start waits for the migrations' connection before it gives up (exit 1); the db:
    // commands wait as long for each connection, and for each lock another session holds.
    MIGRATIONS_CONNECTION_WAIT_MS: { type: 'integer', minimum: 1, maximum: 600000, default: 5000 },
    // RFC 7518 §3.2: an HS256 key must be at least as long as the hash (256 bits).
    JWT_SECRET: { type: 'string', minLength: 32 },
    JWT_PUBLIC_KEY: { type: 'string', minLength: 1 },
    // The identity provider's JSON Web Key Set, for RS256/ES256 tokens from keys that rotate.
    JWKS_URL: { type: 'string', pattern: '^https?://' },
    // In production JWKS_URL must be https:// or on a loopback host; this allows plain http to any
    // host (an in-cluster address), with a warning at start.
    JWKS_ALLOW_HTTP: { type: 'boolean', default: false },
    // How long fetched keys are fresh: after it the key set is fetched again in the background,
    // the held keys still verifying meanwhile; 6 times it, they are no longer trusted (key-set.ts).
    JWKS_CACHE_MAX_AGE_MS: { type: 'integer', minimum: 1000, maximum: 86400000, default: 600000 },
    // A token whose kid the cached set lacks refetches the set at most once per cooldown (a key
    // published since is accepted within it; made-up kids cannot hammer the provider).
    JWKS_COOLDOWN_MS: { type: 'integer', minimum: 100, maximum: 600000, default: 5000 },
    // How long one fetch of the key set may take before it counts as failed.
    JWKS_FETCH_TIMEOUT_MS: { type: 'integer', minimum: 100, maximum: 60000, default: 5000 },
    // The iss and aud tokens must carry (RFC 9068 §4, RFC 8725 §3.9); both required in production.
    // JWT_AUDIENCE may list several values, comma-separated: a token matches if its aud holds any.
    JWT_ISSUER: { type: 'string', minLength: 1 },
    JWT_AUDIENCE: { type: 'string', pattern: '[^\\s,]' },
    // The typ header tokens must carry (at+jwt, RFC 9068 §2.1): off unless set, because several
    // identity providers do not set it. Compared case-insensitively, "application/" optional.
    JWT_TYPE: { type: 'string', pattern: '^([Aa][Pp][Pp][Ll][Ii][Cc][Aa][Tt][Ii][Oo][Nn]/)?[A-Za-z0-9!#$&^_.+-]+$' },
    // Which claims carry the token's scopes, space-separated, from scope, scp and permissions: the
    // first of them the token carries is its scopes, and no later one widens them. scope (RFC 9068),
    // when listed, comes first. Auth0 RBAC's permissions claim: JWT_SCOPE_CLAIMS=permissions.
    JWT_SCOPE_CLAIMS: { type: 'string', pattern: '^ *(scope|scp|permissions)( +(scp|permissions))* *$', default: 'scope scp' },
    // The longest lifetime (exp − iat, or exp − now without iat) a token may have, in seconds;
    // unset: any.
    JWT_MAX_LIFETIME_S: { type: 'integer', minimum: 1, maximum: 31536000 },
    // The change feed's streams (GET /permission_changes, text/event-stream): how many one replica
    // serves at once (one more answers 503 overloaded); how often an idle stream gets a heartbeat
    // comment (below a gateway's idle timeout: HAProxy's is 30 s here); how many bytes may wait for
    // a consumer that reads slower than changes arrive before it is disconnected (it resumes with
    // Last-Event-ID), which bounds the memory each stream holds; and how long a consumer may take
    // none of what waits for it before it is disconnected, which bounds how long it holds a slot.
    FEED_MAX_STREAMS: { type: 'integer', minimum: 0, maximum: 100000, default: 200 },
    FEED_HEARTBEAT_MS: { type: 'integer', minimum: 100, maximum: 15000, default: 10000 },
    FEED_STREAM_BUFFER_BYTES: { type: 'integer', minimum: 1024, maximum: 67108864, default: 262144 },
    FEED_STALL_TIMEOUT_MS: { type: 'integer', minimum: 1000, maximum: 3600000, default: 60000 },
    // Pages of the list kept in memory by the authorization's version, up to this many bytes (0: none).
    // Each read still asks the database for the version, and gets the page only when it changed.
    LIST_PAGE_CACHE_BYTES: { type: 'integer', minimum: 0, maximum: 1073741824, default: 8388608 },
    LOG_LEVEL: { type: 'string', enum: ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], default: 'info' },
    // Behind the API gateway: "true", or the gateway's addresses (comma-separated).
    TRUST_PROXY: { type: 'string', default: 'false' },
    // Prometheus metrics at GET /metrics.
    METRICS_ENABLED: { type: 'boolean', default: true },
    // Serve GET /metrics on this port only (same HOST), never on the API port; 0 picks a free port.
    METRICS_PORT: { type: 'integer', minimum: 0, maximum: 65535 },
    // Above this event-loop lag, API calls are shed with 503; 0 turns shedding off.
    MAX_EVENT_LOOP_DELAY_MS: { type: 'integer', minimum: 0, maximum: 60000, default: 1000 },
    // How often that lag is measured (its mean over the interval): a stall shorter than about the
    // interval is averaged away; a shorter interval reacts sooner and counts shorter stalls. At
    // least 100: the lag monitor (under-pressure's) ticks every 10 ms and a sample's first tick
    // measures nothing, so a sample in which the loop ticked once at most (a stall nearly as long
    // as the interval) holds no measure, which under-pressure takes for an infinite lag, whatever
    // MAX_EVENT_LOOP_DELAY_MS says: at 10 ms a calm replica shed nearly every call and was never
    // ready (97 calls of 100 shed; at 20 ms, 5).
    EVENT_LOOP_SAMPLE_INTERVAL_MS: { type: 'integer', minimum: 100, maximum: 60000, default: 1000 },
    // On SIGTERM: how long readiness fails while requests are still served (for the gateway to
    // notice), and the bound on the whole shutdown after which the process exits anyway.
    SHUTDOWN_DELAY_MS: { type: 'integer', minimum: 0, default: 0 },
    SHUTDOWN_TIMEOUT_MS: { type: 'integer', minimum: 1000, maximum: 600000, default: 10000 },
    EMBEDDED_POSTGRES_PORT: { type: 'integer', minimum: 1, maximum: 65535, default: 54329 }
  }
} as const satisfies JSONSchema

/** Every setting's name, in the schema's order: what .env.example and docs/configuration.md list. */
export const settingNames = Object.keys(schema.properties) as ReadonlyArray<keyof Config>

const KEY_SOURCES = ['JWKS_URL', 'JWT_PUBLIC_KEY', 'JWT_SECRET'] as const

// HS256 secrets that have been written in this repository (a compose default, CI and test
// fixtures, now all gone or made at run time): anyone who has read it can sign tokens with them,
// so production refuses them. test/src/config.test.ts fails when the repository names one not listed.
export const PUBLISHED_SECRETS: ReadonlySet<string> = new Set([
  'compose-local-only-secret-change-me-0123456789',
  'runtime-check-secret-0123456789abcdef',
  'test-secret-that-is-at-least-32-characters-long',
  'another-secret-that-is-also-32-characters-or-more'
])

/**
 * The configuration as loaded: every setting of the schema, typed from it (a default makes a
 * setting always present; one without may be unset). Adding a setting is adding it to the schema.
 */
export type Config = FromSchema<typeof schema>

/**
 * Production rules (no generated secret, no embedded database, issuer and audience required, JWKS
 * over https) unless NODE_ENV is unset or, in exactly these words, development or test: "prod",
 * "Production" or "staging" all get production rules.
 */
export function isProduction (config: Pick<Config, 'NODE_ENV'>): boolean {
  return config.NODE_ENV !== 'development' && config.NODE_ENV !== 'test'
}

export function loadConfig (env: Record<string, string | undefined> = process.env): Config {
  const data = Object.fromEntries(Object.entries(env).filter(([, value]) => value !== undefined && value !== ''))
  let config: Config
  try {
    config = envSchema<Config>({ schema, data, env: false, dotenv: false })
  } catch (error) {
    throw new Error(`Invalid configuration: ${(error as Error).message}`)
  }
  if (config.DATABASE_STATEMENT_TIMEOUT_MS >= config.DATABASE_QUERY_TIMEOUT_MS) {
    throw new Error('Invalid configuration: DATABASE_STATEMENT_TIMEOUT_MS must be shorter than DATABASE_QUERY_TIMEOUT_MS')
  }
  if (config.SHUTDOWN_DELAY_MS >= config.SHUTDOWN_TIMEOUT_MS) {
    throw new Error('Invalid configuration: SHUTDOWN_DELAY_MS must be shorter than SHUTDOWN_TIMEOUT_MS')
  }
  // As Fastify reads it (src/app.ts): checked here, so a bad value stops the start naming it.
  if (config.TRUST_PROXY !== 'true' && config.TRUST_PROXY !== 'false') {
    try {
      compileProxies(config.TRUST_PROXY.split(',').map((entry) => entry.trim()))
    } catch (error) {
      throw new Error(`Invalid configuration: TRUST_PROXY must be true, false or the proxies' addresses, comma-separated (${(error as Error).message})`)
    }
  }
  const sources = KEY_SOURCES.filter((name) => config[name] !== undefined)
  if (sources.length > 1) {
    throw new Error(`Invalid configuration: set only one of ${KEY_SOURCES.join(', ')} (got ${sources.join(' and ')})`)
  }
  return config
}

/**
 * What the service needs before it may start in production, checked in this order; throws naming
 * the first one missing. Outside production the gaps are filled locally (src/local-dev.ts).
 */
export function assertProductionReady (config: Config): void {
  const refuse = (what: string) => { throw new Error(`Refusing to start: ${what} is required in production (NODE_ENV=${config.NODE_ENV}).`) }
  if (!config.DATABASE_URL) refuse('DATABASE_URL')
  if (!hasJwtKey(config)) refuse('one of JWKS_URL, JWT_PUBLIC_KEY or JWT_SECRET')
  if (!config.JWT_ISSUER) refuse('JWT_ISSUER')
  if (!config.JWT_AUDIENCE) refuse('JWT_AUDIENCE')
  // At least 32 characters is the schema's rule everywhere (RFC 7518 §3.2); production also
  // refuses a secret anyone can read.
  if (config.JWT_SECRET !== undefined && PUBLISHED_SECRETS.has(config.JWT_SECRET)) {
    throw new Error(`Refusing to start: JWT_SECRET is a secret published in this repository; make one of your own (openssl rand -base64 32) (NODE_ENV=${config.NODE_ENV}).`)
  }
}

/**
 * The configuration the server starts with: valid, and in production everything production needs.
 * Throws with the one line the server exits with. Whether the key named is usable is auth's to say
 * (plugins/auth/key.ts jwtKeyOf), checked next at the start.
 */
export function loadStartupConfig (env: Record<string, string | undefined> = process.env): Config {
  const config = loadConfig(env)
  if (isProduction(config)) assertProductionReady(config)
  return config
}

/** Whether one of JWKS_URL, JWT_PUBLIC_KEY or JWT_SECRET is set (loadConfig allows one at most). */
export function hasJwtKey (config: Pick<Config, typeof KEY_SOURCES[number]>): boolean {
  return KEY_SOURCES.some((name) => config[name] !== undefined)
}

/** JWT_AUDIENCE's values: comma-separated, blanks around them ignored. */
export function audiencesOf (config: Pick<Config, 'JWT_AUDIENCE'>): string[] {
  return (config.JWT_AUDIENCE ?? '').split(',').map((value) => value.trim()).filter(Boolean)
}

/** DATABASE_REPLICA_URLS's URLs, in order; none when unset. */
export function replicaUrlsOf (config: Pick<Config, 'DATABASE_REPLICA_URLS'>): string[] {
  return (config.DATABASE_REPLICA_URLS ?? '').split(',').map((url) => url.trim()).filter(Boolean)
}
