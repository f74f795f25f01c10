// What the scenarios of one `npm run bench` share, made by the bench's main (openBench) and handed
// to each scenario: the settings, a work folder, the bench's database (a new one on DATABASE_URL's
// server, or on a throwaway embedded cluster), the processes it starts, its tokens and pgbench.
// close() undoes all of it, and so does SIGINT or SIGTERM.
import { randomBytes } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { givenOrThrowawayPostgres } from '../../db/embedded-postgres.js'
import type { Ending } from '../../db/replicated-postgres.js'
import { projectRoot } from '../../src/project-root.js'
import { findPgbench } from './pgbench.js'
import { type Processes, trackProcesses } from './processes.js'
import { benchTokens, type BenchTokens } from './tokens.js'

/** The bench's settings, read once from the environment by its main (scripts/bench.ts documents each). */
export interface BenchSettings {
  /** The server to make the bench's database on (DATABASE_URL); undefined: a throwaway embedded cluster. */
  serverUrl?: string
  /** autocannon's and pgbench's concurrency. */
  connections: number
  /** BENCH_SECONDS: each measurement's, after a 1 s warm-up. */
  seconds: number
  /** BENCH_SCALES: grants in the database, a table of scenarios at each. */
  scales: number[]
  /** BENCH_ONLY: the scenarios run are those whose name contains it. */
  only: string
  /** BENCH_PROFILE: the service under node --cpu-prof. */
  profile: boolean
  /** BENCH_ROUNDS: of the replica scenario, the ladder and the tracing scenario. */
  rounds: number
  /** BENCH_OVERLOAD_CONNECTIONS: the overload scenario's saturating count per order, when given. */
  overloadConnections: (sortBy: string) => number | undefined
  /** BENCH_REPLICA_BASELINE, BENCH_LADDER_BASELINE, BENCH_TRACING_BASELINE: git revisions measured beside. */
  replicaBaseline?: string
  ladderBaseline?: string
  tracingBaseline?: string
  /** BENCH_FEED_CHANGES, BENCH_FEED_STREAMS, BENCH_FEED_RATE, BENCH_FEED_SECONDS. */
  feed: { changes: number, streams: number, rate: number, seconds: number }
  /** DATABASE_CONNECTION_WAIT_MS, passed to the service when given. */
  connectionWaitMs?: string
}

export interface Bench {
  settings: BenchSettings
  /** A folder of this run's own (pgbench scripts, the ceiling's pages, other revisions' builds), removed by close(). */
  work: string
  /** reports/bench/: the report, the plans and the profiles. */
  reportFolder: string
  /** The bench's database, and a pool of 2 on it. */
  databaseUrl: string
  db: pg.Pool
  processes: Processes
  tokens: BenchTokens
  /** The pgbench binary; undefined: the database ceilings are skipped. */
  pgbench: string | undefined
  /** Whether the scenario of that name runs (BENCH_ONLY). */
  selected: (scenario: string) => boolean
  /** A progress line, on stderr. */
  log: (line: string) => void
  /** Servers a scenario started (the replica's), for close() to stop if the scenario did not get to. */
  stopOnClose: (ending: Ending) => void
  close: () => Promise<void>
}

/** Makes the bench's database and the rest; the caller calls close() when done, whatever happened. */
export async function openBench (settings: BenchSettings): Promise<Bench> {
  const work = await mkdtemp(join(tmpdir(), 'client-permissions-bench-'))
  const server = await givenOrThrowawayPostgres(settings.serverUrl)
  const databaseName = `bench_${randomBytes(4).toString('hex')}`
  const admin = new pg.Pool({ connectionString: server.url, max: 1 })
  await admin.query(`CREATE DATABASE ${databaseName}`)
  const databaseUrl = Object.assign(new URL(server.url), { pathname: `/${databaseName}` }).toString()
  const db = new pg.Pool({ connectionString: databaseUrl, max: 2 })
  // pool.end() resolves before its connections have closed, so the clean-up's DROP DATABASE … WITH
  // (FORCE) and the server's stop can still terminate one (57P01): an 'error' on the pool that,
  // unhandled, crashed the bench after its report was written, with exit status 1.
  let stopping = false
  for (const pool of [admin, db]) pool.on('error', (error) => { if (!stopping) console.warn(`database connection lost: ${error.message}`) })
  const processes = trackProcesses()
  /** The replica scenario's servers, while they may run. */
  let replicated: Ending | undefined

  async function close () {
    stopping = true
    await processes.stopAll()
    await replicated?.stop().catch(() => {})
    await db.end().catch(() => {})
    await admin.query(`DROP DATABASE IF EXISTS ${databaseName} WITH (FORCE)`).catch(() => {})
    await admin.end().catch(() => {})
    await server.stop()
    await rm(work, { recursive: true, force: true })
  }
  process.once('SIGINT', () => { close().finally(() => process.exit(130)) })
  process.once('SIGTERM', () => { close().finally(() => process.exit(143)) })

  const tokens = benchTokens()
  const pgbench = findPgbench()
  if (!pgbench) console.warn('pgbench not found (Debian: apt-get install postgresql-client): the database ceiling is skipped.')

  return {
    settings,
    work,
    reportFolder: join(projectRoot, 'reports', 'bench'),
    databaseUrl,
    db,
    processes,
    tokens,
    pgbench,
    selected: (scenario) => scenario.includes(settings.only),
    log: (line) => console.error(line),
    stopOnClose: (ending) => { replicated = ending },
    close
  }
}
