// The schema itself keeps the invariants: bad rows written with raw SQL, no service code in the
// way, are refused by the database with the right SQLSTATE and constraint.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import { migrate } from 'postgres-migrations'
import t, { type Test } from 'tap'
import { loadScale, RESOURCE_ID } from '../../db/bench-data.js'
import { explainPreparedTree, type PlanNode } from '../../db/explain.js'
import { migrateDatabase } from '../../db/migrate.js'
import { grantSql, unauthorizeSql } from '../../db/queries/change.js'
import { listGrantedPermissions, listGrantedPermissionsSql } from '../../db/queries/list.js'
import { authorizeClient, upsertClient, upsertPermission, upsertResource } from '../../db/queries/seeding.js'
import type { SortKey } from '../../db/queries/sort.js'
import { ping } from '../../db/queries/statement.js'
import { migrationsDir } from '../../src/project-root.js'
import { createTestDatabase } from '../support/database.js'

async function migratedPool (t: Test): Promise<pg.Pool> {
  const pool = new pg.Pool({ connectionString: await createTestDatabase(t), max: 4 })
  pool.on('error', () => {}) // the database is dropped with FORCE at teardown
  t.teardown(() => pool.end())
  await migrateDatabase(pool, migrationsDir)
  return pool
}

const db = await migratedPool(t)
const sql = (text: string, values: unknown[] = []) => db.query(text, values)
const count = async (text: string, values: unknown[] = []) => (await sql(`SELECT count(*)::int AS n FROM ${text}`, values)).rows[0].n as number

/** A resource with permissions, clients authorized on it, and every permission granted to each. */
async function arrange (prefix: string, { permissions = 2, clients = 2 } = {}) {
  const resource = `${prefix}-api`
  const permissionIds = Array.from({ length: permissions }, (_, i) => `${prefix}-p${i}`)
  const clientIds = Array.from({ length: clients }, (_, i) => `${prefix}-c${i}`)
  await sql('INSERT INTO resources (id) VALUES ($1)', [resource])
  await sql(`INSERT INTO permissions (id, resource_id, name)
    SELECT id, $1, 'read:' || id FROM unnest($2::text[]) AS id`, [resource, permissionIds])
  await sql('INSERT INTO clients (id) SELECT unnest($1::text[])', [clientIds])
  await sql('INSERT INTO authorizations (resource_id, client_id) SELECT $1, unnest($2::text[])', [resource, clientIds])
  await sql(`INSERT INTO grants (resource_id, client_id, permission_id)
    SELECT $1, c, p FROM unnest($2::text[]) AS c, unnest($3::text[]) AS p`, [resource, clientIds, permissionIds])
  return { resource, permissionIds, clientIds }
}

t.test('a grant for a client that is not authorized on the resource → 23503 grant_within_authorization', async (t) => {
  await sql("INSERT INTO resources (id) VALUES ('unauth-api')")
  await sql("INSERT INTO clients (id) VALUES ('unauth-app'), ('auth-app')")
  await sql("INSERT INTO permissions (id, resource_id, name) VALUES ('unauth-p', 'unauth-api', 'read:x')")
  await sql("INSERT INTO authorizations (resource_id, client_id) VALUES ('unauth-api', 'auth-app')")
  await t.rejects(
    sql("INSERT INTO grants (resource_id, client_id, permission_id) VALUES ('unauth-api', 'unauth-app', 'unauth-p')"),
    { code: '23503', constraint: 'grant_within_authorization' }
  )
  await t.resolves(
    sql("INSERT INTO grants (resource_id, client_id, permission_id) VALUES ('unauth-api', 'auth-app', 'unauth-p')"),
    'the same grant is accepted for the authorized client'
  )
  t.equal(await count("grants WHERE resource_id = 'unauth-api'"), 1)
})

t.test('a grant of a permission that belongs to another resource → 23503 grant_of_resource_permission', async (t) => {
  await sql("INSERT INTO resources (id) VALUES ('cross-a'), ('cross-b')")
  await sql("INSERT INTO clients (id) VALUES ('cross-app')")
  await sql(`INSERT INTO permissions (id, resource_id, name)
    VALUES ('cross-pa', 'cross-a', 'read:a'), ('cross-pb', 'cross-b', 'read:b')`)
  // Authorized on both, so only the permission's resource can be at fault.
  await sql("INSERT INTO authorizations (resource_id, client_id) VALUES ('cross-a', 'cross-app'), ('cross-b', 'cross-app')")
  await t.rejects(
    sql("INSERT INTO grants (resource_id, client_id, permission_id) VALUES ('cross-a', 'cross-app', 'cross-pb')"),
    { code: '23503', constraint: 'grant_of_resource_permission' }
  )
  await t.rejects(
    sql("INSERT INTO grants (resource_id, client_id, permission_id) VALUES ('cross-a', 'cross-app', 'no-such-permission')"),
    { code: '23503', constraint: 'grant_of_resource_permission' },
    'a permission that does not exist at all'
  )
  await sql("INSERT INTO grants (resource_id, client_id, permission_id) VALUES ('cross-a', 'cross-app', 'cross-pa')")
  await t.rejects(
    sql("UPDATE grants SET permission_id = 'cross-pb' WHERE resource_id = 'cross-a' AND client_id = 'cross-app'"),
    { code: '23503', constraint: 'grant_of_resource_permission' },
    'an update cannot move a grant onto another resource\'s permission'
  )
  await t.rejects(
    sql("UPDATE permissions SET resource_id = 'cross-b' WHERE id = 'cross-pa'"),
    { code: '23503', constraint: 'grant_of_resource_permission' },
    'a granted permission cannot be moved to another resource'
  )
  t.same((await sql("SELECT permission_id FROM grants WHERE client_id = 'cross-app'")).rows, [{ permission_id: 'cross-pa' }])
})

