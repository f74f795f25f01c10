// The database as `fastify.db` (a pg Pool that tells overload from an outage, db/pool.ts),
// migrated before the server takes requests; `fastify.queries`, the query module (db/queries/)
// bound to it, its replicas and the statement settings; and `fastify.checkDatabase()` for
// readiness, on a connection of its own so that it never queues behind API traffic. All close
// with the server.
import { performance } from 'node:perf_hooks'
import { context } from '@opentelemetry/api'
import fp from 'fastify-plugin'
import { databaseErrorSummary, lockWaitExpired, onDatabaseOf } from '../db/errors.js'
import { migrateDatabase, migrationsNotKnown } from '../db/migrate.js'
import { DatabasePool } from '../db/pool.js'
import { type ChangeInput, type ChangeOptions, type ChangeResult, grantPermissions, primaryPositionNow, unauthorizePermissions } from '../db/queries/change.js'
import { type FeedInput, type FeedPage, readFeed } from '../db/queries/feed.js'
import { type ChangeHistoryInput, type ChangeHistoryPage, listPermissionChanges } from '../db/queries/history.js'
import { type ListGrantedPermissionsInput, listGrantedPermissions, type PermissionPage } from '../db/queries/list.js'
import { ping, type Queryable } from '../db/queries/statement.js'
import { parseLsn } from '../db/lsn.js'
import { readIfReplayed, recoveryConflict, type Replica, ReplicaSet, replicaFailed, schemaBehind } from '../db/replicas.js'
import { replicaUrlsOf } from '../src/config.js'
import { migrationsDir } from '../src/project-root.js'

declare module 'fastify' {
  interface FastifyInstance {
    db: DatabasePool
    /** The streaming replicas reads may go to (DATABASE_REPLICA_URLS); undefined without. */
    replicas: ReplicaSet | undefined
    /**
     * Runs a read where it may be answered: on a replica that may answer it, else on the primary
     * (db/replicas.ts says which may). `run` is handed where, and whether to ask for the position.
     */
    read: Read
    /**
     * The query module's statements as the service runs them: on the pool or where a read may be
     * answered, prepared or not (DATABASE_PREPARED_STATEMENTS), a change bounded by
     * DATABASE_STATEMENT_TIMEOUT_MS, with positions when there are replicas. Routes pass only what
     * a request asks for.
     */
    queries: Queries
    /** Resolves when the database answers, within READINESS_TIMEOUT_MS; rejects when it does not. */
    checkDatabase: () => Promise<void>
  }
}

export type Read = <T extends { position?: string }>(run: (db: Queryable, position: boolean) => Promise<T>, options?: ReadOptions<T>) => Promise<T>

export interface ReadOptions<T> {
  /** The position the caller has seen (Consistency-Token): the answer must be at least as new. */
  after?: bigint
  /** Whether a replica's answer is new enough (an If-None-Match naming a newer version is not). */
  satisfied?: (result: T) => boolean
}

export interface Queries {
  /** A page of a client's grants, read where it may be answered (`read`). */
  listGrantedPermissions: (input: ListGrantedPermissionsInput, options?: ReadOptions<PermissionPage>) => Promise<PermissionPage>
  /** A page of a client's change history on a resource, read where it may be answered. */
  listPermissionChanges: (input: ChangeHistoryInput, options?: ReadOptions<ChangeHistoryPage>) => Promise<ChangeHistoryPage>
  /** A page of the change feed, read where it may be answered. */
  readFeed: (input: FeedInput, options?: ReadOptions<FeedPage>) => Promise<FeedPage>
  /** A page of the change feed from the primary, without its position: what the streams' shared reader reads. */
  readFeedFromPrimary: (input: FeedInput) => Promise<FeedPage>
  /** An unauthorize, on the primary in a transaction of its own. */
  unauthorizePermissions: (input: ChangeInput) => Promise<ChangeResult>
  /** A grant, on the primary in a transaction of its own. */
  grantPermissions: (input: ChangeInput) => Promise<ChangeResult>
  /**
   * Where the primary is now, when a change answers positions (with replicas): the Consistency-Token
   * of a change the database refused with an error, which has no commit of its own to give one.
   */
  primaryPosition: () => Promise<string | undefined>
}

