// db/seed.ts: what a seed document loads, that loading it again changes nothing, and the many ways
// a document is refused (assertSeedData, then the database through seedDatabase), each named and
// with nothing of it loaded. `npm run db:seed` itself, in a process: test/scripts/db-commands.test.ts.
import pg from 'pg'
import t, { type Test } from 'tap'
import { migrateDatabase } from '../../db/migrate.js'
import { assertSeedData, SeedError, type SeedData, seedDatabase } from '../../db/seed.js'
import { migrationsDir } from '../../src/project-root.js'
import { createTestDatabase, lockWaiter, rowCounts, type RowCounts, serviceTables } from '../support/database.js'
import { seedingFixture } from '../support/fixtures.js'
const validCounts: RowCounts = { resources: 2, clients: 2, permissions: 3, authorizations: 3, grants: 3 }

/** A pool on a migrated database of the test's own, closed when the test ends. */
async function migratedPool (t: Test): Promise<{ url: string, pool: pg.Pool }> {
  const url = await createTestDatabase(t)
  const pool = new pg.Pool({ connectionString: url, max: 1 })
  pool.on('error', () => {}) // the database is dropped with FORCE at teardown
  t.teardown(() => pool.end())
  await migrateDatabase(pool, migrationsDir)
  return { url, pool }
}

/** As db:seed loads a parsed file: checked first, then seeded in one transaction. The SeedError it refuses with, if any. */
async function refusal (pool: pg.Pool, document: unknown): Promise<SeedError | undefined> {
  try {
    assertSeedData(document)
    await seedDatabase(pool, document)
  } catch (error) {
    if (error instanceof SeedError) return error
    throw error
  }
  return undefined
}

t.test('seeding again with the same document succeeds and changes nothing', async (t) => {
  const { url, pool } = await migratedPool(t)
  t.equal(await refusal(pool, seedingFixture()), undefined)
  const snapshot = async () => {
    const result: Record<string, unknown[]> = {}
    for (const table of [...serviceTables, 'migrations']) result[table] = (await pool.query(`SELECT * FROM ${table} AS row ORDER BY row::text`)).rows
    return result
  }
  const before = await snapshot()
  for (const attempt of [1, 2]) {
    await migrateDatabase(pool, migrationsDir)
    t.equal(await refusal(pool, seedingFixture()), undefined, `run ${attempt + 1}`)
    t.same(await rowCounts(url), validCounts)
  }
  t.same(await snapshot(), before, 'every row is as it was, names and descriptions included')
})

t.test('seeding again with new descriptions: the grants carry them, a description at the bound included', async (t) => {
  const { pool } = await migratedPool(t)
  await seedDatabase(pool, seedingFixture())
  const granted = async () => (await pool.query(`
    SELECT client_id, permission_id, permission_description FROM grants WHERE resource_id = 'orders-api' ORDER BY 1, 2`)).rows
  t.same(await granted(), [
    { client_id: 'billing-app', permission_id: 'p_create_orders', permission_description: null },
    { client_id: 'billing-app', permission_id: 'p_read_orders', permission_description: 'Read orders' }
  ])
  const changed = seedingFixture()
  changed.permissions![0].description = 'é'.repeat(255)
  changed.permissions![1].description = 'Create orders'
  changed.authorizations![2].permission_ids = ['p_read_orders']
  await seedDatabase(pool, changed)
  t.same(await granted(), [
    { client_id: 'billing-app', permission_id: 'p_create_orders', permission_description: 'Create orders' },
    { client_id: 'billing-app', permission_id: 'p_read_orders', permission_description: 'é'.repeat(255) },
    { client_id: 'warehouse-app', permission_id: 'p_read_orders', permission_description: 'é'.repeat(255) }
  ])
  delete changed.permissions![0].description
  await seedDatabase(pool, changed)
  t.same((await pool.query("SELECT DISTINCT permission_description FROM grants WHERE permission_id = 'p_read_orders'")).rows,
    [{ permission_description: null }], 'a description left out of the file is removed from the grants too')
})

