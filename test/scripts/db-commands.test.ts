// The database commands as an operator runs them (npm run db:seed -- FILE.json, npm run db:migrate,
// npm run db:prune-changes), each a real process against a database of its own: what they load and
// apply, what they say, and their own argument rules (every command's --help, -h and unknown
// option: commands.test.ts). What a seed document may hold and how each bad one is refused, in
// process: test/db/seed.test.ts.
import { execFile } from 'node:child_process'
import { once } from 'node:events'
import { createServer, type Socket } from 'node:net'
import { join } from 'node:path'
import pg from 'pg'
import t from 'tap'
import { freePort } from '../../db/embedded-postgres.js'
import { projectRoot } from '../../src/project-root.js'
import { createTestDatabase, rowCounts } from '../support/database.js'
import { seedingFixture } from '../support/fixtures.js'
import { nodeArgsOf } from '../support/node-args.js'

interface Run { code: number | null, stdout: string, stderr: string }

/**
 * Runs scripts/SCRIPT with DATABASE_URL; resolves with the exit code and output, whatever the code.
 * Run by node as the system tests start the server (support/node-args.ts): one process, where tsx's CLI is two.
 */
function cli (script: string, args: string[], databaseUrl: string, env: Record<string, string> = {}, timeoutMs = 60_000): Promise<Run> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [...nodeArgsOf(`scripts/${script}`), ...args], {
      cwd: projectRoot,
      env: { PATH: process.env.PATH, DATABASE_URL: databaseUrl, ...env },
      timeout: timeoutMs
    }, (error, stdout, stderr) => {
      // Killed at the timeout: the code is null.
      if (error && typeof error.code !== 'number' && !error.killed) return reject(error)
      resolve({ code: error ? (error.killed ? null : error.code as number) : 0, stdout, stderr })
    })
  })
}

const validDocument = seedingFixture()

t.test('db:seed on an empty database applies the migrations, then loads the file (saved with a byte order mark, as some editors do)', async (t) => {
  const url = await createTestDatabase(t)
  const dir = t.testdir({ 'seed.json': '\uFEFF' + JSON.stringify(validDocument) })
  const file = join(dir, 'seed.json')
  t.equal(await rowCounts(url), null, 'no schema before')

  const run = await cli('db-seed.ts', [file], url)
  t.equal(run.code, 0, run.stderr)
  t.equal(run.stdout.trim(), `Loaded ${file}: 2 resources, 2 clients, 3 permissions, 3 authorizations, 3 grants.`)
  t.same(await rowCounts(url), { resources: 2, clients: 2, permissions: 3, authorizations: 3, grants: 3 })

  const client = new pg.Client({ connectionString: url })
  await client.connect()
  t.teardown(() => client.end())
  const grants = await client.query('SELECT resource_id, client_id, permission_id FROM grants ORDER BY 1, 2, 3')
  t.same(grants.rows, [
    { resource_id: 'orders-api', client_id: 'billing-app', permission_id: 'p_create_orders' },
    { resource_id: 'orders-api', client_id: 'billing-app', permission_id: 'p_read_orders' },
    { resource_id: 'reports-api', client_id: 'billing-app', permission_id: 'p_read_reports' }
  ])
  const permission = await client.query("SELECT resource_id, name, description FROM permissions WHERE id = 'p_read_orders'")
  t.same(permission.rows, [{ resource_id: 'orders-api', name: 'read:orders', description: 'Read orders' }])
  const migrations = await client.query("SELECT count(*)::int AS n FROM migrations WHERE name = 'create_permissions'")
  t.equal(migrations.rows[0].n, 1, 'the migration is recorded')
  // A bulk import, not a change: nothing in the history (operations.md says so, and why).
  t.equal((await client.query('SELECT count(*)::int AS n FROM permission_changes')).rows[0].n, 0)
})

