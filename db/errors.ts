// What a database error means for the caller: the database cannot be reached (an outage), or it
// is reachable but has more work than it can take now (overload). The two get different answers
// (503 database-unavailable vs 503 overloaded), different log levels and different metrics.

/** No pooled connection became free within the wait: the pool is busy, the database answering. */
export class ConnectionWaitTimeout extends Error {
  readonly code = 'CONNECTION_WAIT_TIMEOUT'
}

/** No connection within the wait, while the database's last answer was a failure to connect. */
export class DatabaseUnreachable extends Error {
  readonly code = 'DATABASE_UNREACHABLE'
}

// Asked about whatever an error carries as its code: only these strings are in it.
const unavailableCodes: ReadonlySet<unknown> = new Set([
  'DATABASE_UNREACHABLE',
  'ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'EPIPE', 'ENOENT',
  '57P01', '57P02', '57P03', // admin_shutdown, crash_shutdown, cannot_connect_now
  '08000', '08001', '08003', '08004', '08006' // connection exceptions
])

// A statement cancelled by statement_timeout: the server answered, in time to say it gave up.
const STATEMENT_TIMEOUT = '57014'
const TOO_MANY_CONNECTIONS = '53300'

const codeOf = (error: Error) => (error as Error & { code?: unknown }).code

// PgBouncer sends each refusal of its own as protocol_violation, then closes the client's connection.
const PROTOCOL_VIOLATION = '08P01'
// PgBouncer's refusals when it cannot reach the server: its logins to it fail ("server login has
// been failing, try again later (server_login_retry)" in 1.18; "…, cached error: … (server_login_retry)"
// later; "pgbouncer cannot connect to server" before), or the server connection under the client's
// transaction was lost ("server conn crashed?"). Only the words tell them from its other refusals.
const POOLER_CANNOT_REACH_SERVER = /server login has been failing|pgbouncer cannot connect to server|server conn crashed/
// PgBouncer's refusal when no server connection became free within its query_wait_timeout: its
// queue, behind a transaction pooler, is the wait for a connection. It says the same while the
// server cannot be reached (a client queued when it went away), so the pool that saw it decides.
const POOLER_QUEUE_WAIT_EXPIRED = 'query_wait_timeout'
// PgBouncer's refusal of one more client connection: it takes max_client_conn at once. Like the
// server's too_many_connections, it is there and busy.
const POOLER_FULL = /^no more connections allowed \(max_client_conn\)/

// Pooler queue waits that ran out while their pool's latest sign was that the database cannot be
// reached (db/pool.ts): an outage, as pg-pool's own wait is then.
const queueWaitsWhileUnreachable = new WeakSet<Error>()

/** Whether `error` is PgBouncer's query_wait_timeout: no server connection became free in its queue in time. */
export function isPoolerQueueWaitExpired (error: unknown): boolean {
  return error instanceof Error && codeOf(error) === PROTOCOL_VIOLATION && error.message === POOLER_QUEUE_WAIT_EXPIRED
}

/** Takes a pooler's query_wait_timeout for the database unavailable: its pool had found the database unreachable. */
export function markQueueWaitWhileUnreachable (error: Error): void {
  queueWaitsWhileUnreachable.add(error)
}

/** Whether an error means the database cannot be reached now, as opposed to a bug or overload. */
export function isDatabaseUnavailable (error: unknown): boolean {
  if (!(error instanceof Error)) return false
  if (unavailableCodes.has(codeOf(error))) return true
  if (codeOf(error) === PROTOCOL_VIOLATION && POOLER_CANNOT_REACH_SERVER.test(error.message)) return true
  if (queueWaitsWhileUnreachable.has(error)) return true
  // pg's own words for a connection that could not be made or was lost, and for a server that did
  // not answer a query at all within query_timeout (one that is alive cancels it sooner itself).
  return /Connection terminated|Query read timeout|encountered a connection error and is not queryable/i.test(error.message)
}

export type OverloadReason = 'connection_wait' | 'statement_timeout'

/** Why a database error means overload, or undefined when it does not. */
export function overloadReasonOf (error: unknown): OverloadReason | undefined {
  if (error instanceof ConnectionWaitTimeout) return 'connection_wait'
  // The pooler's wait for a server connection, as pg-pool's own: overload while the database answers.
  if (error instanceof Error && isPoolerQueueWaitExpired(error) && !queueWaitsWhileUnreachable.has(error)) return 'connection_wait'
  // too_many_connections: the server is there and refuses one more connection under load.
  if (error instanceof Error && codeOf(error) === TOO_MANY_CONNECTIONS) return 'connection_wait'
  if (error instanceof Error && codeOf(error) === PROTOCOL_VIOLATION && POOLER_FULL.test(error.message)) return 'connection_wait'
  if (error instanceof Error && codeOf(error) === STATEMENT_TIMEOUT) return 'statement_timeout'
  return undefined
}

// program_limit_exceeded: here, an index entry over a third of a page (about 2.7 kB). The
// contract bounds each id at 255 characters, not their bytes together.
const PROGRAM_LIMIT_EXCEEDED = '54000'

/** Whether the database refused to store a row because it is too large for an index (or another of its limits). */
export function isOverDatabaseLimit (error: unknown): boolean {
  return error instanceof Error && codeOf(error) === PROGRAM_LIMIT_EXCEEDED
}

/** What a log line needs of a database error: no client, no connection parameters, no SQL. */
export function databaseErrorSummary (error: Error & { code?: string }): { code?: string, reason: string } {
  return { code: error.code, reason: error.message }
}

// SQLSTATE lock_not_available: lock_timeout expired (or a NOWAIT lock was not free).
const LOCK_NOT_AVAILABLE = '55P03'

/**
 * The error of a statement that waited for a lock another session holds past lock_timeout (55P03),
 * also where a caller wrapped it as a cause (postgres-migrations does).
 */
export function lockWaitExpired (error: unknown): Error | undefined {
  for (let cause = error; cause instanceof Error; cause = cause.cause) {
    if ((cause as { code?: string }).code === LOCK_NOT_AVAILABLE) return cause
  }
  return undefined
}

// The setting that names the database a failed start was on, when it is not DATABASE_URL.
const settingOfError = new WeakMap<object, string>()

/** Marks `error` as one of the database `setting` names (MIGRATIONS_DATABASE_URL): a failed start says that setting. */
export function onDatabaseOf<E> (error: E, setting: string): E {
  if (typeof error === 'object' && error !== null) settingOfError.set(error, setting)
  return error
}

/** The setting naming the database `error` came from: DATABASE_URL unless marked otherwise (onDatabaseOf). */
export function databaseSettingOf (error: unknown): string {
  return (typeof error === 'object' && error !== null && settingOfError.get(error)) || 'DATABASE_URL'
}