t.test('permission names must be verb:noun without whitespace → otherwise 23514', async (t) => {
  await sql("INSERT INTO resources (id) VALUES ('names-api')")
  const insert = (id: string, name: string) =>
    sql("INSERT INTO permissions (id, resource_id, name) VALUES ($1, 'names-api', $2)", [id, name])
  const refused = [
    'read user', 'read', 'read:', ':user', ':', 'a:b:c', 'read:\tuser', 'read:user\n', ' read:user', 'read :user', '',
    'read:' + 'x'.repeat(251)
  ]
  for (const [index, name] of refused.entries()) {
    await t.rejects(insert(`bad-${index}`, name), { code: '23514', constraint: 'permission_name_is_verb_colon_noun' }, JSON.stringify(name))
  }
  await t.rejects(
    sql("INSERT INTO permissions (id, resource_id, name) VALUES ('null-name', 'names-api', NULL)"),
    { code: '23502' },
    'a missing name'
  )
  const accepted = ['read:user', 'create:client_grants', 'read:ü', 'read:' + 'x'.repeat(250)]
  for (const [index, name] of accepted.entries()) await t.resolves(insert(`good-${index}`, name), JSON.stringify(name))
  t.equal(await count("permissions WHERE resource_id = 'names-api'"), accepted.length)
})

// The OpenAPI contract and the seed format both use the ECMAScript pattern ^[^\s:]+:[^\s:]+$, where
// \s includes Unicode spaces; [[:space:]] alone, under the column's "C" collation, is ASCII only.
t.test('permission names with Unicode whitespace are refused like ASCII whitespace → 23514', async (t) => {
  await sql("INSERT INTO resources (id) VALUES ('unicode-names-api')")
  for (const [index, name] of ['read:\u00a0user', 'read:\u2003user', 'read\u3000:user', '\ufeffread:user'].entries()) {
    await t.rejects(
      sql("INSERT INTO permissions (id, resource_id, name) VALUES ($1, 'unicode-names-api', $2)", [`u-${index}`, name]),
      { code: '23514' },
      JSON.stringify(name)
    )
  }
})

t.test('a permission name is unique within its resource (23505), not across resources', async (t) => {
  await sql("INSERT INTO resources (id) VALUES ('dup-a'), ('dup-b')")
  await sql("INSERT INTO permissions (id, resource_id, name) VALUES ('dup-1', 'dup-a', 'read:dup')")
  await t.rejects(
    sql("INSERT INTO permissions (id, resource_id, name) VALUES ('dup-2', 'dup-a', 'read:dup')"),
    { code: '23505', constraint: 'permission_name_unique_per_resource' }
  )
  await t.rejects(
    sql("INSERT INTO permissions (id, resource_id, name) VALUES ('dup-1', 'dup-b', 'write:dup')"),
    { code: '23505', constraint: 'permissions_pkey' },
    'a permission id is unique across resources'
  )
  await t.resolves(sql("INSERT INTO permissions (id, resource_id, name) VALUES ('dup-3', 'dup-b', 'read:dup')"))
  await t.resolves(
    sql("INSERT INTO permissions (id, resource_id, name) VALUES ('dup-4', 'dup-a', 'Read:dup')"),
    'names compare byte for byte: another case is another name'
  )
  t.same(
    (await sql("SELECT id FROM permissions WHERE name = 'read:dup' ORDER BY id")).rows.map(({ id }) => id),
    ['dup-1', 'dup-3']
  )
})

t.test('deleting an authorization deletes its grants, and only its grants', async (t) => {
  const { resource, clientIds: [gone, kept], permissionIds } = await arrange('del-auth', { permissions: 3 })
  t.equal(await count('grants WHERE resource_id = $1', [resource]), 6)
  await sql('DELETE FROM authorizations WHERE resource_id = $1 AND client_id = $2', [resource, gone])
  t.equal(await count('grants WHERE resource_id = $1 AND client_id = $2', [resource, gone]), 0)
  t.equal(await count('grants WHERE resource_id = $1 AND client_id = $2', [resource, kept]), 3)
  t.equal(await count('permissions WHERE resource_id = $1', [resource]), permissionIds.length, 'the permissions stay')
  t.equal(await count('clients WHERE id = $1', [gone]), 1, 'the client stays')
})

t.test('deleting a permission removes its grants from every client', async (t) => {
  const { resource, permissionIds: [gone, kept] } = await arrange('del-perm')
  await sql('DELETE FROM permissions WHERE id = $1', [gone])
  t.equal(await count('grants WHERE permission_id = $1', [gone]), 0)
  t.equal(await count('grants WHERE permission_id = $1', [kept]), 2)
  t.equal(await count('authorizations WHERE resource_id = $1', [resource]), 2, 'the authorizations stay')
})

t.test('deleting a client removes its authorizations and grants everywhere', async (t) => {
  const first = await arrange('del-client-a')
  const second = await arrange('del-client-b')
  const gone = first.clientIds[0]
  await sql('INSERT INTO authorizations (resource_id, client_id) VALUES ($1, $2)', [second.resource, gone])
  await sql('INSERT INTO grants (resource_id, client_id, permission_id) VALUES ($1, $2, $3)', [second.resource, gone, second.permissionIds[0]])
  await sql('DELETE FROM clients WHERE id = $1', [gone])
  t.equal(await count('authorizations WHERE client_id = $1', [gone]), 0)
  t.equal(await count('grants WHERE client_id = $1', [gone]), 0)
  t.equal(await count('grants WHERE resource_id = ANY ($1)', [[first.resource, second.resource]]), 6, 'the other clients keep theirs')
})

t.test('deleting a resource removes its permissions, authorizations and grants, not other resources\'', async (t) => {
  const gone = await arrange('del-res-a')
  const kept = await arrange('del-res-b')
  // A client authorized on both resources.
  await sql('INSERT INTO authorizations (resource_id, client_id) VALUES ($1, $2)', [kept.resource, gone.clientIds[0]])
  await sql('INSERT INTO grants (resource_id, client_id, permission_id) VALUES ($1, $2, $3)', [kept.resource, gone.clientIds[0], kept.permissionIds[0]])
  await sql('DELETE FROM resources WHERE id = $1', [gone.resource])
  for (const table of ['permissions', 'authorizations', 'grants']) {
    t.equal(await count(`${table} WHERE resource_id = $1`, [gone.resource]), 0, `${table} of the deleted resource`)
  }
  t.equal(await count('permissions WHERE resource_id = $1', [kept.resource]), 2)
  t.equal(await count('authorizations WHERE resource_id = $1', [kept.resource]), 3)
  t.equal(await count('grants WHERE resource_id = $1', [kept.resource]), 5)
  t.equal(await count('clients WHERE id = ANY ($1)', [gone.clientIds]), 2, 'the clients stay')
})

