// The streaming replicas of the primary (DATABASE_REPLICA_URLS), each with a pool of its own, and
// what is known of them without a query per request: a background probe, every interval and with
// a deadline, reads how far each has replayed and how far the primary has written. A replica's lag
// is then how long ago the primary was at a position it has not replayed.
import { EventEmitter } from 'node:events'
import { performance } from 'node:perf_hooks'
import type pg from 'pg'
import { isDatabaseUnavailable, overloadReasonOf } from './errors.js'
import { parseLsn } from './lsn.js'
import { DatabasePool, type DatabasePoolOptions } from './pool.js'

export interface Replica {
  /** replica-1, replica-2...: in logs and metrics, never the URL (it may hold a password). */
  readonly name: string
  readonly pool: DatabasePool
  /** False from a failed probe or read until a probe answers again. */
  up: boolean
  /** The newest position it is known to have replayed. */
  replayed: bigint
}

/** Why a read was not sent to a replica (fallbacks to the primary, by reason, in the metrics). */
export type NoReplica = 'none_up' | 'behind_token' | 'lagging'

export interface ReplicaSetOptions {
  urls: string[]
  /** The replicas' pools are bounded as the primary's: the same size, waits and settings. */
  pool: Omit<DatabasePoolOptions, 'connectionString'>
  /** The primary, for its written position: a connection of the probe's own. */
  primaryUrl: string
  maxLagMs: number
  probeIntervalMs: number
}

interface PrimarySample { lsn: bigint, at: number }

/**
 * Which server's state a connection reads: its cluster (the system identifier, which a standby
 * copied from its primary shares and no other cluster does) and its database.
 */
interface Identity { system: string, database: string }
const IDENTITY = '(SELECT system_identifier FROM pg_control_system())::text AS system, current_database() AS database'

const PROBE_DEADLINE_FLOOR_MS = 1000

export class ReplicaSet extends EventEmitter {
  readonly replicas: Replica[]
  /** False while the primary does not answer the probe. */
  // Stryker disable next-line BooleanLiteral: read only by lagMs(), which has no position of the primary before the first probe sets this
  primaryReachable = true
  readonly #primary: DatabasePool
  readonly #probes: DatabasePool[]
  readonly #maxLagMs: number
  readonly #probeIntervalMs: number
  // The primary's positions over the last maxLag + a few intervals, oldest first.
  readonly #samples: PrimarySample[] = []
  // The primary's first position probed (since it was found another, or gone back: probe()): how long a replica behind it had lagged before is unknown.
  #firstLsn: bigint | undefined
  // Which cluster and database the primary is, from its last answer: a replica must be the same.
  #primaryIdentity: Identity | undefined
  #next = 0
  readonly #reportedDown = new Set<Replica>()
  // What each replica was found to lack that the primary has (schemaBehind), by its error's message.
  readonly #reportedLacking = new Set<string>()
  readonly #downAt = new Map<Replica, number>()
  #timer: NodeJS.Timeout | undefined
  #closed = false

