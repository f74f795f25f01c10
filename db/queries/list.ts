// The list: one page of a client's grants on a resource, its total and version, in one statement.
import { positionColumn } from '../lsn.js'
import type { SortDirection, SortKey, SortProperty } from './sort.js'
import { type Queryable, type StatementOptions, type Target, type TargetRow, statement, takeRows, targetOf } from './statement.js'

export interface ListGrantedPermissionsInput {
  resourceId: string
  clientId: string
  limit: number
  /** A page number: `limit * page` rows are skipped, multiplied as bigint in SQL. */
  page: number
  sort: SortKey[]
  /**
   * Versions whose page the caller has already (a tag of If-None-Match, a page kept by the version):
   * when the authorization is at one of them, PostgreSQL does not build the page.
   */
  knownVersions?: string[]
}

export interface PermissionPage extends Target {
  total: number
  /**
   * The page as the API shows it, a JSON array of the spec's Permission, made by PostgreSQL: parsed
   * into objects row by row and serialized again, 50 rows cost the service more than the rest of
   * the request's layers together (BENCH_ONLY=ladder); they are written out as read. Its reader
   * takes it out of this object, as the row is taken out of pg's result (`takeRows` says why).
   * Undefined when the version is one of the input's knownVersions.
   */
  permissionsJson?: string
  /** The authorization's version (migration 0004), behind the ETag; undefined when not authorized. */
  version?: string
  /** The WAL position of the state read, when asked for (StatementOptions.position). */
  position?: string
}

// The only text that reaches ORDER BY: columns from these maps and directions from a closed set.
// A grant carries its permission's name (migration 0002) and description (0003): no order joins.
const grantColumns: Record<SortProperty, string> = { id: 'permission_id', name: 'permission_name', description: 'permission_description' }
const pageColumns: Record<SortProperty, string> = { id: 'page.id', name: 'page.name', description: 'page.description' }
const directions: Record<SortDirection, string> = {
  // Stryker disable next-line StringLiteral: ascending is ORDER BY's default, so an empty direction orders the same
  asc: 'ASC',
  desc: 'DESC'
}
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

/**
 * The order a sort reads the list in, as text (`name.asc`, `description.desc,id.asc`): the same for
 * every `sort_by` that reads the same pages (`name`, `name.asc,id.desc`, `name,name.desc`).
 */
export function orderOf (sort: SortKey[]): string {
  return decidingKeys(sort).map(({ property, direction }) => `${property}.${direction}`).join(',')
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
 * The list statement for one sort order; $1 resource id, $2 client id, $3 limit, $4 page, $5 the
 * versions whose page is not wanted (bigint[]: the page is NULL when the authorization is at one).
 * The total comes from the authorization's grant count, and a page in the back half of the list is
 * read backwards from the end: either way the statement reads about one page of rows, wherever the
 * page is. Page and total come from one snapshot, in one row: the page is its JSON text.
 */
export function listGrantedPermissionsSql (sort: SortKey[], position = false): string {
  const keys = decidingKeys(sort)
  const backwards = keys.map(({ property, direction }) => ({ property, direction: reversed[direction] }))
  return `
    WITH t AS MATERIALIZED (
      SELECT
        -- NULL when the client is not authorized on the resource.
        (SELECT grant_count FROM authorizations WHERE resource_id = $1 AND client_id = $2) AS total,
        (SELECT version FROM authorizations WHERE resource_id = $1 AND client_id = $2) AS version,
        -- The page number times the limit, as bigint: up to 5·10^16 rows, past JavaScript's integers.
        $3::bigint * $4::bigint AS skip${position ? ', ' + positionColumn : ''}
    )
    SELECT
      -- An authorization implies both exist (foreign keys): they are looked up only for a 404.
      CASE WHEN t.total IS NULL THEN EXISTS (SELECT 1 FROM resources WHERE id = $1) ELSE true END AS resource_exists,
      CASE WHEN t.total IS NULL THEN EXISTS (SELECT 1 FROM clients WHERE id = $2) ELSE true END AS client_exists,
      t.total IS NOT NULL AS authorized, coalesce(t.total, 0) AS total, t.version,${position ? ' t.position,' : ''}
      -- A page the caller has is not built: CASE runs the subquery only when it is wanted.
      CASE WHEN t.version = ANY ($5::bigint[]) THEN NULL ELSE (
        -- Compact, in the spec's order, a missing description left out (json_build_object would
        -- put spaces around every colon); to_json quotes and escapes each text as JSON.stringify does.
        -- Joined with ||, not concat(), which looks up each argument's output function on every
        -- call: a page of 500 costs the database about a quarter less (pgbench, generic plans).
        SELECT coalesce('[' || string_agg(
            '{"id":' || to_json(page.id)::text || ',"name":' || to_json(page.name)::text ||
            coalesce(',"description":' || to_json(page.description)::text, '') || '}',
            ',' ORDER BY ${orderBy(keys, pageColumns)}) || ']', '[]')
        FROM (
          (${pageOf(keys, 't.skip * 2 < t.total', '$3::bigint', '$3::bigint * $4::bigint')})
          UNION ALL
          (${pageOf(backwards, 't.skip * 2 >= t.total',
            'greatest(least($3::bigint, t.total - t.skip), 0)', 'greatest(t.total - t.skip - $3::bigint, 0)')})
        ) page
      ) END AS page
    FROM t`
}

// One statement per order that decides differently, built once: a bounded set (sort_by has three
// properties, each kept once).
const listStatements = new Map<string, { name: string, text: string }>()

function listStatement (sort: SortKey[], position: boolean): { name: string, text: string } {
  const name = `list${position ? '+position' : ''} ${orderOf(sort)}`
  let known = listStatements.get(name)
  if (!known) {
    known = { name, text: listGrantedPermissionsSql(sort, position) }
    listStatements.set(name, known)
  }
  return known
}

/**
 * One page of the permissions granted to a client on a resource, the total across pages and the
 * target's existence, in one round trip and one row.
 */
export async function listGrantedPermissions (db: Queryable, input: ListGrantedPermissionsInput, options: StatementOptions): Promise<PermissionPage> {
  const { name, text } = listStatement(input.sort, options.position === true)
  const [row] = takeRows(await db.query<TargetRow & { total: string, version: string | null, position?: string, page: string | null }>(
    statement(name, text, [input.resourceId, input.clientId, input.limit, input.page, input.knownVersions ?? []], options)))
  return { ...targetOf(row), total: Number(row.total), permissionsJson: row.page ?? undefined, version: row.version ?? undefined, position: row.position }
}