t.test('ids are 1 to 255 characters: empty or longer → 23514', async (t) => {
  await sql("INSERT INTO resources (id) VALUES ('ids-api')")
  const inserts: Record<string, (id: string) => Promise<unknown>> = {
    resources: (id) => sql('INSERT INTO resources (id) VALUES ($1)', [id]),
    clients: (id) => sql('INSERT INTO clients (id) VALUES ($1)', [id]),
    permissions: (id) => sql("INSERT INTO permissions (id, resource_id, name) VALUES ($1, 'ids-api', 'read:' || md5($1))", [id])
  }
  for (const [table, insert] of Object.entries(inserts)) {
    for (const id of ['', 'a'.repeat(256), 'é'.repeat(256), 'x'.repeat(10_000)]) {
      await t.rejects(insert(id), { code: '23514', constraint: `${table}_id_check` }, `${table}: ${id.length} characters`)
    }
    await t.resolves(insert(`${table[0]}`.repeat(255)), `${table}: 255 characters`)
    await t.resolves(insert('😀'.repeat(255)), `${table}: 255 characters outside the BMP`)
  }
  t.equal(await count("resources WHERE id <> 'ids-api' AND char_length(id) = 255"), 2)
})

t.test('migrating an up-to-date database applies nothing', async (t) => {
  const pool = new pg.Pool({ connectionString: await createTestDatabase(t), max: 1 })
  pool.on('error', () => {}) // the database is dropped with FORCE at teardown
  t.teardown(() => pool.end())
  const first = await migrateDatabase(pool, migrationsDir)
  t.ok(first.includes('0001_create_permissions.sql'), `first run applies the migration: ${first.join(', ')}`)
  t.same(await migrateDatabase(pool, migrationsDir), [])
  t.same(await migrateDatabase(pool, migrationsDir), [])
  const { rows } = await pool.query("SELECT count(*)::int AS n FROM migrations WHERE name = 'create_permissions'")
  t.equal(rows[0].n, 1)
})

function planNodes (node: PlanNode): PlanNode[] {
  return [node, ...(node.Plans ?? []).flatMap(planNodes)]
}

function describe (node: PlanNode): string {
  const on = node['Relation Name'] ? ` on ${node['Relation Name']}` : ''
  const using = node['Index Name'] ? ` using ${node['Index Name']} [${node['Index Cond']}]` : ''
  const heap = node['Heap Fetches'] === undefined ? '' : ` heap fetches=${node['Heap Fetches']}`
  return `${node['Node Type']}${on}${using} rows=${node['Actual Rows']}×${node['Actual Loops']}${heap} buffers=${node['Shared Hit Blocks'] + node['Shared Read Blocks']}`
}

t.test('the seeding upserts: names kept unless given, ids never move between resources, new grants counted', async (t) => {
  await upsertResource(db, { id: 'up-api', name: 'Upserts' })
  await upsertResource(db, { id: 'up-api' })
  await upsertClient(db, { id: 'up-c', name: 'Up client' })
  await upsertClient(db, { id: 'up-c' })
  t.same((await sql("SELECT name FROM resources WHERE id = 'up-api'")).rows, [{ name: 'Upserts' }])
  t.same((await sql("SELECT name FROM clients WHERE id = 'up-c'")).rows, [{ name: 'Up client' }])
  await upsertResource(db, { id: 'up-api', name: 'Renamed' })
  t.same((await sql("SELECT name FROM resources WHERE id = 'up-api'")).rows, [{ name: 'Renamed' }])

  t.equal(await upsertPermission(db, { id: 'up-p1', resource_id: 'up-api', name: 'read:up' }), true)
  t.equal(await upsertPermission(db, { id: 'up-p1', resource_id: 'up-api', name: 'read:up', description: 'd' }), true)
  await upsertResource(db, { id: 'other-api' })
  t.equal(await upsertPermission(db, { id: 'up-p1', resource_id: 'other-api', name: 'steal:it' }), false)
  t.same((await sql("SELECT resource_id, name, description FROM permissions WHERE id = 'up-p1'")).rows,
    [{ resource_id: 'up-api', name: 'read:up', description: 'd' }])

  t.equal(await authorizeClient(db, 'up-api', 'up-c', ['up-p1']), 1)
  t.equal(await authorizeClient(db, 'up-api', 'up-c', ['up-p1']), 0, 'a grant held already is not new')
  t.equal(await count("authorizations WHERE client_id = 'up-c'"), 1)
})

t.test('ping answers on a live database and throws on a closed pool', async (t) => {
  await t.resolves(ping(db))
  const closed = new pg.Pool({ connectionString: await createTestDatabase(t) })
  await closed.end()
  await t.rejects(ping(closed))
})