t.test('db:seed refuses a file → exit 1, "Nothing was loaded." with the file and why, nothing loaded', async (t) => {
  const withBadLast = { ...validDocument, authorizations: [...validDocument.authorizations ?? [], { resource_id: 'reports-api', client_id: 'warehouse-app', permission_ids: ['p_read_orders'] }] }
  const cases = [
    // Refused before any database is touched (a file that cannot be read takes the same way).
    { name: 'not JSON', content: '{"resources": [{"id": "new-api"},]}', says: /is not valid JSON|in JSON at position/, after: null },
    // Refused by the database, its last authorization granting a permission of another resource:
    // migrated, and not one row of the file loaded.
    {
      name: 'a bad last authorization, on an empty database',
      content: JSON.stringify(withBadLast),
      says: /authorizations\[3\] \(resource "reports-api", client "warehouse-app"\): refers to something that does not exist/,
      after: { resources: 0, clients: 0, permissions: 0, authorizations: 0, grants: 0 }
    }
  ]
  // One process each, all at once.
  const dir = t.testdir(Object.fromEntries(cases.map(({ content }, index) => [`${index}.json`, content])))
  const runs = await Promise.all(cases.map(async (_, index) => {
    const url = await createTestDatabase(t)
    const file = join(dir, `${index}.json`)
    return { url, file, run: await cli('db-seed.ts', [file], url) }
  }))
  for (const [index, { name, says, after }] of cases.entries()) {
    const { url, file, run } = runs[index]
    t.equal(run.code, 1, name)
    t.equal(run.stdout, '', `${name}: nothing claims to be loaded`)
    t.ok(run.stderr.startsWith(`Nothing was loaded. ${file}: `), `${name}: ${run.stderr}`)
    t.match(run.stderr, says, name)
    t.same(await rowCounts(url), after, `${name}: ${after ? 'migrated, nothing loaded' : 'the database is not touched'}`)
  }
})

t.test('db:migrate applies the migrations to a fresh database, then says it is up to date', async (t) => {
  const url = await createTestDatabase(t)
  const first = await cli('db-migrate.ts', [], url)
  t.equal(first.code, 0, first.stderr)
  t.match(first.stdout, /^Applied: .*0001_create_permissions\.sql.*0002_page_scaling\.sql.*0003_description_on_grant\.sql.*0004_authorization_version\.sql.*0005_permission_changes\.sql.*0006_append_only_history\.sql.*0007_change_feed\.sql.*0008_grants_described_per_statement\.sql.*0009_version_follows_shown_grants\.sql.*0010_renames_lock_authorizations_first\.sql.*0011_trigger_functions_search_path\.sql.*0012_prune_mark_guarded\.sql.*0013_change_times_in_range\.sql.*0014_versions_outlive_truncate\.sql.*0015_prune_mark_below_next_ids\.sql$/m)
  t.same(await rowCounts(url), { resources: 0, clients: 0, permissions: 0, authorizations: 0, grants: 0 }, 'the tables exist')
  const again = await cli('db-migrate.ts', [], url)
  t.equal(again.code, 0, again.stderr)
  t.equal(again.stdout.trim(), 'The database is up to date.')
})

t.test('their own argument rules: --help wins over a valid file; a missing or extra argument → one line ending with the usage, exit 2; no database touched', async (t) => {
  const url = await createTestDatabase(t)
  const seedFile = join(t.testdir({ 'seed.json': JSON.stringify(validDocument) }), 'seed.json')
  const seed = 'npm run -s db:seed -- FILE.json'
  const prune = 'npm run -s db:prune-changes -- --older-than DAYS'
  const cases: Array<{ script: string, args: string[], usage: string, problem?: string }> = [
    { script: 'db-seed.ts', args: [seedFile, '--help'], usage: seed },
    { script: 'db-seed.ts', args: [], usage: seed, problem: 'FILE.json is missing' },
    { script: 'db-seed.ts', args: [seedFile, seedFile], usage: seed, problem: 'one file at a time, not 2' },
    { script: 'db-prune-changes.ts', args: [], usage: prune, problem: '--older-than must be a whole number of days, from 1 to 36500' },
    { script: 'db-prune-changes.ts', args: ['--older-than', '0'], usage: prune, problem: '--older-than must be a whole number of days, from 1 to 36500' },
    // Past it, PostgreSQL's dates overflow: it was an uncaught 22008 and exit 1.
    { script: 'db-prune-changes.ts', args: ['--older-than', '3000000'], usage: prune, problem: '--older-than must be a whole number of days, from 1 to 36500' }
  ]
  const runs = await Promise.all(cases.map(({ script, args }) => cli(script, args, url)))
  for (const [index, { script, args, usage, problem }] of cases.entries()) {
    const { code, stdout, stderr } = runs[index]
    const what = `${script} ${args.join(' ')}`
    if (problem === undefined) {
      t.equal(code, 0, what)
      t.equal(stderr, '', what)
      t.ok(stdout.startsWith(`usage: ${usage}\n`), `${what}: the usage line first`)
      t.match(stdout, /\nOptions:\n(.*\n)* {2}-h, --help +print this help and exit\n$/, `${what}: then the options`)
    } else {
      t.equal(code, 2, what)
      t.equal(stdout, '', what)
      t.ok(stderr.startsWith(problem), `${what}: ${stderr}`)
      t.ok(stderr.endsWith(` (usage: ${usage})\n`), `${what}: ends with the usage`)
      t.equal(stderr.trimEnd().split('\n').length, 1, `${what}: one line`)
    }
  }
  t.equal(await rowCounts(url), null, 'the database has no tables')
})