export default fp(async function db (fastify) {
  const { config } = fastify
  const { DATABASE_URL, MIGRATIONS_DATABASE_URL } = config
  if (!DATABASE_URL) throw new Error('DATABASE_URL is required')
  // Sent with each new connection; behind a transaction pooler they belong on the role
  // (docs/operations.md, PgBouncer).
  const settings = config.DATABASE_POOLER === 'transaction'
    ? {}
    : {
        statement_timeout: config.DATABASE_STATEMENT_TIMEOUT_MS,
        // A prepared statement is planned anew on every execution while PostgreSQL estimates its
        // generic plan (LIMIT and OFFSET unknown) dearer than a custom one: the list statement
        // always was, and planning it took longer than running it. Its generic plan is the same
        // index scan, so it is used from the first execution.
        ...(config.DATABASE_PREPARED_STATEMENTS ? { plan_cache_mode: 'force_generic_plan' } : {})
      }
  // Behind a transaction pooler a connection made, or a refusal, is the pooler's answer, not the
  // database's (db/pool.ts): readiness and the outage/overload choice go by statements answered.
  const pooler = config.DATABASE_POOLER === 'transaction'
  const poolOptions = {
    max: config.DATABASE_POOL_MAX,
    connectionWaitMs: config.DATABASE_CONNECTION_WAIT_MS,
    queryTimeoutMs: config.DATABASE_QUERY_TIMEOUT_MS,
    settings,
    pooler
  }
  const pool = new DatabasePool({ connectionString: DATABASE_URL, ...poolOptions })
  // Readiness gets its own connection: behind a saturated pool it would wait its turn and fail.
  const probePool = new DatabasePool({
    connectionString: DATABASE_URL,
    max: 1,
    connectionWaitMs: config.READINESS_TIMEOUT_MS,
    queryTimeoutMs: config.READINESS_TIMEOUT_MS,
    // Kept between probes (often 10 s apart): a new connection is what fails first under load.
    idleTimeoutMs: 0,
    pooler
  })
  // An idle client that loses its connection (say, the server restarts) emits 'error' on the pool;
  // unhandled, that would crash the process. The pool drops the client and connects anew later.
  // Message and code only: pg hangs the whole client (connection parameters, last query) on the error.
  pool.on('error', (error) => fastify.log.warn(databaseErrorSummary(error), 'idle database connection lost'))
  probePool.on('error', () => {})
  fastify.decorate('db', pool)
  const replicaUrls = replicaUrlsOf(config)
  const replicas = replicaUrls.length === 0
    ? undefined
    : new ReplicaSet({
      urls: replicaUrls,
      pool: poolOptions,
      primaryUrl: DATABASE_URL,
      maxLagMs: config.DATABASE_REPLICA_MAX_LAG_MS,
      probeIntervalMs: config.DATABASE_REPLICA_PROBE_INTERVAL_MS
    })
  replicas?.on('down', (replica, error: Error) => fastify.log.warn({ replica: replica.name, ...databaseErrorSummary(error) }, 'database replica down: its reads go elsewhere'))
  replicas?.on('up', (replica) => fastify.log.warn({ replica: replica.name }, 'database replica back: it takes reads again'))
  replicas?.on('lacking', (replica, error: Error) => fastify.log.warn({ replica: replica.name, ...databaseErrorSummary(error) }, 'database replica lacks an object the primary has: such reads go to the primary'))
  fastify.decorate('replicas', replicas)
  const read: Read = replicas ? readAnywhere(pool, replicas, config.DATABASE_POOLER === 'transaction') : async (run) => run(pool, false)
  fastify.decorate('read', read)
  fastify.decorate('queries', boundQueries(pool, read, {
    prepared: config.DATABASE_PREPARED_STATEMENTS,
    statementTimeoutMs: config.DATABASE_STATEMENT_TIMEOUT_MS,
    // A change answers its commit's position (Consistency-Token) when a replica may answer the next read.
    position: replicas !== undefined
  }))
  const primaryCheck = readinessCheck(pool, probePool, config.READINESS_TIMEOUT_MS)
  // With replicas, a replica still answering reads keeps the service ready while the primary is
  // down: writes answer 503 database-unavailable, and a gateway that pulled every replica of the
  // service would fail the reads too.
  fastify.decorate('checkDatabase', replicas
    ? () => primaryCheck().catch((error: unknown) => { if (!replicas.replicas.some(({ up }) => up)) throw error })
    : primaryCheck)
  fastify.addHook('onClose', async () => { await Promise.all([pool.end(), probePool.end(), replicas?.close()]) })

  // Migrations get a connection of their own, without the query timeout: a migration may be slow.
  // But not its lock waits: a migration waiting behind another session's lock on a table makes
  // every statement of the running service that needs the table queue behind it (a rolling deploy
  // would stall the service it replaces), so the start gives up after MIGRATIONS_CONNECTION_WAIT_MS,
  // as the db: commands do, and its orchestrator starts it again. Behind a transaction pooler the
  // role's lock_timeout applies (PgBouncer refuses startup parameters); MIGRATIONS_DATABASE_URL is direct.
  const migrationsUrl = MIGRATIONS_DATABASE_URL ?? DATABASE_URL
  const migrationPool = new DatabasePool({
    connectionString: migrationsUrl,
    max: 1,
    connectionWaitMs: config.MIGRATIONS_CONNECTION_WAIT_MS,
    queryTimeoutMs: 0,
    settings: config.DATABASE_POOLER === 'transaction' && migrationsUrl === DATABASE_URL ? {} : { lock_timeout: config.MIGRATIONS_CONNECTION_WAIT_MS }
  })
  // Its idle client may lose its connection too, even while end() closes it (pg-pool resolves end()
  // before the server has let go): unhandled, the pool's 'error' would crash the process. Seen once,
  // as a test database was dropped WITH (FORCE) just after a start, on a loaded machine.
  // Stryker disable next-line StringLiteral: equivalent but for that race, which no test can make on purpose: the connection lost in the moment between the migrations and end()
  migrationPool.on('error', () => {})
  try {
    const applied = await migrateDatabase(migrationPool, migrationsDir)
    if (applied.length > 0) fastify.log.info({ migrations: applied }, 'database migrated')
    // A rollback of the service leaves the newer schema (postgres-migrations passes over what it
    // has no file for): this version serves it, and an operator reading the log should know.
    const notKnown = await migrationsNotKnown(migrationPool, migrationsDir)
    if (notKnown.length > 0) fastify.log.warn({ migrations: notKnown }, 'the database is ahead of this version: migrated by a newer one')
  } catch (error) {
    const lockWait = lockWaitExpired(error)
    const failure = lockWait
      ? new Error(`the migrations waited longer than MIGRATIONS_CONNECTION_WAIT_MS for a lock another session holds (${lockWait.message})`, { cause: error })
      : error
    // On a database of its own: the start's failure names that setting, not DATABASE_URL, which may answer.
    throw MIGRATIONS_DATABASE_URL === undefined ? failure : onDatabaseOf(failure, 'MIGRATIONS_DATABASE_URL')
  } finally {
    await migrationPool.end()
  }
  // The pool's first connection, made now: a pooler that refuses the session settings stops the
  // start with a message saying what to change, instead of failing every request.
  // Stryker disable next-line StringLiteral: an empty query makes the first connection too, which is what this is for
  await pool.query('SELECT 1').catch((error: Error & { code?: string }) => {
    if (error.code !== '08P01' || Object.keys(settings).length === 0) throw error
    throw new Error(`the database refused the session settings sent with each connection (${error.message}); ` +
      'behind a transaction pooler such as PgBouncer, set DATABASE_POOLER=transaction', { cause: error })
  })
  // Their first probe: a replica that answers takes reads from the first request.
  await replicas?.start()
}, { name: 'db', dependencies: ['env'] })

