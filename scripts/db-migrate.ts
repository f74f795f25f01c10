// npm run db:migrate: applies pending migrations to DATABASE_URL, or to the local embedded database.
import pg from 'pg'
import { migrateDatabase } from '../db/migrate.js'
import { migrationsDir } from '../src/project-root.js'
import { withDatabase } from './database.js'

await withDatabase(async (url) => {
  const pool = new pg.Pool({ connectionString: url, max: 1 })
  try {
    const applied = await migrateDatabase(pool, migrationsDir)
    console.log(applied.length > 0 ? `Applied: ${applied.join(', ')}` : 'The database is up to date.')
  } finally {
    await pool.end()
  }
})