t.test('a database that cannot be reached, or never answers: one line saying so, exit 1, no stack trace', async (t) => {
  const file = join(t.testdir({ 'seed.json': JSON.stringify(validDocument) }), 'seed.json')
  // A server that takes connections and never says a word (a hung server or pooler): the commands
  // waited for it for ever.
  const sockets = new Set<Socket>()
  const silent = createServer((socket) => { sockets.add(socket) }).listen(0, '127.0.0.1')
  await once(silent, 'listening')
  t.teardown(() => { for (const socket of sockets) socket.destroy(); silent.close() })
  const silentUrl = `postgres://postgres@127.0.0.1:${(silent.address() as { port: number }).port}/nothing`
  const refusedUrl = `postgres://postgres@127.0.0.1:${await freePort()}/nothing`
  const commands = [
    { script: 'db-migrate.ts', args: [], says: 'The migrations were not applied: the database cannot be reached (' },
    { script: 'db-seed.ts', args: [file], says: `Nothing was loaded. ${file}: the database cannot be reached (` },
    { script: 'db-prune-changes.ts', args: ['--older-than', '30'], says: 'Nothing was pruned: the database cannot be reached (' },
    // db:explain on DATABASE_URL: it printed pg's stack trace (refused) and waited for ever (silent).
    { script: 'explain-queries.ts', args: ['2000'], says: 'No plan was explained: the database cannot be reached (' }
  ]
  const cases = commands.flatMap((command) => [
    { ...command, what: 'refused', url: refusedUrl },
    { ...command, what: 'silent', url: silentUrl }
  ])
  const runs = await Promise.all(cases.map(({ script, args, url }) => cli(script, args, url, { MIGRATIONS_CONNECTION_WAIT_MS: '1000' })))
  for (const [index, { script, what, says }] of cases.entries()) {
    const { code, stdout, stderr } = runs[index]
    const name = `${script}, ${what}`
    t.equal(code, 1, `${name}: ${stderr}`)
    t.equal(stdout, '', name)
    t.ok(stderr.startsWith(says), `${name}: ${stderr}`)
    t.equal(stderr.trimEnd().split('\n').length, 1, `${name}: one line`)
  }
})