/** The query module bound once: its functions given the pool (or `read`) and the statement options. */
function boundQueries (pool: DatabasePool, read: Read, change: ChangeOptions): Queries {
  const { prepared } = change
  return {
    listGrantedPermissions: (input, options) => read((db, position) => listGrantedPermissions(db, input, { prepared, position }), options),
    listPermissionChanges: (input, options) => read((db, position) => listPermissionChanges(db, input, { prepared, position }), options),
    readFeed: (input, options) => read((db, position) => readFeed(db, input, { prepared, position }), options),
    readFeedFromPrimary: (input) => readFeed(pool, input, { prepared }),
    unauthorizePermissions: (input) => unauthorizePermissions(pool, input, change),
    grantPermissions: (input) => grantPermissions(pool, input, change),
    primaryPosition: async () => change.position === true ? primaryPositionNow(pool) : undefined
  }
}

/**
 * Reads with replicas: on one that may answer (ReplicaSet.choose), else on the primary. A replica
 * that fails the read (unreachable, or too slow) is marked down and the read goes to the primary;
 * one that cancels it in a conflict with its recovery is not, but the primary answers; nor is one
 * that lacks a table, column, function or type the read names (schemaBehind), said once when the
 * primary has it. A replica found behind the request's token before it reads, or whose answer is
 * older than `satisfied` allows, leaves the read to the primary.
 */
