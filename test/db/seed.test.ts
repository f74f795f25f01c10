// The database commands as an operator runs them (npm run db:seed -- FILE.json, npm run db:migrate):
// the real scripts in a child process, against a database of their own; the many ways a seed file
// is refused, and every command's --help and bad arguments (db:prune-changes's too), run the same
// commands in-process (the functions scripts/db-*.ts export).
import { execFile } from 'node:child_process'
import { join } from 'node:path'
import pg from 'pg'
import t from 'tap'
import { migrateDatabase } from '../../db/migrate.js'
import { seedDatabase, type SeedData } from '../../db/seed.js'
import { migrationsDir, projectRoot } from '../../src/project-root.js'
import { capturedOutput, type DatabaseIo } from '../../scripts/command.js'
import { migrateCommand } from '../../scripts/db-migrate.js'
import { pruneChangesCommand } from '../../scripts/db-prune-changes.js'
import { seedCommand } from '../../scripts/db-seed.js'
import { createTestDatabase } from '../support/database.js'

const tsx = join(projectRoot, 'node_modules', '.bin', 'tsx')

interface Run { code: number | null, stdout: string, stderr: string }

/** Runs scripts/SCRIPT with DATABASE_URL; resolves with the exit code and output, whatever the code. */
function cli (script: string, args: string[], databaseUrl: string): Promise<Run> {
  return new Promise((resolve, reject) => {
    execFile(tsx, [join('scripts', script), ...args], {
      cwd: projectRoot,
      env: { ...process.env, DATABASE_URL: databaseUrl },
      timeout: 60_000
    }, (error, stdout, stderr) => {
      if (error && typeof error.code !== 'number') return reject(error)
      resolve({ code: error ? error.code as number : 0, stdout, stderr })
    })
  })
}

/** db:seed in-process: the same exit code and output as the script, without starting a process. */
async function seed (file: string, databaseUrl: string): Promise<Run> {
  const output = capturedOutput()
  const code = await seedCommand([file], { ...output, withDatabase: (work) => work(databaseUrl) })
  return { code, stdout: output.stdout(), stderr: output.stderr() }
}

const tables = ['resources', 'clients', 'permissions', 'authorizations', 'grants'] as const
type Counts = Record<typeof tables[number], number>

/** Row counts of every table, or null when the schema has not been created. */
async function counts (databaseUrl: string): Promise<Counts | null> {
  const client = new pg.Client({ connectionString: databaseUrl })
  await client.connect()
  try {
    const { rows: [{ exists }] } = await client.query("SELECT to_regclass('public.grants') IS NOT NULL AS exists")
    if (!exists) return null
    const result: Partial<Counts> = {}
    for (const table of tables) result[table] = (await client.query(`SELECT count(*)::int AS n FROM ${table}`)).rows[0].n
    return result as Counts
  } finally {
    await client.end()
  }
}

function validDocument (): SeedData {
  return {
    resources: [{ id: 'orders-api', name: 'Orders API' }, { id: 'reports-api' }],
    clients: [{ id: 'billing-app', name: 'Billing' }, { id: 'warehouse-app' }],
    permissions: [
      { id: 'p_read_orders', resource_id: 'orders-api', name: 'read:orders', description: 'Read orders' },
      { id: 'p_create_orders', resource_id: 'orders-api', name: 'create:orders' },
      { id: 'p_read_reports', resource_id: 'reports-api', name: 'read:reports' }
    ],
    authorizations: [
      { resource_id: 'orders-api', client_id: 'billing-app', permission_ids: ['p_read_orders', 'p_create_orders'] },
      { resource_id: 'reports-api', client_id: 'billing-app', permission_ids: ['p_read_reports'] },
      { resource_id: 'orders-api', client_id: 'warehouse-app' }
    ]
  }
}
const validCounts: Counts = { resources: 2, clients: 2, permissions: 3, authorizations: 3, grants: 3 }

t.test('db:seed on an empty database applies the migrations, then loads the file', async (t) => {
  const url = await createTestDatabase(t)
  const dir = t.testdir({ 'seed.json': JSON.stringify(validDocument()) })
  const file = join(dir, 'seed.json')
  t.equal(await counts(url), null, 'no schema before')

  const run = await cli('db-seed.ts', [file], url)
  t.equal(run.code, 0, run.stderr)
  t.equal(run.stdout.trim(), `Loaded ${file}: 2 resources, 2 clients, 3 permissions, 3 authorizations, 3 grants.`)
  t.same(await counts(url), validCounts)

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
})

