// npm run bench: the service under load (autocannon, 50 connections, loopback) beside, in the same
// run, its two ceilings: the HTTP ceiling (bare Fastify with the same schemas, answering from
// memory) and the database ceiling (pgbench running the service's exact SQL, and the best SQL for
// the request). Figures are ratios against those baselines. Writes a table to the terminal and
// reports/bench/latest.json. Environment:
//   DATABASE_URL   a PostgreSQL server to use (a database is created in it and dropped); else embedded
//   BENCH_SCALES   grants in the database, comma-separated (default 10000,1000000,10000000)
//   BENCH_SECONDS  seconds per measurement (default 5), after a 1 s warm-up
//   BENCH_ONLY     run only the scenarios whose name contains this text (say "page 0", "overload",
//                  "replica": page 0 through a streaming replica and through the primary, scripts/bench/replica.ts;
//                  "feed": the change feed polled and streamed, scripts/bench/feed-polling.ts and feed-fanout.ts;
//                  "ladder": the ablation ladder, page 0 from a minimal Fastify + pg up to the service, a
//                  layer at a time, beside the ceilings, scripts/bench/ladder.ts;
//                  "tracing": page 0 with tracing off and on (always_on, to a local OTLP sink),
//                  scripts/bench/tracing.ts)
//   BENCH_ROUNDS   rounds of the replica scenario, the ladder and the tracing scenario (default 5;
//                  the ladder and the tracing scenario flag fewer)
//   BENCH_FEED_CHANGES  the history the feed is polled from (default 50000)
//   BENCH_FEED_STREAMS, BENCH_FEED_RATE, BENCH_FEED_SECONDS  the fan-out: streams open (default 100),
//                  changes per second (20) for seconds (10)
//   BENCH_REPLICA_BASELINE  a git revision: the replica scenario measures its build too, without replicas
//   BENCH_LADDER_BASELINE   a git revision: the ladder measures the service built at it too, in the same rounds
//   BENCH_TRACING_BASELINE  a git revision: the tracing scenario measures its build too (no OTEL_*), in the same rounds
//   DATABASE_CONNECTION_WAIT_MS  passed to the service; the overload scenario checks shed answers against it
//   BENCH_OVERLOAD_CONNECTIONS   the overload scenario's saturating count, given ("8", "name.asc=4,id.desc=8")
//   BENCH_PROFILE  set: the service runs under node --cpu-prof; the profile and a summary of it are
//                  written to reports/bench/ (service.cpuprofile, profile.txt); the ladder's service
//                  step too (ladder-service.cpuprofile, ladder-profile.txt), its summary printed beside it
import { spawn } from 'node:child_process'
import { generateKeyPairSync, randomBytes } from 'node:crypto'
import { copyFile, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises'
import { cpus, tmpdir, totalmem } from 'node:os'
import { join } from 'node:path'
import autocannon from 'autocannon'
import { createSigner } from 'fast-jwt'
import pg from 'pg'
import { givenOrThrowawayPostgres } from '../db/embedded-postgres.js'
import { migrateDatabase } from '../db/migrate.js'
import { unauthorizeSql } from '../db/queries/change.js'
import { listGrantedPermissionsSql } from '../db/queries/list.js'
import { parseSortBy } from '../db/queries/sort.js'
import { loadConfig } from '../src/config.js'
import { migrationsDir, projectRoot } from '../src/project-root.js'
import { idealListSql } from './bench/best-sql.js'
import { BIG_CLIENT, fillerPermissionId, grantFillers, loadScale, RESOURCE_ID, scaleOf, SMALL_CLIENT, type Scale } from './bench/data.js'
import { explainPrepared } from './bench/explain.js'
import { connectionWaitOf, givenConnections, measureOverload, OVERLOAD_SCENARIO, overloadSummary, type OverloadReport } from './bench/overload.js'
import { FEED_FANOUT_SCENARIO, feedFanoutSummary, measureFeedFanout, type FeedFanoutReport } from './bench/feed-fanout.js'
import { FEED_POLLING_SCENARIO, feedPollingSummary, measureFeedPolling, type FeedPollingReport } from './bench/feed-polling.js'
import type { CeilingPages } from './bench/http-ceiling.js'
import { LADDER_GRANTS, LADDER_SCENARIO, ladderSummary, measureLadder, type LadderReport } from './bench/ladder.js'
import { findPgbench, pgbench, withPgbenchVariables } from './bench/pgbench.js'
import { children, startHttpCeiling, startService, stopProcess } from './bench/processes.js'
import { summarizeProfile } from './bench/profile.js'
import { measureReplicaRouting, REPLICA_GRANTS, REPLICA_SCENARIO, replicaSummary, type ReplicaReport } from './bench/replica.js'
import { buildRevision } from './bench/revision.js'
import { measureTracing, TRACING_SCENARIO, tracingSummary, type TracingReport } from './bench/tracing.js'
import type { Ending } from './replicated-postgres.js'

const CONNECTIONS = 50
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5)
const SCALES = (process.env.BENCH_SCALES ?? '10000,1000000,10000000').split(',').map(Number)
const DELETE_BATCH_SIZES = [50, 500]
const ONLY = process.env.BENCH_ONLY ?? ''
const PROFILE = Boolean(process.env.BENCH_PROFILE)
const OVERLOAD_CONNECTIONS = givenConnections(process.env.BENCH_OVERLOAD_CONNECTIONS)
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5)
const REPLICA_BASELINE = process.env.BENCH_REPLICA_BASELINE
const FEED_CHANGES = Number(process.env.BENCH_FEED_CHANGES ?? 50_000)
const FEED_STREAMS = Number(process.env.BENCH_FEED_STREAMS ?? 100)
const FEED_RATE = Number(process.env.BENCH_FEED_RATE ?? 20)
const FEED_SECONDS = Number(process.env.BENCH_FEED_SECONDS ?? 10)
// The bound the service sets on a change's transaction: the setting's default, as the bench's
// services run with it (their environment does not set it).
const STATEMENT_TIMEOUT_MS = loadConfig({}).DATABASE_STATEMENT_TIMEOUT_MS
const selected = (scenario: string) => scenario.includes(ONLY)
const reportFolder = join(projectRoot, 'reports', 'bench')

