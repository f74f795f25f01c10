// The change feed: every recorded change across resources, oldest first, in an order no reader can
// miss (migration 0007, docs/change-feed.md). A read returns only changes below the horizon, the
// first id a transaction still running could yet commit; everything below it is final.
import { positionColumn } from '../lsn.js'
import { type Queryable, type StatementOptions, statement, takeRows } from './statement.js'

/**
 * A change of the feed: its id and resource (to follow and filter by), and its entry as the API
 * shows it, as JSON text made by PostgreSQL. A page of 500 changes parsed into objects, with their
 * arrays and dates, and serialized again cost the service about 17 ms of CPU; the entries are
 * written out as they are read.
 */
export interface FeedChange {
  id: string
  resourceId: string
  /** The spec's FeedChange, as JSON. */
  entry: string
}

export interface FeedInput {
  /** Only changes after this one (exclusive); undefined: from the oldest kept. */
  after?: string
  limit: number
  /** Only changes of this resource. */
  resourceId?: string
}

export interface FeedPage {
  changes: FeedChange[]
  /**
   * The horizon: every change with a smaller id that will ever be visible is visible now. A reader
   * that has read every change below it (the page was not full) may continue from it.
   */
  horizon: string
  /** Whether committed changes wait at or above the horizon, for an older transaction to end. */
  heldBack: boolean
  /** The largest id a prune has deleted; a cursor below it has missed changes (410). */
  prunedThrough?: string
  /** The WAL position of the state read, when asked for (StatementOptions.position). */
  position?: string
}

/**
 * The horizon of the statement's own snapshot (pg_current_snapshot() is the active snapshot): its
 * xmin, the oldest transaction still running, in ids (migration 0007: xid × 65536 + n). Every
 * change that will ever have a smaller id is visible now.
 */
export const feedHorizon = 'pg_snapshot_xmin(pg_current_snapshot())::text::bigint * 65536'

// $1 after (or NULL), $2 limit, [$3 resource id]. The snapshot whose xmin bounds the page is the
// statement's own (pg_current_snapshot() is the active snapshot), so the horizon and the rows read
// agree. NULL after: from -1, below every id.
export const feedSql = (byResource: boolean, position: boolean) => `
  WITH bounds AS MATERIALIZED (
    SELECT horizon,
      -- The newest id, once per statement (the primary key's last entry): an EXISTS on id >= horizon
      -- may be planned as a scan of the whole table.
      coalesce((SELECT max(id) FROM permission_changes) >= horizon, false) AS held_back,
      (SELECT through_id FROM permission_changes_pruned) AS pruned_through${position ? ', ' + positionColumn : ''}
    FROM (SELECT ${feedHorizon} AS horizon) AS snapshot
  )
  SELECT bounds.*, c.id, c.resource_id,
    -- Compact, in the spec's order (json_build_object would put spaces around every colon):
    -- to_json quotes and escapes each text. Joined with ||, not concat(), which looks up each
    -- argument's output function on every call (a page of 500 about a fifth faster in pgbench).
    '{"id":"' || c.id::text ||
      -- As JavaScript's toISOString: UTC, milliseconds (truncated, as pg's Date parsing does). The
      -- colons quoted: pgbench (the bench's reference) would read :MI as one of its variables.
      '","at":"' || to_char(c.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24":"MI":"SS.MS"Z"') ||
      '","resource_id":' || to_json(c.resource_id)::text ||
      ',"client_id":' || to_json(c.client_id)::text ||
      ',"action":"' || c.action ||
      '","permission_ids":' || to_json(c.permission_ids)::text ||
      -- A claim the token did not carry is left out.
      ',"actor":{' || concat_ws(',', '"sub":' || to_json(c.actor_sub)::text, '"client_id":' || to_json(c.actor_client_id)::text) ||
      '},"request_id":' || to_json(c.request_id)::text || '}' AS entry
  FROM bounds
  LEFT JOIN LATERAL (
    SELECT * FROM permission_changes
    WHERE id > coalesce($1::bigint, -1) AND id < bounds.horizon${byResource ? ' AND resource_id = $3' : ''}
    ORDER BY id
    LIMIT $2::int
  ) c ON true
  ORDER BY c.id`

const statements = new Map([false, true].flatMap((byResource) => [false, true].map((position) => [
  `${byResource}/${position}`,
  // Stryker disable next-line StringLiteral: an empty name is PostgreSQL's unnamed statement, parsed on each use: the same rows
  { name: `feed${byResource ? ' by resource' : ''}${position ? '+position' : ''}`, text: feedSql(byResource, position) }
])))

interface FeedRow {
  horizon: string
  pruned_through: string | null
  held_back: boolean
  position?: string
  id: string | null
  resource_id: string
  entry: string
}

/** One page of the feed, from a cursor, up to the horizon. */
export async function readFeed (db: Queryable, input: FeedInput, options: StatementOptions): Promise<FeedPage> {
  const byResource = input.resourceId !== undefined
  const { name, text } = statements.get(`${byResource}/${options.position === true}`)!
  const values: unknown[] = [input.after ?? null, input.limit]
  if (byResource) values.push(input.resourceId)
  const rows = takeRows(await db.query<FeedRow>(statement(name, text, values, options)))
  const [first] = rows
  const changes: FeedChange[] = []
  for (const row of rows) {
    if (row.id !== null) changes.push({ id: row.id, resourceId: row.resource_id, entry: row.entry })
  }
  return {
    changes,
    horizon: first.horizon,
    heldBack: first.held_back,
    ...(first.pruned_through === null ? {} : { prunedThrough: first.pruned_through }),
    // Stryker disable next-line ConditionalExpression: a position undefined reads as none: every reader asks page.position
    ...(first.position === undefined ? {} : { position: first.position })
  }
}
