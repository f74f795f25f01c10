// Applies pending migrations from db/migrations/ (postgres-migrations). It holds an advisory lock
// while it runs, so replicas that start together apply each migration exactly once.
// https://github.com/thomwright/postgres-migrations
import type pg from 'pg'
import { migrate } from 'postgres-migrations'
import { migrationsDir } from '../src/project-root.js'

export async function migrateDatabase (pool: pg.Pool, log: (message: string) => void = () => {}): Promise<string[]> {
  const client = await pool.connect()
  try {
    const applied = await migrate({ client }, migrationsDir, { logger: log })
    return applied.map((migration) => migration.fileName)
  } finally {
    client.release()
  }
}
