// Applies pending migrations (postgres-migrations) from the folder it is given (db/migrations/, which
// src/project-root.ts finds from source and from dist/ alike). It holds an advisory lock while it
// runs, so replicas that start together apply each migration exactly once.
// https://github.com/thomwright/postgres-migrations
import { readdir } from 'node:fs/promises'
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

/**
 * The migrations the database records as applied that the folder has no file for (0016_name, as
 * their files are named), in order: the database was migrated by a newer version. postgres-migrations
 * passes over them, so a migration finds the database "up to date" with this version's files. None
 * when no migration was ever applied.
 */
export async function migrationsNotKnown (pool: pg.Pool, migrationsDir: string): Promise<string[]> {
  // postgres-migrations numbers its files from 1 without a gap (it refuses a folder that skips one).
  const last = Math.max(0, ...(await readdir(migrationsDir)).map((file) => Number(/^(\d+)[-_].*\.(sql|js)$/i.exec(file)?.[1] ?? 0)))
  const { rows } = await pool.query<{ id: number, name: string }>(
    'SELECT id, name FROM migrations WHERE id > $1 ORDER BY id', [last])
    .catch((error: { code?: string }) => {
      // No table of applied migrations: none.
      if (error.code === '42P01') return { rows: [] }
      throw error
    })
  return rows.map(({ id, name }) => `${String(id).padStart(4, '0')}_${name}`)
}
