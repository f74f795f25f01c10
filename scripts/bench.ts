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
//                  "tracing": page 0 with tracing off, on (always_on, to a local OTLP sink) and
//                  loaded but sampling nothing, scripts/bench/tracing.ts;
//                  "kept pages": page 0 of 1,000 readers at random, with the page cache holding
//                  them all, a quarter of them, or off, scripts/bench/kept-pages.ts)
//   BENCH_ROUNDS   rounds of the replica scenario, the ladder, the tracing and the kept pages
//                  scenarios (default 5; all but the replica's flag fewer)
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
//                  Where Linux perf is installed, the ladder and the tracing scenario sample each step's
//                  or variant's CPU with it in their last round instead (scripts/bench/cpu-samples.ts)
import { spawn } from 'node:child_process'
import { copyFile, mkdir, readdir, writeFile } from 'node:fs/promises'
import { cpus, totalmem } from 'node:os'
import { join } from 'node:path'
import { loadScale, RESOURCE_ID, scaleOf } from '../db/bench-data.js'
import { migrateDatabase } from '../db/migrate.js'
import { listGrantedPermissionsSql } from '../db/queries/list.js'
import { parseSortBy } from '../db/queries/sort.js'
import { migrationsDir, projectRoot } from '../src/project-root.js'
import { idealListSql } from './bench/best-sql.js'
import { type Bench, type BenchSettings, openBench } from './bench/context.js'
import { FEED_FANOUT_SCENARIO, feedFanoutSummary, measureFeedFanout, type FeedFanoutReport } from './bench/feed-fanout.js'
import { FEED_POLLING_SCENARIO, feedPollingSummary, measureFeedPolling, type FeedPollingReport } from './bench/feed-polling.js'
import { HISTORY_SCENARIO, measureHistory } from './bench/history.js'
import { KEPT_PAGES_SCENARIO, keptPagesSummary, measureKeptPages, type KeptPagesReport } from './bench/kept-pages.js'
import { LADDER_GRANTS, LADDER_SCENARIO, ladderSummary, measureLadder, type LadderReport } from './bench/ladder.js'
import { ceilingPagesOf, deepestPageGoal, explainList, listScenarios, measureList, pageZero, pageZeroPath } from './bench/list.js'
import { databaseCeiling, hasPgbench, load, statementTps } from './bench/measure.js'
import { connectionWaitOf, givenConnections, measureOverload, OVERLOAD_SCENARIO, overloadSummary, type OverloadReport } from './bench/overload.js'
import { describeImageNode, imageNode, stopProcess, watchRss } from './bench/processes.js'
import { summarizeProfile } from './bench/profile.js'
import { measureRejections, REJECTION_SCENARIOS } from './bench/rejections.js'
import { measureReplicaRouting, REPLICA_GRANTS, REPLICA_SCENARIO, replicaSummary, type ReplicaReport } from './bench/replica.js'
import { buildRevision } from './bench/revision.js'
import { cells, columns, machineCeiling, markdownTable, type Row, type TableRun } from './bench/table.js'
import { measureTracing, TRACING_SCENARIO, tracingSummary, type TracingReport } from './bench/tracing.js'
import { measureWrites, WRITE_SCENARIOS } from './bench/writes.js'
import { type Command, isEntryPoint, openingComment, readCommandLine } from '../src/command-line.js'

