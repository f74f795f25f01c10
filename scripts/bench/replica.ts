// The replica scenario of `npm run bench` (issue 28): what routing reads costs. A primary and a
// streaming replica (db/replicated-postgres.ts, Debian's PostgreSQL) hold the bench's data;
// page 0 of the 1,000-grant client is measured, round after round, in each variant:
//   (0) optional: another revision's build (BENCH_REPLICA_BASELINE), no replica: the code before
//   (a) the service with no replica configured, on the primary
//   (b) the service with the replica configured: its reads answered by the replica
//   (c) the same service, each request with a Consistency-Token no server has reached: every read
//       sent to the primary after the routing has looked at the replica (the machinery, no gain)
//   (d) the same service, each request with a token every server has replayed: read on the
//       replica, which is first asked where it stands (db/replicas.ts, readIfReplayed)
// The primary, the replica, the service and the load generator share the machine, so (b) shows
// what a replica gives on one machine, not a scale-out.
// Each round measures every variant, in an order that rotates round by round, so the machine's
// drift falls on all alike. A variant's ratio to (a) is that of the medians of the rounds; each
// round's own ratio (against the (a) of the same round, seconds apart) gives the spread. Beside
// req/s, the CPU each request cost the service and the database servers (from /proc): which side
// a difference comes from. Where each read was answered is checked on the service's own /metrics
// (db_reads_total), per measurement. Then, with pgbench, the list statement on the primary without
// and with the position column routing adds (db/lsn.ts), alternating: what the column costs the
// database alone.
import { readdir, readFile } from 'node:fs/promises'
import { setTimeout as sleep } from 'node:timers/promises'
import autocannon from 'autocannon'
import pg from 'pg'
import { loadScale } from '../../db/bench-data.js'
import { migrateDatabase } from '../../db/migrate.js'
import { NO_POSTGRES_SERVER, postgresServerBin, startReplicatedPostgres, type Ending } from '../../db/replicated-postgres.js'
import { migrationsDir } from '../../src/project-root.js'
import { fixed } from './format.js'

/** The scenario's name for BENCH_ONLY. */
export const REPLICA_SCENARIO = 'replica routing'
/** The grants loaded: the page-0 client's 1,000 and the table of the bench's smallest default scale. */
export const REPLICA_GRANTS = 10_000
/** A position no server has written: the replica cannot have replayed it, so the primary answers. */
const UNREACHED_TOKEN = 'FFFFFFFF/FFFFFFFF'
/** A position every server has passed: the replica answers, after saying where it stands. */
const REPLAYED_TOKEN = '0/1'
/** Routing may cost at most this share of page-0 throughput (issue 28). */
const GOAL = 0.95
/** After a run, the requests autocannon left in flight are answered within this (50 at ~2,000/s). */
const SETTLE_MS = 250
/** Linux's USER_HZ, the unit of CPU times in /proc/<pid>/stat (100 on every common architecture). */
const CLOCK_TICKS = 100

export interface Service { url: string, pid: number, stop: () => Promise<void> }

interface Variant { key: string, name: string, service: Service, headers: Record<string, string>, routed: boolean }

interface Round {
  reqPerSec: number
  p50: number
  p99: number
  /** Answers other than 200, connection errors and timeouts. */
  errors: number
  /** 200s received in the measured run. */
  answered: number
  /** CPU time per answered request, µs: the service's process, and both database servers' processes. */
  serviceCpuUs: number
  databaseCpuUs: number
  /** Reads the service counted during the run, by where they were answered (with replicas only). */
  reads?: { replica: number, primary: number }
}

interface Spread { median: number, min: number, max: number }

export interface ReplicaVariantReport {
  key: string
  name: string
  rounds: Round[]
  reqPerSec: Spread
  p50: number
  p99: number
  errors: number
  serviceCpuUs: number
  databaseCpuUs: number
  /** Share of its reads answered by the replica, from /metrics; undefined without replicas configured. */
  onReplica?: number
  /** ÷ (a): of the medians (req/s and CPU per request), and each round's req/s against (a)'s. */
  ratio?: { reqPerSec: number, perRound: Spread & { values: number[] }, serviceCpu: number, databaseCpu: number }
}

