// A pg Pool as `fastify.db`, migrated before the server takes requests and closed with the server.
// https://node-postgres.com/apis/pool
import fp from 'fastify-plugin'
import pg from 'pg'
import { migrateDatabase } from '../db/migrate.js'

declare module 'fastify' {
  interface FastifyInstance {
    db: pg.Pool
  }
}

// Bounds that turn a database that is down, black-holed or stuck into a 503 within seconds
// instead of a hung request. They are client-side because PgBouncer refuses startup parameters
// such as statement_timeout; the DELETE also sets one on the server (db/queries.ts).
const CONNECT_TIMEOUT_MS = 5_000
const QUERY_TIMEOUT_MS = 10_000

export default fp(async function db (fastify) {
  const { DATABASE_URL, DATABASE_POOL_MAX, DATABASE_PREPARED_STATEMENTS, MIGRATIONS_DATABASE_URL } = fastify.config
  if (!DATABASE_URL) throw new Error('DATABASE_URL is required')
  const pool = new pg.Pool({
    connectionString: DATABASE_URL,
    max: DATABASE_POOL_MAX,
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    query_timeout: QUERY_TIMEOUT_MS,
    // A prepared statement is planned anew on every execution while PostgreSQL estimates its
    // generic plan (LIMIT and OFFSET unknown) dearer than a custom one: the list statement always
    // was, and planning it took longer than running it. Its generic plan is the same index scan,
    // so it is used from the first execution. (pg-pool awaits this before handing the client out.)
    onConnect: DATABASE_PREPARED_STATEMENTS
      ? async (client: pg.ClientBase) => { await client.query('SET plan_cache_mode = force_generic_plan') }
      : undefined
  })
  // An idle client that loses its connection (say, the server restarts) emits 'error' on the pool;
  // unhandled, that would crash the process. The pool drops the client and connects anew later.
  pool.on('error', (error) => fastify.log.warn({ err: error }, 'idle database connection lost'))
  fastify.decorate('db', pool)
  fastify.addHook('onClose', async () => pool.end())

  // Migrations get a connection of their own, without the query timeout: a migration may be slow.
  const migrationPool = new pg.Pool({
    connectionString: MIGRATIONS_DATABASE_URL ?? DATABASE_URL, max: 1, connectionTimeoutMillis: CONNECT_TIMEOUT_MS
  })
  try {
    const applied = await migrateDatabase(migrationPool)
    if (applied.length > 0) fastify.log.info({ migrations: applied }, 'database migrated')
  } finally {
    await migrationPool.end()
  }
}, { name: 'db', dependencies: ['env'] })

const unavailableCodes = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'EPIPE',
  '57P01', '57P02', '57P03', // admin_shutdown, crash_shutdown, cannot_connect_now
  '57014', // query_canceled: a statement_timeout set on the role
  '53300', // too_many_connections
  '08000', '08001', '08003', '08004', '08006' // connection exceptions
])

/** Whether an error means the database cannot be reached now, as opposed to a bug. */
export function isDatabaseUnavailable (error: unknown): boolean {
  if (!(error instanceof Error)) return false
  const code = (error as { code?: unknown }).code
  if (typeof code === 'string' && unavailableCodes.has(code)) return true
  return /timeout exceeded when trying to connect|Connection terminated|Query read timeout/i.test(error.message)
}
