// What `npm start` and the npm scripts use on a laptop when the environment names no database or
// key: an embedded PostgreSQL under .data/ and a generated HS256 secret in .data/ (both git-ignored).
// Production never gets here: src/server.ts refuses to start without DATABASE_URL and a key, and
// withLocalDefaults refuses to fill anything in under production rules (src/config.ts isProduction).
import { join } from 'node:path'
import { createSigner } from 'fast-jwt'
import {
  attachEmbeddedPostgres, isOrphaned, type RunningPostgres, runningPostmaster, startEmbeddedPostgres, stopPostmaster
} from '../db/embedded-postgres.js'
import { keptSecret } from '../db/kept-secret.js'
import { audiencesOf, type Config, hasJwtKey, isProduction } from './config.js'
import { operations } from './generated/operations.js'
import { projectRoot } from './project-root.js'

export const localDataDir = join(projectRoot, '.data')
const localClusterDir = join(localDataDir, 'postgres')

export interface LocalDatabaseOptions {
  port: number
  /** Stop a postmaster left running on the data folder by a killed run, and start anew. */
  takeOver: boolean
  /** Leave SIGINT, SIGTERM and SIGHUP to the caller, which stops the database itself (the service's drain). */
  stopsItself?: boolean
  log?: (message: string) => void
}

/** The local embedded PostgreSQL: started here, or an already running one attached to. */
export async function openLocalDatabase ({ port, takeOver, stopsItself = false, log = () => {} }: LocalDatabaseOptions): Promise<RunningPostgres> {
  const running = await runningPostmaster(localClusterDir)
  if (running && !takeOver) return attachEmbeddedPostgres(localClusterDir, running.port)
  if (running) {
    if (!await isOrphaned(running.pid)) {
      throw new Error(`another process is using the embedded PostgreSQL in ${localClusterDir} ` +
        `(postmaster pid ${running.pid}): stop that \`npm start\` first, or set DATABASE_URL`)
    }
    log(`stopping the embedded PostgreSQL left running by a killed earlier run (pid ${running.pid})`)
    await stopPostmaster(running.pid)
  }
  const server = await startEmbeddedPostgres({ dataDir: localClusterDir, port, stopOnSignal: !stopsItself })
  log(`embedded PostgreSQL running on 127.0.0.1:${port}, data in ${localClusterDir}`)
  return server
}

/** As long as config.ts asks of JWT_SECRET. */
const SECRET_MIN_LENGTH = 32

/**
 * The HS256 secret for local use, made once and kept in `dataDir` (.data/). A file holding less than
 * a secret's length (cut short by a run killed while writing it, or edited) is made again: the
 * service would otherwise verify tokens with it. Written to a file of its own and linked into
 * place, so that `npm start` and `npm run token` making it at once end with one secret, whole.
 */
export async function localJwtSecret (dataDir = localDataDir): Promise<string> {
  return await keptSecret(join(dataDir, 'dev-jwt-secret'), { bytes: 32, minLength: SECRET_MIN_LENGTH })
}

/**
 * The configuration with the local defaults filled in where the environment leaves gaps:
 * the embedded database (when `database` is given) and the local secret.
 */
export async function withLocalDefaults (config: Config, database?: RunningPostgres): Promise<Config> {
  if (isProduction(config)) throw new Error(`local defaults are for development only (NODE_ENV=${config.NODE_ENV})`)
  const filled = { ...config }
  if (!filled.DATABASE_URL && database) filled.DATABASE_URL = database.url
  if (!hasJwtKey(filled)) filled.JWT_SECRET = await localJwtSecret()
  return filled
}

/**
 * Every scope an operation of the spec asks for (src/generated/operations.ts), each once, in the
 * spec's order: what the demo token carries, so every operation Swagger UI shows can be tried.
 */
export const everyScope: readonly string[] = [
  ...new Set(Object.values(operations).flatMap(({ config }) => 'scopes' in config ? config.scopes : []))
]

/**
 * A token signed with the configured HS256 secret, for trying the API by hand: one the service
 * accepts as configured, so typed JWT_TYPE when it asks for a type, and its scopes in the first
 * claim of JWT_SCOPE_CLAIMS (the only one the service then reads), in that claim's shape.
 */
export function signToken (config: Config, scope: string, expiresInSeconds: number): string {
  if (!config.JWT_SECRET) throw new Error('signing a token needs JWT_SECRET (HS256)')
  const sign = createSigner({
    key: config.JWT_SECRET,
    algorithm: 'HS256',
    expiresIn: expiresInSeconds * 1000,
    ...(config.JWT_TYPE ? { header: { alg: 'HS256', typ: config.JWT_TYPE } } : {}),
    ...(config.JWT_ISSUER ? { iss: config.JWT_ISSUER } : {}),
    ...(config.JWT_AUDIENCE ? { aud: audiencesOf(config)[0] } : {})
  })
  const claim = config.JWT_SCOPE_CLAIMS.trim().split(/ +/)[0]
  // `permissions` is an array of scopes (Auth0); `scope` and `scp` a space-separated string.
  return sign({ sub: 'local-developer', [claim]: claim === 'permissions' ? scope.split(' ').filter(Boolean) : scope })
}

/** How long `npm start`'s demo token lives: half a day of trying things by hand. */
const DEMO_TOKEN_LIFETIME_S = 12 * 3600

/**
 * `npm start`'s demo token: every scope, and how long it lives (seconds): half a day, or
 * JWT_MAX_LIFETIME_S when shorter, since the service refuses a token living longer (as
 * scripts/token.ts bounds its default).
 */
export function demoToken (config: Config): { token: string, scope: string, lifetimeS: number } {
  const scope = everyScope.join(' ')
  const lifetimeS = Math.min(DEMO_TOKEN_LIFETIME_S, config.JWT_MAX_LIFETIME_S ?? Infinity)
  return { token: signToken(config, scope, lifetimeS), scope, lifetimeS }
}

/** A lifetime as people say it: `12 h`, `10 min`, `90 s`. */
export function lifetimeText (seconds: number): string {
  if (seconds % 3600 === 0) return `${seconds / 3600} h`
  if (seconds % 60 === 0) return `${seconds / 60} min`
  return `${seconds} s`
}
