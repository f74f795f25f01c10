// npm run db:migrate: applies pending migrations to DATABASE_URL (through MIGRATIONS_DATABASE_URL when
// set, as the service does), or to the local embedded database, and says which, or that there were
// none, or that the database is ahead of this version (migrated by a newer one: exit 0, nothing to
// apply); a failure is one line and exit 1. Run as a process it calls migrateCommand.
import { migrateDatabase, migrationsNotKnown } from '../db/migrate.js'
import { migrationsDir } from '../src/project-root.js'
import { type Command, type DatabaseIo, isEntryPoint, processOutput, readCommandLine } from '../src/command-line.js'
import { commandPool, failureOf, withDatabase } from './database.js'

const command = {
  usage: 'npm run -s db:migrate',
  about: 'Applies the pending migrations (db/migrations/) to DATABASE_URL (through MIGRATIONS_DATABASE_URL when set),\n' +
    'or to the local embedded database, and names them. The service also migrates at start.',
  options: {}
} satisfies Command

/** Returns the exit code: 0 migrated (or --help), 1 failed (the reason on err), 2 bad arguments. */
export async function migrateCommand (args: string[], io: DatabaseIo = { ...processOutput, withDatabase }): Promise<number> {
  const commandLine = readCommandLine(command, args, io)
  if (typeof commandLine === 'number') return commandLine
  try {
    await io.withDatabase(async (database) => {
      const pool = commandPool(database.migrationsUrl, database)
      try {
        const applied = await migrateDatabase(pool, migrationsDir)
        // postgres-migrations passes over migrations it has no file for: the database is not "up to
        // date" with this version, it is ahead of it (a rollback of the service leaves the schema).
        const notKnown = await migrationsNotKnown(pool, migrationsDir)
        const ahead = `the database is ahead of this version, migrated by a newer one (it has ${notKnown.join(', ')}, which this version does not know).`
        if (applied.length > 0) io.out(`Applied: ${applied.join(', ')}`)
        if (notKnown.length > 0) io.out(applied.length > 0 ? `Yet ${ahead}` : `Nothing was applied: ${ahead}`)
        else if (applied.length === 0) io.out('The database is up to date.')
      } finally {
        await pool.end()
      }
    })
  } catch (error) {
    io.err(`The migrations were not applied: ${failureOf(error)}`)
    return 1
  }
  return 0
}

if (isEntryPoint(import.meta.url)) process.exitCode = await migrateCommand(process.argv.slice(2))