/** The settings, from the environment: the opening comment documents each. */
function settingsOf (env: NodeJS.ProcessEnv): BenchSettings {
  return {
    serverUrl: env.DATABASE_URL,
    connections: 50,
    seconds: Number(env.BENCH_SECONDS ?? 5),
    scales: (env.BENCH_SCALES ?? '10000,1000000,10000000').split(',').map(Number),
    only: env.BENCH_ONLY ?? '',
    profile: Boolean(env.BENCH_PROFILE),
    rounds: Number(env.BENCH_ROUNDS ?? 5),
    overloadConnections: givenConnections(env.BENCH_OVERLOAD_CONNECTIONS),
    replicaBaseline: env.BENCH_REPLICA_BASELINE,
    ladderBaseline: env.BENCH_LADDER_BASELINE,
    tracingBaseline: env.BENCH_TRACING_BASELINE,
    feed: {
      changes: Number(env.BENCH_FEED_CHANGES ?? 50_000),
      streams: Number(env.BENCH_FEED_STREAMS ?? 100),
      rate: Number(env.BENCH_FEED_RATE ?? 20),
      seconds: Number(env.BENCH_FEED_SECONDS ?? 10)
    },
    connectionWaitMs: env.DATABASE_CONNECTION_WAIT_MS
  }
}

/** npm run build's tsc: every service the bench starts is this build (dist/). */
async function buildService (): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    spawn(process.execPath, [join(projectRoot, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.build.json'], { cwd: projectRoot, stdio: 'inherit' })
      .on('exit', (code) => code === 0 ? resolve() : reject(new Error(`tsc exited with ${code}`)))
  })
}

type Env = Record<string, string | undefined>

// The scenarios that run on servers of their own, stopped before the bench's service starts.

async function replicaScenario (bench: Bench, commonEnv: Env): Promise<ReplicaReport | undefined> {
  const { settings, processes } = bench
  if (settings.replicaBaseline) bench.log(`# ${REPLICA_SCENARIO}: building ${settings.replicaBaseline} (git archive, tsc)…`)
  const baseline = settings.replicaBaseline ? await buildRevision(settings.replicaBaseline, bench.work) : undefined
  return await measureReplicaRouting({
    path: pageZeroPath(REPLICA_GRANTS),
    headers: bench.tokens.readHeaders,
    rounds: settings.rounds,
    seconds: settings.seconds,
    connections: settings.connections,
    startService: async (env, root) => {
      const { url, child } = await processes.startService({ ...commonEnv, ...env }, { root })
      return { url, pid: child.pid!, stop: () => stopProcess(child) }
    },
    baseline,
    statementTps: hasPgbench(bench)
      ? async (url, position, seconds) => await statementTps(bench, listGrantedPermissionsSql(parseSortBy(pageZero.sortBy), position),
        { p1: RESOURCE_ID, p2: pageZero.client, p3: String(pageZero.limit), p4: '0', p5: '{}' }, seconds, url)
      : undefined,
    onCreated: bench.stopOnClose,
    log: bench.log
  })
}

async function ladderScenario (bench: Bench, serviceEnv: Env): Promise<LadderReport> {
  const { settings } = bench
  const grants = Math.min(LADDER_GRANTS, ...settings.scales)
  if (settings.ladderBaseline) bench.log(`# ${LADDER_SCENARIO}: building ${settings.ladderBaseline} (git archive, tsc)…`)
  return await measureLadder({
    baseline: settings.ladderBaseline ? await buildRevision(settings.ladderBaseline, bench.work) : undefined,
    db: bench.db,
    processes: bench.processes,
    grants,
    path: pageZeroPath(grants),
    env: serviceEnv,
    bearer: bench.tokens.bearer,
    rounds: settings.rounds,
    seconds: settings.seconds,
    connections: settings.connections,
    folder: bench.work,
    profileTo: settings.profile ? bench.reportFolder : undefined,
    bestSqlTps: hasPgbench(bench)
      ? async (seconds) => await statementTps(bench, idealListSql(pageZero),
        { p1: RESOURCE_ID, p2: pageZero.client, p3: String(pageZero.limit), p4: String(pageZero.page(scaleOf(grants))) }, seconds)
      : undefined,
    log: bench.log
  })
}

