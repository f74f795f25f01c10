// The thin query module: every SQL statement of the service, parameterized, one function each.
// Each takes a Queryable (the pool or a transaction's client) so a caller can span statements.
import type pg from 'pg'

export type Queryable = Pick<pg.Pool | pg.PoolClient, 'query'>

/**
 * Whether statements are sent as named prepared statements: parsed and planned once per connection
 * (a list statement takes longer to plan than to run), or unnamed, for poolers that cannot keep
 * them (PgBouncer in transaction mode before 1.21).
 */
export interface StatementOptions {
  prepared?: boolean
  /** The DELETE's server-side bound, set in its own transaction (so it holds behind a pooler too). */
  statementTimeoutMs?: number
}

const statement = (name: string, text: string, values: unknown[], { prepared = true }: StatementOptions) =>
  prepared ? { name, text, values } : { text, values }

/** Default server-side bound on a statement (DATABASE_STATEMENT_TIMEOUT_MS). */
export const STATEMENT_TIMEOUT_MS = 5_000

export type SortProperty = 'id' | 'name' | 'description'
export type SortDirection = 'asc' | 'desc'
export interface SortKey { property: SortProperty, direction: SortDirection }

export interface Permission { id: string, name: string, description?: string }

/** Whether the resource and the client exist, and whether the client is authorized on it. */
export interface Target { resourceExists: boolean, clientExists: boolean, authorized: boolean }

const targetColumns = `
  EXISTS (SELECT 1 FROM resources WHERE id = $1) AS resource_exists,
  EXISTS (SELECT 1 FROM clients WHERE id = $2) AS client_exists,
  EXISTS (SELECT 1 FROM authorizations WHERE resource_id = $1 AND client_id = $2) AS authorized`

interface TargetRow { resource_exists: boolean, client_exists: boolean, authorized: boolean }

function targetOf (row: TargetRow): Target {
  return { resourceExists: row.resource_exists, clientExists: row.client_exists, authorized: row.authorized }
}

export interface ListGrantedPermissionsInput {
  resourceId: string
  clientId: string
  limit: number
  /** A page number: `limit * page` rows are skipped, multiplied as bigint in SQL. */
  page: number
  sort: SortKey[]
}

export interface PermissionPage extends Target {
  total: number
  permissions: Permission[]
  /** The authorization's version (migration 0004), behind the ETag; undefined when not authorized. */
  version?: string
}

// The only text that reaches ORDER BY: columns from these maps and directions from a closed set.
// A grant carries its permission's name (migration 0002) and description (0003): no order joins.
const grantColumns: Record<SortProperty, string> = { id: 'permission_id', name: 'permission_name', description: 'permission_description' }
const pageColumns: Record<SortProperty, string> = { id: 'page.id', name: 'page.name', description: 'page.description' }
const directions: Record<SortDirection, string> = { asc: 'ASC', desc: 'DESC' }
const reversed: Record<SortDirection, SortDirection> = { asc: 'desc', desc: 'asc' }

/**
 * The keys that decide the order: the given ones up to the first that is unique among a client's
 * grants on a resource (the id, or the name: unique per resource), then the id if none was.
 * Keys after a unique one could never matter, and leaving them out lets an index serve the order.
 */
function decidingKeys (sort: SortKey[]): SortKey[] {
  const uniqueAt = sort.findIndex(({ property }) => property !== 'description')
  return uniqueAt === -1 ? [...sort, { property: 'id', direction: 'asc' }] : sort.slice(0, uniqueAt + 1)
}

function orderBy (keys: SortKey[], columns: Record<SortProperty, string>): string {
  return keys.map(({ property, direction }) => `${columns[property]} ${directions[direction]}`).join(', ')
}

/**
 * One page of grants ($1 resource id, $2 client id), when `when` holds: whatever the order, an
 * index-only scan of the client's entries in one of the grants indexes (migration 0003 says which
 * serves which order), stopping after the page.
 */
function pageOf (keys: SortKey[], when: string, limit: string, offset: string): string {
  return `SELECT permission_id AS id, permission_name AS name, permission_description AS description
      FROM grants
      WHERE resource_id = $1 AND client_id = $2 AND ${when}
      ORDER BY ${orderBy(keys, grantColumns)} LIMIT ${limit} OFFSET ${offset}`
}