// ---------------------------------------------------------------------------------------------
// Processes: PostgreSQL, the service (production build, logs at warn), the HTTP ceiling.

const work = await mkdtemp(join(tmpdir(), 'client-permissions-bench-'))
const server = await givenOrThrowawayPostgres(process.env.DATABASE_URL)
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
/** The replica scenario's servers, while they may run. */
let replicated: Ending | undefined

async function cleanUp () {
  stopping = true
  await Promise.all(children.map(stopProcess))
  await replicated?.stop().catch(() => {})
  await db.end().catch(() => {})
  await admin.query(`DROP DATABASE IF EXISTS ${databaseName} WITH (FORCE)`).catch(() => {})
  await admin.end().catch(() => {})
  await server.stop()
  await rm(work, { recursive: true, force: true })
}
process.once('SIGINT', () => { cleanUp().finally(() => process.exit(130)) })
process.once('SIGTERM', () => { cleanUp().finally(() => process.exit(143)) })

// Tokens as an identity provider issues them: RS256, verified with its public key.
const keys = generateKeyPairSync('rsa', { modulusLength: 2048, publicKeyEncoding: { type: 'spki', format: 'pem' }, privateKeyEncoding: { type: 'pkcs8', format: 'pem' } })
// Issuer and audience as production requires them: their checks are part of what a request costs.
const ISSUER = 'https://bench.invalid/'
const AUDIENCE = 'client-permissions-service'
const sign = createSigner({ key: keys.privateKey, algorithm: 'RS256', expiresIn: 3_600_000, iss: ISSUER, aud: AUDIENCE })
const bearer = (scope: string) => `Bearer ${sign({ scope, sub: 'bench' })}`

let rssPeak = 0
function watchRss (pid: number): NodeJS.Timeout {
  return setInterval(() => {
    readFile(`/proc/${pid}/status`, 'utf8').then((status) => {
      const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0)
      rssPeak = Math.max(rssPeak, kb * 1024)
    }, () => {})
  }, 100)
}

// ---------------------------------------------------------------------------------------------
// Measurements.

interface Run { reqPerSec: number, p50: number, p99: number, errors: number, requests: number }

