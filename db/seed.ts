// Loads resources, clients, permissions and authorizations from a JSON document in one
// transaction. Re-loading the same document changes nothing; a bad one loads nothing and the
// error names the offending entry.
//
// The demo data and the change history agree: `npm start` seeds db/demo-data.json at every start,
// which grants again what a user unauthorized since, and it records those grants in the history as
// `granted` by the actor "demo-seed" (one request id per start), exactly the ids it added. The
// history is append-only (migration 0006), so resetting it with the demo data is not an option the
// database leaves, and a record says what happened: "unauthorized by you, granted again by the demo
// seed at the next start". A seeding without `recordAs` (db:seed, the tests' fixtures) records nothing.
import { Ajv, type ValidateFunction } from 'ajv'
import type pg from 'pg'
import { authorizeClient, lockAuthorizations, type SeedActor, upsertClient, upsertPermission, upsertResource } from './queries/seeding.js'

/** The actor `npm start` records its seeding of the demo data as (src/server.ts). */
export const DEMO_SEED_ACTOR = 'demo-seed'

export interface SeedData {
  resources?: Array<{ id: string, name?: string }>
  clients?: Array<{ id: string, name?: string }>
  permissions?: Array<{ id: string, resource_id: string, name: string, description?: string }>
  authorizations?: Array<{ resource_id: string, client_id: string, permission_ids?: string[] }>
}

// As the spec's ids: no NUL (PostgreSQL text cannot hold it), no lone surrogate (not Unicode).
const text = { type: 'string', pattern: '^[^\\u0000\\uD800-\\uDFFF]*$' }
// As the spec's PermissionId; a resource or client id (its EntityId) is also a path segment of
// the API, where `.` and `..` cannot be.
const id = { type: 'string', minLength: 1, maxLength: 255, pattern: '^[^\\u0000\\uD800-\\uDFFF]+$' }
const segmentId = { ...id, pattern: '^(?!\\.\\.?$)[^\\u0000\\uD800-\\uDFFF]+$' }
const named = {
  type: 'object',
  additionalProperties: false,
  required: ['id'],
  properties: { id: segmentId, name: text }
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
          resource_id: segmentId,
          name: { type: 'string', maxLength: 255, pattern: '^[^\\s:\\u0000\\uD800-\\uDFFF]+:[^\\s:\\u0000\\uD800-\\uDFFF]+$' },
          // As the spec's bound (and the database's CHECK): descriptions go into index entries.
          description: { ...text, maxLength: 255 }
        }
      }
    },
    authorizations: {
      type: 'array',
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['resource_id', 'client_id'],
        properties: { resource_id: segmentId, client_id: segmentId, permission_ids: { type: 'array', items: id } }
      }
    }
  }
}

let validateSeed: ValidateFunction<SeedData> | undefined

export class SeedError extends Error {}

/** Throws a SeedError listing every way `data` does not fit the seed format, an id (or a resource's permission name) listed twice included. */
export function assertSeedData (data: unknown): asserts data is SeedData {
  // Compiled on first use: the server and most tests import this module only to seed, and the
  // compilation cost each of their processes about 50 ms of CPU.
  validateSeed ??= new Ajv({ allErrors: true, unicodeRegExp: true }).compile<SeedData>(seedSchema)
  if (validateSeed(data)) {
    // An id listed twice: the last entry would silently win over the first, and both be counted.
    const repeated: string[] = []
    for (const list of ['resources', 'clients', 'permissions'] as const) {
      const first = new Map<string, number>()
      for (const [index, { id }] of (data[list] ?? []).entries()) {
        const earlier = first.get(id)
        if (earlier === undefined) first.set(id, index)
        else repeated.push(`${list}[${index}] "${id}": the id is also ${list}[${earlier}]'s`)
      }
    }
    // A name listed twice for one resource (unique within it, as the spec says): the database
    // refused the second as conflicting with "an existing row", the file's own, after db:seed had
    // migrated the database for a file that could never load.
    // An entry whose id is a repeat is named above already.
    const named = new Map<string, number>()
    const ids = new Set<string>()
    for (const [index, { id, resource_id: resourceId, name }] of (data.permissions ?? []).entries()) {
      if (ids.has(id)) continue
      ids.add(id)
      const key = JSON.stringify([resourceId, name])
      const earlier = named.get(key)
      if (earlier === undefined) named.set(key, index)
      else repeated.push(`permissions[${index}] "${id}": the name "${name}" is also permissions[${earlier}]'s on resource "${resourceId}"`)
    }
    if (repeated.length === 0) return
    throw new SeedError(`The seed file is not valid:\n  ${repeated.join('\n  ')}`)
  }
  const problems = (validateSeed.errors ?? []).map(({ instancePath, message, params }) =>
    `${instancePath || '(document)'} ${message}${params.additionalProperty ? `: "${params.additionalProperty}"` : ''}`)
  throw new SeedError(`The seed file is not valid:\n  ${problems.join('\n  ')}`)
}