async function tracingScenario (bench: Bench, serviceEnv: Env): Promise<TracingReport> {
  const { settings } = bench
  const grants = Math.min(LADDER_GRANTS, ...settings.scales)
  if (settings.tracingBaseline) bench.log(`# ${TRACING_SCENARIO}: building ${settings.tracingBaseline} (git archive, tsc)…`)
  return await measureTracing({
    baseline: settings.tracingBaseline ? await buildRevision(settings.tracingBaseline, bench.work) : undefined,
    db: bench.db,
    processes: bench.processes,
    grants,
    path: pageZeroPath(grants),
    env: serviceEnv,
    headers: bench.tokens.readHeaders,
    rounds: settings.rounds,
    seconds: settings.seconds,
    connections: settings.connections,
    profileTo: settings.profile ? bench.reportFolder : undefined,
    log: bench.log
  })
}

async function keptPagesScenario (bench: Bench, serviceEnv: Env): Promise<KeptPagesReport> {
  const { settings } = bench
  return await measureKeptPages({
    db: bench.db,
    processes: bench.processes,
    grants: Math.min(LADDER_GRANTS, ...settings.scales),
    env: serviceEnv,
    headers: bench.tokens.readHeaders,
    rounds: settings.rounds,
    seconds: settings.seconds,
    connections: settings.connections,
    log: bench.log
  })
}

