// npm run -s db:explain [-- GRANTS]: the plans of the service's statements on a large data set.
// Builds a throwaway embedded cluster (or uses DATABASE_URL, which it fills: an empty database, or
// one holding only its own data), generates GRANTS grants (default 1,000,000) inside PostgreSQL with
// generate_series — the same data as npm run bench (db/bench-data.ts) — and prints EXPLAIN (ANALYZE,
// BUFFERS) of each statement as the service runs it (prepared, generic plan). A failure (a
// DATABASE_URL that cannot be reached, or does not answer within MIGRATIONS_CONNECTION_WAIT_MS, or
// that holds data of its own) is one line and exit 1.
import pg from 'pg'
import { BIG_CLIENT, loadScale, RESOURCE_ID, SMALL_CLIENT } from '../db/bench-data.js'
import { givenOrThrowawayPostgres } from '../db/embedded-postgres.js'
import { explainPrepared } from '../db/explain.js'
import { migrateDatabase } from '../db/migrate.js'
import { migrationsDir } from '../src/project-root.js'
import { unauthorizeSql } from '../db/queries/change.js'
import { listGrantedPermissionsSql } from '../db/queries/list.js'
import { parseSortBy } from '../db/queries/sort.js'
import { type Command, isEntryPoint, readCommandLine, usageError } from '../src/command-line.js'
import { loadConfig } from '../src/config.js'
import { failureOf } from './database.js'

const command = {
  usage: 'npm run -s db:explain [-- GRANTS]',
  about: 'Prints EXPLAIN (ANALYZE, BUFFERS) of each of the service\'s statements, prepared as the service runs them,\n' +
    'on GRANTS generated grants (default 1000000, at least 2000; the data of npm run bench). Builds a throwaway\n' +
    'embedded cluster, or fills DATABASE_URL: give it an empty database (one holding data of its own is refused).',
  options: {},
  allowPositionals: true
} satisfies Command

/** Returns the exit code: 0 explained (or --help), 1 failed (the reason in one line on stderr), 2 bad arguments. */
async function main (args: string[]): Promise<number> {
  const commandLine = readCommandLine(command, args)
  if (typeof commandLine === 'number') return commandLine
  const { positionals } = commandLine
  if (positionals.length > 1) return usageError(command, `one GRANTS count, not ${positionals.length} arguments`)
  const total = Number(positionals[0] ?? 1_000_000)
  if (!Number.isInteger(total) || total < 2_000) return usageError(command, 'GRANTS must be an integer of at least 2000')

  try {
    await explainAll(total)
  } catch (error) {
    // As the db: commands say it (scripts/database.ts): one line, no stack trace.
    console.error(`No plan was explained: ${failureOf(error)}`)
    return 1
  }
  return 0
}

/**
 * What tells a database that is not db:explain's to fill (a shared or staging one DATABASE_URL
 * happens to name): a table of another application in a schema without the service's, or a
 * resource or client that is not the benchmark's. Undefined when empty, or holding only the
 * benchmark's data (an earlier db:explain or bench, which a larger scale grows).
 */
async function dataOfItsOwn (pool: pg.Pool): Promise<string | undefined> {
  const { rows: [{ service, table }] } = await pool.query<{ service: boolean, table: string | null }>(`
    SELECT to_regclass('resources') IS NOT NULL AS service,
      (SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace AND relkind IN ('r', 'p')
        ORDER BY relname LIMIT 1) AS table`)
  if (!service) return table === null ? undefined : `table "${table}"`
  const { rows: [row] } = await pool.query<{ what: string, id: string }>(`
    (SELECT 'resource' AS what, id FROM resources WHERE id <> $1 ORDER BY id LIMIT 1)
    UNION ALL
    (SELECT 'client', id FROM clients WHERE id NOT IN ($2, $3) AND id NOT LIKE 'filler-%' ORDER BY id LIMIT 1)
    LIMIT 1`, [RESOURCE_ID, SMALL_CLIENT, BIG_CLIENT])
  return row && `${row.what} "${row.id}"`
}

async function explainAll (total: number): Promise<void> {
  const config = loadConfig()
  const database = await givenOrThrowawayPostgres(config.DATABASE_URL)

  // A server that never answers fails the command after MIGRATIONS_CONNECTION_WAIT_MS, as the db:
  // commands' connections do, rather than hanging it.
  const pool = new pg.Pool({ connectionString: database.url, max: 1, connectionTimeoutMillis: config.MIGRATIONS_CONNECTION_WAIT_MS })
  // The throwaway server stops right after; its goodbye to an idle connection is expected.
  pool.on('error', () => {})
  try {
    if (config.DATABASE_URL) {
      const own = await dataOfItsOwn(pool)
      if (own) {
        throw new Error(`DATABASE_URL holds data of its own (${own}), and db:explain fills the database it is given with ` +
          'generated grants: give it an empty database, or unset DATABASE_URL for a throwaway one.')
      }
    }
    await migrateDatabase(pool, migrationsDir)
    const started = Date.now()
    const scale = await loadScale(pool, total)
    console.log(`-- ${scale.grants} grants generated in ${((Date.now() - started) / 1000).toFixed(1)} s` +
      ` (a client with 1,000, one with ${scale.bigGrants})\n`)

    const explain = async (title: string, sql: string, values: unknown[]) => {
      console.log(`-- ${title}\n${await explainPrepared(pool, sql, values)}\n`)
    }
    const list = (sortBy: string) => listGrantedPermissionsSql(parseSortBy(sortBy))
    await explain('GET page 0, limit 50, sort_by=name.asc; client with 1,000 grants', list('name.asc'), [RESOURCE_ID, SMALL_CLIENT, 50, 0, []])
    await explain(`GET deepest page, limit 500; client with ${scale.bigGrants} grants`, list('name.asc'),
      [RESOURCE_ID, BIG_CLIENT, 500, Math.ceil(scale.bigGrants / 500) - 1, []])
    await explain('GET page 0, limit 50, sort_by=id.desc; client with 1,000 grants', list('id.desc'), [RESOURCE_ID, SMALL_CLIENT, 50, 0, []])
    await explain('GET page 0, limit 50, sort_by=description.desc,name.asc; client with 1,000 grants',
      list('description.desc,name.asc'), [RESOURCE_ID, SMALL_CLIENT, 50, 0, []])
    // The order that read all of a client's grants before migration 0003, at both ends of the list.
    await explain(`GET page 0, limit 500, sort_by=description.desc; client with ${scale.bigGrants} grants`,
      list('description.desc'), [RESOURCE_ID, BIG_CLIENT, 500, 0, []])
    await explain(`GET deepest page, limit 500, sort_by=description.desc; client with ${scale.bigGrants} grants`,
      list('description.desc'), [RESOURCE_ID, BIG_CLIENT, 500, Math.ceil(scale.bigGrants / 500) - 1, []])
    const { rows } = await pool.query('SELECT permission_id FROM grants WHERE resource_id = $1 AND client_id = $2 LIMIT 500', [RESOURCE_ID, BIG_CLIENT])
    await explain('DELETE 500 ids (rolled back)', unauthorizeSql, [RESOURCE_ID, BIG_CLIENT, rows.map((row) => row.permission_id), null, 'explain', null, 'explain', null, false]) // rolled back: no history is kept
  } finally {
    await pool.end()
    await database.stop()
  }
}

if (isEntryPoint(import.meta.url)) process.exitCode = await main(process.argv.slice(2))
