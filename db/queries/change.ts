// The DELETE and the POST: one statement that changes a client's grants only when the change
// applies, and records it in the history in the same transaction.
import { setTimeout as sleep } from 'node:timers/promises'
import { context } from '@opentelemetry/api'
import type pg from 'pg'
import { primaryPosition } from '../lsn.js'
import { type StatementOptions, type Target, type TargetRow, statement, targetColumns, targetOf } from './statement.js'

// What the DELETE and the POST share ($1 resource id, $2 client id, $3 permission ids, $4 the versions
// an If-Match accepts, NULL for none; $8 the versions an If-None-Match names, empty or NULL for
// none, and $9 whether it is `*`): the target, its authorization row locked (against writers other
// than this service, and held already: authorizationLocks), whether each precondition holds,
// and whether every id is a permission of the resource (one index scan). The change joins
// `locked`, so the row is locked before it writes anything (the sub-statements of a WITH run in no
// set order otherwise). The resource's permissions among the ids are read once, into `requested`:
// locked FOR SHARE by the grant (see grantSql), so that the check that every id is one, the 422's
// ids and the rows granted all come from the same rows.
const changeContext = (lock: boolean) => `
  target AS (
    SELECT ${targetColumns}
  ), locked AS MATERIALIZED (
    SELECT version FROM authorizations WHERE resource_id = $1 AND client_id = $2 FOR UPDATE
  ), precondition AS (
    SELECT $4::bigint[] IS NULL OR coalesce((SELECT version FROM locked) = ANY ($4::bigint[]), false) AS met,
      NOT ($9::boolean AND EXISTS (SELECT FROM locked))
        AND NOT coalesce((SELECT version FROM locked) = ANY ($8::bigint[]), false) AS none_match_met
  ), requested AS MATERIALIZED (
    SELECT id, name, description FROM permissions WHERE resource_id = $1 AND id = ANY ($3::text[])${lock ? ' FOR SHARE' : ''}
  ), known AS (
    SELECT count(*) = (SELECT count(DISTINCT id) FROM unnest($3::text[]) AS id) AS all_known
    FROM requested
  )`

// The ids of $3 that are not permissions of the resource, in request order, each once: worked out
// only when some are not, for the 422.
const unknownIds = `
    CASE WHEN known.all_known THEN '{}' ELSE (
      SELECT array_agg(r.id ORDER BY r.position)
      FROM (
        SELECT id, min(position) AS position
        FROM unnest($3::text[]) WITH ORDINALITY AS ids (id, position)
        WHERE NOT EXISTS (SELECT 1 FROM requested p WHERE p.id = ids.id)
        GROUP BY id
      ) r
    ) END AS unknown_permission_ids`

const changeApplies = 'target.authorized AND precondition.met AND precondition.none_match_met AND known.all_known'

// After the change ($5 actor sub, $6 actor client id, $7 request id): when it changed anything, one
// row of history with the ids it changed (request order, each once). Its trigger announces it at
// COMMIT on the permission_changes channel (migration 0007). The client is authorized when the
// statement locked its authorization row: one made after the change's locks and deleted as the
// statement began is in its snapshot, but gone for the lock, and the change (which joins `locked`)
// made nothing; a 404, as after the delete, not a 204 with no version for its ETag.
const recordChange = (action: 'granted' | 'unauthorized') => `
  , recorded AS (
    INSERT INTO permission_changes (resource_id, client_id, action, permission_ids, actor_sub, actor_client_id, request_id)
    SELECT $1, $2, '${action}', ids, $5, $6, $7
    FROM (
      SELECT array_agg(id ORDER BY position) AS ids
      FROM (
        SELECT id, min(position) AS position
        FROM unnest($3::text[]) WITH ORDINALITY AS requested (id, position)
        WHERE id IN (SELECT permission_id FROM changed)
        GROUP BY id
      ) r
    ) changed_ids
    WHERE ids IS NOT NULL
    RETURNING id
  )
  SELECT target.resource_exists, target.client_exists, EXISTS (SELECT FROM locked) AS authorized,
    precondition.met AS precondition_met, precondition.none_match_met, ${unknownIds},
    (SELECT version FROM locked)::text AS version_before,
    (SELECT count(*) FROM changed) AS changed,
    (SELECT id FROM recorded) AS change_id
  FROM target, precondition, known`