t.test('each authorization counts its grants through inserts, deletes, cascades and renames', async (t) => {
  const { resource, permissionIds, clientIds } = await arrange('counted', { permissions: 4, clients: 2 })
  const counts = async () => (await sql(
    'SELECT client_id, grant_count::int AS n FROM authorizations WHERE resource_id = $1 ORDER BY client_id', [resource])).rows
  const actual = async () => (await sql(`
    SELECT a.client_id, count(g.*)::int AS n FROM authorizations a
    LEFT JOIN grants g ON g.resource_id = a.resource_id AND g.client_id = a.client_id
    WHERE a.resource_id = $1 GROUP BY a.client_id ORDER BY a.client_id`, [resource])).rows
  t.same(await counts(), [{ client_id: clientIds[0], n: 4 }, { client_id: clientIds[1], n: 4 }])
  await sql('DELETE FROM grants WHERE resource_id = $1 AND client_id = $2 AND permission_id = ANY ($3)', [resource, clientIds[0], permissionIds.slice(0, 3)])
  t.same(await counts(), await actual(), 'after a DELETE of three')
  await sql('DELETE FROM permissions WHERE id = $1', [permissionIds[3]])
  t.same(await counts(), [{ client_id: clientIds[0], n: 0 }, { client_id: clientIds[1], n: 3 }], 'after a cascade from a permission')
  await sql("UPDATE permissions SET name = 'renamed:one' WHERE id = $1", [permissionIds[0]])
  t.same((await sql('SELECT DISTINCT permission_name FROM grants WHERE permission_id = $1', [permissionIds[0]])).rows,
    [{ permission_name: 'renamed:one' }], 'a rename reaches the grants')
  t.same(await counts(), await actual(), 'a rename changes no count')
  await t.rejects(sql('UPDATE grants SET permission_name = $2 WHERE permission_id = $1', [permissionIds[0], 'other:name']),
    { code: '23503', constraint: 'grant_of_resource_permission' }, 'a grant cannot carry another name than its permission')
  await sql('INSERT INTO grants (resource_id, client_id, permission_id) VALUES ($1, $2, $3)', [resource, clientIds[0], permissionIds[0]])
  t.same(await counts(), await actual(), 'after an INSERT')
  await t.rejects(sql('UPDATE authorizations SET grant_count = -1 WHERE resource_id = $1', [resource]), { code: '23514' })
})

t.test('the triggers use the schema\'s own tables whatever the caller\'s search_path: a temporary table of the same name diverts nothing (0011)', async (t) => {
  const { resource, permissionIds, clientIds: [holder] } = await arrange('shadowed', { permissions: 2, clients: 1 })
  const client = await db.connect()
  // Released destroyed: its temporary table goes with its connection.
  t.teardown(() => client.release(true))
  // Searched first: pg_temp comes before any schema unless a search_path names it.
  await client.query('CREATE TEMP TABLE authorizations (LIKE public.authorizations)')
  await client.query('DELETE FROM public.grants WHERE resource_id = $1 AND client_id = $2 AND permission_id = $3', [resource, holder, permissionIds[0]])
  const { rows: [{ n }] } = await client.query('SELECT grant_count::int AS n FROM public.authorizations WHERE resource_id = $1 AND client_id = $2', [resource, holder])
  t.equal(n, 1, 'the DELETE counted on the real authorization')
  const { rows: functions } = await sql(`SELECT p.proname, p.proconfig FROM pg_proc p
    WHERE p.pronamespace = current_schema()::regnamespace AND p.prorettype = 'trigger'::regtype ORDER BY p.proname`)
  t.equal(functions.length, 16, 'the trigger functions of the migrations: 15 named in 0011, and 0012\'s')
  for (const { proname, proconfig } of functions) t.same(proconfig, ['search_path=pg_catalog, public, pg_temp'], proname)
})

t.test('an authorization\'s version changes when a page of its grants would read differently, and only then (0004, 0009)', async (t) => {
  const { resource, permissionIds: [first, second], clientIds: [holder, other] } = await arrange('shown', { permissions: 2, clients: 2 })
  await sql('DELETE FROM grants WHERE client_id = $1 AND permission_id = $2', [other, first])
  const versions = async () => Object.fromEntries((await sql(
    'SELECT client_id, version::text FROM authorizations WHERE resource_id = $1', [resource])).rows.map((row) => [row.client_id, row.version]))
  const before = await versions()

  await sql("UPDATE permissions SET name = 'renamed:shown' WHERE id = $1", [first])
  const renamed = await versions()
  t.not(renamed[holder], before[holder], 'a rename of a permission the client holds')
  t.equal(renamed[other], before[other], 'not for a client that does not hold it')

  await sql("UPDATE permissions SET description = 'now described' WHERE id = $1", [second])
  const described = await versions()
  t.not(described[holder], renamed[holder], 'a new description')
  t.not(described[other], renamed[other], 'for every client that holds the permission')
  t.ok(BigInt(described[holder]) > BigInt(renamed[holder]), 'from the one sequence: newer is larger')

  await sql("UPDATE permissions SET description = 'now described' WHERE id = $1", [second])
  await sql('UPDATE grants SET permission_description = permission_description WHERE resource_id = $1', [resource])
  await sql("UPDATE permissions SET name = 'renamed:shown' WHERE id = $1", [first])
  t.same(await versions(), described, 'updates that change nothing a page shows keep the version')
})

t.test('TRUNCATE of the grants zeroes every count', async (t) => {
  const pool = await migratedPool(t)
  await pool.query(`
    INSERT INTO resources (id) VALUES ('tr-api');
    INSERT INTO clients (id) VALUES ('tr-app');
    INSERT INTO permissions (id, resource_id, name) VALUES ('tr-p', 'tr-api', 'read:tr');
    INSERT INTO authorizations (resource_id, client_id) VALUES ('tr-api', 'tr-app');
    INSERT INTO grants (resource_id, client_id, permission_id) VALUES ('tr-api', 'tr-app', 'tr-p')`)
  t.equal((await pool.query('SELECT grant_count::int AS n FROM authorizations')).rows[0].n, 1)
  await pool.query('TRUNCATE grants')
  t.equal((await pool.query('SELECT grant_count::int AS n FROM authorizations')).rows[0].n, 0)
})

/** The description each grant of the resource carries, beside its permission's, where they differ. */
async function describedAmiss (pool: pg.Pool, resource: string) {
  return (await pool.query(`
    SELECT g.client_id, g.permission_id, g.permission_description, p.description
    FROM grants g JOIN permissions p ON p.resource_id = g.resource_id AND p.id = g.permission_id
    WHERE g.resource_id = $1 AND g.permission_description IS DISTINCT FROM p.description`, [resource])).rows
}