t.test('a bad document is refused, says which entry is wrong and loads nothing of it', async (t) => {
  // A database already holding the valid document: a refused one must leave it exactly as is.
  const { url, pool } = await migratedPool(t)
  await seedDatabase(pool, seedingFixture())

  // Valid new rows first, so a partial load would show in the counts.
  const fresh = {
    resources: [{ id: 'new-api' }],
    clients: [{ id: 'new-app' }],
    permissions: [{ id: 'p_new', resource_id: 'new-api', name: 'read:new' }]
  }
  const newAuthorization = { resource_id: 'new-api', client_id: 'new-app', permission_ids: ['p_new'] }
  const cases: Array<{ name: string, content: string, says: string[] }> = [
    {
      name: 'a permission name with a space',
      content: JSON.stringify({ ...fresh, permissions: [...fresh.permissions, { id: 'p_bad', resource_id: 'new-api', name: 'bad name' }] }),
      says: ['/permissions/1/name must match pattern']
    },
    {
      name: 'several problems: each is named',
      content: JSON.stringify({
        ...fresh,
        clients: [{ id: 'c'.repeat(256) }],
        permissions: [{ id: 'p_bad', resource_id: 'new-api', name: 'read:' }],
        authorizations: [{ resource_id: 'new-api' }]
      }),
      says: ['/clients/0/id must NOT have more than 255 characters', '/permissions/0/name must match pattern', "/authorizations/0 must have required property 'client_id'"]
    },
    {
      name: 'ids . and .., which no URL can carry as a path segment',
      content: JSON.stringify({ ...fresh, resources: [...fresh.resources, { id: '..' }], clients: [...fresh.clients, { id: '.' }] }),
      says: ['/resources/1/id must match pattern', '/clients/1/id must match pattern']
    },
    {
      name: 'a description longer than 255 characters (the spec\'s bound)',
      content: JSON.stringify({ ...fresh, permissions: [{ ...fresh.permissions[0], description: 'd'.repeat(256) }] }),
      says: ['/permissions/0/description must NOT have more than 255 characters']
    },
    {
      name: 'a document that is not an object',
      content: '[]',
      says: ['(document) must be object']
    },
    {
      name: 'an unknown top-level key',
      content: JSON.stringify({ ...fresh, permision: [] }),
      says: ['(document) must NOT have additional properties']
    },
    {
      name: 'an authorization granting a permission of another resource (the last entry)',
      content: JSON.stringify({
        ...fresh,
        authorizations: [newAuthorization, { resource_id: 'new-api', client_id: 'billing-app', permission_ids: ['p_read_orders'] }]
      }),
      says: ['authorizations[1] (resource "new-api", client "billing-app"): refers to something that does not exist', 'p_read_orders']
    },
    {
      name: 'a permission of a resource that does not exist',
      content: JSON.stringify({ ...fresh, permissions: [...fresh.permissions, { id: 'p_ghost', resource_id: 'ghost-api', name: 'read:ghost' }] }),
      says: ['permissions[1] "p_ghost": refers to something that does not exist', 'ghost-api']
    },
    {
      name: 'an authorization of a client that does not exist',
      content: JSON.stringify({ ...fresh, authorizations: [newAuthorization, { resource_id: 'new-api', client_id: 'ghost-app' }] }),
      says: ['authorizations[1] (resource "new-api", client "ghost-app"): refers to something that does not exist']
    },
    {
      name: 'a permission name already used on the resource by another id',
      content: JSON.stringify({ ...fresh, permissions: [...fresh.permissions, { id: 'p_read_orders_2', resource_id: 'orders-api', name: 'read:orders' }] }),
      says: ['permissions[1] "p_read_orders_2": conflicts with an existing row']
    },
    {
      name: 'ids and texts PostgreSQL or Unicode cannot hold (NUL, a lone surrogate)',
      content: JSON.stringify({
        ...fresh,
        resources: [...fresh.resources, { id: 'nul\u0000api' }, { id: '\ud800' }],
        permissions: [...fresh.permissions, { id: 'p_nul', resource_id: 'new-api', name: 'read:a\u0000b', description: 'x\u0000' }]
      }),
      says: ['/resources/1/id must match pattern', '/resources/2/id must match pattern', '/permissions/1/name must match pattern', '/permissions/1/description must match pattern']
    },
    {
      // 255 characters of four bytes each, which compression cannot shrink, in each id: within
      // every bound of the format, over a grant's primary key entry (3,060 bytes).
      name: 'ids too long together for the grants\' indexes (four-byte characters)',
      content: JSON.stringify(((long) => ({
        ...fresh,
        resources: [{ id: long(1) }],
        clients: [{ id: long(2) }],
        permissions: [{ id: long(3), resource_id: long(1), name: 'read:new' }],
        authorizations: [{ resource_id: long(1), client_id: long(2), permission_ids: [long(3)] }]
      }))((seed: number) => {
        let state = seed
        return Array.from({ length: 255 }, () => String.fromCodePoint(0x20000 + ((state = (state * 1103515245 + 12345) % 2147483648) % 0xa6d0))).join('')
      })),
      says: ['authorizations[0]', 'too long together for the database\'s indexes']
    },
    {
      name: 'a permission id that belongs to another resource',
      content: JSON.stringify({ ...fresh, permissions: [...fresh.permissions, { id: 'p_read_orders', resource_id: 'new-api', name: 'read:orders' }] }),
      says: ['permissions[1] "p_read_orders": the id already belongs to a permission of another resource']
    }
  ]
  const before = await rowCounts(url)
  t.same(before, validCounts)
  for (const { name, content, says } of cases) {
    await t.test(name, async (t) => {
      const error = await refusal(pool, JSON.parse(content))
      t.ok(error, 'refused')
      for (const expected of says) t.ok(error?.message.includes(expected), `names ${expected}: ${error?.message}`)
      t.same(await rowCounts(url), before, 'the tables are as they were')
      const { rows } = await pool.query(`
        SELECT (SELECT count(*) FROM resources WHERE id = 'new-api')::int AS resources,
               (SELECT count(*) FROM clients WHERE id = 'new-app')::int AS clients`)
      t.same(rows[0], { resources: 0, clients: 0 }, 'not even the valid entries before the bad one')
    })
  }
  const names = await pool.query("SELECT name FROM permissions WHERE id = 'p_read_orders'")
  t.same(names.rows, [{ name: 'read:orders' }], 'an existing permission was not renamed or moved')
})