/** The unauthorize statement: removes the grants only when the change applies. */
export const unauthorizeSql = `
  WITH ${changeContext(false)}, changed AS (
    DELETE FROM grants g
    USING target, precondition, known, locked
    WHERE ${changeApplies}
      AND g.resource_id = $1 AND g.client_id = $2 AND g.permission_id = ANY ($3::text[])
    RETURNING g.permission_id
  )${recordChange('unauthorized')}`

/**
 * The grant statement: adds the grants not held yet, only when the change applies. Each new grant
 * carries its permission's name and description from the same read of permissions (one join, each
 * id once); the database checks them once for the statement (migration 0008). The grants held
 * already are left out by NOT EXISTS, not by ON CONFLICT: no other transaction can commit a grant
 * of this authorization while this one holds its row FOR UPDATE (authorizationLocks), since every
 * grant's foreign key check locks that row FOR KEY SHARE and waits; an insert caught halfway makes
 * this one wait for it, as ON CONFLICT would. ON CONFLICT's speculative insertion cost about a
 * twentieth of a 500-id grant. The permissions granted are read FOR SHARE (the lock the statement's
 * description check, migration 0008, takes anyway): a rename or a new description under way is
 * waited for and its row read again, so the grant carries the name committed last. Read without the
 * lock, a name renamed meanwhile failed the grant's key (MATCH FULL on the name) with 23503, a 500.
 * They are locked where they are first read (`requested`), and every id is counted from the rows
 * locked: a permission deleted while the grant waited for its row is gone from them, so the grant is
 * refused with a 422 naming it. Locked only in the insert, the check had counted it from the
 * statement's snapshot and the insert skipped it: the other ids were granted, with a 204.
 */
export const grantSql = `
  WITH ${changeContext(true)}, changed AS (
    INSERT INTO grants (resource_id, client_id, permission_id, permission_name, permission_description)
    SELECT $1, $2, p.id, p.name, p.description
    FROM requested p, target, precondition, known, locked
    WHERE ${changeApplies}
      AND NOT EXISTS (SELECT FROM grants g WHERE g.resource_id = $1 AND g.client_id = $2 AND g.permission_id = p.id)
    RETURNING permission_id
  )${recordChange('granted')}`

export interface ChangeInput {
  resourceId: string
  clientId: string
  permissionIds: string[]
  /** The versions an If-Match accepts, each a bigint in decimal; undefined when the request has no precondition. */
  ifMatch?: string[]
  /** The versions an If-None-Match names, or `*` (any); none (or undefined) without one. */
  ifNoneMatch?: string[] | '*'
  /** Who asks (from the verified token) and the request's id, for the history. */
  actor: { sub?: string, clientId?: string }
  requestId: string
}

/** How a change runs: its statements prepared or not, its commit's position asked for or not, and its bound. */
export interface ChangeOptions extends StatementOptions {
  /**
   * The server-side bound on its statements (DATABASE_STATEMENT_TIMEOUT_MS), set in its own
   * transaction, so that it holds behind a transaction pooler too, where no session settings are sent.
   */
  statementTimeoutMs: number
}

export interface ChangeResult extends Target {
  /** False when an If-Match names no current version: nothing was changed. */
  preconditionMet: boolean
  /** False when an If-None-Match names the current version, or is `*`: nothing was changed. */
  noneMatchMet: boolean
  /** Requested ids that are not permissions of the resource, in request order, each once. */
  unknownPermissionIds: string[]
  /** Grants removed or added. */
  changed: number
  /** The history row written for the change; undefined when nothing changed. */
  changeId?: string
  /** The authorization's version after the change (the 204's ETag); undefined when not authorized. */
  version?: string
  /** The WAL position of the commit, when asked for (StatementOptions.position). */
  position?: string
}

// The version a change left (a trigger moved it at the end of the statement, so the statement
// could not see it), read under the statement's lock: no other change comes between.
const versionAfterSql = 'SELECT version::text FROM authorizations WHERE resource_id = $1 AND client_id = $2'

