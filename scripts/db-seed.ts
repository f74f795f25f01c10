// npm run db:seed -- FILE.json: applies pending migrations, then loads FILE.json in one transaction
// into DATABASE_URL, or into the local embedded database; a file that is not valid loads nothing and
// touches no database. Run as a process it calls seedCommand.
import { readFile } from 'node:fs/promises'
import { migrateDatabase } from '../db/migrate.js'
import { assertSeedData, SeedError, seedDatabase } from '../db/seed.js'
import { migrationsDir } from '../src/project-root.js'
import { type Command, type DatabaseIo, isEntryPoint, processOutput, readCommandLine, usageError } from '../src/command-line.js'
import { commandPool, failureOf, withDatabase } from './database.js'

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
    // A byte order mark, which some editors write at the start of a UTF-8 file, is not JSON; RFC
    // 8259 lets a parser ignore it, and this one does.
    data = JSON.parse((await readFile(file, 'utf8')).replace(/^\uFEFF/, ''))
    assertSeedData(data)
  } catch (error) {
    io.err(`Nothing was loaded. ${file}: ${(error as Error).message}`)
    return 1
  }

  try {
    await io.withDatabase(async (database) => {
      // Migrated as the service migrates (MIGRATIONS_DATABASE_URL when set), loaded on DATABASE_URL.
      const migrations = commandPool(database.migrationsUrl, database)
      try {
        await migrateDatabase(migrations, migrationsDir)
      } finally {
        await migrations.end()
      }
      const pool = commandPool(database.url, database)
      try {
        const counts = await seedDatabase(pool, data)
        io.out(`Loaded ${file}: ${Object.entries(counts).map(([what, count]) => `${count} ${what}`).join(', ')}.`)
      } finally {
        await pool.end()
      }
    })
  } catch (error) {
    // The load is one transaction: whatever failed, none of the file is in the database.
    io.err(`Nothing was loaded. ${file}: ${error instanceof SeedError ? error.message : failureOf(error)}`)
    return 1
  }
  return 0
}

if (isEntryPoint(import.meta.url)) process.exitCode = await seedCommand(process.argv.slice(2))