export interface ReplicaReport {
  server: string
  grants: number
  path: string
  rounds: number
  seconds: number
  connections: number
  variants: ReplicaVariantReport[]
  /** That each variant read where it says, from the service's /metrics. */
  checks: Array<{ check: string, pass: boolean, measured: string }>
  /** The revision of variant (0), if any. */
  baseline?: { revision: string, subject: string }
  /** The list statement in pgbench, tps per round, without and with the position column. */
  statement?: { without: Spread & { values: number[] }, with: Spread & { values: number[] }, ratio: number, perRound: Spread }
  goal: { goal: string, pass: boolean, measured: string }
}

/** db_reads_total by target, from the service's /metrics. */
async function readCounts (url: string): Promise<{ replica: number, primary: number }> {
  const text = await (await fetch(`${url}/metrics`)).text()
  const value = (target: string) => Number(new RegExp(`^db_reads_total\\{target="${target}"\\} (\\d+)`, 'm').exec(text)?.[1] ?? NaN)
  return { replica: value('replica-1'), primary: value('primary') }
}

interface Stat { ppid: number, cpu: number, childrenCpu: number }

/** utime + stime (and cutime + cstime: children waited for) of a process, in ticks. */
async function statOf (pid: number | string): Promise<Stat | undefined> {
  const text = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => undefined)
  if (text === undefined) return undefined
  // Fields after "(comm)", which may hold spaces: state is field 3, so field n is at n - 3.
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ').map(Number)
  return { ppid: fields[4 - 3], cpu: fields[14 - 3] + fields[15 - 3], childrenCpu: fields[16 - 3] + fields[17 - 3] }
}

/**
 * CPU seconds used so far by the database servers: each postmaster, the backends and workers it
 * has waited for (a backend that ended moves there from the live ones), and those still running.
 */
async function serversCpuSeconds (postmasters: number[]): Promise<number> {
  let ticks = 0
  for (const pid of postmasters) {
    const stat = await statOf(pid)
    if (stat) ticks += stat.cpu + stat.childrenCpu
  }
  const processes = (await readdir('/proc')).filter((name) => /^\d+$/.test(name))
  for (const stat of await Promise.all(processes.map(statOf))) {
    if (stat && postmasters.includes(stat.ppid)) ticks += stat.cpu
  }
  return ticks / CLOCK_TICKS
}

async function serviceCpuSeconds (pid: number): Promise<number> {
  const stat = await statOf(pid)
  if (!stat) throw new Error(`the service (pid ${pid}) has exited`)
  return stat.cpu / CLOCK_TICKS
}

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b)
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}
const spread = (values: number[]): Spread => ({ median: median(values), min: Math.min(...values), max: Math.max(...values) })

/**
 * Runs the scenario; undefined, with a message, when Debian's PostgreSQL server is missing. The
 * services and the servers are stopped before it returns; `onCreated` gets the servers' ending
 * too, for a clean-up that runs if this never gets to it.
 */