/**
 * The list statement for one sort order; $1 resource id, $2 client id, $3 limit, $4 page.
 * The total comes from the authorization's grant count, and a page in the back half of the list is
 * read backwards from the end: either way the statement reads about one page of rows, wherever the
 * page is. Page and total come from one snapshot.
 */
export function listGrantedPermissionsSql (sort: SortKey[]): string {
  const keys = decidingKeys(sort)
  const backwards = keys.map(({ property, direction }) => ({ property, direction: reversed[direction] }))
  return `
    WITH t AS MATERIALIZED (
      SELECT
        -- NULL when the client is not authorized on the resource.
        (SELECT grant_count FROM authorizations WHERE resource_id = $1 AND client_id = $2) AS total,
        (SELECT version FROM authorizations WHERE resource_id = $1 AND client_id = $2) AS version,
        -- The page number times the limit, as bigint: up to 5·10^16 rows, past JavaScript's integers.
        $3::bigint * $4::bigint AS skip
    )
    SELECT
      -- An authorization implies both exist (foreign keys): they are looked up only for a 404.
      CASE WHEN t.total IS NULL THEN EXISTS (SELECT 1 FROM resources WHERE id = $1) ELSE true END AS resource_exists,
      CASE WHEN t.total IS NULL THEN EXISTS (SELECT 1 FROM clients WHERE id = $2) ELSE true END AS client_exists,
      t.total IS NOT NULL AS authorized, coalesce(t.total, 0) AS total, t.version,
      page.id, page.name, page.description
    FROM t
    LEFT JOIN LATERAL (
      (${pageOf(keys, 't.skip * 2 < t.total', '$3::bigint', '$3::bigint * $4::bigint')})
      UNION ALL
      (${pageOf(backwards, 't.skip * 2 >= t.total',
        'greatest(least($3::bigint, t.total - t.skip), 0)', 'greatest(t.total - t.skip - $3::bigint, 0)')})
    ) page ON true
    ORDER BY ${orderBy(keys, pageColumns)}`
}

// One statement per order that decides differently, built once: a bounded set (sort_by has three
// properties, each kept once).
const listStatements = new Map<string, { name: string, text: string }>()

function listStatement (sort: SortKey[]): { name: string, text: string } {
  const keys = decidingKeys(sort)
  const name = `list ${keys.map(({ property, direction }) => `${property}.${direction}`).join(',')}`
  let known = listStatements.get(name)
  if (!known) {
    known = { name, text: listGrantedPermissionsSql(keys) }
    listStatements.set(name, known)
  }
  return known
}

/**
 * One page of the permissions granted to a client on a resource, the total across pages and the
 * target's existence, in one round trip. An empty page still yields one row, carrying the totals.
 */
export async function listGrantedPermissions (db: Queryable, input: ListGrantedPermissionsInput, options: StatementOptions = {}): Promise<PermissionPage> {
  const { name, text } = listStatement(input.sort)
  const { rows } = await db.query<TargetRow & { total: string, version: string | null, id: string | null, name: string, description: string | null }>(
    statement(name, text, [input.resourceId, input.clientId, input.limit, input.page], options))
  const first = rows[0]
  const permissions: Permission[] = []
  for (const row of rows) {
    if (row.id === null) continue
    permissions.push(row.description === null ? { id: row.id, name: row.name } : { id: row.id, name: row.name, description: row.description })
  }
  return { ...targetOf(first), total: Number(first.total), permissions, ...(first.version === null ? {} : { version: first.version }) }
}

// What the DELETE and the POST share ($1 resource id, $2 client id, $3 permission ids, $4 the versions
// an If-Match accepts, NULL for none): the target, its authorization locked (so two callers holding
// the same tag are served one after the other, and the second sees the first's version), whether
// the precondition holds, and whether every id is a permission of the resource (one index scan).
const changeContext = `
  target AS (
    SELECT ${targetColumns}
  ), locked AS MATERIALIZED (
    SELECT version FROM authorizations WHERE resource_id = $1 AND client_id = $2 FOR UPDATE
  ), precondition AS (
    SELECT $4::bigint[] IS NULL OR coalesce((SELECT version FROM locked) = ANY ($4::bigint[]), false) AS met
  ), known AS (
    SELECT count(*) = (SELECT count(DISTINCT id) FROM unnest($3::text[]) AS id) AS all_known
    FROM permissions
    WHERE resource_id = $1 AND id = ANY ($3::text[])
  )`