async function load (options: autocannon.Options & { expect: number }): Promise<Run> {
  await autocannon({ ...options, connections: CONNECTIONS, duration: 1 }) // warm-up: JIT, pools, caches
  const result = await autocannon({ ...options, connections: CONNECTIONS, duration: SECONDS })
  const unexpected = Object.entries(result.statusCodeStats ?? {})
    .filter(([status]) => status !== String(options.expect))
    .reduce((sum, [, { count = 0 }]) => sum + count, 0)
  return {
    reqPerSec: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    errors: result.errors + result.timeouts + unexpected,
    requests: result.requests.sent
  }
}

const pgbenchBinary = findPgbench()
if (!pgbenchBinary) console.warn('pgbench not found (Debian: apt-get install postgresql-client): the database ceiling is skipped.')

async function databaseCeiling (sql: string, variables: Record<string, string>): Promise<number | undefined> {
  if (!pgbenchBinary) return undefined
  const script = `${withPgbenchVariables(sql)};\n`
  await pgbench(pgbenchBinary, databaseUrl, script, { connections: CONNECTIONS, seconds: 1, variables, folder: work })
  const result = await pgbench(pgbenchBinary, databaseUrl, script, { connections: CONNECTIONS, seconds: SECONDS, variables, folder: work })
  if (result.failed > 0) throw new Error(`pgbench: ${result.failed} failed transactions`)
  return result.tps
}

interface Row {
  scenario: string
  grants: number
  service: Run
  httpCeiling?: number
  dbCeiling?: number
  idealSqlCeiling?: number
}
const rows: Row[] = []

// ---------------------------------------------------------------------------------------------
// The scenarios.

interface ListScenario {
  name: string
  client: string
  limit: number
  page: (scale: Scale) => number
  sortBy: string
  /** A page in the back half: the best statement reads it from the end. */
  fromEnd?: boolean
}
const deepestPage = (scale: Scale) => Math.ceil(scale.bigGrants / 500) - 1
// Each order's page 0 and deepest page of the big client, to hold the deepest page to its page 0.
const ORDERS = ['name.asc', 'id.desc', 'description.desc']
const listScenarios: ListScenario[] = [
  { name: 'GET page 0, limit 50', client: SMALL_CLIENT, limit: 50, page: () => 0, sortBy: 'name.asc' },
  ...ORDERS.flatMap((sortBy) => [
    { name: `GET ${sortBy} page 0, limit 500`, client: BIG_CLIENT, limit: 500, page: () => 0, sortBy },
    { name: `GET ${sortBy} deepest page, limit 500`, client: BIG_CLIENT, limit: 500, page: deepestPage, sortBy, fromEnd: true }
  ]),
  { name: 'GET two-key sort_by', client: SMALL_CLIENT, limit: 50, page: () => 0, sortBy: 'description.desc,name.asc' }
]

const listPath = (client: string) => `/resources/${RESOURCE_ID}/authorized_clients/${client}/permissions`
const search = (scenario: ListScenario, scale: Scale) =>
  `?limit=${scenario.limit}&offset=${scenario.page(scale)}&sort_by=${scenario.sortBy}`

/** The goal for each order: its deepest page's p50 at most 2× its page 0's, at the same scale. */
function deepestPageGoal (): string[] {
  const lines: string[] = []
  for (const grants of new Set(rows.map((row) => row.grants))) {
    for (const sortBy of ORDERS) {
      const first = rows.find((row) => row.grants === grants && row.scenario === `GET ${sortBy} page 0, limit 500`)
      const deepest = rows.find((row) => row.grants === grants && row.scenario === `GET ${sortBy} deepest page, limit 500`)
      if (!first || !deepest) continue
      const ratio = deepest.service.p50 / first.service.p50
      lines.push(`${ratio <= 2 ? 'PASS' : 'FAIL'}  deepest page p50 ≤ 2 × page 0 p50, ${sortBy} at ${grants} grants: ` +
        `${deepest.service.p50} ÷ ${first.service.p50} ms = ${ratio.toFixed(2)}`)
    }
  }
  return lines
}

const ceilingPages: CeilingPages = {}
const service = { url: '', pid: 0 }
const ceiling = { url: '' }
const readHeaders = { authorization: bearer('read:resource') }
const deleteHeaders = { authorization: bearer('delete:resource'), 'content-type': 'application/json' }
const grantHeaders = { authorization: bearer('create:resource'), 'content-type': 'application/json' }

