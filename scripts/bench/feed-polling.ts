// The change feed polled, a scenario of `npm run bench` (BENCH_ONLY=feed): a history of changes
// across several resources, written with SQL, then full pages (`/permission_changes?limit=500&after=`)
// from a few cursors under autocannon, beside the database ceiling for the same page (pgbench: the
// service's feed statement, and the plainest page, by primary key with no horizon).
import type autocannon from 'autocannon'
import type pg from 'pg'
import { feedSql } from '../../db/queries/feed.js'
import { fixed } from './format.js'

/** The scenario's name for BENCH_ONLY. */
export const FEED_POLLING_SCENARIO = 'feed polling'
/** The most a poll may ask for. */
const LIMIT = 500
/** Migration 0007: one transaction records at most 65,536 changes (an id is xid × 65536 + n). */
const MAX_CHANGES_PER_TRANSACTION = 65_536
const RESOURCES = 8
const CLIENTS = 100
/** A request usually changes a few ids; a page's bytes grow with them. */
const IDS_PER_CHANGE = 5

interface Run { reqPerSec: number, p50: number, p99: number, errors: number, requests: number }

export interface FeedPollingRow {
  cursor: string
  after: string
  /** Entries of the page, read once before the load: the changes each request carries. */
  perPage: number
  service: Run
  changesPerSec: number
  dbCeiling?: number
  idealSqlCeiling?: number
}

export interface FeedPollingReport { changes: number, resources: number, idsPerChange: number, connections: number, seconds: number, rows: FeedPollingRow[] }

// One row per change, numbered by the trigger (it overwrites any id given), in autocommitted
// statements of at most MAX_CHANGES_PER_TRANSACTION rows.
const historySql = `
  INSERT INTO permission_changes (resource_id, client_id, action, permission_ids, actor_sub, request_id)
  SELECT 'bench-feed-' || (i % ${RESOURCES}), 'feed-client-' || (i % ${CLIENTS}),
    CASE WHEN i % 2 = 0 THEN 'granted' ELSE 'unauthorized' END,
    ARRAY(SELECT 'perm-' || lpad(((i * 7919 + k) % 100000)::text, 6, '0') FROM generate_series(0, ${IDS_PER_CHANGE - 1}) AS k),
    'bench', 'bench-feed-' || i
  FROM generate_series($1::int, $2::int - 1) AS i`

/** The plainest statement for the page: by primary key, no horizon, no pruning mark. */
const BEST_SQL = `SELECT id, at, resource_id, client_id, action, permission_ids, actor_sub, actor_client_id, request_id
  FROM permission_changes WHERE id > $1::bigint ORDER BY id LIMIT $2::int`