// The ids of $3 that are not permissions of the resource, in request order, each once: worked out
// only when some are not, for the 422.
const unknownIds = `
    CASE WHEN known.all_known THEN '{}' ELSE (
      SELECT array_agg(r.id ORDER BY r.position)
      FROM (
        SELECT id, min(position) AS position
        FROM unnest($3::text[]) WITH ORDINALITY AS requested (id, position)
        WHERE NOT EXISTS (SELECT 1 FROM permissions p WHERE p.resource_id = $1 AND p.id = requested.id)
        GROUP BY id
      ) r
    ) END AS unknown_permission_ids`

const changeApplies = 'target.authorized AND precondition.met AND known.all_known'

// After the change ($5 actor sub, $6 actor client id, $7 request id): when it changed anything, one
// row of history with the ids it changed (request order, each once), and a notification that
// PostgreSQL delivers at COMMIT, to listeners on the permission_changes channel.
const recordChange = (action: 'granted' | 'unauthorized') => `
  , recorded AS (
    INSERT INTO permission_changes (resource_id, client_id, action, permission_ids, actor_sub, actor_client_id, request_id)
    SELECT $1, $2, '${action}', ids, $5, $6, $7
    FROM (
      SELECT array_agg(id ORDER BY position) AS ids
      FROM (
        SELECT id, min(position) AS position
        FROM unnest($3::text[]) WITH ORDINALITY AS requested (id, position)
        WHERE id IN (SELECT permission_id FROM changed)
        GROUP BY id
      ) r
    ) changed_ids
    WHERE ids IS NOT NULL
    RETURNING id
  ), notified AS (
    SELECT pg_notify('permission_changes', json_build_object(
      'id', id::text, 'resource_id', $1::text, 'client_id', $2::text, 'action', '${action}')::text)
    FROM recorded
  )
  SELECT target.*, precondition.met AS precondition_met, ${unknownIds},
    (SELECT count(*) FROM changed) AS changed,
    (SELECT id FROM recorded) AS change_id,
    (SELECT count(*) FROM notified) AS notified
  FROM target, precondition, known`

/** The unauthorize statement: removes the grants only when the change applies. */
export const unauthorizeSql = `
  WITH ${changeContext}, changed AS (
    DELETE FROM grants g
    USING target, precondition, known
    WHERE ${changeApplies}
      AND g.resource_id = $1 AND g.client_id = $2 AND g.permission_id = ANY ($3::text[])
    RETURNING g.permission_id
  )${recordChange('unauthorized')}`

/** The grant statement: adds the grants not held yet, only when the change applies. */
export const grantSql = `
  WITH ${changeContext}, changed AS (
    INSERT INTO grants (resource_id, client_id, permission_id)
    SELECT DISTINCT $1, $2, id
    FROM unnest($3::text[]) AS id, target, precondition, known
    WHERE ${changeApplies}
    ON CONFLICT DO NOTHING
    RETURNING permission_id
  )${recordChange('granted')}`

export interface ChangeInput {
  resourceId: string
  clientId: string
  permissionIds: string[]
  /** The versions an If-Match accepts; undefined when the request has no precondition. */
  ifMatch?: string[]
  /** Who asks (from the verified token) and the request's id, for the history. */
  actor: { sub?: string, clientId?: string }
  requestId: string
}

export interface ChangeResult extends Target {
  /** False when an If-Match names no current version: nothing was changed. */
  preconditionMet: boolean
  /** Requested ids that are not permissions of the resource, in request order, each once. */
  unknownPermissionIds: string[]
  /** Grants removed or added. */
  changed: number
  /** The history row written for the change; undefined when nothing changed. */
  changeId?: string
}

/**
 * One change of a client's grants on a resource, all or nothing: one statement that changes only
 * when the client is authorized, the precondition holds and every id is a permission of the
 * resource, in an explicit transaction with a server-side statement timeout. COMMIT is sent only
 * after the statement's answer, so a client that gave up waiting never leaves a change committed
 * behind it.
 */