async function measureList (scale: Scale): Promise<void> {
  for (const scenario of listScenarios.filter(({ name }) => selected(name))) {
    const path = listPath(scenario.client) + search(scenario, scale)
    const variables = { p1: RESOURCE_ID, p2: scenario.client, p3: String(scenario.limit), p4: String(scenario.page(scale)) }
    const serviceRun = await load({ url: service.url + path, headers: readHeaders, expect: 200 })
    const httpRun = await load({ url: ceiling.url + path, expect: 200 })
    const dbCeiling = await databaseCeiling(listGrantedPermissionsSql(parseSortBy(scenario.sortBy)), variables)
    const idealSqlCeiling = await databaseCeiling(idealListSql(scenario), variables)
    rows.push({ scenario: scenario.name, grants: scale.grants, service: serviceRun, httpCeiling: httpRun.reqPerSec, dbCeiling, idealSqlCeiling })
    printRow(rows.at(-1)!)
  }
}

/** EXPLAIN (ANALYZE, BUFFERS) of each list statement as the service runs it, for docs/performance.md. */
async function explainList (scale: Scale): Promise<void> {
  const sections: string[] = []
  for (const scenario of listScenarios) {
    const values = [RESOURCE_ID, scenario.client, scenario.limit, scenario.page(scale)]
    const plan = await explainPrepared(db, listGrantedPermissionsSql(parseSortBy(scenario.sortBy)), values)
    sections.push(`-- ${scenario.name} (${search(scenario, scale)}) at ${scale.grants} grants\n${plan}`)
  }
  await mkdir(reportFolder, { recursive: true })
  await writeFile(join(reportFolder, 'explain.txt'), sections.join('\n\n') + '\n')
}

/** A slice of the permissions a filler client holds. */
function fillerBatch (client: number, batch: number, size: number): string[] {
  return Array.from({ length: size }, (_, j) => fillerPermissionId(client, batch * size + j))
}

async function measureDelete (scale: Scale): Promise<void> {
  if (scale.fillerClients === 0) {
    console.warn(`DELETE skipped: at ${scale.grants} grants there are no filler clients to delete from (there are from 102,000 on)`)
    return
  }
  for (const size of DELETE_BATCH_SIZES.filter((size) => selected(`DELETE ${size} ids`))) {
    const batchesPerClient = Math.floor(1000 / size)
    const available = scale.fillerClients * batchesPerClient
    let next = 0
    // Every request removes grants that exist: a new (client, batch) each time, never one twice.
    const serviceRun = await load({
      url: service.url,
      method: 'DELETE',
      headers: deleteHeaders,
      expect: 204,
      requests: [{
        setupRequest: (request) => {
          const n = next++ % available
          const client = Math.floor(n / batchesPerClient) + 1
          return { ...request, path: listPath(`filler-${client}`), body: JSON.stringify(fillerBatch(client, n % batchesPerClient, size)) }
        }
      }]
    })
    if (next > available) console.warn(`DELETE ${size}: ${next} requests for ${available} batches; later ones removed nothing`)
    // POST gives back what the DELETEs removed, batch by batch in the same order: real work each time.
    const removedBatches = Math.min(next, available)
    if (selected(`POST ${size} ids`)) {
      let granted = 0
      const postRun = await load({
        url: service.url,
        method: 'POST',
        headers: grantHeaders,
        expect: 204,
        requests: [{
          setupRequest: (request) => {
            const n = granted++ % removedBatches
            const client = Math.floor(n / batchesPerClient) + 1
            return { ...request, path: listPath(`filler-${client}`), body: JSON.stringify(fillerBatch(client, n % batchesPerClient, size)) }
          }
        }]
      })
      rows.push({ scenario: `POST ${size} ids`, grants: scale.grants, service: postRun })
      printRow(rows.at(-1)!)
    }
    // Re-grant whatever is still missing, so the next round (and scale) does real work again.
    await grantFillers(db, 1, Math.min(scale.fillerClients, Math.ceil(next / batchesPerClient)))
    const body = JSON.stringify(fillerBatch(1, 0, size))
    const httpRun = await load({ url: ceiling.url + listPath('filler-1'), method: 'DELETE', headers: { 'content-type': 'application/json' }, body, expect: 204 })
    // In pgbench, each transaction picks a random filler client, deletes a batch it holds and
    // rolls back: real work every time, and concurrent transactions rarely wait on each other.
    // (Picking the batch is one more small query in each transaction: a slightly lower ceiling.)
    const variables = { p1: RESOURCE_ID }
    const transaction = (statement: string) => `\\set c random(1, ${scale.fillerClients})
SELECT 'filler-' || :c AS p2, '{' || string_agg('perm-' || lpad(((:c * 7919 + j) % 100000)::text, 6, '0'), ',') || '}' AS p3 FROM generate_series(0, ${size - 1}) AS j \\gset
BEGIN;
SET LOCAL statement_timeout = ${STATEMENT_TIMEOUT_MS};
${withPgbenchVariables(statement)};
ROLLBACK;
`
    let dbCeiling: number | undefined
    let idealSqlCeiling: number | undefined
    if (pgbenchBinary) {
      const run = async (statement: string) => (await pgbench(pgbenchBinary, databaseUrl, transaction(statement), {
        connections: CONNECTIONS, seconds: SECONDS, variables, folder: work
      })).tps
      // No If-Match (NULL); an actor and a request id for the history row, as the service sends.
      dbCeiling = await run(unauthorizeSql.replaceAll('$4::bigint[]', 'NULL::bigint[]')
        .replaceAll('$5', "'bench'").replaceAll('$6', 'NULL::text').replaceAll('$7', "'bench-request'"))
      idealSqlCeiling = await run('DELETE FROM grants WHERE resource_id = $1 AND client_id = $2 AND permission_id = ANY ($3::text[])')
    }
    rows.push({ scenario: `DELETE ${size} ids`, grants: scale.grants, service: serviceRun, httpCeiling: httpRun.reqPerSec, dbCeiling, idealSqlCeiling })
    printRow(rows.at(-1)!)
  }
}