t.test('db:seed run again with the same file succeeds and changes nothing', async (t) => {
  const url = await createTestDatabase(t)
  const file = join(t.testdir({ 'seed.json': JSON.stringify(validDocument()) }), 'seed.json')
  t.equal((await seed(file, url)).code, 0)
  const snapshot = async () => {
    const client = new pg.Client({ connectionString: url })
    await client.connect()
    try {
      const result: Record<string, unknown[]> = {}
      for (const table of [...tables, 'migrations']) result[table] = (await client.query(`SELECT * FROM ${table} AS row ORDER BY row::text`)).rows
      return result
    } finally {
      await client.end()
    }
  }
  const before = await snapshot()
  for (const attempt of [1, 2]) {
    const run = await seed(file, url)
    t.equal(run.code, 0, `run ${attempt + 1}: ${run.stderr}`)
    t.equal(run.stderr, '')
    t.same(await counts(url), validCounts)
  }
  t.same(await snapshot(), before, 'every row is as it was, names and descriptions included')
})

t.test('seeding again with new descriptions: the grants carry them, a description at the bound included', async (t) => {
  const pool = new pg.Pool({ connectionString: await createTestDatabase(t), max: 1 })
  pool.on('error', () => {}) // the database is dropped with FORCE at teardown
  t.teardown(() => pool.end())
  await migrateDatabase(pool, migrationsDir)
  await seedDatabase(pool, validDocument())
  const granted = async () => (await pool.query(`
    SELECT client_id, permission_id, permission_description FROM grants WHERE resource_id = 'orders-api' ORDER BY 1, 2`)).rows
  t.same(await granted(), [
    { client_id: 'billing-app', permission_id: 'p_create_orders', permission_description: null },
    { client_id: 'billing-app', permission_id: 'p_read_orders', permission_description: 'Read orders' }
  ])
  const changed = validDocument()
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

t.test('db:seed refuses a bad file, says which entry is wrong and loads nothing of it', async (t) => {
  // A database already holding the valid document: a refused file must leave it exactly as is.
  const url = await createTestDatabase(t)
  const pool = new pg.Pool({ connectionString: url, max: 1 })
  pool.on('error', () => {}) // the database is dropped with FORCE at teardown
  t.teardown(() => pool.end())
  await migrateDatabase(pool, migrationsDir)
  await seedDatabase(pool, validDocument())

  // Valid new rows first, so a partial load would show in the counts.
  const fresh = {
    resources: [{ id: 'new-api' }],
    clients: [{ id: 'new-app' }],
    permissions: [{ id: 'p_new', resource_id: 'new-api', name: 'read:new' }]
  }
  const newAuthorization = { resource_id: 'new-api', client_id: 'new-app', permission_ids: ['p_new'] }
  const cases: Array<{ name: string, content: string, stderr: Array<string | RegExp> }> = [
    {
      name: 'invalid JSON',
      content: '{"resources": [{"id": "new-api"},]}',
      stderr: [/is not valid JSON|in JSON at position/]
    },
    {
      name: 'a permission name with a space',
      content: JSON.stringify({ ...fresh, permissions: [...fresh.permissions, { id: 'p_bad', resource_id: 'new-api', name: 'bad name' }] }),
      stderr: ['/permissions/1/name must match pattern']
    },
    {
      name: 'several problems: each is named',
      content: JSON.stringify({
        ...fresh,
        clients: [{ id: 'c'.repeat(256) }],
        permissions: [{ id: 'p_bad', resource_id: 'new-api', name: 'read:' }],
        authorizations: [{ resource_id: 'new-api' }]
      }),
      stderr: ['/clients/0/id must NOT have more than 255 characters', '/permissions/0/name must match pattern', "/authorizations/0 must have required property 'client_id'"]
    },
    {
      name: 'a description longer than 255 characters (the spec\'s bound)',
      content: JSON.stringify({ ...fresh, permissions: [{ ...fresh.permissions[0], description: 'd'.repeat(256) }] }),
      stderr: ['/permissions/0/description must NOT have more than 255 characters']
    },
    {
      name: 'a document that is not an object',
      content: '[]',
      stderr: ['(document) must be object']
    },
    {
      name: 'an unknown top-level key',
      content: JSON.stringify({ ...fresh, permision: [] }),
      stderr: ['(document) must NOT have additional properties']
    },
    {
      name: 'an authorization granting a permission of another resource (the last entry)',
      content: JSON.stringify({
        ...fresh,
        authorizations: [newAuthorization, { resource_id: 'new-api', client_id: 'billing-app', permission_ids: ['p_read_orders'] }]
      }),
      stderr: ['authorizations[1] (resource "new-api", client "billing-app"): refers to something that does not exist', 'p_read_orders']
    },
    {
      name: 'a permission of a resource that does not exist',
      content: JSON.stringify({ ...fresh, permissions: [...fresh.permissions, { id: 'p_ghost', resource_id: 'ghost-api', name: 'read:ghost' }] }),
      stderr: ['permissions[1] "p_ghost": refers to something that does not exist', 'ghost-api']
    },
    {
      name: 'an authorization of a client that does not exist',
      content: JSON.stringify({ ...fresh, authorizations: [newAuthorization, { resource_id: 'new-api', client_id: 'ghost-app' }] }),
      stderr: ['authorizations[1] (resource "new-api", client "ghost-app"): refers to something that does not exist']
    },
    {
      name: 'a permission name already used on the resource by another id',
      content: JSON.stringify({ ...fresh, permissions: [...fresh.permissions, { id: 'p_read_orders_2', resource_id: 'orders-api', name: 'read:orders' }] }),
      stderr: ['permissions[1] "p_read_orders_2": conflicts with an existing row']
    },
    {
      name: 'ids and texts PostgreSQL or Unicode cannot hold (NUL, a lone surrogate)',
      content: JSON.stringify({
        ...fresh,
        resources: [...fresh.resources, { id: 'nul\u0000api' }, { id: '\ud800' }],
        permissions: [...fresh.permissions, { id: 'p_nul', resource_id: 'new-api', name: 'read:a\u0000b', description: 'x\u0000' }]
      }),
      stderr: ['/resources/1/id must match pattern', '/resources/2/id must match pattern', '/permissions/1/name must match pattern', '/permissions/1/description must match pattern']
    },
    {
      name: 'a permission id that belongs to another resource',
      content: JSON.stringify({ ...fresh, permissions: [...fresh.permissions, { id: 'p_read_orders', resource_id: 'new-api', name: 'read:orders' }] }),
      stderr: ['permissions[1] "p_read_orders": the id already belongs to a permission of another resource']
    }
  ]
  const before = await counts(url)
  t.same(before, validCounts)
  for (const { name, content, stderr } of cases) {
    await t.test(name, async (t) => {
      const file = join(t.testdir({ 'bad.json': content }), 'bad.json')
      const run = await seed(file, url)
      t.equal(run.code, 1)
      t.equal(run.stdout, '', 'nothing claims to be loaded')
      const prefix = `Nothing was loaded. ${file}: `
      t.ok(run.stderr.startsWith(prefix), run.stderr)
      // After the file's path, which holds the test's name.
      const message = run.stderr.slice(prefix.length)
      for (const expected of stderr) {
        if (typeof expected === 'string') t.ok(message.includes(expected), `stderr names ${expected}`)
        else t.match(message, expected)
      }
      t.same(await counts(url), before, 'the tables are as they were')
      const { rows } = await pool.query(`
        SELECT (SELECT count(*) FROM resources WHERE id = 'new-api')::int AS resources,
               (SELECT count(*) FROM clients WHERE id = 'new-app')::int AS clients`)
      t.same(rows[0], { resources: 0, clients: 0 }, 'not even the valid entries before the bad one')
    })
  }
  const names = await pool.query("SELECT name FROM permissions WHERE id = 'p_read_orders'")
  t.same(names.rows, [{ name: 'read:orders' }], 'an existing permission was not renamed or moved')
})

t.test('db:seed names the unknown key it refuses', async (t) => {
  const url = await createTestDatabase(t)
  const file = join(t.testdir({ 'bad.json': JSON.stringify({ resources: [], permision: [] }) }), 'bad.json')
  const run = await seed(file, url)
  t.equal(run.code, 1)
  t.match(run.stderr.slice(`Nothing was loaded. ${file}: `.length), /permision/)
})

t.test('db:seed with a bad last authorization on an empty database leaves every table empty', async (t) => {
  const url = await createTestDatabase(t)
  const document = validDocument()
  document.authorizations!.push({ resource_id: 'reports-api', client_id: 'warehouse-app', permission_ids: ['p_read_orders'] })
  const file = join(t.testdir({ 'seed.json': JSON.stringify(document) }), 'seed.json')
  const run = await seed(file, url)
  t.equal(run.code, 1)
  t.ok(run.stderr.includes('authorizations[3] (resource "reports-api", client "warehouse-app"): refers to something that does not exist'), run.stderr)
  t.same(await counts(url), { resources: 0, clients: 0, permissions: 0, authorizations: 0, grants: 0 }, 'migrated, nothing loaded')
})

t.test('db:seed with a file that does not exist → exit 1 naming the file, nothing loaded', async (t) => {
  const url = await createTestDatabase(t)
  const file = join(t.testdir(), 'missing.json')
  const run = await seed(file, url)
  t.equal(run.code, 1)
  t.ok(run.stderr.startsWith(`Nothing was loaded. ${file}: `), run.stderr)
  t.match(run.stderr, /ENOENT/)
  t.equal(await counts(url), null, 'the database is not touched')
})

t.test('db:seed, db:migrate, db:prune-changes: --help and -h print the usage and touch no database; bad arguments → one line, exit 2', async (t) => {
  const url = await createTestDatabase(t)
  const seedFile = join(t.testdir({ 'seed.json': JSON.stringify(validDocument()) }), 'seed.json')
  let touched = 0
  const run = async (command: (args: string[], io: DatabaseIo) => Promise<number>, args: string[]): Promise<Run> => {
    const output = capturedOutput()
    const code = await command(args, { ...output, withDatabase: (work) => { touched++; return work(url) } })
    return { code, stdout: output.stdout(), stderr: output.stderr() }
  }
  const commands = [
    {
      name: 'db:seed',
      command: seedCommand,
      usage: 'npm run -s db:seed -- FILE.json',
      // With a valid file too: the help wins, and nothing is loaded.
      help: [[seedFile, '--help'], ['-h', seedFile]],
      bad: [[['--bogus', seedFile], "Unknown option '--bogus'"], [[], 'FILE.json is missing'], [[seedFile, seedFile], 'one file at a time, not 2']]
    },
    {
      name: 'db:migrate',
      command: migrateCommand,
      usage: 'npm run -s db:migrate',
      help: [['--help'], ['-h']],
      bad: [[['--bogus'], "Unknown option '--bogus'"], [['up'], "Unexpected argument 'up'"]]
    },
    {
      name: 'db:prune-changes',
      command: pruneChangesCommand,
      usage: 'npm run -s db:prune-changes -- --older-than DAYS',
      help: [['--help'], ['-h', '--older-than', '30']],
      bad: [[['--bogus', '--older-than', '30'], "Unknown option '--bogus'"], [[], '--older-than must be a whole number of days, at least 1'],
        [['--older-than', '0'], '--older-than must be a whole number of days, at least 1'], [['--older-than'], "Option '--older-than <value>' argument missing"]]
    }
  ] as Array<{ name: string, command: (args: string[], io: DatabaseIo) => Promise<number>, usage: string, help: string[][], bad: Array<[string[], string]> }>
  for (const { name, command, usage, help, bad } of commands) {
    for (const args of help) {
      const what = `${name} ${args.join(' ')}`
      const { code, stdout, stderr } = await run(command, args)
      t.equal(code, 0, what)
      t.equal(stderr, '', what)
      t.ok(stdout.startsWith(`usage: ${usage}\n`), `${what}: the usage line first`)
      t.match(stdout, /\nOptions:\n(.*\n)* {2}-h, --help +print this help and exit\n$/, `${what}: then the options`)
    }
    for (const [args, problem] of bad) {
      const what = `${name} ${args.join(' ')}`
      const { code, stdout, stderr } = await run(command, args)
      t.equal(code, 2, what)
      t.equal(stdout, '', what)
      t.ok(stderr.startsWith(problem), `${what}: ${stderr}`)
      t.ok(stderr.endsWith(` (usage: ${usage})\n`), `${what}: ends with the usage`)
      t.equal(stderr.trimEnd().split('\n').length, 1, `${what}: one line`)
    }
  }
  t.equal(touched, 0, 'no command asked for the database')
  t.equal(await counts(url), null, 'the database has no tables')
})

t.test('db:migrate applies the migrations to a fresh database, then says it is up to date', async (t) => {
  const url = await createTestDatabase(t)
  const first = await cli('db-migrate.ts', [], url)
  t.equal(first.code, 0, first.stderr)
  t.match(first.stdout, /^Applied: .*0001_create_permissions\.sql.*0002_page_scaling\.sql.*0003_description_on_grant\.sql.*0004_authorization_version\.sql.*0005_permission_changes\.sql.*0006_append_only_history\.sql.*0007_change_feed\.sql$/m)
  t.same(await counts(url), { resources: 0, clients: 0, permissions: 0, authorizations: 0, grants: 0 }, 'the tables exist')
  // Again, in-process (the same command): nothing left to apply.
  const output = capturedOutput()
  t.equal(await migrateCommand([], { ...output, withDatabase: (work) => work(url) }), 0)
  t.equal(output.stdout().trim(), 'The database is up to date.')
})
