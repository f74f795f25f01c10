// EXPLAIN (ANALYZE, BUFFERS) of a statement as the service runs it: prepared, on its generic plan
// (plugins/db.ts), on one connection of the pool.
import type pg from 'pg'

// EXECUTE takes no bound parameters: the values are written out as literals.
function literal (value: unknown): string {
  if (Array.isArray(value)) return `ARRAY[${value.map(literal).join(', ')}]`
  return typeof value === 'number' ? String(value) : `'${String(value).replaceAll("'", "''")}'`
}

/** The plan's lines, as EXPLAIN prints them. Run in a transaction rolled back: a DELETE removes nothing. */
export async function explainPrepared (pool: pg.Pool, sql: string, values: unknown[]): Promise<string> {
  const client = await pool.connect()
  try {
    await client.query('BEGIN; SET LOCAL plan_cache_mode = force_generic_plan')
    await client.query(`PREPARE explained AS ${sql}`)
    const { rows } = await client.query(`EXPLAIN (ANALYZE, BUFFERS) EXECUTE explained (${values.map(literal).join(', ')})`)
    return rows.map((row) => row['QUERY PLAN']).join('\n')
  } finally {
    // A prepared statement outlives the transaction.
    await client.query('ROLLBACK; DEALLOCATE ALL').catch(() => {})
    client.release()
  }
}
