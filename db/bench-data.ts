// The benchmark's data, generated inside PostgreSQL with generate_series (never row by row from
// Node): one resource with 10^5 permissions, a client holding 1,000 of them (the page-0 target), a
// big client holding up to 10^5 (the deepest-page target), and filler clients holding 1,000 each
// until the grants table has the requested size. Growing to a larger scale only adds rows.
import type pg from 'pg'

export const RESOURCE_ID = 'bench-api'
export const SMALL_CLIENT = 'small-client'
export const BIG_CLIENT = 'big-client'
export const PERMISSIONS = 100_000
export const SMALL_GRANTS = 1_000
const FILLER_GRANTS = 1_000

export interface Scale { grants: number, bigGrants: number, fillerClients: number }

/** How the grants of one scale are split between the clients. */
export function scaleOf (grants: number): Scale {
  const bigGrants = Math.min(PERMISSIONS, grants - SMALL_GRANTS)
  const fillerClients = Math.floor((grants - SMALL_GRANTS - bigGrants) / FILLER_GRANTS)
  return { grants: SMALL_GRANTS + bigGrants + fillerClients * FILLER_GRANTS, bigGrants, fillerClients }
}

// Permission i: an id in id order, a name in another order (so sorting by name means something),
// and a description that is missing for every tenth.
const permissionId = (i: string) => `'perm-' || lpad((${i})::text, 6, '0')`
const permissionName = (i: string) => `'read:' || substr(md5((${i})::text), 1, 16)`
const permissionDescription = (i: string) => `CASE WHEN (${i}) % 10 = 0 THEN NULL ELSE 'Permission number ' || (${i}) END`

// A grant is given its permission's name and description, as the service's grant gives them: the
// database checks them once per statement (migration 0008) and copies only a text that differs.
async function grantRange (db: pg.Pool, clientId: string, from: number, to: number, stride = 1, start = 0): Promise<void> {
  await db.query(`
    INSERT INTO grants (resource_id, client_id, permission_id, permission_name, permission_description)
    SELECT $1, $2, ${permissionId('x.i')}, ${permissionName('x.i')}, ${permissionDescription('x.i')}
    FROM (SELECT ($5::bigint + j * $6::bigint) % ${PERMISSIONS} AS i FROM generate_series($3::bigint, $4::bigint - 1) AS j) x
    ON CONFLICT DO NOTHING`, [RESOURCE_ID, clientId, from, to, start, stride])
}

/** Filler client c holds permissions (c·7919 + j) mod 10^5 for j < 1,000. */
export function fillerPermissionId (client: number, j: number): string {
  return `perm-${String((client * 7919 + j) % PERMISSIONS).padStart(6, '0')}`
}

/** Grants filler clients first…last all their permissions (again: grants they hold are kept). */
export async function grantFillers (db: pg.Pool, first: number, last: number): Promise<void> {
  for (let client = first; client <= last; client += 100) {
    // 100 clients (10^5 grants) per statement: one transaction per batch keeps the WAL in check.
    await db.query(`
      INSERT INTO grants (resource_id, client_id, permission_id, permission_name, permission_description)
      SELECT $1, 'filler-' || c, ${permissionId('(c * 7919 + j) % ' + PERMISSIONS)}, ${permissionName('(c * 7919 + j) % ' + PERMISSIONS)},
        ${permissionDescription('(c * 7919 + j) % ' + PERMISSIONS)}
      FROM generate_series($2::int, $3::int) AS c, generate_series(0, ${FILLER_GRANTS - 1}) AS j
      ON CONFLICT DO NOTHING`, [RESOURCE_ID, client, Math.min(client + 99, last)])
  }
}

/** Grants each reader holds (loadReaders): a page of 50, as page 0 reads. */
export const READER_GRANTS = 50

/**
 * `count` reader clients (reader-1…), each authorized on the bench's resource and holding
 * READER_GRANTS of its permissions, (c · 7919 + j) mod 10^5 as the fillers: as many pages that cost
 * what page 0 costs, for the page cache's scenario. Needs loadScale's permissions; idempotent.
 */
export async function loadReaders (db: pg.Pool, count: number): Promise<string[]> {
  const ids = Array.from({ length: count }, (_, i) => `reader-${i + 1}`)
  await db.query('INSERT INTO clients (id) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING', [ids])
  await db.query('INSERT INTO authorizations (resource_id, client_id) SELECT $1, unnest($2::text[]) ON CONFLICT DO NOTHING', [RESOURCE_ID, ids])
  await db.query(`
    INSERT INTO grants (resource_id, client_id, permission_id, permission_name, permission_description)
    SELECT $1, 'reader-' || c, ${permissionId('(c * 7919 + j) % ' + PERMISSIONS)}, ${permissionName('(c * 7919 + j) % ' + PERMISSIONS)},
      ${permissionDescription('(c * 7919 + j) % ' + PERMISSIONS)}
    FROM generate_series(1, $2::int) AS c, generate_series(0, ${READER_GRANTS - 1}) AS j
    ON CONFLICT DO NOTHING`, [RESOURCE_ID, count])
  await db.query('VACUUM (ANALYZE) grants')
  await db.query('VACUUM (ANALYZE) authorizations')
  return ids
}

/** Brings the database to `grants` grants (it may hold a smaller scale already). */
export async function loadScale (db: pg.Pool, grants: number): Promise<Scale> {
  const scale = scaleOf(grants)
  await db.query("INSERT INTO resources (id, name) VALUES ($1, 'Benchmark API') ON CONFLICT DO NOTHING", [RESOURCE_ID])
  await db.query(`
    INSERT INTO permissions (id, resource_id, name, description)
    SELECT ${permissionId('i')}, $1, ${permissionName('i')}, ${permissionDescription('i')}
    FROM generate_series(0, ${PERMISSIONS - 1}) AS i
    ON CONFLICT DO NOTHING`, [RESOURCE_ID])
  await db.query(`
    INSERT INTO clients (id)
    SELECT unnest(ARRAY[$1, $2]) UNION ALL SELECT 'filler-' || c FROM generate_series(1, $3::int) AS c
    ON CONFLICT DO NOTHING`, [SMALL_CLIENT, BIG_CLIENT, scale.fillerClients])
  await db.query(`
    INSERT INTO authorizations (resource_id, client_id)
    SELECT $1, id FROM clients WHERE id IN ($2, $3) OR id LIKE 'filler-%'
    ON CONFLICT DO NOTHING`, [RESOURCE_ID, SMALL_CLIENT, BIG_CLIENT])
  // The small client's permissions are spread over the resource, not its first 1,000.
  await grantRange(db, SMALL_CLIENT, 0, SMALL_GRANTS, 97)
  await grantRange(db, BIG_CLIENT, 0, scale.bigGrants)
  const { rows: [{ have }] } = await db.query<{ have: number }>(
    "SELECT count(*)::int AS have FROM authorizations WHERE client_id LIKE 'filler-%' AND grant_count > 0")
  await grantFillers(db, have + 1, scale.fillerClients)
  await db.query('VACUUM (ANALYZE) grants')
  await db.query('VACUUM (ANALYZE) permissions')
  await db.query('VACUUM (ANALYZE) authorizations')
  return scale
}