t.test('a grant carries its permission\'s description: copied on every insert and update, kept through changes', async (t) => {
  const { resource, permissionIds: [first, second], clientIds } = await arrange('described', { permissions: 2, clients: 3 })
  await sql("UPDATE permissions SET description = 'first' WHERE id = $1", [first])
  t.same(await describedAmiss(db, resource), [], 'a new description reaches every grant')
  t.equal(await count("grants WHERE permission_description = 'first'"), 3)

  await sql('DELETE FROM grants WHERE resource_id = $1 AND client_id = $2', [resource, clientIds[0]])
  await sql(`INSERT INTO grants (resource_id, client_id, permission_id, permission_name, permission_description)
    VALUES ($1, $2, $3, 'read:' || $3, 'a wrong text'), ($1, $2, $4, 'read:' || $4, 'another')`, [resource, clientIds[0], first, second])
  t.same(await describedAmiss(db, resource), [], 'an insert that names the permission (as the bench loader does) gets its description, not the given one')

  await sql("UPDATE grants SET permission_description = 'tampered' WHERE permission_id = $1", [first])
  t.same(await describedAmiss(db, resource), [], 'an update of the copy itself copies the permission\'s again')

  await sql('UPDATE permissions SET description = NULL WHERE id = $1', [first])
  await sql("UPDATE permissions SET description = 'second' WHERE id = $1", [second])
  t.same(await describedAmiss(db, resource), [], 'to and from no description')
  await sql("UPDATE permissions SET name = 'renamed:first', description = 'renamed' WHERE id = $1", [first])
  t.same(await describedAmiss(db, resource), [], 'renamed and described in one statement')
  t.same((await sql('SELECT DISTINCT permission_name, permission_description FROM grants WHERE permission_id = $1', [first])).rows,
    [{ permission_name: 'renamed:first', permission_description: 'renamed' }])

  const versions = async () => (await sql('SELECT xmin::text FROM grants WHERE permission_id = $1 ORDER BY client_id', [second])).rows
  const unchanged = await versions()
  await sql("UPDATE permissions SET description = 'second' WHERE id = $1", [second])
  t.same(await versions(), unchanged, 'an unchanged description rewrites no grant')
})

