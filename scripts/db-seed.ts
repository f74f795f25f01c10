// npm run db:seed -- FILE.json: applies pending migrations, then loads FILE.json in one transaction
// into DATABASE_URL, or into the local embedded database; a file that is not valid loads nothing and
// touches no database. Run as a process it calls seedCommand.
import { readFile } from 'node:fs/promises'
import pg from 'pg'
import { migrateDatabase } from '../db/migrate.js'
import { assertSeedData, SeedError, seedDatabase } from '../db/seed.js'
import { migrationsDir } from '../src/project-root.js'
import { type Command, type DatabaseIo, isEntryPoint, processOutput, readCommandLine, usageError } from '../src/command-line.js'
import { withDatabase } from './database.js'

const command = {
  usage: 'npm run -s db:seed -- FILE.json',
  about: 'Applies the pending migrations to DATABASE_URL, or to the local embedded database, then loads\n' +
    'FILE.json ({resources, clients, permissions, authorizations}, as db/demo-data.json) in one transaction.\n' +
    'A file that is not valid loads nothing, and each of its problems is named.',
  options: {},
  allowPositionals: true
} satisfies Command

/** Returns the exit code: 0 loaded (or --help), 1 nothing loaded (the reason on err), 2 usage. */
export async function seedCommand (args: string[], io: DatabaseIo = { ...processOutput, withDatabase }): Promise<number> {
  const commandLine = readCommandLine(command, args, io)
  if (typeof commandLine === 'number') return commandLine
  const [file, ...more] = commandLine.positionals
  if (!file) return usageError(command, 'FILE.json is missing', io)
  if (more.length > 0) return usageError(command, `one file at a time, not ${commandLine.positionals.length}`, io)

  let data: unknown
  try {
    data = JSON.parse(await readFile(file, 'utf8'))
    assertSeedData(data)
  } catch (error) {
    io.err(`Nothing was loaded. ${file}: ${(error as Error).message}`)
    return 1
  }

  let code = 0
  await io.withDatabase(async (url) => {
    const pool = new pg.Pool({ connectionString: url, max: 1 })
    try {
      await migrateDatabase(pool, migrationsDir)
      const counts = await seedDatabase(pool, data)
      io.out(`Loaded ${file}: ${Object.entries(counts).map(([what, count]) => `${count} ${what}`).join(', ')}.`)
    } catch (error) {
      if (!(error instanceof SeedError)) throw error
      io.err(`Nothing was loaded. ${file}: ${error.message}`)
      code = 1
    } finally {
      await pool.end()
    }
  })
  return code
}

if (isEntryPoint(import.meta.url)) process.exitCode = await seedCommand(process.argv.slice(2))