/** Every scenario in its turn, then the report. */
async function run (bench: Bench): Promise<void> {
  const { settings, db, tokens, processes, log } = bench
  const node = await imageNode()
  console.log(`${cpus().length} × ${cpus()[0]?.model}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}; ` +
    `${settings.connections} connections, ${settings.seconds} s per measurement; ` +
    `the service's node settings (the image's): ${describeImageNode(node)}`)
  await migrateDatabase(db, migrationsDir)
  console.log('building the service (tsc)…')
  await buildService()
  // Every service the bench starts runs so; each is given its database and port.
  const commonEnv = {
    NODE_ENV: 'production',
    JWT_PUBLIC_KEY: tokens.publicKey,
    JWT_ISSUER: tokens.issuer,
    JWT_AUDIENCE: tokens.audience,
    LOG_LEVEL: 'warn',
    HOST: '127.0.0.1',
    // The bounded wait for a pooled connection, when the bench is given one (else the service's default).
    ...(settings.connectionWaitMs ? { DATABASE_CONNECTION_WAIT_MS: settings.connectionWaitMs } : {})
  }

  // First, on servers of its own that are stopped before the rest begins.
  const replica = bench.selected(REPLICA_SCENARIO) ? await replicaScenario(bench, commonEnv) : undefined
  const serviceEnv = { ...commonEnv, DATABASE_URL: bench.databaseUrl }
  // The ladder too, before the bench's service starts: it runs steps of its own, a service among
  // them, and stops them.
  const ladder = bench.selected(LADDER_SCENARIO) ? await ladderScenario(bench, serviceEnv) : undefined
  // Tracing off, on and before, on services of its own too, stopped before the bench's starts.
  const tracing = bench.selected(TRACING_SCENARIO) ? await tracingScenario(bench, serviceEnv) : undefined
  // The page cache at three sizes, on services of its own too.
  const keptPages = bench.selected(KEPT_PAGES_SCENARIO) ? await keptPagesScenario(bench, serviceEnv) : undefined

  const profileArgs = settings.profile ? ['--cpu-prof', '--cpu-prof-dir', join(bench.work, 'profile')] : []
  const { poolMax, ...connectionWait } = connectionWaitOf({ ...process.env, ...serviceEnv })
  const service = await processes.startService(serviceEnv, { nodeArgs: profileArgs })
  const serviceUrl = service.url
  const rss = watchRss(service.child.pid!)

  // The feed, on data of its own, before the table scenarios: the overload scenario, last, leaves
  // the service working off requests.
  if (bench.selected(FEED_POLLING_SCENARIO)) rss.phase(FEED_POLLING_SCENARIO)
  const feedPolling: FeedPollingReport | undefined = bench.selected(FEED_POLLING_SCENARIO)
    ? await measureFeedPolling({
      db,
      serviceUrl,
      headers: tokens.readHeaders,
      changes: settings.feed.changes,
      connections: settings.connections,
      seconds: settings.seconds,
      load: (options) => load(bench, options),
      databaseCeiling: (sql, variables) => databaseCeiling(bench, sql, variables),
      log
    })
    : undefined
  if (bench.selected(FEED_FANOUT_SCENARIO)) rss.phase(FEED_FANOUT_SCENARIO)
  const feedFanout: FeedFanoutReport | undefined = bench.selected(FEED_FANOUT_SCENARIO)
    ? await measureFeedFanout({
      db,
      serviceUrl,
      servicePid: service.child.pid!,
      readHeaders: tokens.readHeaders,
      grantHeaders: tokens.grantHeaders,
      streams: settings.feed.streams,
      rate: settings.feed.rate,
      seconds: settings.feed.seconds,
      log
    })
    : undefined

  // No scale is loaded for a run of the replica scenario alone.
  const tableScenarios = [...listScenarios.map(({ name }) => name), ...WRITE_SCENARIOS, HISTORY_SCENARIO, ...REJECTION_SCENARIOS, OVERLOAD_SCENARIO]
  const scales = tableScenarios.some((name) => bench.selected(name)) ? settings.scales : []
  if (scales.length > 0) console.log(columns.join(' | '))
  const rows: Row[] = []
  const record = (row: Row) => {
    rows.push(row)
    console.log(cells(row).join(' | '))
  }
  let overload: OverloadReport | undefined
  for (const grants of scales) {
    const started = Date.now()
    const scale = await loadScale(db, grants)
    log(`# ${scale.grants} grants loaded in ${((Date.now() - started) / 1000).toFixed(0)} s (big client: ${scale.bigGrants})`)
    // The HTTP ceiling answers the same pages, read once from the service itself.
    const pagesFile = join(bench.work, 'pages.json')
    await writeFile(pagesFile, JSON.stringify(await ceilingPagesOf(serviceUrl, tokens.readHeaders, scale)))
    const ceiling = await processes.startHttpCeiling(pagesFile)
    const table: TableRun = { bench, scale, serviceUrl, ceilingUrl: ceiling.url, record }
    const largest = grants === settings.scales.at(-1)
    rss.phase(`reads at ${grants}`)
    await measureList(table)
    if (largest) {
      await explainList(bench, scale)
      rss.phase(`writes at ${grants}`)
      await measureWrites(table)
      rss.phase(`history and rejections at ${grants}`)
      await measureHistory(table)
      await measureRejections(table)
    }
    await stopProcess(ceiling.child)
    // Last: it leaves the service loaded with requests it may still be working off.
    if (largest && bench.selected(OVERLOAD_SCENARIO)) {
      rss.phase(`${OVERLOAD_SCENARIO} at ${grants}`)
      overload = await measureOverload({
        serviceUrl,
        headers: tokens.readHeaders,
        scale,
        seconds: settings.seconds,
        connectionWait,
        poolMax,
        connections: settings.overloadConnections,
        log
      })
    }
  }
  rss.stop()

  // The report: reports/bench/latest.json, and the same on the terminal.
  const report = {
    date: new Date().toISOString(),
    machine: { cpus: cpus().length, model: cpus()[0]?.model, memoryGiB: Math.round(totalmem() / 2 ** 30), node: process.version },
    connections: settings.connections,
    secondsPerMeasurement: settings.seconds,
    serviceNodeOptions: node.options ?? null,
    serviceNodeFlags: node.flags,
    serviceRssPeakMiB: Math.round(rss.peak() / 2 ** 20),
    serviceRssPeaksMiB: Object.fromEntries([...rss.peaks()].map(([phase, bytes]) => [phase, Math.round(bytes / 2 ** 20)])),
    rows: rows.map((row) => ({ ...row, machineCeiling: machineCeiling(row) })),
    overload: overload && { ...overload, markdown: overloadSummary(overload) },
    replica: replica && { ...replica, markdown: replicaSummary(replica) },
    feedPolling: feedPolling && { ...feedPolling, markdown: feedPollingSummary(feedPolling) },
    feedFanout: feedFanout && { ...feedFanout, markdown: feedFanoutSummary(feedFanout) },
    ladder: ladder && { ...ladder, markdown: ladderSummary(ladder) },
    tracing: tracing && { ...tracing, markdown: tracingSummary(tracing) },
    keptPages: keptPages && { ...keptPages, markdown: keptPagesSummary(keptPages) }
  }
  const { reportFolder } = bench
  await mkdir(reportFolder, { recursive: true })
  await writeFile(join(reportFolder, 'latest.json'), JSON.stringify(report, null, 2))
  if (rows.length > 0) console.log(`\n${markdownTable(rows)}\n\n${deepestPageGoal(rows).join('\n')}`)
  if (overload) console.log(`\n${report.overload!.markdown}`)
  if (replica) console.log(`\n${report.replica!.markdown}`)
  if (feedPolling) console.log(`\n${report.feedPolling!.markdown}`)
  if (feedFanout) console.log(`\n${report.feedFanout!.markdown}`)
  if (ladder) console.log(`\n${report.ladder!.markdown}`)
  if (ladder?.profile) {
    console.log(`\nThe ladder's service step, where its CPU went:\n${ladder.profile.summary}\n\n` +
      'profile: reports/bench/ladder-service.cpuprofile, summary: reports/bench/ladder-profile.txt')
  }
  if (ladder?.cpu) {
    console.log('\nWhere each step\'s CPU went in the last round (perf, cpu-clock), µs per answer by owner (scripts/bench/cpu-samples.ts):\n\n' +
      ladder.cpu.table)
  }
  if (tracing) console.log(`\n${report.tracing!.markdown}`)
  if (keptPages) console.log(`\n${report.keptPages!.markdown}`)
  const byPhase = Object.entries(report.serviceRssPeaksMiB).map(([phase, mib]) => `${phase} ${mib}`).join(', ')
  // The scenarios chosen may all run on services of their own (the ladder, tracing): then nothing sampled the bench's.
  const rssLine = report.serviceRssPeakMiB > 0 ? `service RSS peak: ${report.serviceRssPeakMiB} MiB (by phase: ${byPhase})` : 'service RSS: no scenario ran on the bench\'s service'
  console.log(`\n${rssLine}. JSON: reports/bench/latest.json`)
  if (settings.profile) {
    await stopProcess(service.child)
    const [written] = await readdir(join(bench.work, 'profile'))
    await copyFile(join(bench.work, 'profile', written), join(reportFolder, 'service.cpuprofile'))
    const summary = await summarizeProfile(join(reportFolder, 'service.cpuprofile'))
    await writeFile(join(reportFolder, 'profile.txt'), summary + '\n')
    console.log(`\n${summary}\n\nprofile: reports/bench/service.cpuprofile (Chrome DevTools, speedscope), summary: reports/bench/profile.txt`)
  }
}

/** Returns the exit code: 0 measured (or --help), 2 bad arguments. */
async function main (args: string[]): Promise<number> {
  // Its settings are the environment's, written once in the opening comment, which --help prints.
  const command = { usage: 'npm run -s bench', about: await openingComment(new URL(import.meta.url)), options: {} } satisfies Command
  const commandLine = readCommandLine(command, args)
  if (typeof commandLine === 'number') return commandLine
  const bench = await openBench(settingsOf(process.env))
  try {
    await run(bench)
  } finally {
    await bench.close()
  }
  return 0
}

if (isEntryPoint(import.meta.url)) process.exitCode = await main(process.argv.slice(2))