t.test('a document with an unknown key is refused, naming it', async (t) => {
  const { pool } = await migratedPool(t)
  t.match((await refusal(pool, { resources: [], permision: [] }))?.message, /permision/)
})

t.test('a bad last authorization on an empty database: every table stays empty', async (t) => {
  const { url, pool } = await migratedPool(t)
  const document = seedingFixture()
  document.authorizations!.push({ resource_id: 'reports-api', client_id: 'warehouse-app', permission_ids: ['p_read_orders'] })
  const error = await refusal(pool, document)
  t.ok(error?.message.includes('authorizations[3] (resource "reports-api", client "warehouse-app"): refers to something that does not exist'), error?.message ?? 'not refused')
  t.same(await rowCounts(url), { resources: 0, clients: 0, permissions: 0, authorizations: 0, grants: 0 })
})

t.test('an id listed twice (a resource, a client, a permission) is refused, naming both entries: the last one silently won, and the counts counted both', async (t) => {
  const { url, pool } = await migratedPool(t)
  const cases = [
    { document: { resources: [{ id: 'a-api', name: 'A' }, { id: 'a-api', name: 'B' }] }, says: 'resources[1] "a-api": the id is also resources[0]\'s' },
    { document: { clients: [{ id: 'app' }, { id: 'other' }, { id: 'app' }] }, says: 'clients[2] "app": the id is also clients[0]\'s' },
    {
      document: {
        resources: [{ id: 'a-api' }],
        permissions: [{ id: 'p', resource_id: 'a-api', name: 'read:a' }, { id: 'p', resource_id: 'a-api', name: 'write:a' }]
      },
      says: 'permissions[1] "p": the id is also permissions[0]\'s'
    }
  ]
  for (const { document, says } of cases) {
    const error = await refusal(pool, document)
    t.ok(error?.message.includes(says), `${says}: ${error?.message}`)
    t.same(await rowCounts(url), { resources: 0, clients: 0, permissions: 0, authorizations: 0, grants: 0 }, 'nothing loaded')
  }
})

