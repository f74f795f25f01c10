// The change history (migration 0005): read a page of it, prune it.
import { type Queryable, type StatementOptions, type Target, type TargetRow, statement, targetColumns, targetOf } from './statement.js'

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
}

/** One page of a client's change history on a resource, newest first; $3 limit, $4 before (or NULL). */
export const changeHistorySql = `
  WITH target AS (
    SELECT ${targetColumns},
      EXISTS (SELECT 1 FROM permission_changes WHERE resource_id = $1 AND client_id = $2) AS has_history
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

export async function listPermissionChanges (db: Queryable, input: ChangeHistoryInput, options: StatementOptions): Promise<ChangeHistoryPage> {
  const { rows } = await db.query<TargetRow & {
    has_history: boolean,
    id: string | null,
    at: Date,
    action: 'granted' | 'unauthorized',
    permission_ids: string[],
    actor_sub: string | null,
    actor_client_id: string | null,
    request_id: string
  }>(statement('change history', changeHistorySql, [input.resourceId, input.clientId, input.limit, input.before ?? null], options))
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
  return { ...targetOf(rows[0]), hasHistory: rows[0].has_history, changes: changes.slice(0, input.limit), more }
}

/** Deletes the changes recorded more than `days` days ago; returns how many. */
export async function pruneChanges (db: Queryable, days: number): Promise<number> {
  const { rowCount } = await db.query('DELETE FROM permission_changes WHERE at < now() - make_interval(days => $1)', [days])
  return rowCount ?? 0
}