function readAnywhere (primary: DatabasePool, replicas: ReplicaSet, pooler: boolean): Read {
  return async function read<T extends { position?: string }> (run: (db: Queryable, position: boolean) => Promise<T>, { after, satisfied }: ReadOptions<T> = {}): Promise<T> {
    const replica = replicas.choose(after)
    // The caller's trace context, for the primary's statement after an await (db/pool.ts).
    const traced = context.active()
    let reason: string
    // The replica's error when it lacked what the read names: the primary's answer says whether it should have.
    let lacking: [Replica, Error] | undefined
    if (typeof replica === 'string') reason = replica
    else {
      try {
        // With a token, the replica is asked again where it stands before it reads (readIfReplayed).
        const result = after === undefined ? await run(replica.pool, true) : await readIfReplayed(replica.pool, after, (db) => run(db, true), { pooler })
        if (result === undefined) reason = 'behind_token'
        else {
          replicas.observed(replica, parseLsn(result.position!)!)
          if (satisfied && !satisfied(result)) reason = 'behind_version'
          else {
            replicas.emit('read', replica.name)
            return result
          }
        }
      } catch (error) {
        if (recoveryConflict(error)) reason = 'recovery_conflict'
        else if (replicaFailed(error)) {
          replicas.markDown(replica, error as Error)
          reason = 'replica_failed'
        } else if (schemaBehind(error)) {
          lacking = [replica, error as Error]
          reason = 'schema_behind'
        } else throw error
      }
    }
    replicas.emit('fallback', reason)
    const result = await context.with(traced, run, undefined, primary, true)
    if (lacking) replicas.lacking(...lacking)
    replicas.emit('read', 'primary')
    return result
  }
}

/**
 * The readiness check: the database answers someone within `timeoutMs`. `SELECT 1` on the probe's
 * own connection (concurrent checks share one); meanwhile, unless the pool has found the database
 * unreachable, an answer to one of the pool's own queries will do: a database that is slow, or
 * refuses one more connection under load, is still there. One deadline bounds the whole check.
 */
function readinessCheck (pool: DatabasePool, probePool: DatabasePool, timeoutMs: number): () => Promise<void> {
  let inFlight: Promise<void> | undefined
  function probe (): Promise<void> {
    const started = performance.now()
    let failure: unknown = new Error(`the database answered nobody within ${timeoutMs} ms`)
    const pinged = ping(probePool).then(() => true, (error: unknown) => { failure = error; return false })
    const poolAnswered = pool.answersSince(started, timeoutMs)
    return new Promise((resolve, reject) => {
      // Stryker disable next-line ConditionalExpression: equivalent but for timing: without it a refused probe while the pool finds the database unreachable waits for the pool's answer, and fails with the same error once READINESS_TIMEOUT_MS runs out (or is ready if the database answered meanwhile)
      pinged.then((ok) => { if (ok) resolve(); else if (pool.unreachable) reject(failure) })
      poolAnswered.then((ok) => { if (ok && !pool.unreachable) resolve(); else reject(failure) })
    })
  }
  return () => {
    inFlight ??= probe().finally(() => { inFlight = undefined })
    return inFlight
  }
}