/**
 * One change at a time per authorization, its locks taken in statements before the change, for two
 * reasons. The change statement's snapshot is taken after them, so a change that waited for
 * another sees what that one did (a lock waited for inside the statement re-reads the locked row
 * only: a DELETE behind a POST of the same id answered 204 and left it granted). And the first is
 * an advisory lock of the authorization's own, which needs no transaction id, so the change takes
 * its id (its history id, migration 0007) only once it holds it: one authorization's ids follow
 * the order its changes were applied, in the history and in the feed. Then the row, which writers
 * other than this service lock too (a grant's count moves with it). The advisory key is the pair
 * of ids' hashes (a collision only serializes two authorizations). Sent with BEGIN in one simple
 * query, so no round trip of their own: the ids are escaped as literals by pg.
 */
function authorizationLocks (client: pg.PoolClient, { resourceId, clientId }: Pick<ChangeInput, 'resourceId' | 'clientId'>): string {
  const [resource, clientLiteral] = [client.escapeLiteral(resourceId), client.escapeLiteral(clientId)]
  return `SELECT pg_advisory_xact_lock(hashtext(${resource}), hashtext(${clientLiteral}));
    SELECT FROM authorizations WHERE resource_id = ${resource} AND client_id = ${clientLiteral} FOR UPDATE`
}

// deadlock_detected: PostgreSQL failed this transaction to break a cycle of lock waits.
const DEADLOCK_DETECTED = '40P01'
/** Attempts of a change that PostgreSQL fails to break a deadlock: the first and two more. */
const CHANGE_ATTEMPTS = 3
/**
 * The pause before a change is run again, in ms: at least the first, up to the second, at random,
 * doubled for each attempt already failed (50–150, then 100–300).
 */
const RETRY_PAUSE_MS = [50, 150] as const

/**
 * A change, run again from BEGIN when PostgreSQL failed it to break a deadlock: it had changed
 * nothing (its transaction was rolled back). Renames of several permissions at once (SQL, seeds)
 * can deadlock with a grant (migration 0010 says how); the caller should not get a 500 for that.
 * The other side of the cycle still holds its locks until it commits: its statement was woken by
 * the rollback and takes the lock it waited for (the authorization's row) as soon as it runs. Run
 * again at once, on a connection idle in the pool, the change could take that row before it,
 * wait for the other side's rows again and close the same cycle: failed again, a 500. So it
 * pauses first, 50 to 150 ms at random, twice that before a third attempt (long enough for the
 * other side to run on a busy machine, longer if it did not; two changes failed together do not
 * start again together), then waits behind its commit instead. Each attempt takes its
 * connection in the caller's trace context, kept for synchronous calls only (src/tracing.ts): the
 * others start after an await, and their statements would have no span. A change failed by every
 * attempt is a 500 still: the spec's 503 problem types say outage or overload, not a deadlock.
 */
async function changeGrants (pool: pg.Pool, name: string, text: string, input: ChangeInput, options: ChangeOptions): Promise<ChangeResult> {
  const traced = context.active()
  for (let attempt = 1; ; attempt++) {
    try {
      return await context.with(traced, changeGrantsOnce, undefined, pool, name, text, input, options)
    } catch (error) {
      if (attempt >= CHANGE_ATTEMPTS || (error as { code?: unknown }).code !== DEADLOCK_DETECTED) throw error
    }
    // Stryker disable next-line ArithmeticOperator: the pause's length, timing only: whether the other side of the cycle runs first is a race no test decides
    await sleep(2 ** (attempt - 1) * (RETRY_PAUSE_MS[0] + Math.random() * (RETRY_PAUSE_MS[1] - RETRY_PAUSE_MS[0])))
  }
}

// The errors the change statement itself raised: a row it could not write is the request's (a grant
// too large for an index), while BEGIN, the locks and COMMIT fail for reasons of the database's own
// (COMMIT writes the history's notification, and a NOTIFY queue held full by a listener that sits in
// a transaction refuses it with the same SQLSTATE, 54000, as an index entry too large).
const raisedByChange = new WeakSet<Error>()