/** The change history of a client the DELETE and POST scenarios changed: its newest page. */
async function measureHistory (scale: Scale): Promise<void> {
  const scenario = 'GET change history, limit 50'
  if (!selected(scenario) || scale.fillerClients === 0) return
  const path = `/resources/${RESOURCE_ID}/authorized_clients/filler-1/permission_changes?limit=50`
  const serviceRun = await load({ url: service.url + path, headers: readHeaders, expect: 200 })
  rows.push({ scenario, grants: scale.grants, service: serviceRun })
  printRow(rows.at(-1)!)
}

async function measureRejections (scale: Scale): Promise<void> {
  const path = listPath(SMALL_CLIENT)
  const scenarios = ([
    ['GET without a token → 401', {}, 401],
    ['GET without the scope → 403', { authorization: bearer('delete:resource') }, 403]
  ] as const).filter(([scenario]) => selected(scenario))
  if (scenarios.length === 0) return
  const httpRun = await load({ url: `${ceiling.url}/unauthorized`, expect: 401 })
  for (const [scenario, headers, status] of scenarios) {
    const serviceRun = await load({ url: service.url + path, headers, expect: status })
    rows.push({ scenario, grants: scale.grants, service: serviceRun, httpCeiling: httpRun.reqPerSec })
    printRow(rows.at(-1)!)
  }
}

// ---------------------------------------------------------------------------------------------
// Output.

const fixed = (value: number | undefined, digits = 0) => value === undefined || Number.isNaN(value) ? '—' : value.toFixed(digits)
const machineCeiling = (row: Row) => row.httpCeiling && row.idealSqlCeiling
  ? 1 / (1 / row.httpCeiling + 1 / row.idealSqlCeiling)
  : row.httpCeiling
const columns = ['scenario', 'grants', 'req/s', 'p50 ms', 'p99 ms', 'errors', 'HTTP ceil', 'DB (our SQL)', 'DB (best SQL)', 'ceiling', '÷HTTP', '÷DB', '÷ceiling']

