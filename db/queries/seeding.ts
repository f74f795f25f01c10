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
