// What every statement of the query module shares: where it runs, how it is sent, and the target
// (resource, client, authorization) whose existence decides between an answer and a 404.
import type pg from 'pg'

export type Queryable = Pick<pg.Pool | pg.PoolClient, 'query'>

/**
 * Whether statements are sent as named prepared statements: parsed and planned once per connection
 * (a list statement takes longer to plan than to run), or unnamed, for poolers that cannot keep
 * them (PgBouncer in transaction mode before 1.21).
 */
export interface StatementOptions {
  prepared: boolean
  /**
   * Whether a read also answers the WAL position of the state it saw, and a change the position of
   * its commit (db/lsn.ts): with replicas, for Consistency-Token. Without, statements are unchanged.
   */
  position?: boolean
}

export const statement = (name: string, text: string, values: unknown[], { prepared }: StatementOptions) =>
  prepared ? { name, text, values } : { text, values }

/**
 * A statement's rows, taken out of pg's result. A request that queued for a connection gets its
 * answer with its promises in V8's old generation, and a settled one still points at what it
 * settled with until the next full collection: left in pg-pool's result, a page (tens of kB) would
 * outlive every young collection and grow the old generation (docs/performance.md, "What the old
 * generation held"). Whoever reads the page hands it on the same way.
 */
export const takeRows = <R extends pg.QueryResultRow>(result: pg.QueryResult<R>): R[] => result.rows.splice(0)

/** Whether the resource and the client exist, and whether the client is authorized on it. */
export interface Target { resourceExists: boolean, clientExists: boolean, authorized: boolean }

export const targetColumns = `
  EXISTS (SELECT 1 FROM resources WHERE id = $1) AS resource_exists,
  EXISTS (SELECT 1 FROM clients WHERE id = $2) AS client_exists,
  EXISTS (SELECT 1 FROM authorizations WHERE resource_id = $1 AND client_id = $2) AS authorized`

export interface TargetRow { resource_exists: boolean, client_exists: boolean, authorized: boolean }

export function targetOf (row: TargetRow): Target {
  return { resourceExists: row.resource_exists, clientExists: row.client_exists, authorized: row.authorized }
}

/** Answers when the database can run a query. */
export async function ping (db: Queryable): Promise<void> {
  // Stryker disable next-line StringLiteral: an empty query is a round trip too (EmptyQueryResponse)
  await db.query('SELECT 1')
}
