// What `npm run db:migrate` does, as a function: scripts/db-migrate.ts runs it as a process, tests
// run it in-process too. Applies pending migrations and says which, or that there were none.
import pg from 'pg'
import { migrateDatabase } from '../db/migrate.js'
import { migrationsDir } from '../src/project-root.js'
import { type DatabaseIo, processOutput } from './command.js'
import { withDatabase } from './database.js'

export async function migrateCommand (io: DatabaseIo = { ...processOutput, withDatabase }): Promise<void> {
  await io.withDatabase(async (url) => {
    const pool = new pg.Pool({ connectionString: url, max: 1 })
    try {
      const applied = await migrateDatabase(pool, migrationsDir)
      io.out(applied.length > 0 ? `Applied: ${applied.join(', ')}` : 'The database is up to date.')
    } finally {
      await pool.end()
    }
  })
}