export async function measureReplicaRouting (options: {
  /** The request: the bench's page-0 scenario (path and query). */
  path: string
  headers: Record<string, string>
  rounds: number
  seconds: number
  connections: number
  /** Starts the built service from `root` (default: this project) with `env` over the bench's. */
  startService: (env: Record<string, string | undefined>, root?: string) => Promise<Service>
  /** A build of another revision, run as variant (0). */
  baseline?: { name: string, subject: string, root: string }
  /** The list statement's tps in pgbench on `databaseUrl`, without or with the position column. */
  statementTps?: (databaseUrl: string, position: boolean, seconds: number) => Promise<number>
  onCreated: (ending: Ending) => void
  log: (line: string) => void
}): Promise<ReplicaReport | undefined> {
  const { path, headers, rounds, seconds, connections, startService, baseline, statementTps, log } = options
  if (!postgresServerBin()) {
    log(`${REPLICA_SCENARIO} skipped: ${NO_POSTGRES_SERVER}`)
    return undefined
  }
  let ending: Ending | undefined
  // shared_buffers as PostgreSQL's default (the harness keeps tests small); connections for every
  // variant's pools and probes, and the bench's.
  const cluster = await startReplicatedPostgres({
    onCreated: (each) => { ending = each; options.onCreated(each) },
    settings: { shared_buffers: '128MB', max_connections: 150 }
  })
  const services: Service[] = []
  try {
    const db = new pg.Pool({ connectionString: cluster.primaryUrl, max: 2 })
    try {
      await migrateDatabase(db, migrationsDir)
      const started = Date.now()
      await loadScale(db, REPLICA_GRANTS)
      log(`# ${REPLICA_SCENARIO}: ${REPLICA_GRANTS} grants loaded on the primary (PostgreSQL ${cluster.version}) in ${((Date.now() - started) / 1000).toFixed(0)} s`)
    } finally {
      await db.end()
    }
    await cluster.waitForReplay(120_000)

    const start = async (env: Record<string, string | undefined>, root?: string) => {
      // Metrics on the API port in every variant: (b) and (c) are checked on them, and they cost alike.
      const service = await startService({ DATABASE_URL: cluster.primaryUrl, METRICS_ENABLED: 'true', METRICS_PORT: undefined, ...env }, root)
      services.push(service)
      return service
    }
    const alone = { DATABASE_REPLICA_URLS: undefined }
    const routed = await start({ DATABASE_REPLICA_URLS: cluster.replicaUrl })
    const variants: Variant[] = [
      ...(baseline ? [{ key: '0', name: `${baseline.name}'s build, no replica configured`, service: await start(alone, baseline.root), headers, routed: false }] : []),
      { key: 'a', name: 'no replica configured', service: await start(alone), headers, routed: false },
      { key: 'b', name: 'replica configured: read on the replica', service: routed, headers, routed: true },
      { key: 'c', name: 'replica configured, token ahead: read on the primary', service: routed, headers: { ...headers, 'consistency-token': UNREACHED_TOKEN }, routed: true },
      { key: 'd', name: 'replica configured, token replayed: read on the replica, asked first', service: routed, headers: { ...headers, 'consistency-token': REPLAYED_TOKEN }, routed: true }
    ]

    const run = async (variant: Variant, duration: number) => {
      const result = await autocannon({ url: variant.service.url + path, headers: variant.headers, connections, duration })
      // The requests autocannon left in flight are answered (and counted) before the next reading.
      await sleep(SETTLE_MS)
      return result
    }
    // JIT, pools and both servers' caches warm before the first round, which would otherwise pay for them.
    for (const variant of variants) await run(variant, 2)
    const runs = variants.map(() => [] as Round[])
    for (let round = 0; round < rounds; round++) {
      // Rotated: no variant always follows the same one or always goes first.
      for (let k = 0; k < variants.length; k++) {
        const i = (round + k) % variants.length
        const variant = variants[i]
        await run(variant, 1)
        const before = {
          counts: variant.routed ? await readCounts(variant.service.url) : undefined,
          service: await serviceCpuSeconds(variant.service.pid),
          database: await serversCpuSeconds(cluster.postmasterPids())
        }
        const result = await run(variant, seconds)
        const database = await serversCpuSeconds(cluster.postmasterPids())
        const service = await serviceCpuSeconds(variant.service.pid)
        const counts = before.counts && await readCounts(variant.service.url)
        const answered = result.statusCodeStats?.['200']?.count ?? 0
        const reads = before.counts && counts && { replica: counts.replica - before.counts.replica, primary: counts.primary - before.counts.primary }
        runs[i].push({
          reqPerSec: result.requests.average,
          p50: result.latency.p50,
          p99: result.latency.p99,
          errors: result.errors + result.timeouts + (result.requests.total - answered),
          answered,
          serviceCpuUs: (service - before.service) / answered * 1e6,
          databaseCpuUs: (database - before.database) / answered * 1e6,
          reads
        })
        const last = runs[i].at(-1)!
        log(`# ${REPLICA_SCENARIO}, round ${round + 1}/${rounds}, (${variant.key}) ${variant.name}: ${last.reqPerSec.toFixed(0)} req/s, ` +
          `CPU per request ${last.serviceCpuUs.toFixed(0)} µs service, ${last.databaseCpuUs.toFixed(0)} µs database` +
          (reads ? `; reads on the replica ${reads.replica}, on the primary ${reads.primary}` : ''))
      }
    }

    // The services idle meanwhile (their probes aside).
    const tps: Record<'without' | 'with', number[]> = { without: [], with: [] }
    if (statementTps) {
      for (const position of [false, true]) await statementTps(cluster.primaryUrl, position, 1)
      for (let round = 0; round < rounds; round++) {
        for (const position of round % 2 === 0 ? [false, true] : [true, false]) {
          tps[position ? 'with' : 'without'].push(await statementTps(cluster.primaryUrl, position, seconds))
        }
        log(`# ${REPLICA_SCENARIO}, round ${round + 1}/${rounds}, the list statement in pgbench: ${tps.without.at(-1)!.toFixed(0)} tps, ` +
          `with the position column ${tps.with.at(-1)!.toFixed(0)} tps`)
      }
    }

    const reference = runs[variants.findIndex(({ key }) => key === 'a')]
    const reports = variants.map((variant, i): ReplicaVariantReport => {
      const own = runs[i]
      const counted = own.flatMap(({ reads }) => reads ? [reads] : [])
      const onReplica = counted.reduce((sum, { replica }) => sum + replica, 0)
      const total = counted.reduce((sum, { replica, primary }) => sum + replica + primary, 0)
      const ofMedians = (field: 'reqPerSec' | 'serviceCpuUs' | 'databaseCpuUs') => median(own.map((each) => each[field])) / median(reference.map((each) => each[field]))
      const perRound = own.map(({ reqPerSec }, round) => reqPerSec / reference[round].reqPerSec)
      return {
        key: variant.key,
        name: variant.name,
        rounds: own,
        reqPerSec: spread(own.map(({ reqPerSec }) => reqPerSec)),
        p50: median(own.map(({ p50 }) => p50)),
        p99: median(own.map(({ p99 }) => p99)),
        errors: own.reduce((sum, { errors }) => sum + errors, 0),
        serviceCpuUs: median(own.map(({ serviceCpuUs }) => serviceCpuUs)),
        databaseCpuUs: median(own.map(({ databaseCpuUs }) => databaseCpuUs)),
        onReplica: variant.routed ? onReplica / total : undefined,
        ratio: variant.key === 'a'
          ? undefined
          : {
              reqPerSec: ofMedians('reqPerSec'),
              perRound: { ...spread(perRound), values: perRound },
              serviceCpu: ofMedians('serviceCpuUs'),
              databaseCpu: ofMedians('databaseCpuUs')
            }
      }
    })
    const [b, c, d] = ['b', 'c', 'd'].map((key) => reports.find((report) => report.key === key)!)
    // The variants must have been what they say, or their ratios measure something else.
    const checks = [
      { check: '(b) answered by the replica: ≥ 99 % of its reads', pass: b.onReplica! >= 0.99, measured: percent(b.onReplica!) },
      { check: '(c) answered by the primary: none of its reads on the replica', pass: c.onReplica === 0, measured: percent(c.onReplica!) },
      { check: '(d) answered by the replica: ≥ 99 % of its reads', pass: d.onReplica! >= 0.99, measured: percent(d.onReplica!) }
    ]
    const routingCost = c.ratio!.reqPerSec
    return {
      server: `Debian's PostgreSQL ${cluster.version}, a primary and a streaming replica`,
      grants: REPLICA_GRANTS,
      path,
      rounds,
      seconds,
      connections,
      variants: reports,
      checks,
      baseline: baseline && { revision: baseline.name, subject: baseline.subject },
      statement: statementTps && {
        without: { ...spread(tps.without), values: tps.without },
        with: { ...spread(tps.with), values: tps.with },
        ratio: median(tps.with) / median(tps.without),
        perRound: spread(tps.with.map((value, round) => value / tps.without[round]))
      },
      goal: {
        goal: `routing costs at most ${Math.round((1 - GOAL) * 100)} % of page-0 throughput: (c) ÷ (a) ≥ ${GOAL}`,
        pass: routingCost >= GOAL && checks.every(({ pass }) => pass),
        measured: `${fixed(routingCost, 2)} (round by round ${fixed(c.ratio!.perRound.min, 2)}–${fixed(c.ratio!.perRound.max, 2)}, median ${fixed(c.ratio!.perRound.median, 2)})`
      }
    }
  } finally {
    await Promise.all(services.map((service) => service.stop()))
    await ending?.stop()
  }
}

