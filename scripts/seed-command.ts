// What `npm run db:seed -- FILE.json` does, as a function: scripts/db-seed.ts runs it as a process,
// and tests run every refusal in-process. Applies pending migrations, then loads FILE.json in one
// transaction; a file that is not valid loads nothing and touches no database.
import { readFile } from 'node:fs/promises'
import pg from 'pg'
import { migrateDatabase } from '../db/migrate.js'
import { assertSeedData, SeedError, seedDatabase } from '../db/seed.js'
import { migrationsDir } from '../src/project-root.js'
import { type DatabaseIo, processOutput } from './command.js'
import { withDatabase } from './database.js'

/** Returns the exit code: 0 loaded, 1 nothing loaded (the reason on err), 2 usage. */
export async function seedCommand (args: string[], io: DatabaseIo = { ...processOutput, withDatabase }): Promise<number> {
  const file = args[0]
  if (!file) {
    io.err('Usage: npm run db:seed -- FILE.json')
    return 2
  }

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