async function changeGrants (pool: pg.Pool, name: string, text: string, input: ChangeInput, options: StatementOptions): Promise<ChangeResult> {
  const client = await pool.connect()
  try {
    // One round trip; the timeout is transaction-scoped, so nothing leaks to the next user of a
    // pooled server connection.
    const timeout = Math.trunc(options.statementTimeoutMs ?? STATEMENT_TIMEOUT_MS)
    await client.query(`BEGIN; SET LOCAL statement_timeout = ${timeout}`)
    const { rows: [row] } = await client.query<TargetRow & { precondition_met: boolean, unknown_permission_ids: string[], changed: string, change_id: string | null }>(
      statement(name, text, [
        input.resourceId, input.clientId, input.permissionIds, input.ifMatch ?? null,
        input.actor.sub ?? null, input.actor.clientId ?? null, input.requestId
      ], options))
    await client.query('COMMIT')
    client.release()
    return {
      ...targetOf(row),
      preconditionMet: row.precondition_met,
      unknownPermissionIds: row.unknown_permission_ids,
      changed: Number(row.changed),
      ...(row.change_id === null ? {} : { changeId: row.change_id })
    }
  } catch (error) {
    // A connection whose transaction failed is not reused: it may be in any state.
    client.release(error as Error)
    throw error
  }
}

/** Removes grants from a client's authorization on a resource (ids not granted are no-ops). */
export function unauthorizePermissions (pool: pg.Pool, input: ChangeInput, options: StatementOptions = {}): Promise<ChangeResult> {
  return changeGrants(pool, 'unauthorize', unauthorizeSql, input, options)
}

/** Grants permissions within a client's existing authorization on a resource (ids held are no-ops). */
export function grantPermissions (pool: pg.Pool, input: ChangeInput, options: StatementOptions = {}): Promise<ChangeResult> {
  return changeGrants(pool, 'grant', grantSql, input, options)
}

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

export async function listPermissionChanges (db: Queryable, input: ChangeHistoryInput, options: StatementOptions = {}): Promise<ChangeHistoryPage> {
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

// Seeding (db/seed.ts): upserts, so loading the same document twice changes nothing.

export async function upsertResource (db: Queryable, resource: { id: string, name?: string }): Promise<void> {
  await db.query(`
    INSERT INTO resources (id, name) VALUES ($1, $2)
    ON CONFLICT (id) DO UPDATE SET name = coalesce(EXCLUDED.name, resources.name)`,
  [resource.id, resource.name ?? null])
}

export async function upsertClient (db: Queryable, client: { id: string, name?: string }): Promise<void> {
  await db.query(`
    INSERT INTO clients (id, name) VALUES ($1, $2)
    ON CONFLICT (id) DO UPDATE SET name = coalesce(EXCLUDED.name, clients.name)`,
  [client.id, client.name ?? null])
}

/** False when the id already belongs to a permission of another resource. */
export async function upsertPermission (db: Queryable, permission: { id: string, resource_id: string, name: string, description?: string }): Promise<boolean> {
  const { rowCount } = await db.query(`
    INSERT INTO permissions (id, resource_id, name, description) VALUES ($1, $2, $3, $4)
    ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, description = EXCLUDED.description
    WHERE permissions.resource_id = EXCLUDED.resource_id`,
  [permission.id, permission.resource_id, permission.name, permission.description ?? null])
  return rowCount === 1
}

/** Authorizes the client on the resource (if it was not) and grants the permissions; returns how many grants are new. */
export async function authorizeClient (db: Queryable, resourceId: string, clientId: string, permissionIds: string[]): Promise<number> {
  await db.query(
    'INSERT INTO authorizations (resource_id, client_id) VALUES ($1, $2) ON CONFLICT DO NOTHING', [resourceId, clientId])
  const { rowCount } = await db.query(`
    INSERT INTO grants (resource_id, client_id, permission_id)
    SELECT $1, $2, permission_id FROM unnest($3::text[]) AS permission_id
    ON CONFLICT DO NOTHING`,
  [resourceId, clientId, permissionIds])
  return rowCount ?? 0
}

/** Answers when the database can run a query. */
export async function ping (db: Queryable): Promise<void> {
  await db.query('SELECT 1')
}