t.test('a statement waiting on a lock another session holds: one line saying so, exit 1, within MIGRATIONS_CONNECTION_WAIT_MS, not a hang', async (t) => {
  const url = await createTestDatabase(t)
  t.equal((await cli('db-migrate.ts', [], url)).code, 0, 'migrated')
  const file = join(t.testdir({ 'seed.json': JSON.stringify(validDocument) }), 'seed.json')
  const holder = new pg.Client({ connectionString: url })
  await holder.connect()
  t.teardown(() => holder.end())
  const env = { MIGRATIONS_CONNECTION_WAIT_MS: '500' }
  const cases = [
    // The migrations read the table of those applied; db:seed migrates first.
    { table: 'migrations', script: 'db-migrate.ts', args: [], says: 'The migrations were not applied: ' },
    { table: 'migrations', script: 'db-seed.ts', args: [file], says: `Nothing was loaded. ${file}: ` },
    // The load itself, once migrated.
    { table: 'resources', script: 'db-seed.ts', args: [file], says: `Nothing was loaded. ${file}: ` },
    { table: 'permission_changes', script: 'db-prune-changes.ts', args: ['--older-than', '30'], says: 'Nothing was pruned: ' }
  ]
  for (const { table, script, args, says } of cases) {
    const name = `${script}, ${table} locked`
    await holder.query(`BEGIN; LOCK TABLE ${table} IN ACCESS EXCLUSIVE MODE`)
    const started = Date.now()
    const { code, stdout, stderr } = await cli(script, args, url, env, 20_000)
    await holder.query('ROLLBACK')
    t.equal(code, 1, `${name}: ${stderr}`)
    t.equal(stdout, '', name)
    t.equal(stderr, `${says}another session holds a lock it needs, for longer than MIGRATIONS_CONNECTION_WAIT_MS: try again once it is released (canceling statement due to lock timeout)\n`, name)
    t.ok(Date.now() - started < 15_000, `${name}: ${Date.now() - started} ms`)
  }
  t.same(await rowCounts(url), { resources: 0, clients: 0, permissions: 0, authorizations: 0, grants: 0 }, 'nothing loaded')
  // Without the lock the same commands go through.
  const seeded = await cli('db-seed.ts', [file], url, env)
  t.equal(seeded.code, 0, seeded.stderr)
  const pruned = await cli('db-prune-changes.ts', ['--older-than', '30'], url, env)
  t.equal(pruned.code, 0, pruned.stderr)
})

t.test('db:migrate and db:seed migrate through MIGRATIONS_DATABASE_URL when it is set, as the service does', async (t) => {
  const url = await createTestDatabase(t)
  const nowhere = `postgres://postgres@127.0.0.1:${await freePort()}/nothing`
  // DATABASE_URL a transaction pooler, say, where the migrations' session lock does not hold.
  const migrated = await cli('db-migrate.ts', [], nowhere, { MIGRATIONS_DATABASE_URL: url })
  t.equal(migrated.code, 0, migrated.stderr)
  t.match(migrated.stdout, /^Applied: .*0001_create_permissions\.sql/)
  t.same(await rowCounts(url), { resources: 0, clients: 0, permissions: 0, authorizations: 0, grants: 0 }, 'migrated on MIGRATIONS_DATABASE_URL')

  // Seeded on DATABASE_URL after migrating on MIGRATIONS_DATABASE_URL: the one where nothing listens
  // fails the command, whichever of the two it is.
  const file = join(t.testdir({ 'seed.json': JSON.stringify(validDocument) }), 'seed.json')
  const seeded = await cli('db-seed.ts', [file], url, { MIGRATIONS_DATABASE_URL: nowhere })
  t.equal(seeded.code, 1, 'migrating on MIGRATIONS_DATABASE_URL, where nothing listens')
  t.match(seeded.stderr, /the database cannot be reached/)
  t.same(await rowCounts(url), { resources: 0, clients: 0, permissions: 0, authorizations: 0, grants: 0 }, 'nothing loaded')
})

t.test('db:explain on a DATABASE_URL that holds data of its own: refused before anything is written, exit 1', async (t) => {
  const url = await createTestDatabase(t)
  const file = join(t.testdir({ 'seed.json': JSON.stringify(validDocument) }), 'seed.json')
  t.equal((await cli('db-seed.ts', [file], url)).code, 0, 'seeded')
  const before = await rowCounts(url)
  // It filled it: a resource, 100,000 permissions, clients and grants of the benchmark's, among the
  // service's own (a shared or staging database DATABASE_URL happened to name).
  const run = await cli('explain-queries.ts', ['2000'], url, {}, 120_000)
  t.equal(run.code, 1, run.stderr)
  t.equal(run.stdout, '')
  t.equal(run.stderr, 'No plan was explained: DATABASE_URL holds data of its own (resource "orders-api"), and db:explain fills the database it is given with generated grants: give it an empty database, or unset DATABASE_URL for a throwaway one.\n')
  t.same(await rowCounts(url), before, 'nothing written')

  // Another application's database (tables, none of the service's): refused too, not migrated.
  const other = await createTestDatabase(t)
  const client = new pg.Client({ connectionString: other })
  await client.connect()
  t.teardown(() => client.end())
  await client.query('CREATE TABLE invoices (id int)')
  const elsewhere = await cli('explain-queries.ts', ['2000'], other, {}, 120_000)
  t.equal(elsewhere.code, 1, elsewhere.stderr)
  t.equal(elsewhere.stderr, 'No plan was explained: DATABASE_URL holds data of its own (table "invoices"), and db:explain fills the database it is given with generated grants: give it an empty database, or unset DATABASE_URL for a throwaway one.\n')
  t.equal(await rowCounts(other), null, 'not migrated')
})

