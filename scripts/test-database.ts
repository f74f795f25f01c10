// Runs a command with TEST_DATABASE_URL set: the given one, or a throwaway embedded cluster made for
// this run and removed after it. Used by `npm test` (tap) and `npm run mutation` (Stryker).
// Also sets TEST_TEMPLATE_DATABASE: a database migrated once for the run, which test/helper.ts
// copies for each app it builds instead of migrating every one anew; and TEST_DEREFERENCED_SPEC:
// the spec bundled once for the run (scripts/spec.ts).
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { givenOrThrowawayPostgres } from '../db/embedded-postgres.js'
import { migrateDatabase } from '../db/migrate.js'
import { migrationsDir, projectRoot } from '../src/project-root.js'
import { dereferencedSpec } from './spec.js'

/** Runs one statement (CREATE or DROP DATABASE) on its own connection to the server. */
export async function onServer (serverUrl: string, sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: serverUrl })
  await client.connect()
  try {
    await client.query(sql)
  } finally {
    await client.end()
  }
}

/** The URL of database `name` on the server at `serverUrl`. */
export function databaseUrlOf (serverUrl: string, name: string): string {
  const url = new URL(serverUrl)
  url.pathname = `/${name}`
  return url.toString()
}

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

export async function runWithTestDatabase (bin: string, args: string[]): Promise<never> {
  const database = await givenOrThrowawayPostgres(process.env.TEST_DATABASE_URL)
  const template = await migratedTemplate(database.url)
  const specDir = await mkdtemp(join(tmpdir(), 'client-permissions-spec-'))
  const spec = join(specDir, 'openapi.dereferenced.json')
  await writeFile(spec, JSON.stringify(await dereferencedSpec()))
  const child = spawn(join(projectRoot, 'node_modules', '.bin', bin), args, {
    stdio: 'inherit',
    env: { ...process.env, TEST_DATABASE_URL: database.url, TEST_TEMPLATE_DATABASE: template, TEST_DEREFERENCED_SPEC: spec }
  })
  // Interrupted, the command stops first and the throwaway cluster is still removed after it.
  for (const name of ['SIGINT', 'SIGTERM'] as const) process.on(name, () => child.kill(name))
  const [code, signal] = await once(child, 'exit') as [number | null, string | null]
  await onServer(database.url, `DROP DATABASE IF EXISTS ${template} WITH (FORCE)`).catch(() => {})
  await rm(specDir, { recursive: true, force: true })
  await database.stop()
  process.exit(code ?? (signal ? 1 : 0))
}