  constructor ({ urls, pool, primaryUrl, maxLagMs, probeIntervalMs }: ReplicaSetOptions) {
    super()
    // The probe's own connections, one per server (never behind reads), with a deadline: the
    // interval, but at least a second, so a busy machine's slower answer is not taken for an outage.
    const deadlineMs = Math.max(probeIntervalMs, PROBE_DEADLINE_FLOOR_MS)
    const probeBounds = { max: 1, connectionWaitMs: deadlineMs, queryTimeoutMs: deadlineMs, idleTimeoutMs: 0 }
    this.replicas = urls.map((connectionString, index) => ({
      name: `replica-${index + 1}`,
      pool: new DatabasePool({ ...pool, connectionString }),
      up: false,
      replayed: 0n
    }))
    this.#probes = urls.map((connectionString) => new DatabasePool({ ...probeBounds, connectionString }))
    this.#primary = new DatabasePool({ ...probeBounds, connectionString: primaryUrl })
    this.#maxLagMs = maxLagMs
    this.#probeIntervalMs = probeIntervalMs
    // Lost idle connections are dropped by the pools; the probe and the reads report the outage.
    for (const each of [this.#primary, ...this.#probes, ...this.replicas.map(({ pool }) => pool)]) each.on('error', () => {})
  }

  /** Probes at once, then every interval until closed. */
  async start (): Promise<void> {
    await this.probe()
    if (this.#closed) return
    const again = () => {
      this.#timer = setTimeout(() => { this.probe().finally(() => { if (!this.#closed) again() }) }, this.#probeIntervalMs)
      this.#timer.unref()
    }
    again()
  }

  async close (): Promise<void> {
    this.#closed = true
    clearTimeout(this.#timer)
    await Promise.all([this.#primary, ...this.#probes, ...this.replicas.map(({ pool }) => pool)].map((pool) => pool.end()))
  }

  /** One round: the primary's written position, then each replica's replayed one. */
  async probe (): Promise<void> {
    try {
      // Where the primary has written (not inserted: a position inside a WAL page's header, which
      // no standby ever reports, would make an idle primary's replicas look behind for ever).
      const { rows: [row] } = await this.#primary.query<{ lsn: string } & Identity>(`SELECT pg_current_wal_lsn()::text AS lsn, ${IDENTITY}`)
      this.primaryReachable = true
      const lsn = parseLsn(row.lsn)!
      // Another cluster behind the URL (its positions are another WAL's), or the same one gone back
      // in its WAL (a restore to an earlier point): the positions kept are of a history this primary
      // does not have, and its replicas, measured against them, would lag for as long as they are
      // kept, and be below the first position until the primary's WAL passed it (maybe months).
      // Its positions are known from now on, as at a start.
      if (this.#primaryIdentity !== undefined && (row.system !== this.#primaryIdentity.system || lsn < this.#samples.at(-1)!.lsn)) {
        this.#samples.length = 0
        this.#firstLsn = undefined
      }
      this.#primaryIdentity = { system: row.system, database: row.database }
      const now = performance.now()
      this.#samples.push({ lsn, at: now })
      this.#firstLsn ??= this.#samples[0].lsn
      // Kept for maxLag and four intervals more, and the one sample before: enough to tell that a
      // replica lags, so the lag reads at most about that (db_replica_lag_seconds says so).
      // Stryker disable next-line EqualityOperator: equivalent: at two samples the second is the one just taken (its age is 0), and two times of performance.now() a threshold apart to the fraction of a ms do not happen
      while (this.#samples.length > 2 && now - this.#samples[1].at > this.#maxLagMs + 4 * this.#probeIntervalMs) this.#samples.shift()
    } catch {
      this.primaryReachable = false
    }
    await Promise.all(this.replicas.map(async (replica, index) => {
      const askedAt = performance.now()
      try {
        const { rows: [row] } = await this.#probes[index].query<{ standby: boolean, lsn: string | null } & Identity>(
          `SELECT pg_is_in_recovery() AS standby, pg_last_wal_replay_lsn()::text AS lsn, ${IDENTITY}`)
        // Not a standby (promoted, or misconfigured): its position says nothing of the primary's.
        if (!row.standby ||
          // Stryker disable next-line ConditionalExpression: a standby takes connections only once its replay has set a position, so it never answers NULL
          row.lsn === null) throw new Error('not a streaming replica: pg_is_in_recovery() is false')
        // A standby of another cluster (its positions are another WAL's), or of the primary's
        // cluster but named with another database: its state is not the primary's. Checked once the
        // primary has said which it is (before, as with the lag, a stale read beats none).
        const primary = this.#primaryIdentity
        if (primary !== undefined && row.system !== primary.system) {
          throw new Error(`not a replica of the primary: another cluster (system identifier ${row.system}, the primary's ${primary.system})`)
        }
        if (primary !== undefined && row.database !== primary.database) {
          throw new Error(`not a replica of the primary's database: it serves "${row.database}", the primary "${primary.database}"`)
        }
        // What it has replayed now, even if less than before: a standby restarted, or another one
        // behind the same URL, is only as far as it says.
        replica.replayed = parseLsn(row.lsn)!
        // An answer to a question asked before a read found the replica failing says nothing of now.
        // Stryker disable next-line EqualityOperator: equivalent: a probe asked and a read failed at the same performance.now(), to the fraction of a ms, do not happen
        if (!replica.up && askedAt > (this.#downAt.get(replica) ?? -Infinity)) {
          replica.up = true
          // Reported when it comes back from a reported outage, not at its first probe.
          if (this.#reportedDown.delete(replica)) this.emit('up', replica)
        }
      } catch (error) {
        // A set closed during the probe ended the pool under it: no outage to report.
        if (!this.#closed) this.markDown(replica, error as Error)
      }
    }))
  }

  /** A replica that failed a read or a probe: no reads until a probe answers again. */
  markDown (replica: Replica, error: Error): void {
    replica.up = false
    this.#downAt.set(replica, performance.now())
    // Reported once per outage, a replica never up since start included.
    if (this.#reportedDown.has(replica)) return
    this.#reportedDown.add(replica)
    this.emit('down', replica, error)
  }

  /**
   * A read that `replica` failed for an object it lacks (schemaBehind) and the primary then
   * answered: reported once per replica and object (its error's message), not marked down.
   */
  lacking (replica: Replica, error: Error): void {
    const key = `${replica.name}\n${error.message}`
    if (this.#reportedLacking.has(key)) return
    this.#reportedLacking.add(key)
    this.emit('lacking', replica, error)
  }

  /** What a read on `replica` has shown of its position (never moves it back). */
  observed (replica: Replica, lsn: bigint): void {
    // Stryker disable next-line EqualityOperator: equivalent: an equal position assigned again changes nothing
    if (lsn > replica.replayed) replica.replayed = lsn
  }

  /**
   * How far behind the primary a replica is, in ms: how long ago the primary was at a position the
   * replica has not replayed (0 when it has replayed the newest position seen); undefined while
   * the primary cannot be asked.
   */
  lagMs (replica: Replica): number | undefined {
    if (!this.primaryReachable || this.#samples.length === 0) return undefined
    const ahead = this.#samples.find(({ lsn }) => lsn > replica.replayed)
    return ahead === undefined ? 0 : performance.now() - ahead.at
  }

  /**
   * Whether a replica's lag is within maxLag (any lag while the primary is down: stale reads then
   * beat none). The primary's positions are known only since the first probe: a replica that has
   * not replayed the first one may have been behind it for an hour (or lack the tables the
   * migrations just made), so it is not within any bound until it has.
   */
  #withinLag (replica: Replica): boolean {
    const lag = this.lagMs(replica)
    if (lag === undefined) return true
    return lag <= this.#maxLagMs && replica.replayed >= this.#firstLsn!
  }

  /**
   * A replica for a read, round robin among those that may answer it: up, within the lag bound
   * (#withinLag), and having replayed `after` when the caller has seen that position. A token is
   * a floor, not a waiver of the bound: a caller passing on the tokens a stalled replica gave it
   * would otherwise be answered from its state for as long as it stalls. The reason when there is
   * none.
   */
  choose (after?: bigint): Replica | NoReplica {
    const up = this.replicas.filter((replica) => replica.up)
    if (up.length === 0) return 'none_up'
    const recent = up.filter((replica) => this.#withinLag(replica))
    if (recent.length === 0) return 'lagging'
    const fresh = after === undefined ? recent : recent.filter((replica) => replica.replayed >= after)
    if (fresh.length === 0) return 'behind_token'
    this.#next = (this.#next + 1) % fresh.length
    return fresh[this.#next]
  }
}

// Where the server has replayed, NULL when it is not a standby.
const REPLAYED = 'SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() END)::text AS lsn'

// Where each pooled connection's server was last seen to have replayed. A connection stays on one
// server, whose replay never goes back (a restart ends the connection); not so through a
// transaction pooler, which may send each statement over another server connection.
const seenReplayed = new WeakMap<pg.PoolClient, bigint | undefined>()

/**
 * Runs `run` on a connection of `pool` only if its server had replayed `after` before `run`
 * began; undefined if not (or if it is not a standby). What the probe last saw only picks the
 * replica: a standby restarted, or another one behind the same URL, may be behind its former
 * self. And a position read by the read's own statement is read after its snapshot: replay may
 * pass `after` while the statement runs and the state shown still be older. So the connection's
 * server is asked first, in a statement of its own (READ COMMITTED: each statement's snapshot is
 * taken when it starts), unless that connection has already seen it at `after` or past. Behind a
 * transaction pooler (`pooler`), always, and in one transaction with the read, which keeps them
 * on one server connection.
 */
export async function readIfReplayed<T extends { position?: string }> (
  pool: DatabasePool, after: bigint, run: (db: pg.PoolClient) => Promise<T>, { pooler }: { pooler: boolean }
): Promise<T | undefined> {
  const client = await pool.connect()
  try {
    let replayed = pooler ? undefined : seenReplayed.get(client)
    if (replayed === undefined || replayed < after) {
      // A multi-statement query answers a result per statement.
      const results = await client.query(pooler ? `BEGIN; ${REPLAYED}` : REPLAYED) as unknown as pg.QueryResult<{ lsn: string | null }> | [pg.QueryResult, pg.QueryResult<{ lsn: string | null }>]
      const { rows: [row] } = Array.isArray(results) ? results[1] : results
      // Stryker disable next-line ConditionalExpression: parseLsn(null) is undefined as well, so the NULL test only narrows the type
      replayed = row.lsn === null ? undefined : parseLsn(row.lsn)!
      seenReplayed.set(client, replayed)
    }
    // Stryker disable next-line ConditionalExpression: undefined >= a bigint is false, so the comparison alone refuses a server that is not a standby
    const result = replayed !== undefined &&
      replayed >= after
      ? await run(client)
      : undefined
    if (pooler) await client.query('COMMIT')
    // The read's own position (its standby's, read after its snapshot) is as far as its server has been seen.
    else if (result !== undefined) seenReplayed.set(client, parseLsn(result.position!)!)
    client.release()
    return result
  } catch (error) {
    // The client is dropped: its transaction may be open, or its connection gone.
    client.release(error as Error)
    throw error
  }
}

const codeOf = (error: unknown) => error instanceof Error ? (error as { code?: unknown }).code : undefined

// A standby cancelling a read that conflicts with the WAL it replays (a snapshot or lock conflict,
// a buffer-pin deadlock, a database dropped on the primary): the replica works, this read lost.
const recoveryConflicts: ReadonlySet<unknown> = new Set(['40001', '40P01', '57P04'])

/**
 * Whether a read's failure on a replica says the replica, not the request, is at fault: it cannot
 * be reached, or it is busy beyond its bounds (no connection in time, a statement past its timeout).
 */
export function replicaFailed (error: unknown): boolean {
  return isDatabaseUnavailable(error) || overloadReasonOf(error) !== undefined
}

// A table, column, function or type that does not exist (SQLSTATE 42P01, 42703, 42883, 42704):
// on a replica, what a migration made on the primary and the standby has not replayed yet.
const missingObjects: ReadonlySet<unknown> = new Set(['42P01', '42703', '42883', '42704'])

/**
 * Whether a read's failure on a replica may be the replica's schema behind the primary's: the
 * primary is asked, and its answer (or its own error, when the object is missing there too) is the
 * caller's. The lag checks keep reads off a replica that has not replayed the migrations the
 * service started with; this covers what they cannot see, such as another server behind the
 * replica's URL, or an object made on the primary after the start. Other errors of the request
 * (data, syntax, a constraint) would be the primary's too, and are not retried.
 */
export function schemaBehind (error: unknown): boolean {
  return missingObjects.has(codeOf(error))
}

/** Whether a read's failure on a replica is a conflict with its recovery: the primary answers it. */
export function recoveryConflict (error: unknown): boolean {
  return recoveryConflicts.has(codeOf(error))
}
