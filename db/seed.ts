// Loads resources, clients, permissions and authorizations from a JSON document in one
// transaction. Re-loading the same document changes nothing; a bad one loads nothing and the
// error names the offending entry.
import { Ajv } from 'ajv'
import type pg from 'pg'

export interface SeedData {
  resources?: Array<{ id: string, name?: string }>
  clients?: Array<{ id: string, name?: string }>
  permissions?: Array<{ id: string, resource_id: string, name: string, description?: string }>
  authorizations?: Array<{ resource_id: string, client_id: string, permission_ids?: string[] }>
}

const id = { type: 'string', minLength: 1, maxLength: 255 }
const named = {
  type: 'object',
  additionalProperties: false,
  required: ['id'],
  properties: { id, name: { type: 'string' } }
}
const seedSchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    resources: { type: 'array', items: named },
    clients: { type: 'array', items: named },
    permissions: {
      type: 'array',
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['id', 'resource_id', 'name'],
        properties: {
          id,
          resource_id: id,
          name: { type: 'string', maxLength: 255, pattern: '^[^\\s:]+:[^\\s:]+$' },
          description: { type: 'string' }
        }
      }
    },
    authorizations: {
      type: 'array',
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['resource_id', 'client_id'],
        properties: { resource_id: id, client_id: id, permission_ids: { type: 'array', items: id } }
      }
    }
  }
}

const validateSeed = new Ajv({ allErrors: true }).compile<SeedData>(seedSchema)

export class SeedError extends Error {}

/** Throws a SeedError listing every way `data` does not fit the seed format. */
export function assertSeedData (data: unknown): asserts data is SeedData {
  if (validateSeed(data)) return
  const problems = (validateSeed.errors ?? []).map((error) => `${error.instancePath || '(document)'} ${error.message}`)
  throw new SeedError(`The seed file is not valid:\n  ${problems.join('\n  ')}`)
}

/** What the database refused, said in terms of the seed document. */
function explain (where: string, error: unknown): SeedError {
  const { code, detail, message } = error as { code?: string, detail?: string, message: string }
  const reason = detail ?? message
  if (code === '23503') return new SeedError(`${where}: refers to something that does not exist (${reason})`)
  if (code === '23505') return new SeedError(`${where}: conflicts with an existing row (${reason})`)
  if (code === '23514') return new SeedError(`${where}: breaks a rule of the schema (${message})`)
  return error as Error
}

export interface SeedCounts { resources: number, clients: number, permissions: number, authorizations: number, grants: number }

export async function seedDatabase (pool: pg.Pool, data: SeedData): Promise<SeedCounts> {
  const counts: SeedCounts = { resources: 0, clients: 0, permissions: 0, authorizations: 0, grants: 0 }
  const client = await pool.connect()
  try {
    await client.query('BEGIN')
    const run = async (where: string, sql: string, values: unknown[]) => {
      try {
        return await client.query(sql, values)
      } catch (error) {
        throw explain(where, error)
      }
    }
    for (const [index, resource] of (data.resources ?? []).entries()) {
      await run(`resources[${index}] "${resource.id}"`, `
        INSERT INTO resources (id, name) VALUES ($1, $2)
        ON CONFLICT (id) DO UPDATE SET name = coalesce(EXCLUDED.name, resources.name)`,
      [resource.id, resource.name ?? null])
      counts.resources++
    }
    for (const [index, seedClient] of (data.clients ?? []).entries()) {
      await run(`clients[${index}] "${seedClient.id}"`, `
        INSERT INTO clients (id, name) VALUES ($1, $2)
        ON CONFLICT (id) DO UPDATE SET name = coalesce(EXCLUDED.name, clients.name)`,
      [seedClient.id, seedClient.name ?? null])
      counts.clients++
    }
    for (const [index, permission] of (data.permissions ?? []).entries()) {
      const where = `permissions[${index}] "${permission.id}"`
      const { rowCount } = await run(where, `
        INSERT INTO permissions (id, resource_id, name, description) VALUES ($1, $2, $3, $4)
        ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, description = EXCLUDED.description
        WHERE permissions.resource_id = EXCLUDED.resource_id`,
      [permission.id, permission.resource_id, permission.name, permission.description ?? null])
      if (rowCount === 0) throw new SeedError(`${where}: the id already belongs to a permission of another resource`)
      counts.permissions++
    }
    for (const [index, authorization] of (data.authorizations ?? []).entries()) {
      const where = `authorizations[${index}] (resource "${authorization.resource_id}", client "${authorization.client_id}")`
      const ids = [authorization.resource_id, authorization.client_id]
      await run(where, 'INSERT INTO authorizations (resource_id, client_id) VALUES ($1, $2) ON CONFLICT DO NOTHING', ids)
      const { rowCount } = await run(where, `
        INSERT INTO grants (resource_id, client_id, permission_id)
        SELECT $1, $2, permission_id FROM unnest($3::text[]) AS permission_id
        ON CONFLICT DO NOTHING`,
      [...ids, authorization.permission_ids ?? []])
      counts.authorizations++
      counts.grants += rowCount ?? 0
    }
    await client.query('COMMIT')
    return counts
  } catch (error) {
    await client.query('ROLLBACK')
    throw error
  } finally {
    client.release()
  }
}