const percent = (share: number) => `${fixed(share * 100, 1)} %`

/** The scenario's result as markdown: a table of the variants, the checks and the goal. */
export function replicaSummary (report: ReplicaReport): string {
  const ratio = (variant: ReplicaVariantReport, value: (ratio: NonNullable<ReplicaVariantReport['ratio']>) => string) =>
    variant.ratio ? value(variant.ratio) : '1'
  return [
    `Replica routing: \`GET ${report.path}\`, ${report.grants} grants, ${report.server}; ${report.connections} connections, ` +
      `${report.rounds} rounds of ${report.seconds} s per variant, rotated. Medians of the rounds [min–max]; ` +
      '÷ (a): of the medians; round by round, the median [range] of each round\'s own ratio.',
    ...(report.baseline ? [`(0) is the build of ${report.baseline.revision}, "${report.baseline.subject}".`] : []),
    '',
    '| variant | req/s | p50 ms | p99 ms | errors | reads on the replica | CPU µs/request: service + database | ÷ (a): req/s | round by round | ÷ (a): CPU, service + database |',
    '|---|---|---|---|---|---|---|---|---|---|',
    ...report.variants.map((variant) => `| (${variant.key}) ${variant.name} | ${fixed(variant.reqPerSec.median)} ` +
      `[${fixed(variant.reqPerSec.min)}–${fixed(variant.reqPerSec.max)}] | ${fixed(variant.p50, 1)} | ${fixed(variant.p99, 1)} | ${variant.errors} | ` +
      `${variant.onReplica === undefined ? '—' : percent(variant.onReplica)} | ${fixed(variant.serviceCpuUs)} + ${fixed(variant.databaseCpuUs)} | ` +
      `${ratio(variant, ({ reqPerSec }) => fixed(reqPerSec, 2))} | ` +
      `${ratio(variant, ({ perRound }) => `${fixed(perRound.median, 2)} [${fixed(perRound.min, 2)}–${fixed(perRound.max, 2)}]`)} | ` +
      `${ratio(variant, ({ serviceCpu, databaseCpu }) => `${fixed(serviceCpu, 2)} + ${fixed(databaseCpu, 2)}`)} |`),
    '',
    ...(report.statement
      ? [`The list statement alone (pgbench on the primary, ${report.connections} connections, alternating): ` +
        `${fixed(report.statement.without.median)} tps [${fixed(report.statement.without.min)}–${fixed(report.statement.without.max)}], ` +
        `with the position column ${fixed(report.statement.with.median)} [${fixed(report.statement.with.min)}–${fixed(report.statement.with.max)}]: ` +
        `÷ ${fixed(report.statement.ratio, 2)} (round by round ${fixed(report.statement.perRound.median, 2)} ` +
        `[${fixed(report.statement.perRound.min, 2)}–${fixed(report.statement.perRound.max, 2)}])`, '']
      : []),
    ...report.checks.map(({ check, pass, measured }) => `${pass ? 'PASS' : 'FAIL'}  ${check}: ${measured}`),
    `${report.goal.pass ? 'PASS' : 'FAIL'}  ${report.goal.goal}: ${report.goal.measured}`
  ].join('\n')
}
