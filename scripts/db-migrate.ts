// npm run db:migrate: applies pending migrations to DATABASE_URL, or to the local embedded database,
// and says which, or that there were none. Run as a process it calls migrateCommand.
import pg from 'pg'
import { migrateDatabase } from '../db/migrate.js'
import { migrationsDir } from '../src/project-root.js'
import { type Command, type DatabaseIo, isEntryPoint, processOutput, readCommandLine } from '../src/command-line.js'
import { withDatabase } from './database.js'

const command = {
  usage: 'npm run -s db:migrate',
  about: 'Applies the pending migrations (db/migrations/) to DATABASE_URL, or to the local embedded database,\n' +
    'and names them. The service also migrates at start.',
  options: {}
} satisfies Command

/** Returns the exit code: 0 migrated (or --help), 2 bad arguments. A failed migration throws. */
export async function migrateCommand (args: string[], io: DatabaseIo = { ...processOutput, withDatabase }): Promise<number> {
  const commandLine = readCommandLine(command, args, io)
  if (typeof commandLine === 'number') return commandLine
  await io.withDatabase(async (url) => {
    const pool = new pg.Pool({ connectionString: url, max: 1 })
    try {
      const applied = await migrateDatabase(pool, migrationsDir)
      io.out(applied.length > 0 ? `Applied: ${applied.join(', ')}` : 'The database is up to date.')
    } finally {
      await pool.end()
    }
  })
  return 0
}

if (isEntryPoint(import.meta.url)) process.exitCode = await migrateCommand(process.argv.slice(2))
