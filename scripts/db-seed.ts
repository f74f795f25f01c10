// npm run db:seed -- FILE.json: applies pending migrations, then loads FILE.json in one transaction
// into DATABASE_URL, or into the local embedded database.
import { readFile } from 'node:fs/promises'
import pg from 'pg'
import { migrateDatabase } from '../db/migrate.js'
import { migrationsDir } from '../src/project-root.js'
import { assertSeedData, SeedError, seedDatabase } from '../db/seed.js'
import { withDatabase } from './database.js'

const file = process.argv[2]
if (!file) {
  console.error('Usage: npm run db:seed -- FILE.json')
  process.exit(2)
}

let data: unknown
try {
  data = JSON.parse(await readFile(file, 'utf8'))
  assertSeedData(data)
} catch (error) {
  console.error(`Nothing was loaded. ${file}: ${(error as Error).message}`)
  process.exit(1)
}

await withDatabase(async (url) => {
  const pool = new pg.Pool({ connectionString: url, max: 1 })
  try {
    await migrateDatabase(pool, migrationsDir)
    const counts = await seedDatabase(pool, data)
    console.log(`Loaded ${file}: ${Object.entries(counts).map(([what, count]) => `${count} ${what}`).join(', ')}.`)
  } catch (error) {
    if (!(error instanceof SeedError)) throw error
    console.error(`Nothing was loaded. ${file}: ${error.message}`)
    process.exitCode = 1
  } finally {
    await pool.end()
  }
})
