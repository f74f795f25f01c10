// Runs a command with TEST_DATABASE_URL set: the given one, or a throwaway embedded cluster made for
// this run and removed after it. Used by `npm test` (tap) and `npm run mutation` (Stryker).
// Also sets TEST_TEMPLATE_DATABASE: a database migrated once for the run, which test/support/database.ts
// copies for each app it builds instead of migrating every one anew; and TEST_DEREFERENCED_SPEC:
// the spec bundled once for the run (src/spec.ts).
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { databaseUrlOf, onServer } from '../db/databases.js'
import { givenOrThrowawayPostgres } from '../db/embedded-postgres.js'
import { migrateDatabase } from '../db/migrate.js'
import { migrationsDir, projectRoot } from '../src/project-root.js'
import { dereferencedSpec } from '../src/spec.js'

/** A database on the server with every migration applied, and no connection left open to it. */
async function migratedTemplate (serverUrl: string): Promise<string> {
  const name = `test_template_${randomBytes(6).toString('hex')}`
  await onServer(serverUrl, `CREATE DATABASE ${name}`)
  const pool = new pg.Pool({ connectionString: databaseUrlOf(serverUrl, name), max: 1 })
  try {
    await migrateDatabase(pool, migrationsDir)
  } finally {
    await pool.end()
  }
  return name
}

/** What a command run against the test database needs in its environment. */
export type TestDatabaseEnv = Pick<NodeJS.ProcessEnv, 'TEST_DATABASE_URL' | 'TEST_TEMPLATE_DATABASE' | 'TEST_DEREFERENCED_SPEC'>

/** Runs `work` with the test database, its migrated template and the bundled spec; removes them after. */
export async function withTestDatabase<T> (work: (env: TestDatabaseEnv) => Promise<T>): Promise<T> {
  // In RAM when there is room: nothing of it outlives the run (db/embedded-postgres.ts).
  const database = await givenOrThrowawayPostgres(process.env.TEST_DATABASE_URL, { inMemory: true })
  const template = await migratedTemplate(database.url)
  const specDir = await mkdtemp(join(tmpdir(), 'client-permissions-spec-'))
  try {
    const spec = join(specDir, 'openapi.dereferenced.json')
    await writeFile(spec, JSON.stringify(await dereferencedSpec()))
    return await work({ TEST_DATABASE_URL: database.url, TEST_TEMPLATE_DATABASE: template, TEST_DEREFERENCED_SPEC: spec })
  } finally {
    await onServer(database.url, `DROP DATABASE IF EXISTS ${template} WITH (FORCE)`).catch(() => {})
    await rm(specDir, { recursive: true, force: true })
    await database.stop()
  }
}

/** Runs node_modules/.bin/`bin` with the test database (and `env`) in its environment; its exit code, or 1 when a signal ended it. */
export async function runBin (bin: string, args: string[], env: NodeJS.ProcessEnv): Promise<number> {
  const child = spawn(join(projectRoot, 'node_modules', '.bin', bin), args, { stdio: 'inherit', env: { ...process.env, ...env } })
  // Interrupted, the command stops first and the throwaway cluster is still removed after it.
  const stop = (name: NodeJS.Signals) => child.kill(name)
  for (const name of ['SIGINT', 'SIGTERM'] as const) process.on(name, stop)
  const [code, signal] = await once(child, 'exit') as [number | null, string | null]
  for (const name of ['SIGINT', 'SIGTERM'] as const) process.off(name, stop)
  return code ?? (signal ? 1 : 0)
}

export async function runWithTestDatabase (bin: string, args: string[], env: NodeJS.ProcessEnv = {}): Promise<never> {
  process.exit(await withTestDatabase((database) => runBin(bin, args, { ...env, ...database })))
}