function cells (row: Row): string[] {
  const ceilingValue = machineCeiling(row)
  return [
    row.scenario, row.grants.toExponential(0).replace('e+', 'e'), fixed(row.service.reqPerSec), fixed(row.service.p50, 1), fixed(row.service.p99, 1),
    String(row.service.errors), fixed(row.httpCeiling), fixed(row.dbCeiling), fixed(row.idealSqlCeiling), fixed(ceilingValue),
    row.httpCeiling ? fixed(row.service.reqPerSec / row.httpCeiling, 2) : '—',
    row.idealSqlCeiling ? fixed(row.service.reqPerSec / row.idealSqlCeiling, 2) : '—',
    ceilingValue ? fixed(row.service.reqPerSec / ceilingValue, 2) : '—'
  ]
}

function printRow (row: Row) { console.log(cells(row).join(' | ')) }

function markdownTable (): string {
  return [`| ${columns.join(' | ')} |`, `|${columns.map(() => '---').join('|')}|`, ...rows.map((row) => `| ${cells(row).join(' | ')} |`)].join('\n')
}

// ---------------------------------------------------------------------------------------------
// The run.

try {
  console.log(`${cpus().length} × ${cpus()[0]?.model}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}; ` +
    `${CONNECTIONS} connections, ${SECONDS} s per measurement`)
  await migrateDatabase(db, migrationsDir)
  console.log('building the service (tsc)…')
  await new Promise<void>((resolve, reject) => {
    spawn(process.execPath, [join(projectRoot, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.build.json'], { cwd: projectRoot, stdio: 'inherit' })
      .on('exit', (code) => code === 0 ? resolve() : reject(new Error(`tsc exited with ${code}`)))
  })
  // Every service the bench starts runs so; each is given its database and port.
  const commonEnv = {
    NODE_ENV: 'production',
    JWT_PUBLIC_KEY: keys.publicKey,
    JWT_ISSUER: ISSUER,
    JWT_AUDIENCE: AUDIENCE,
    LOG_LEVEL: 'warn',
    HOST: '127.0.0.1',
    // The bounded wait for a pooled connection, when the bench is given one (else the service's default).
    ...(process.env.DATABASE_CONNECTION_WAIT_MS ? { DATABASE_CONNECTION_WAIT_MS: process.env.DATABASE_CONNECTION_WAIT_MS } : {})
  }

  // First, on servers of its own that are stopped before the rest begins.
  const pageZero = listScenarios.find(({ name }) => name === 'GET page 0, limit 50')!
  let replica: ReplicaReport | undefined
  if (selected(REPLICA_SCENARIO)) {
    if (REPLICA_BASELINE) console.error(`# ${REPLICA_SCENARIO}: building ${REPLICA_BASELINE} (git archive, tsc)…`)
    const baseline = REPLICA_BASELINE ? await buildRevision(REPLICA_BASELINE, work) : undefined
    replica = await measureReplicaRouting({
      path: listPath(pageZero.client) + search(pageZero, scaleOf(REPLICA_GRANTS)),
      headers: readHeaders,
      rounds: ROUNDS,
      seconds: SECONDS,
      connections: CONNECTIONS,
      startService: async (env, root) => {
        const { url, child } = await startService({ ...commonEnv, ...env }, { root })
        return { url, pid: child.pid!, stop: () => stopProcess(child) }
      },
      baseline,
      statementTps: pgbenchBinary
        ? async (url, position, seconds) => {
          const script = `${withPgbenchVariables(listGrantedPermissionsSql(parseSortBy(pageZero.sortBy), position))};\n`
          const variables = { p1: RESOURCE_ID, p2: pageZero.client, p3: String(pageZero.limit), p4: '0' }
          const result = await pgbench(pgbenchBinary, url, script, { connections: CONNECTIONS, seconds, variables, folder: work })
          if (result.failed > 0) throw new Error(`pgbench: ${result.failed} failed transactions`)
          return result.tps
        }
        : undefined,
      onCreated: (ending) => { replicated = ending },
      log: (line) => console.error(line)
    })
  }

  const serviceEnv = { ...commonEnv, DATABASE_URL: databaseUrl }
  // The ladder too, before the bench's service starts: it runs steps of its own, a service among
  // them, and stops them.
  let ladder: LadderReport | undefined
  if (selected(LADDER_SCENARIO)) {
    const grants = Math.min(LADDER_GRANTS, ...SCALES)
    const ladderBaseline = process.env.BENCH_LADDER_BASELINE
    if (ladderBaseline) console.error(`# ${LADDER_SCENARIO}: building ${ladderBaseline} (git archive, tsc)…`)
    ladder = await measureLadder({
      baseline: ladderBaseline ? await buildRevision(ladderBaseline, work) : undefined,
      db,
      grants,
      path: listPath(pageZero.client) + search(pageZero, scaleOf(grants)),
      env: serviceEnv,
      bearer,
      rounds: ROUNDS,
      seconds: SECONDS,
      connections: CONNECTIONS,
      folder: work,
      profileTo: PROFILE ? reportFolder : undefined,
      bestSqlTps: pgbenchBinary
        ? async (seconds) => {
          const script = `${withPgbenchVariables(idealListSql(pageZero))};\n`
          const variables = { p1: RESOURCE_ID, p2: pageZero.client, p3: String(pageZero.limit), p4: String(pageZero.page(scaleOf(grants))) }
          const result = await pgbench(pgbenchBinary, databaseUrl, script, { connections: CONNECTIONS, seconds, variables, folder: work })
          if (result.failed > 0) throw new Error(`pgbench: ${result.failed} failed transactions`)
          return result.tps
        }
        : undefined,
      log: (line) => console.error(line)
    })
  }

  // Tracing off, on and before, on services of its own too, stopped before the bench's starts.
  let tracing: TracingReport | undefined
  if (selected(TRACING_SCENARIO)) {
    const grants = Math.min(LADDER_GRANTS, ...SCALES)
    const tracingBaseline = process.env.BENCH_TRACING_BASELINE
    if (tracingBaseline) console.error(`# ${TRACING_SCENARIO}: building ${tracingBaseline} (git archive, tsc)…`)
    tracing = await measureTracing({
      baseline: tracingBaseline ? await buildRevision(tracingBaseline, work) : undefined,
      db,
      grants,
      path: listPath(pageZero.client) + search(pageZero, scaleOf(grants)),
      env: serviceEnv,
      headers: readHeaders,
      rounds: ROUNDS,
      seconds: SECONDS,
      connections: CONNECTIONS,
      log: (line) => console.error(line)
    })
  }

  const profileArgs = PROFILE ? ['--cpu-prof', '--cpu-prof-dir', join(work, 'profile')] : []
  const { poolMax, ...connectionWait } = connectionWaitOf({ ...process.env, ...serviceEnv })
  const { url: serviceUrl, child: serviceProcess } = await startService(serviceEnv, { nodeArgs: profileArgs })
  service.url = serviceUrl
  service.pid = serviceProcess.pid!
  const rssTimer = watchRss(service.pid)

  // The feed, on data of its own, before the table scenarios: the overload scenario, last, leaves
  // the service working off requests.
  const log = (line: string) => console.error(line)
  const feedPolling: FeedPollingReport | undefined = selected(FEED_POLLING_SCENARIO)
    ? await measureFeedPolling({ db, serviceUrl: service.url, headers: readHeaders, changes: FEED_CHANGES, connections: CONNECTIONS, seconds: SECONDS, load, databaseCeiling, log })
    : undefined
  const feedFanout: FeedFanoutReport | undefined = selected(FEED_FANOUT_SCENARIO)
    ? await measureFeedFanout({
      db, serviceUrl: service.url, servicePid: service.pid, readHeaders, grantHeaders, streams: FEED_STREAMS, rate: FEED_RATE, seconds: FEED_SECONDS, log
    })
    : undefined

  // No scale is loaded for a run of the replica scenario alone.
  const tableScenarios = [
    ...listScenarios.map(({ name }) => name), ...DELETE_BATCH_SIZES.flatMap((size) => [`DELETE ${size} ids`, `POST ${size} ids`]),
    'GET change history, limit 50', 'GET without a token → 401', 'GET without the scope → 403', OVERLOAD_SCENARIO
  ]
  const scales = tableScenarios.some(selected) ? SCALES : []
  if (scales.length > 0) console.log(columns.join(' | '))
  let scale: Scale | undefined
  let overload: OverloadReport | undefined
  for (const grants of scales) {
    const started = Date.now()
    scale = await loadScale(db, grants)
    console.error(`# ${scale.grants} grants loaded in ${((Date.now() - started) / 1000).toFixed(0)} s (big client: ${scale.bigGrants})`)
    // The HTTP ceiling answers the same pages, read once from the service itself.
    for (const scenario of listScenarios) {
      const url = service.url + listPath(scenario.client) + search(scenario, scale)
      const res = await fetch(url, { headers: readHeaders })
      ceilingPages[search(scenario, scale)] = { body: await res.json(), total: Number(res.headers.get('x-total-count')), link: res.headers.get('link') ?? '' }
    }
    const pagesFile = join(work, 'pages.json')
    await writeFile(pagesFile, JSON.stringify(ceilingPages))
    const { url: ceilingUrl, child: ceilingProcess } = await startHttpCeiling(pagesFile)
    ceiling.url = ceilingUrl
    await measureList(scale)
    if (grants === SCALES.at(-1)) await explainList(scale)
    if (grants === SCALES.at(-1)) {
      await measureDelete(scale)
      await measureHistory(scale)
      await measureRejections(scale)
    }
    await stopProcess(ceilingProcess)
    // Last: it leaves the service loaded with requests it may still be working off.
    if (grants === SCALES.at(-1) && selected(OVERLOAD_SCENARIO)) {
      overload = await measureOverload({
        serviceUrl: service.url,
        headers: readHeaders,
        scale,
        seconds: SECONDS,
        connectionWait,
        poolMax,
        connections: OVERLOAD_CONNECTIONS,
        log: (line) => console.error(line)
      })
    }
  }
  clearInterval(rssTimer)

  const report = {
    date: new Date().toISOString(),
    machine: { cpus: cpus().length, model: cpus()[0]?.model, memoryGiB: Math.round(totalmem() / 2 ** 30), node: process.version },
    connections: CONNECTIONS,
    secondsPerMeasurement: SECONDS,
    serviceRssPeakMiB: Math.round(rssPeak / 2 ** 20),
    rows: rows.map((row) => ({ ...row, machineCeiling: machineCeiling(row) })),
    overload: overload && { ...overload, markdown: overloadSummary(overload) },
    replica: replica && { ...replica, markdown: replicaSummary(replica) },
    feedPolling: feedPolling && { ...feedPolling, markdown: feedPollingSummary(feedPolling) },
    feedFanout: feedFanout && { ...feedFanout, markdown: feedFanoutSummary(feedFanout) },
    ladder: ladder && { ...ladder, markdown: ladderSummary(ladder) },
    tracing: tracing && { ...tracing, markdown: tracingSummary(tracing) }
  }
  await mkdir(reportFolder, { recursive: true })
  await writeFile(join(reportFolder, 'latest.json'), JSON.stringify(report, null, 2))
  if (rows.length > 0) console.log(`\n${markdownTable()}\n\n${deepestPageGoal().join('\n')}`)
  if (overload) console.log(`\n${report.overload!.markdown}`)
  if (replica) console.log(`\n${report.replica!.markdown}`)
  if (feedPolling) console.log(`\n${report.feedPolling!.markdown}`)
  if (feedFanout) console.log(`\n${report.feedFanout!.markdown}`)
  if (ladder) console.log(`\n${report.ladder!.markdown}`)
  if (ladder?.profile) {
    console.log(`\nThe ladder's service step, where its CPU went:\n${ladder.profile.summary}\n\n` +
      'profile: reports/bench/ladder-service.cpuprofile, summary: reports/bench/ladder-profile.txt')
  }
  if (tracing) console.log(`\n${report.tracing!.markdown}`)
  console.log(`\n${scales.length > 0 ? `service RSS peak: ${report.serviceRssPeakMiB} MiB. ` : ''}JSON: reports/bench/latest.json`)
  if (PROFILE) {
    await stopProcess(serviceProcess)
    const [written] = await readdir(join(work, 'profile'))
    await copyFile(join(work, 'profile', written), join(reportFolder, 'service.cpuprofile'))
    const summary = await summarizeProfile(join(reportFolder, 'service.cpuprofile'))
    await writeFile(join(reportFolder, 'profile.txt'), summary + '\n')
    console.log(`\n${summary}\n\nprofile: reports/bench/service.cpuprofile (Chrome DevTools, speedscope), summary: reports/bench/profile.txt`)
  }
} finally {
  await cleanUp()
}