/** Whether the change statement itself raised `error`, not BEGIN, its locks or its COMMIT. */
export function raisedByChangeStatement (error: unknown): boolean {
  return error instanceof Error && raisedByChange.has(error)
}

/**
 * One change of a client's grants on a resource, all or nothing: one statement that changes only
 * when the client is authorized, the precondition holds and every id is a permission of the
 * resource, in an explicit transaction with a server-side statement timeout. COMMIT is sent only
 * after the statement's answer, so a client that gave up waiting on the statement never leaves a
 * change committed behind it. One that gave up on the COMMIT itself may (the server can still
 * receive and apply it): its 503 database-unavailable says nothing of whether the change was made.
 */
async function changeGrantsOnce (pool: pg.Pool, name: string, text: string, input: ChangeInput, options: ChangeOptions): Promise<ChangeResult> {
  const client = await pool.connect()
  try {
    // One round trip; the timeout is transaction-scoped, so nothing leaks to the next user of a
    // pooled server connection. The server bounds each statement of a message on its own, the
    // pool's query bound (only longer than one statement timeout) the whole message: the two lock
    // waits share the timeout, half each, or two long waits were ended as an outage.
    const timeout = Math.trunc(options.statementTimeoutMs)
    const lockTimeout = Math.max(1, Math.floor(timeout / 2))
    await client.query(`BEGIN; SET LOCAL statement_timeout = ${lockTimeout}; ${authorizationLocks(client, input)}; SET LOCAL statement_timeout = ${timeout}`)
    const { rows: [row] } = await client.query<TargetRow & { precondition_met: boolean, none_match_met: boolean, unknown_permission_ids: string[], changed: string, change_id: string | null, version_before: string | null }>(
      statement(name, text, [
        input.resourceId, input.clientId, input.permissionIds, input.ifMatch ?? null,
        input.actor.sub ?? null, input.actor.clientId ?? null, input.requestId,
        Array.isArray(input.ifNoneMatch) ? input.ifNoneMatch : null, input.ifNoneMatch === '*'
      ], options)).catch((error: unknown) => {
      // Stryker disable next-line ConditionalExpression: equivalent: pg rejects a query with an Error only
      if (error instanceof Error) raisedByChange.add(error)
      throw error
    })
    const changed = Number(row.changed)
    let version = row.version_before ?? undefined
    if (changed > 0) {
      const { rows: [after] } = await client.query<{ version: string }>(statement('version after change', versionAfterSql, [input.resourceId, input.clientId], options))
      version = after.version
    }
    // The commit's position in the same round trip, when asked for: where a replica must have
    // replayed to show this change.
    let position: string | undefined
    if (options.position === true) {
      const results = await client.query(`COMMIT; SELECT ${primaryPosition} AS position`) as unknown as Array<{ rows: Array<{ position: string }> }>
      position = results[1].rows[0].position
    } else {
      await client.query('COMMIT')
    }
    client.release()
    return {
      ...targetOf(row),
      preconditionMet: row.precondition_met,
      noneMatchMet: row.none_match_met,
      unknownPermissionIds: row.unknown_permission_ids,
      changed,
      changeId: row.change_id ?? undefined,
      version,
      position
    }
  } catch (error) {
    // A connection whose transaction failed is not reused: it may be in any state.
    client.release(error as Error)
    throw error
  }
}

/** Where the primary is now: past every commit made so far (db/lsn.ts), for a refusal that made none. */
export async function primaryPositionNow (pool: pg.Pool): Promise<string> {
  const { rows: [row] } = await pool.query<{ position: string }>(`SELECT ${primaryPosition} AS position`)
  return row.position
}

/** Removes grants from a client's authorization on a resource (ids not granted are no-ops). */
export function unauthorizePermissions (pool: pg.Pool, input: ChangeInput, options: ChangeOptions): Promise<ChangeResult> {
  return changeGrants(pool, 'unauthorize', unauthorizeSql, input, options)
}

/** Grants permissions within a client's existing authorization on a resource (ids held are no-ops). */
export function grantPermissions (pool: pg.Pool, input: ChangeInput, options: ChangeOptions): Promise<ChangeResult> {
  return changeGrants(pool, 'grant', grantSql, input, options)
}
