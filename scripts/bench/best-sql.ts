// The best statement for a list request, the bench's reference for the service's own: what pgbench
// measures as the database ceiling "DB (best SQL)", and what the ladder's minimal step runs.
import { parseSortBy } from '../../db/queries/sort.js'

export interface ListRequest {
  sortBy: string
  /** A page in the back half: the statement reads it from the end. */
  fromEnd?: boolean
}

/**
 * The best statement for the request: the page from the one index that serves its order (read from
 * the nearer end, as this statement knows where the page is), the total from the authorization.
 * $1 resource id, $2 client id, $3 limit, $4 page.
 */
export function idealListSql (request: ListRequest): string {
  const keys = parseSortBy(request.sortBy)
  // Up to the first unique key (id, or name: unique per resource), else the id breaks ties.
  const unique = keys.findIndex(({ property }) => property !== 'description')
  const deciding = unique === -1 ? [...keys, { property: 'id' as const, direction: 'asc' as const }] : keys.slice(0, unique + 1)
  const column = { id: 'permission_id', name: 'permission_name', description: 'permission_description' }
  const flip = (direction: string) => request.fromEnd ? (direction === 'asc' ? 'DESC' : 'ASC') : direction.toUpperCase()
  const order = deciding.map(({ property, direction }) => `${column[property]} ${flip(direction)}`).join(', ')
  return `SELECT a.grant_count, g.permission_id, g.permission_name, g.permission_description
    FROM authorizations a
    LEFT JOIN LATERAL (SELECT permission_id, permission_name, permission_description FROM grants
      WHERE resource_id = $1 AND client_id = $2 ORDER BY ${order}
      LIMIT ${request.fromEnd ? 'a.grant_count - $3::bigint * $4::bigint' : '$3 OFFSET $3::bigint * $4::bigint'}) g ON true
    WHERE a.resource_id = $1 AND a.client_id = $2`
}
