// The change history (migration 0005, append-only since 0006): read a page of it, prune it.
import { setTimeout as sleep } from 'node:timers/promises'
import type pg from 'pg'
import { positionColumn } from '../lsn.js'
import { feedHorizon } from './feed.js'
import { type Queryable, type StatementOptions, type Target, type TargetRow, statement, takeRows, targetColumns, targetOf } from './statement.js'

export interface PermissionChange {
  id: string
  at: Date
  action: 'granted' | 'unauthorized'
  permissionIds: string[]
  actor: { sub?: string, clientId?: string }
  requestId: string
}

export interface ChangeHistoryInput {
  resourceId: string
  clientId: string
  limit: number
  /** Only changes older than this one (the id of the last change of the previous page). */
  before?: string
}

export interface ChangeHistoryPage extends Target {
  /** Whether any change of this client on this resource is recorded (the history outlives them). */
  hasHistory: boolean
  changes: PermissionChange[]
  /** Whether older changes follow this page. */
  more: boolean
  /** The WAL position of the state read, when asked for (StatementOptions.position). */
  position?: string
  /**
   * With the position, and `before`: whether the change `before` names is in the state read. One
   * authorization's changes commit in id order (db/queries/change.ts), so a state that has it has
   * every change of that authorization before it; a replica's that lacks it may skip some.
   */
  cursorSeen?: boolean
}

// With the position (a read that may be on a replica), whether the state read has the change `before`
// names, or has pruned past it (its next page is what is left below it, wherever it is read).
const withPosition = `, ${positionColumn},
      ($4::bigint IS NULL OR EXISTS (SELECT 1 FROM permission_changes WHERE id = $4::bigint)
        OR coalesce($4::bigint <= (SELECT through_id FROM permission_changes_pruned), false)) AS cursor_seen`

/** One page of a client's change history on a resource, newest first; $3 limit, $4 before (or NULL). */
export const changeHistorySql = (position = false) => `
  WITH target AS (
    SELECT ${targetColumns},
      EXISTS (SELECT 1 FROM permission_changes WHERE resource_id = $1 AND client_id = $2) AS has_history${position ? withPosition : ''}
  )
  SELECT target.*, c.id, c.at, c.action, c.permission_ids, c.actor_sub, c.actor_client_id, c.request_id
  FROM target
  LEFT JOIN LATERAL (
    SELECT * FROM permission_changes
    WHERE resource_id = $1 AND client_id = $2 AND ($4::bigint IS NULL OR id < $4::bigint)
    ORDER BY id DESC
    LIMIT $3::int + 1
  ) c ON true
  ORDER BY c.id DESC`

const changeHistory = changeHistorySql()
const changeHistoryWithPosition = changeHistorySql(true)
// Stryker disable next-line StringLiteral: an empty name is PostgreSQL's unnamed statement, parsed on each use: the same rows
const WITH_POSITION = 'change history+position'

export async function listPermissionChanges (db: Queryable, input: ChangeHistoryInput, options: StatementOptions): Promise<ChangeHistoryPage> {
  const rows = takeRows(await db.query<TargetRow & {
    has_history: boolean,
    id: string | null,
    at: Date,
    action: 'granted' | 'unauthorized',
    permission_ids: string[],
    actor_sub: string | null,
    actor_client_id: string | null,
    request_id: string
    position?: string
    cursor_seen?: boolean
  }>(options.position === true
    ? statement(WITH_POSITION, changeHistoryWithPosition, [input.resourceId, input.clientId, input.limit, input.before ?? null], options)
    : statement('change history', changeHistory, [input.resourceId, input.clientId, input.limit, input.before ?? null], options)))
  const changes: PermissionChange[] = []
  for (const row of rows) {
    if (row.id === null) continue
    changes.push({
      id: row.id,
      at: row.at,
      action: row.action,
      permissionIds: row.permission_ids,
      actor: { ...(row.actor_sub === null ? {} : { sub: row.actor_sub }), ...(row.actor_client_id === null ? {} : { clientId: row.actor_client_id }) },
      requestId: row.request_id
    })
  }
  const more = changes.length > input.limit
  return {
    ...targetOf(rows[0]),
    hasHistory: rows[0].has_history,
    changes: changes.slice(0, input.limit),
    more,
    position: rows[0].position,
    cursorSeen: rows[0].cursor_seen
  }
}

// What a prune may delete ($1 days): the first changes of the feed (migration 0007), every one before
// the first recorded within the last $1 days, and only below the feed's horizon, so that a change
// still to commit (numbered at or above the horizon) never lands under the mark.
// Stryker disable next-line ArithmeticOperator: one past the largest bigint compares the same (as numeric) with every id
const firstKept = `coalesce((SELECT id FROM permission_changes WHERE at >= now() - make_interval(days => $1) ORDER BY id LIMIT 1), ${2n ** 63n - 1n})`
const pruneBound = `least(${firstKept}, ${feedHorizon})`
// Whether changes the prune would delete wait above the horizon, for transactions still open.
const pruneHeldSql = `SELECT max(id) >= ${feedHorizon} AS held FROM permission_changes WHERE id < ${firstKept}`

/**
 * Deletes the changes recorded more than `days` days ago, in feed order (a change goes only with
 * every change before it, so one recorded earlier by a writer that gave an older `at` may stay
 * until those before it go); returns how many. Waits up to `waitMs` for transactions still open
 * below them, then deletes what it may. The history is append-only (migration 0006): its triggers
 * let a DELETE through only in a transaction that sets client_permissions.prune_changes, and only
 * of the first changes, none recorded within a day (fewer than 1 day fails with SQLSTATE PH001 and
 * deletes nothing). SET LOCAL: the flag ends with the transaction, so the pooled connection goes
 * back without it.
 */
export async function pruneChanges (pool: pg.Pool, days: number, { waitMs = 30_000 } = {}): Promise<number> {
  const deadline = Date.now() + waitMs
  // Stryker disable next-line EqualityOperator: at the deadline's very millisecond one more wait of 100 ms is the same bound
  while ((await pool.query<{ held: boolean | null }>(pruneHeldSql, [days])).rows[0].held === true && Date.now() < deadline) {
    await sleep(100)
  }
  const client = await pool.connect()
  try {
    await client.query("BEGIN; SET LOCAL client_permissions.prune_changes = 'on'")
    const { rowCount } = await client.query(`DELETE FROM permission_changes WHERE id < ${pruneBound}`, [days])
    await client.query('COMMIT')
    client.release()
    return rowCount ?? 0
  } catch (error) {
    // A connection whose transaction failed is not reused: it may be in any state.
    client.release(error as Error)
    throw error
  }
}
