// EXPLAIN (ANALYZE, BUFFERS) of a statement as the service runs it: prepared, on its generic plan
// (plugins/db.ts), on one connection of the pool.
import type pg from 'pg'

// EXECUTE takes no bound parameters: the values are written out as literals. An empty ARRAY[] has
// no type; '{}' takes the parameter's.
function literal (value: unknown): string {
  if (value === null) return 'NULL'
  if (Array.isArray(value)) return value.length === 0 ? "'{}'" : `ARRAY[${value.map(literal).join(', ')}]`
  return typeof value === 'number' ? String(value) : `'${String(value).replaceAll("'", "''")}'`
}

/** EXPLAIN's rows. Run in a transaction rolled back: a DELETE removes nothing. */
async function explainExecuted (pool: pg.Pool, sql: string, values: unknown[], options: string): Promise<unknown[]> {
  const client = await pool.connect()
  try {
    await client.query('BEGIN; SET LOCAL plan_cache_mode = force_generic_plan')
    await client.query(`PREPARE explained AS ${sql}`)
    const { rows } = await client.query(`EXPLAIN (${options}) EXECUTE explained (${values.map(literal).join(', ')})`)
    return rows.map((row) => row['QUERY PLAN'])
  } finally {
    // A prepared statement outlives the transaction.
    await client.query('ROLLBACK; DEALLOCATE ALL').catch(() => {})
    client.release()
  }
}

/** The plan's lines, as EXPLAIN prints them. */
export async function explainPrepared (pool: pg.Pool, sql: string, values: unknown[]): Promise<string> {
  return (await explainExecuted(pool, sql, values, 'ANALYZE, BUFFERS')).join('\n')
}

/** One node of EXPLAIN (FORMAT JSON), with the fields the tests read. */
export interface PlanNode {
  'Node Type': string
  'Relation Name'?: string
  'Index Name'?: string
  'Index Cond'?: string
  'Scan Direction'?: string
  'Actual Rows': number
  'Actual Loops': number
  'Shared Hit Blocks': number
  'Shared Read Blocks': number
  'Heap Fetches'?: number
  Plans?: PlanNode[]
}

/** The same plan as a tree of nodes (EXPLAIN's FORMAT JSON), from its top node. */
export async function explainPreparedTree (pool: pg.Pool, sql: string, values: unknown[]): Promise<PlanNode> {
  const [[{ Plan }]] = await explainExecuted(pool, sql, values, 'ANALYZE, BUFFERS, FORMAT JSON') as Array<Array<{ Plan: PlanNode }>>
  return Plan
}
