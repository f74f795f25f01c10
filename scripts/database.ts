// The database the npm scripts work on: DATABASE_URL, or else the local embedded one (attached to
// when `npm start` is running it, started and stopped around the work otherwise); migrations on
// MIGRATIONS_DATABASE_URL when set, as the service runs them.
import pg from 'pg'
import { isDatabaseUnavailable, lockWaitExpired } from '../db/errors.js'
import type { CommandDatabase } from '../src/command-line.js'
import { isProduction, loadConfig } from '../src/config.js'
import { openLocalDatabase } from '../src/local-dev.js'

export async function withDatabase (work: (database: CommandDatabase) => Promise<void>): Promise<void> {
  const config = loadConfig()
  const on = (url: string) => work({
    url,
    migrationsUrl: config.MIGRATIONS_DATABASE_URL ?? url,
    connectionWaitMs: config.MIGRATIONS_CONNECTION_WAIT_MS,
    pooled: config.DATABASE_POOLER === 'transaction'
  })
  if (config.DATABASE_URL) return on(config.DATABASE_URL)
  if (isProduction(config)) throw new Error('DATABASE_URL is required in production')
  const database = await openLocalDatabase({ port: config.EMBEDDED_POSTGRES_PORT, takeOver: false })
  try {
    await on(database.url)
  } finally {
    await database.stop()
  }
}

/**
 * A pool of one connection to `url`, which gives up on a connection after the command's wait, and
 * on a lock another session holds after as long (lock_timeout, SQLSTATE 55P03). The statements
 * themselves are not bounded: a prune of much history, a large seed or a migration rewriting a
 * table may rightly take long, and no other session waits on them while they work. Behind a
 * transaction pooler (DATABASE_POOLER=transaction) nothing is sent with DATABASE_URL's connections
 * (PgBouncer refuses startup parameters): lock_timeout then belongs on the role, as
 * statement_timeout does (docs/operations.md, PgBouncer). MIGRATIONS_DATABASE_URL is direct.
 */
export function commandPool (url: string, { connectionWaitMs, url: databaseUrl, pooled }: Omit<CommandDatabase, 'migrationsUrl'>): pg.Pool {
  const sendsSettings = !pooled || url !== databaseUrl
  const pool = new pg.Pool({
    connectionString: url,
    max: 1,
    connectionTimeoutMillis: connectionWaitMs,
    ...(sendsSettings ? { options: `-c lock_timeout=${connectionWaitMs}` } : {})
  })
  // A connection lost while idle fails the next query, which says so; unhandled it would end the process.
  pool.on('error', () => {})
  return pool
}

/**
 * Why a command failed, in one line rather than a stack trace: the configuration, a database that
 * cannot be reached, or what the database refused. pg's error for a host with several addresses that
 * all refuse is an AggregateError without a message: its code says it.
 */
export function failureOf (error: unknown): string {
  const { message, code } = error as { message?: string, code?: string }
  // On one line: postgres-migrations says a migration file changed since it was applied on two.
  const said = (message || code || String(error)).replace(/\s*\n\s*/g, ' ')
  if (isDatabaseUnavailable(error) || /timeout expired|timeout exceeded when trying to connect/i.test(said)) return `the database cannot be reached (${said})`
  const lockWait = lockWaitExpired(error)
  if (lockWait) return `another session holds a lock it needs, for longer than MIGRATIONS_CONNECTION_WAIT_MS: try again once it is released (${lockWait.message})`
  return said
}