t.test('a permission name listed twice for one resource is refused before the database, naming both entries: the database said "an existing row" of the file\'s own', async (t) => {
  const { url, pool } = await migratedPool(t)
  const document = {
    resources: [{ id: 'a-api' }, { id: 'b-api' }],
    permissions: [
      { id: 'p_read', resource_id: 'a-api', name: 'read:a' },
      // The same name on another resource is allowed: names are unique within their resource.
      { id: 'p_read_b', resource_id: 'b-api', name: 'read:a' },
      { id: 'p_read_again', resource_id: 'a-api', name: 'read:a' }
    ]
  }
  // Refused by the format's check alone, which db:seed runs before it touches (or migrates) a database.
  t.throws(() => { assertSeedData(document) }, {
    name: 'Error',
    message: 'The seed file is not valid:\n  permissions[2] "p_read_again": the name "read:a" is also permissions[0]\'s on resource "a-api"'
  })
  t.type(await refusal(pool, document), SeedError)
  t.same(await rowCounts(url), { resources: 0, clients: 0, permissions: 0, authorizations: 0, grants: 0 }, 'nothing loaded')
  // One entry listed twice whole: named once, as an id listed twice.
  t.throws(() => { assertSeedData({ ...document, permissions: [document.permissions[0], document.permissions[0]] }) }, {
    message: 'The seed file is not valid:\n  permissions[1] "p_read": the id is also permissions[0]\'s'
  })
})

t.test('an authorization listed twice is merged: its grants are the union, and it is counted once', async (t) => {
  const { url, pool } = await migratedPool(t)
  const document: SeedData = {
    ...seedingFixture(),
    authorizations: [
      { resource_id: 'orders-api', client_id: 'billing-app', permission_ids: ['p_read_orders'] },
      { resource_id: 'reports-api', client_id: 'billing-app', permission_ids: ['p_read_reports'] },
      // The same pair again, with one grant already listed and one new; then a third time, with none.
      { resource_id: 'orders-api', client_id: 'billing-app', permission_ids: ['p_read_orders', 'p_create_orders'] },
      { resource_id: 'orders-api', client_id: 'billing-app' }
    ]
  }
  assertSeedData(document)
  t.same(await seedDatabase(pool, document), { resources: 2, clients: 2, permissions: 3, authorizations: 2, grants: 3 })
  t.same(await rowCounts(url), { resources: 2, clients: 2, permissions: 3, authorizations: 2, grants: 3 })
  t.same(await seedDatabase(pool, document), { resources: 2, clients: 2, permissions: 3, authorizations: 2, grants: 0 }, 'again: nothing new')
})

t.test('the connection lost mid-seed: the caller sees why (not the ROLLBACK that could not be sent), and the pool serves again', async (t) => {
  const { url, pool } = await migratedPool(t)
  // The seed's first write waits on this lock, then its server process is ended from outside.
  const holder = new pg.Client({ connectionString: url })
  await holder.connect()
  t.teardown(() => holder.end())
  await holder.query('BEGIN; LOCK TABLE resources')
  // Watched from outside the holder's transaction, which sees pg_stat_activity as of its first look.
  const watcher = new pg.Client({ connectionString: url })
  await watcher.connect()
  t.teardown(() => watcher.end())
  const seeding = seedDatabase(pool, seedingFixture()).then(() => undefined, (error: Error) => error)
  const pid = await lockWaiter(watcher, { statement: '%INSERT INTO resources%' })
  t.ok(pid, 'the seed waits for the lock')
  await watcher.query('SELECT pg_terminate_backend($1)', [pid])
  const error = await seeding
  t.equal((error as { code?: string } | undefined)?.code, '57P01', `the server's own reason: ${String(error)}`)
  await holder.query('ROLLBACK')
  t.same(await seedDatabase(pool, seedingFixture()), validCounts, 'the pool\'s one connection is a new one')
})
