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

export default fp(async function db (fastify) {
  const { DATABASE_URL, DATABASE_POOL_MAX } = fastify.config
  if (!DATABASE_URL) throw new Error('DATABASE_URL is required')
  const pool = new pg.Pool({
    connectionString: DATABASE_URL,
    max: DATABASE_POOL_MAX,
    connectionTimeoutMillis: 5_000,
    // Server-side bound on any one statement, so a stuck query cannot hold a request forever.
    statement_timeout: 10_000
  })
  // An idle client that loses its connection (say, the server restarts) emits 'error' on the pool;
  // unhandled, that would crash the process. The pool drops the client and connects anew later.
  pool.on('error', (error) => fastify.log.warn({ err: error }, 'idle database connection lost'))
  fastify.decorate('db', pool)
  fastify.addHook('onClose', async () => pool.end())
  const applied = await migrateDatabase(pool)
  if (applied.length > 0) fastify.log.info({ migrations: applied }, 'database migrated')
}, { name: 'db', dependencies: ['env'] })

const unavailableCodes = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'EPIPE',
  '57P01', '57P02', '57P03', // admin_shutdown, crash_shutdown, cannot_connect_now
  '53300', // too_many_connections
  '08000', '08001', '08003', '08004', '08006' // connection exceptions
])

/** Whether an error means the database cannot be reached now, as opposed to a bug. */
export function isDatabaseUnavailable (error: unknown): boolean {
  if (!(error instanceof Error)) return false
  const code = (error as { code?: unknown }).code
  if (typeof code === 'string' && unavailableCodes.has(code)) return true
  return /timeout exceeded when trying to connect|Connection terminated/i.test(error.message)
}
