// Seeding (db/seed.ts): upserts, so loading the same document twice changes nothing.
import type { Queryable } from './statement.js'

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

/** Who a seeding's changes are recorded as in the change history, and the request id they carry. */
export interface SeedActor { sub: string, requestId: string }

/**
 * Takes the change lock of each authorization (the advisory lock db/queries/change.ts takes before a
 * change), in one order so two seedings cannot deadlock. Called before the seeding writes anything:
 * its transaction takes its id (and so its history ids, migration 0007) only once it holds them, so
 * a change the API made before it comes before it in the history too.
 */
export async function lockAuthorizations (db: Queryable, authorizations: Array<{ resource_id: string, client_id: string }>): Promise<void> {
  await db.query(`
    SELECT pg_advisory_xact_lock(r, c)
    FROM (
      SELECT DISTINCT hashtext(resource_id) AS r, hashtext(client_id) AS c
      FROM unnest($1::text[], $2::text[]) AS a (resource_id, client_id)
      ORDER BY 1, 2
      OFFSET 0
    ) keys`,
  [authorizations.map((a) => a.resource_id), authorizations.map((a) => a.client_id)])
}

// The grants added ($3 the permission ids), and, when an actor is given ($4 sub, $5 request id), one
// `granted` row of history per 500 of them (the history's bound per row), in request order, each once.
const authorizeSql = `
  WITH added AS (
    INSERT INTO grants (resource_id, client_id, permission_id)
    SELECT $1, $2, permission_id FROM unnest($3::text[]) AS permission_id
    ON CONFLICT DO NOTHING
    RETURNING permission_id
  ), ordered AS (
    SELECT id, row_number() OVER (ORDER BY min(position)) AS n
    FROM unnest($3::text[]) WITH ORDINALITY AS requested (id, position)
    WHERE $4::text IS NOT NULL AND id IN (SELECT permission_id FROM added)
    GROUP BY id
  ), recorded AS (
    INSERT INTO permission_changes (resource_id, client_id, action, permission_ids, actor_sub, request_id)
    SELECT $1, $2, 'granted', array_agg(id ORDER BY n), $4, $5
    FROM ordered
    GROUP BY (n - 1) / 500
    ORDER BY (n - 1) / 500
  )
  SELECT count(*)::int AS added FROM added`

/**
 * Authorizes the client on the resource (if it was not) and grants the permissions; returns how many
 * grants are new. With an actor, the new grants are recorded in the change history as granted by it.
 */
export async function authorizeClient (db: Queryable, resourceId: string, clientId: string, permissionIds: string[], actor?: SeedActor): Promise<number> {
  await db.query(
    'INSERT INTO authorizations (resource_id, client_id) VALUES ($1, $2) ON CONFLICT DO NOTHING', [resourceId, clientId])
  const { rows: [{ added }] } = await db.query<{ added: number }>(authorizeSql,
    [resourceId, clientId, permissionIds, actor?.sub ?? null, actor?.requestId ?? null])
  return added
}