t.test('db:prune-changes on a database never migrated: one line saying so and what to run, exit 1, nothing created', async (t) => {
  const url = await createTestDatabase(t)
  const run = await cli('db-prune-changes.ts', ['--older-than', '30'], url)
  t.equal(run.code, 1, run.stderr)
  t.equal(run.stdout, '')
  t.equal(run.stderr, 'Nothing was pruned: the database has no change history, as it was never migrated (npm run -s db:migrate migrates it; the service does at start).\n')
  t.equal(await rowCounts(url), null, 'nothing created')
})

t.test('db:prune-changes on a migrated database whose history its connection does not reach (search_path): says where the history is, not that it was never migrated', async (t) => {
  const url = await createTestDatabase(t)
  t.equal((await cli('db-migrate.ts', [], url)).code, 0, 'migrated')
  // As a role or database whose search_path leaves out the schema the service migrated (or whose
  // role lacks USAGE on it, which PostgreSQL's name lookup skips alike): the table is not found.
  const admin = new pg.Client({ connectionString: url })
  await admin.connect()
  await admin.query(`ALTER DATABASE "${new URL(url).pathname.slice(1)}" SET search_path = elsewhere`)
  await admin.end()
  const run = await cli('db-prune-changes.ts', ['--older-than', '30'], url)
  t.equal(run.code, 1, run.stderr)
  t.equal(run.stdout, '')
  t.notMatch(run.stderr, /never migrated|db:migrate/, 'migrating on this connection would make a second, empty history elsewhere')
  t.equal(run.stderr, 'Nothing was pruned: the change history (permission_changes) is in schema public, which this connection does not reach: ' +
    'its search_path (elsewhere) leaves it out, or its role lacks USAGE on it.\n')
})
t.test('db:migrate on a database a newer version migrated: nothing applied, and it says the database is ahead, naming what it does not know', async (t) => {
  const url = await createTestDatabase(t)
  t.equal((await cli('db-migrate.ts', [], url)).code, 0, 'migrated')
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  t.teardown(() => client.end())
  // As a newer version leaves it: a migration recorded that this version has no file for. It said
  // "The database is up to date.", as if this version's schema were the database's.
  await client.query("INSERT INTO migrations (id, name, hash) VALUES (9001, 'from_a_newer_version', 'x')")
  const run = await cli('db-migrate.ts', [], url)
  t.equal(run.code, 0, run.stderr)
  t.equal(run.stdout, 'Nothing was applied: the database is ahead of this version, migrated by a newer one (it has 9001_from_a_newer_version, which this version does not know).\n')
})

t.test('db:migrate on a database whose applied migration differs from its file: one line saying which, exit 1', async (t) => {
  const url = await createTestDatabase(t)
  t.equal((await cli('db-migrate.ts', [], url)).code, 0, 'migrated')
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  t.teardown(() => client.end())
  await client.query("UPDATE migrations SET hash = 'x' WHERE name = 'description_on_grant'")
  const { code, stdout, stderr } = await cli('db-migrate.ts', [], url)
  t.equal(code, 1, stderr)
  t.equal(stdout, '')
  t.ok(stderr.startsWith('The migrations were not applied: '), stderr)
  t.match(stderr, /0003_description_on_grant\.sql/)
  // postgres-migrations says it on two lines.
  t.equal(stderr.trimEnd().split('\n').length, 1, `one line: ${stderr}`)
})