/** What the database refused, said in terms of the seed document. */
function explain (where: string, error: unknown): Error {
  const { code, detail, message } = error as { code?: string, detail?: string, message: string }
  const reason = detail ?? message
  if (code === '23503') return new SeedError(`${where}: refers to something that does not exist (${reason})`)
  if (code === '23505') return new SeedError(`${where}: conflicts with an existing row (${reason})`)
  if (code === '23514') return new SeedError(`${where}: breaks a rule of the schema (${message})`)
  if (code === '22021') return new SeedError(`${where}: holds text PostgreSQL cannot store (${message})`)
  // program_limit_exceeded: an index entry over its size (a third of a page, about 2.7 kB). The ids,
  // name and description of a grant share entries: 255 characters each are up to 1,020 bytes.
  if (code === '54000') return new SeedError(`${where}: its ids, name and description are too long together for the database's indexes (${message}); shorten them`)
  return error as Error
}

export interface SeedCounts { resources: number, clients: number, permissions: number, authorizations: number, grants: number }

export interface SeedOptions {
  /** Record each grant the document adds in the change history, as granted by this actor. */
  recordAs?: SeedActor
}

export async function seedDatabase (pool: pg.Pool, data: SeedData, { recordAs }: SeedOptions = {}): Promise<SeedCounts> {
  const counts: SeedCounts = { resources: 0, clients: 0, permissions: 0, authorizations: 0, grants: 0 }
  const client = await pool.connect()
  // A connection lost while the seed holds it is also an 'error' event of the client (pg emits one
  // when the server closes it unasked, even after failing the query in flight), which nothing else
  // listens to while it is checked out: unheard, it would end the process. The query's own error
  // says what happened.
  const lost = (): void => {}
  client.on('error', lost)
  // Set when the ROLLBACK fails: the connection is in no known state, and is destroyed, not reused.
  let broken: Error | undefined
  // Runs one step, saying which entry of the document the database refused.
  const step = async <T>(where: string, work: () => Promise<T>): Promise<T> => {
    try {
      return await work()
    } catch (error) {
      throw explain(where, error)
    }
  }
  try {
    await client.query('BEGIN')
    // Before any write: the history's order of each authorization's changes is the order they
    // were applied in (db/queries/seeding.ts lockAuthorizations).
    if (recordAs) await lockAuthorizations(client, data.authorizations ?? [])
    for (const [index, resource] of (data.resources ?? []).entries()) {
      await step(`resources[${index}] "${resource.id}"`, () => upsertResource(client, resource))
      counts.resources++
    }
    for (const [index, seedClient] of (data.clients ?? []).entries()) {
      await step(`clients[${index}] "${seedClient.id}"`, () => upsertClient(client, seedClient))
      counts.clients++
    }
    for (const [index, permission] of (data.permissions ?? []).entries()) {
      const where = `permissions[${index}] "${permission.id}"`
      if (!await step(where, () => upsertPermission(client, permission))) {
        throw new SeedError(`${where}: the id already belongs to a permission of another resource`)
      }
      counts.permissions++
    }
    // An authorization listed twice is one, its grants merged: counted once.
    const authorizations = new Set<string>()
    for (const [index, { resource_id: resourceId, client_id: clientId, permission_ids: ids = [] }] of (data.authorizations ?? []).entries()) {
      const where = `authorizations[${index}] (resource "${resourceId}", client "${clientId}")`
      counts.grants += await step(where, () => authorizeClient(client, resourceId, clientId, ids, recordAs))
      authorizations.add(JSON.stringify([resourceId, clientId]))
    }
    counts.authorizations = authorizations.size
    await client.query('COMMIT')
    return counts
  } catch (error) {
    // The original error is the one the caller sees: a ROLLBACK that fails too (the connection
    // lost) would otherwise replace it with its own "Connection terminated".
    await client.query('ROLLBACK').catch((rollbackError: Error) => { broken = rollbackError })
    throw error
  } finally {
    client.removeListener('error', lost)
    client.release(broken)
  }
}