export async function measureFeedPolling (options: {
  db: pg.Pool
  serviceUrl: string
  headers: Record<string, string>
  changes: number
  connections: number
  seconds: number
  /** The bench's autocannon run (1 s warm-up, then the measurement). */
  load: (options: autocannon.Options & { expect: number }) => Promise<Run>
  /** pgbench of a statement at the bench's concurrency; undefined without pgbench. */
  databaseCeiling: (sql: string, variables: Record<string, string>) => Promise<number | undefined>
  log?: (line: string) => void
}): Promise<FeedPollingReport> {
  const { db, serviceUrl, headers, changes, load, databaseCeiling, log = () => {} } = options
  if (!(changes >= 2 * LIMIT)) throw new Error(`feed polling: ${changes} changes; at least ${2 * LIMIT} make full pages at every cursor`)
  // Cursors are taken from this history only, whatever the table held before.
  const { rows: [{ before }] } = await db.query<{ before: string }>('SELECT coalesce(max(id), 0)::text AS before FROM permission_changes')
  const started = Date.now()
  for (let from = 0; from < changes; from += MAX_CHANGES_PER_TRANSACTION) {
    await db.query(historySql, [from, Math.min(from + MAX_CHANGES_PER_TRANSACTION, changes)])
  }
  await db.query('VACUUM (ANALYZE) permission_changes')
  log(`# ${FEED_POLLING_SCENARIO}: ${changes} changes written in ${((Date.now() - started) / 1000).toFixed(1)} s`)

  const idAt = async (offset: number) => (await db.query<{ id: string }>(
    'SELECT id::text FROM permission_changes WHERE id > $1::bigint ORDER BY id OFFSET $2 LIMIT 1', [before, offset])).rows[0].id
  const cursors = [
    { cursor: 'start', after: before },
    { cursor: 'middle', after: await idAt(Math.floor(changes / 2) - 1) },
    { cursor: 'last full page', after: await idAt(changes - LIMIT - 1) }
  ]
  const ourSql = feedSql(false, false)
  const rows: FeedPollingRow[] = []
  for (const { cursor, after } of cursors) {
    const url = `${serviceUrl}/permission_changes?limit=${LIMIT}&after=${after}`
    const res = await fetch(url, { headers })
    if (res.status !== 200) throw new Error(`feed polling: ${url} answered ${res.status}`)
    const perPage = (await res.json() as unknown[]).length
    // Short only when an older transaction holds changes back (docs/change-feed.md): then not what it says.
    if (perPage !== LIMIT) log(`# ${FEED_POLLING_SCENARIO}, ${cursor}: the page holds ${perPage} changes, not ${LIMIT}`)
    const service = await load({ url, headers, expect: 200 })
    // autocannon counts nothing of the requests in flight when a run ends: slower pages than that read as 0.
    if (service.reqPerSec * options.seconds < options.connections) {
      log(`# ${FEED_POLLING_SCENARIO}, ${cursor}: fewer answers than connections in the run; a page takes about as long as the run or longer`)
    }
    const variables = { p1: after, p2: String(LIMIT) }
    const dbCeiling = await databaseCeiling(ourSql, variables)
    const idealSqlCeiling = await databaseCeiling(BEST_SQL, variables)
    rows.push({ cursor, after, perPage, service, changesPerSec: service.reqPerSec * perPage, dbCeiling, idealSqlCeiling })
    log(feedPollingCells(rows.at(-1)!).join(' | '))
  }
  return { changes, resources: RESOURCES, idsPerChange: IDS_PER_CHANGE, connections: options.connections, seconds: options.seconds, rows }
}

const columns = ['cursor', 'req/s', 'p50 ms', 'p99 ms', 'errors', 'changes/page', 'changes/s', 'DB (our SQL)', 'DB (best SQL)', '÷DB']

function feedPollingCells (row: FeedPollingRow): string[] {
  return [
    row.cursor, fixed(row.service.reqPerSec), fixed(row.service.p50, 1), fixed(row.service.p99, 1), String(row.service.errors),
    String(row.perPage), fixed(row.changesPerSec), fixed(row.dbCeiling), fixed(row.idealSqlCeiling),
    row.idealSqlCeiling ? fixed(row.service.reqPerSec / row.idealSqlCeiling, 2) : '—'
  ]
}

/** The scenario's markdown table and its settings. */
export function feedPollingSummary (report: FeedPollingReport): string {
  return [
    `Feed polling: GET /permission_changes?limit=${LIMIT}&after=<cursor>, a history of ${report.changes} changes across ` +
      `${report.resources} resources (${report.idsPerChange} ids each); ${report.connections} connections, ${report.seconds} s per measurement; ` +
      'changes/s = req/s × changes/page; DB: pgbench of the service\'s feed statement (our SQL) and of the page by primary key ' +
      'with no horizon (best SQL); ÷DB = req/s ÷ best SQL.',
    '',
    `| ${columns.join(' | ')} |`,
    `|${columns.map(() => '---').join('|')}|`,
    ...report.rows.map((row) => `| ${feedPollingCells(row).join(' | ')} |`)
  ].join('\n')
}
