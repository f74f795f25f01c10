// npm run -s db:prune-changes -- --older-than DAYS: deletes the change history recorded more than
// DAYS days ago (retention: README), on DATABASE_URL or the local embedded database: the only way
// history is deleted, as the database refuses any other DELETE of it (migration 0006, pruneChanges).
// Run it from a scheduler (a Kubernetes CronJob, cron); the service never deletes history by itself.
// Run as a process it calls pruneChangesCommand.
import { pruneChanges } from '../db/queries/history.js'
import { type Command, type DatabaseIo, isEntryPoint, processOutput, readCommandLine, usageError } from '../src/command-line.js'
import type pg from 'pg'
import { commandPool, failureOf, withDatabase } from './database.js'

// The oldest a change may be and still be asked for: past it the dates overflow.
const MAX_DAYS = 36500
const NEVER_MIGRATED = 'the database has no change history, as it was never migrated (npm run -s db:migrate migrates it; the service does at start).'

/** A failure the command has put in words of its own. */
class Explained extends Error {}

/**
 * Why a prune that found no table (42P01) found none: the database was never migrated only when no
 * schema of it holds the history. A migrated one whose history this connection does not reach (a
 * role or database whose search_path leaves the service's schema out, or a role without USAGE on
 * it, which PostgreSQL's lookup skips alike) is told so: migrating there would make a second, empty
 * history. Any other table missing is PostgreSQL's own words.
 */
async function whyNoTable (pool: pg.Pool, error: unknown): Promise<string> {
  const { rows: [found] } = await pool.query<{ reached: boolean, schemas: string[], search_path: string }>(`
    SELECT to_regclass('permission_changes') IS NOT NULL AS reached,
      ARRAY(SELECT n.nspname::text FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relname = 'permission_changes' AND c.relkind IN ('r', 'p') ORDER BY 1) AS schemas,
      current_setting('search_path') AS search_path`)
  if (found.reached) return failureOf(error)
  if (found.schemas.length === 0) return NEVER_MIGRATED
  return `the change history (permission_changes) is in schema ${found.schemas.join(', ')}, which this connection does not reach: ` +
    `its search_path (${found.search_path}) leaves it out, or its role lacks USAGE on it.`
}

const command = {
  usage: 'npm run -s db:prune-changes -- --older-than DAYS',
  about: 'Deletes the change history recorded more than DAYS days ago, on DATABASE_URL or the local embedded\n' +
    'database. Run it from a scheduler (a Kubernetes CronJob, cron): the service never deletes history itself.',
  options: {
    'older-than': { type: 'string', value: 'DAYS', about: 'the age, in whole days (at least 1), past which changes are deleted' }
  }
} satisfies Command

/** Returns the exit code: 0 pruned (or --help), 1 failed (the reason on err), 2 bad arguments. */
export async function pruneChangesCommand (args: string[], io: DatabaseIo = { ...processOutput, withDatabase }): Promise<number> {
  const commandLine = readCommandLine(command, args, io)
  if (typeof commandLine === 'number') return commandLine
  const olderThan = commandLine.values['older-than'] ?? ''
  const days = Number(olderThan)
  // At most about a hundred years: PostgreSQL refuses an interval or a date far past that (22008, 22003).
  if (!/^\d+$/.test(olderThan) || days < 1 || days > MAX_DAYS) return usageError(command, `--older-than must be a whole number of days, from 1 to ${MAX_DAYS}`, io)

  try {
    await io.withDatabase(async (database) => {
      const pool = commandPool(database.url, database)
      try {
        const pruned = await pruneChanges(pool, days)
        io.out(`Pruned ${pruned} change${pruned === 1 ? '' : 's'} recorded more than ${days} day${days === 1 ? '' : 's'} ago.`)
      } catch (error) {
        // An undefined table (42P01). Asked on a connection of its own: the prune's was discarded.
        if ((error as { code?: string }).code === '42P01') throw new Explained(await whyNoTable(pool, error).catch(() => failureOf(error)))
        throw error
      } finally {
        await pool.end()
      }
    })
  } catch (error) {
    // The prune is one transaction: nothing was deleted.
    io.err(`Nothing was pruned: ${error instanceof Explained ? error.message : failureOf(error)}`)
    return 1
  }
  return 0
}

if (isEntryPoint(import.meta.url)) process.exitCode = await pruneChangesCommand(process.argv.slice(2))