const backendPid = async (client: pg.PoolClient) => (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number

/**
 * For clients of `pool` whose backends are `pids`: a function that resolves once the client's
 * statement waits for a lock, or has finished without waiting (after 2 s at most).
 */
function lockWaitOf (pool: pg.Pool, pids: Map<pg.PoolClient, number>) {
  return async function waitingOrDone (client: pg.PoolClient, statement: Promise<unknown>) {
    const state = { done: false }
    statement.then(() => { state.done = true }, () => { state.done = true })
    for (let i = 0; i < 100 && !state.done; i++) {
      const { rows } = await pool.query("SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'", [pids.get(client)])
      if (rows.length > 0) return
      await sleep(20)
    }
  }
}

// Two writers: one that names only the permission (the row trigger looks it up and locks it), and
// one that gives the name and a description it read before the change, as the service's grant does
// (checked once for the statement, migration 0008).
const racingGrants = {
  'naming only the permission': "INSERT INTO grants (resource_id, client_id, permission_id) VALUES ('race-api', 'race-app', 'race-p')",
  'giving the name and the text it read before': `INSERT INTO grants (resource_id, client_id, permission_id, permission_name, permission_description)
    VALUES ('race-api', 'race-app', 'race-p', 'read:race', 'old')`
}

for (const [writer, grant] of Object.entries(racingGrants)) {
  t.test(`a description changing while its permission is granted (${writer}): the grant copies the text that is committed last`, async (t) => {
    const pool = await migratedPool(t)
    await pool.query(`
    INSERT INTO resources (id) VALUES ('race-api');
    INSERT INTO clients (id) VALUES ('race-app');
    INSERT INTO permissions (id, resource_id, name, description) VALUES ('race-p', 'race-api', 'read:race', 'old');
    INSERT INTO authorizations (resource_id, client_id) VALUES ('race-api', 'race-app')`)
    const described = async () => (await pool.query('SELECT permission_description FROM grants')).rows
    const [first, second] = [await pool.connect(), await pool.connect()]
    const waitingOrDone = lockWaitOf(pool, new Map([[first, await backendPid(first)], [second, await backendPid(second)]]))
    try {
    // The description changes first: the grant waits for that, then copies the new text.
      await first.query("BEGIN; UPDATE permissions SET description = 'new' WHERE id = 'race-p'")
      const granted = second.query(grant)
      await waitingOrDone(second, granted)
      await first.query('COMMIT')
      await granted
      t.same(await described(), [{ permission_description: 'new' }], 'the grant waited for the change')

      // The grant first: the change waits for it, then updates it.
      await pool.query('DELETE FROM grants')
      await second.query(`BEGIN; ${grant}`)
      const changed = first.query("UPDATE permissions SET description = 'newer' WHERE id = 'race-p'")
      await waitingOrDone(first, changed)
      await second.query('COMMIT')
      await changed
      t.same(await described(), [{ permission_description: 'newer' }], 'the change reached the grant committed before it')
    } finally {
      first.release()
      second.release()
    }
  })
}

t.test('a rename beside a change of the service deadlocks neither (0010): the change under way finishes first', async (t) => {
  const pool = await migratedPool(t)
  await pool.query(`
    INSERT INTO resources (id) VALUES ('lock-api');
    INSERT INTO clients (id) VALUES ('lock-app'), ('lock-other');
    INSERT INTO permissions (id, resource_id, name) VALUES ('lock-p', 'lock-api', 'read:lock'), ('lock-q', 'lock-api', 'write:lock');
    INSERT INTO authorizations (resource_id, client_id) VALUES ('lock-api', 'lock-app'), ('lock-api', 'lock-other');
    INSERT INTO grants (resource_id, client_id, permission_id) SELECT 'lock-api', c, p FROM unnest(ARRAY['lock-app', 'lock-other']) c, unnest(ARRAY['lock-p', 'lock-q']) p`)
  const [service, admin] = [await pool.connect(), await pool.connect()]
  const waitingOrDone = lockWaitOf(pool, new Map([[service, await backendPid(service)], [admin, await backendPid(admin)]]))
  try {
    // The service's order (db/queries/change.ts): the authorization locked, then the change statement.
    await service.query("BEGIN; SELECT FROM authorizations WHERE resource_id = 'lock-api' AND client_id = 'lock-app' FOR UPDATE")
    const renamed = admin.query("UPDATE permissions SET name = 'read:renamed' WHERE resource_id = 'lock-api' AND id = 'lock-p'")
    renamed.catch(() => {})
    await waitingOrDone(admin, renamed)
    // Before 0010 the rename had locked the grants by now and waited for the authorization, and this
    // DELETE waited for the rename: a deadlock, one of them failed with 40P01 after deadlock_timeout.
    const { rows: [removed] } = await service.query(unauthorizeSql, ['lock-api', 'lock-app', ['lock-p'], null, 'admin', null, 'req-lock', null, false])
    await service.query('COMMIT')
    await renamed
    t.equal(Number(removed.changed), 1, 'the grant was removed')
    t.same((await pool.query("SELECT client_id, permission_id, permission_name FROM grants WHERE resource_id = 'lock-api' ORDER BY 1, 2")).rows, [
      { client_id: 'lock-app', permission_id: 'lock-q', permission_name: 'write:lock' },
      { client_id: 'lock-other', permission_id: 'lock-p', permission_name: 'read:renamed' },
      { client_id: 'lock-other', permission_id: 'lock-q', permission_name: 'write:lock' }
    ], 'the rename reached the grants that were left')
  } finally {
    service.release()
    admin.release()
  }
})

t.test('a grant of a permission being renamed waits for the rename, then grants it under its new name (no 23503)', async (t) => {
  const pool = await migratedPool(t)
  await pool.query(`
    INSERT INTO resources (id) VALUES ('rn-api');
    INSERT INTO clients (id) VALUES ('rn-app');
    INSERT INTO permissions (id, resource_id, name, description) VALUES ('rn-p', 'rn-api', 'read:old', 'old text');
    INSERT INTO authorizations (resource_id, client_id) VALUES ('rn-api', 'rn-app')`)
  const [service, admin] = [await pool.connect(), await pool.connect()]
  const waitingOrDone = lockWaitOf(pool, new Map([[service, await backendPid(service)], [admin, await backendPid(admin)]]))
  try {
    await admin.query("BEGIN; UPDATE permissions SET name = 'read:new', description = 'new text' WHERE id = 'rn-p'")
    // The service's order (db/queries/change.ts): the authorization locked, then the change statement.
    await service.query("BEGIN; SELECT FROM authorizations WHERE resource_id = 'rn-api' AND client_id = 'rn-app' FOR UPDATE")
    const granted = service.query(grantSql, ['rn-api', 'rn-app', ['rn-p'], null, 'admin', null, 'req-rn', null, false])
    granted.catch(() => {})
    await waitingOrDone(service, granted)
    await admin.query('COMMIT')
    const { rows: [row] } = await granted
    await service.query('COMMIT')
    t.equal(Number(row.changed), 1, 'granted')
  } catch (error) {
    await service.query('ROLLBACK')
    throw error
  } finally {
    service.release()
    admin.release()
  }
  t.same((await pool.query('SELECT permission_name, permission_description FROM grants')).rows,
    [{ permission_name: 'read:new', permission_description: 'new text' }], 'under the name and text committed last')
})

t.test('descriptions are at most 255 characters → otherwise 23514, whatever the characters', async (t) => {
  await sql("INSERT INTO resources (id) VALUES ('long-api')")
  const insert = (id: string, description: string) =>
    sql("INSERT INTO permissions (id, resource_id, name, description) VALUES ($1, 'long-api', 'read:' || $1, $2)", [id, description])
  for (const [index, description] of ['x'.repeat(256), '😀'.repeat(256), 'é'.repeat(10_000)].entries()) {
    await t.rejects(insert(`long-${index}`, description), { code: '23514', constraint: 'permission_description_length' }, `${description.length} UTF-16 units`)
  }
  await t.resolves(insert('long-ok', 'x'.repeat(255)))
  await t.resolves(insert('long-4-byte', '😀'.repeat(255)), '255 characters outside the BMP')
  await t.rejects(sql("UPDATE permissions SET description = repeat('y', 256) WHERE id = 'long-ok'"),
    { code: '23514', constraint: 'permission_description_length' }, 'an update too')
  // The longest description, in a grant: its index entries fit.
  await sql("INSERT INTO clients (id) VALUES ('long-app')")
  await sql("INSERT INTO authorizations (resource_id, client_id) VALUES ('long-api', 'long-app')")
  await t.resolves(authorizeClient(db, 'long-api', 'long-app', ['long-ok', 'long-4-byte']), 'granted')
})

t.test('migration 0003 gives the grants of an existing database their descriptions', async (t) => {
  const url = await createTestDatabase(t)
  const pool = new pg.Pool({ connectionString: url, max: 1 })
  pool.on('error', () => {}) // the database is dropped with FORCE at teardown
  t.teardown(() => pool.end())
  // The database as it was before 0003.
  const before = t.testdir(Object.fromEntries(['0001_create_permissions.sql', '0002_page_scaling.sql'].map((file) =>
    [file, readFileSync(join(migrationsDir, file), 'utf8')])))
  const client = await pool.connect()
  try {
    await migrate({ client }, before)
  } finally {
    client.release()
  }
  await pool.query(`
    INSERT INTO resources (id) VALUES ('old-api');
    INSERT INTO clients (id) VALUES ('old-app');
    INSERT INTO permissions (id, resource_id, name, description) VALUES
      ('old-1', 'old-api', 'read:one', 'one'), ('old-2', 'old-api', 'read:two', NULL), ('old-3', 'old-api', 'read:three', 'three');
    INSERT INTO authorizations (resource_id, client_id) VALUES ('old-api', 'old-app');
    INSERT INTO grants (resource_id, client_id, permission_id) VALUES ('old-api', 'old-app', 'old-1'), ('old-api', 'old-app', 'old-2')`)
  t.same(await migrateDatabase(pool, migrationsDir), ['0003_description_on_grant.sql', '0004_authorization_version.sql', '0005_permission_changes.sql', '0006_append_only_history.sql', '0007_change_feed.sql', '0008_grants_described_per_statement.sql', '0009_version_follows_shown_grants.sql', '0010_renames_lock_authorizations_first.sql', '0011_trigger_functions_search_path.sql', '0012_prune_mark_guarded.sql', '0013_change_times_in_range.sql', '0014_versions_outlive_truncate.sql', '0015_prune_mark_below_next_ids.sql'])
  t.same((await pool.query('SELECT permission_id, permission_description FROM grants ORDER BY permission_id')).rows,
    [{ permission_id: 'old-1', permission_description: 'one' }, { permission_id: 'old-2', permission_description: null }])
  t.same((await pool.query('SELECT grant_count::int AS n FROM authorizations')).rows, [{ n: 2 }], 'the count is untouched')
  await pool.query("UPDATE permissions SET description = 'uno' WHERE id = 'old-1'")
  t.same(await describedAmiss(pool, 'old-api'), [], 'and kept from then on')
})

t.test('the bench loader\'s grants carry their permissions\' descriptions', async (t) => {
  const pool = await migratedPool(t)
  const scale = await loadScale(pool, 2_000)
  t.equal(scale.grants, 2_000)
  t.same(await describedAmiss(pool, RESOURCE_ID), [])
  t.ok(await count('grants WHERE permission_description IS NULL') > 0, 'some permissions have none')
})

t.test('three replicas migrating a fresh database at once: each migration is applied exactly once', async (t) => {
  const url = await createTestDatabase(t)
  const pools = [1, 2, 3].map(() => new pg.Pool({ connectionString: url, max: 1 }))
  for (const each of pools) each.on('error', () => {})
  t.teardown(() => Promise.all(pools.map((pool) => pool.end())))
  const results = await Promise.all(pools.map((pool) => migrateDatabase(pool, migrationsDir)))
  t.equal(results.filter((applied) => applied.includes('0001_create_permissions.sql')).length, 1, JSON.stringify(results))
  t.equal(results.filter((applied) => applied.length === 0).length, 2, 'the other two find nothing to do')
  const { rows } = await pools[0].query(`
    SELECT relname FROM pg_class
    WHERE relkind = 'r' AND relnamespace = 'public'::regnamespace ORDER BY relname`)
  t.same(rows.map(({ relname }) => relname), ['authorizations', 'clients', 'grants', 'migrations', 'permission_changes', 'permission_changes_pruned', 'permissions', 'resources'])
  const migrations = await pools[0].query('SELECT name, count(*)::int AS n FROM migrations GROUP BY name ORDER BY name')
  t.ok(migrations.rows.length > 0)
  for (const { name, n } of migrations.rows) t.equal(n, 1, `${name} recorded once`)
  t.same(await migrateDatabase(pools[1], migrationsDir), [], 'and a later run finds nothing to do')
})

/**
 * VACUUMs grants until every page is all-visible (or 30 s pass), so an index-only scan's buffers are
 * index pages, not heap visits: a transaction open meanwhile on the shared test server (another test
 * file's) holds back what a VACUUM may mark, and under load one run's VACUUM marked no page.
 */
async function vacuumUntilAllVisible (pool: pg.Pool, options = ''): Promise<void> {
  for (const started = Date.now(); ; await sleep(200)) {
    await pool.query(`VACUUM ${options} grants`)
    const { rows: [{ visible }] } = await pool.query<{ visible: boolean }>("SELECT relallvisible >= relpages AS visible FROM pg_class WHERE oid = 'grants'::regclass")
    if (visible || Date.now() - started > 30_000) return
  }
}

t.test('the list and unauthorize statements read about one page of the client\'s entries of a grants index', async (t) => {
  const pool = await migratedPool(t)
  const started = Date.now()
  // 2 resources × 1000 permissions, 50 clients authorized on both with every permission: 100k grants.
  // The test server runs with synchronous_commit off; committing synchronously lets VACUUM mark
  // the pages all-visible at once (hint bits wait for the commit to be flushed).
  await pool.query(`
    BEGIN;
    SET LOCAL synchronous_commit = on;
    INSERT INTO resources (id) SELECT 'api-' || r FROM generate_series(1, 2) r;
    INSERT INTO clients (id) SELECT 'app-' || lpad(c::text, 3, '0') FROM generate_series(1, 50) c;
    -- Descriptions in yet another order, tied by tens, every tenth missing.
    INSERT INTO permissions (id, resource_id, name, description)
      SELECT 'perm-' || r || '-' || lpad(p::text, 4, '0'), 'api-' || r, 'verb' || p || ':noun' || (p % 7),
        CASE WHEN p % 10 <> 0 THEN 'about ' || (p * 37 % 100) END
      FROM generate_series(1, 2) r, generate_series(1, 1000) p;
    INSERT INTO authorizations (resource_id, client_id) SELECT r.id, c.id FROM resources r, clients c;
    INSERT INTO grants (resource_id, client_id, permission_id)
      SELECT a.resource_id, a.client_id, p.id
      FROM authorizations a JOIN permissions p ON p.resource_id = a.resource_id;
    COMMIT`)
  await vacuumUntilAllVisible(pool, '(ANALYZE)')
  await pool.query('ANALYZE')
  t.equal((await pool.query('SELECT count(*)::int AS n FROM grants')).rows[0].n, 100_000)
  t.comment(`arranged in ${Date.now() - started} ms`)

  const { rows: [{ version }] } = await pool.query("SELECT version::int FROM authorizations WHERE resource_id = 'api-2' AND client_id = 'app-042'")
  // The statements exactly as the service runs them (db/queries/).
  const statements: Record<string, [string, unknown[]]> = {
    'list by name': [listGrantedPermissionsSql([{ property: 'name', direction: 'asc' }]), ['api-2', 'app-042', 50, 0, []]],
    'list by name, last page': [listGrantedPermissionsSql([{ property: 'name', direction: 'asc' }]), ['api-2', 'app-042', 50, 19, []]],
    'list by id, desc': [listGrantedPermissionsSql([{ property: 'id', direction: 'desc' }]), ['api-2', 'app-042', 50, 3, []]],
    'list by name, desc, page 15': [listGrantedPermissionsSql([{ property: 'name', direction: 'desc' }]), ['api-2', 'app-042', 50, 15, []]],
    unauthorize: [unauthorizeSql, ['api-2', 'app-042', ['perm-2-0001', 'perm-2-0500', 'perm-2-1000'], null, 'sub', null, 'req-1', null, false]],
    'unauthorize if match': [unauthorizeSql, ['api-2', 'app-042', ['perm-2-0001', 'perm-2-0500', 'perm-2-1000'], [version], 'sub', null, 'req-1', null, false]]
  }
  // Rows a statement may take from the index: a list reads its page (and what it skips, up to half
  // the client's grants, from whichever end is nearer); the DELETE its three ids.
  const budget: Record<string, number> = {
    'list by name': 50, 'list by name, last page': 50, 'list by id, desc': 200, 'list by name, desc, page 15': 250, unauthorize: 3, 'unauthorize if match': 3
  }
  for (const [what, [statement, values]] of Object.entries(statements)) {
    // As the service runs it: prepared, on its generic plan, in a transaction rolled back.
    const nodes = planNodes(await explainPreparedTree(pool, statement, values))
    const summary = nodes.map(describe).join(' > ')
    t.notOk(nodes.some((node) => node['Node Type'] === 'Seq Scan' && node['Relation Name'] === 'grants'), `${what}: no Seq Scan on grants: ${summary}`)
    t.notOk(nodes.some((node) => node['Node Type'] === 'Sort' && node.Plans?.some((child) => child['Actual Rows'] > budget[what])),
      `${what}: no sort of more than the page: ${summary}`)
    const scans = nodes.filter((node) => node['Relation Name'] === 'grants' && node['Node Type'].endsWith('Scan'))
    t.ok(scans.some((scan) => scan['Actual Loops'] > 0), `${what}: reads a grants index: ${summary}`)
    for (const scan of scans) {
      t.match(scan['Index Name'], /^grants_(pkey|by_name)$/, `${what}: through an index of the client's grants`)
      t.match(scan['Index Cond'], /resource_id = .*client_id = |client_id = .*resource_id = /, `${what}: seeks both columns`)
      t.ok(scan['Actual Rows'] * scan['Actual Loops'] <= budget[what], `${what}: the index yields at most ${budget[what]} entries: ${describe(scan)}`)
      // The 1000 entries sit side by side in a few leaf pages; walking or skipping through the
      // 100k entries would touch hundreds or thousands of pages.
      t.ok(scan['Shared Hit Blocks'] + scan['Shared Read Blocks'] < 50, `${what}: a handful of index pages: ${describe(scan)}`)
    }
  }

  // The DELETE above was rolled back, but marked its rows' pages as not all-visible: visible again.
  await vacuumUntilAllVisible(pool)
  // Every order that decides differently, as the service runs it: prepared, on its generic plan.
  const orders: SortKey[][] = [
    [{ property: 'id', direction: 'asc' }], [{ property: 'id', direction: 'desc' }],
    [{ property: 'name', direction: 'asc' }], [{ property: 'name', direction: 'desc' }]
  ]
  for (const first of ['asc', 'desc'] as const) {
    orders.push([{ property: 'description', direction: first }])
    for (const property of ['id', 'name'] as const) {
      for (const second of ['asc', 'desc'] as const) orders.push([{ property: 'description', direction: first }, { property, direction: second }])
    }
  }
  // 1000 grants, 50 a page: page 0 and the page before the middle are read forwards, the page after
  // it and the last one backwards; each takes the page and what it skips from the nearer end.
  const pages = [{ page: 0, reads: 50 }, { page: 9, reads: 500 }, { page: 10, reads: 500 }, { page: 19, reads: 50 }]
  for (const keys of orders) {
    for (const { page, reads } of pages) {
      const what = `${keys.map(({ property, direction }) => `${property}.${direction}`).join(',')} page ${page}`
      const nodes = planNodes(await explainPreparedTree(pool, listGrantedPermissionsSql(keys), ['api-2', 'app-042', 50, page, []]))
      const summary = nodes.map(describe).join(' > ')
      // The one sort allowed puts a page read backwards back in order: the page's rows, no more.
      t.notOk(nodes.some((node) => node['Node Type'].includes('Sort') && node.Plans?.some((child) => child['Actual Rows'] * child['Actual Loops'] > 50)),
        `${what}: nothing sorted but the page: ${summary}`)
      t.ok(nodes[0]['Actual Rows'] <= 50, `${what}: the top node holds the page only: ${describe(nodes[0])}`)
      t.notOk(nodes.some((node) => node['Relation Name'] === 'permissions'), `${what}: permissions are not read: ${summary}`)
      const scans = nodes.filter((node) => node['Relation Name'] === 'grants' && node['Actual Loops'] > 0)
      t.equal(scans.length, 1, `${what}: one scan of grants runs: ${summary}`)
      for (const scan of scans) {
        t.equal(scan['Node Type'], 'Index Only Scan', `${what}: index-only: ${describe(scan)}`)
        t.equal(scan['Heap Fetches'], 0, `${what}: no row read from the table: ${describe(scan)}`)
        t.match(scan['Index Cond'], /resource_id = .*client_id = |client_id = .*resource_id = /, `${what}: seeks the client's entries`)
        t.equal(scan['Actual Rows'], reads, `${what}: stops after the page: ${describe(scan)}`)
        t.ok(scan['Shared Hit Blocks'] + scan['Shared Read Blocks'] < 50, `${what}: a handful of index pages: ${describe(scan)}`)
      }
    }
  }

  const page = await listGrantedPermissions(pool, { resourceId: 'api-2', clientId: 'app-042', limit: 50, page: 0, sort: [{ property: 'name', direction: 'asc' }] }, { prepared: true })
  t.equal(page.total, 1000)
  const permissions = JSON.parse(page.permissionsJson!) as Array<{ id: string }>
  t.equal(permissions.length, 50)
  t.ok(permissions.every(({ id }) => id.startsWith('perm-2-')), 'only the permissions of the resource asked for')
})
