// Applies pending migrations (postgres-migrations) from the folder it is given (db/migrations/, which
// src/project-root.ts finds from source and from dist/ alike). It holds an advisory lock while it
// runs, so replicas that start together apply each migration exactly once.
// https://github.com/thomwright/postgres-migrations
import type pg from 'pg'
import { migrate } from 'postgres-migrations'

export async function migrateDatabase (pool: pg.Pool, migrationsDir: string, log: (message: string) => void = () => {}): Promise<string[]> {
  const client = await pool.connect()
  try {
    const applied = await migrate({ client }, migrationsDir, { logger: log })
    return applied.map((migration) => migration.fileName)
  } finally {
    client.release()
  }
}
