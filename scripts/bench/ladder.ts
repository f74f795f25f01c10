// The ablation ladder of `npm run bench` (BENCH_ONLY=ladder): where a request's time goes between
// the least that can answer it and the service, layer by layer. The request: page 0, limit 50, of
// the client holding 1,000 grants. Each step is a process of its own built from the service's own
// modules (scripts/bench/ladder-server.ts says what each adds), the last the service itself,
// started as the bench starts it:
//   minimal → validated → pool → statement → auth-hs256 → auth-rs256 → hooks → headers → kept-pages → service
// All run side by side on the same database. First a guard: every step answers the page with the
// service's body byte for byte, and the headers and refusals its layers add, or nothing is measured
// (a step that did less work would look cheap). Then, after a warm-up, BENCH_ROUNDS rounds of
// BENCH_SECONDS each measure every step, the HTTP ceiling and the best SQL in pgbench, round-robin
// in an order rotated each round, so the machine's drift falls on all alike. A step's cost is
// (1 / its median − 1 / the previous step's median) × 10^6, µs per request, as measured: noise can
// make a cheap layer's negative. Medians want 5 rounds or more; fewer are flagged in the report.
import { copyFile, mkdir, readdir, readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { randomBytes } from 'node:crypto'
import type { ChildProcess } from 'node:child_process'
import autocannon from 'autocannon'
import { createSigner } from 'fast-jwt'
import type pg from 'pg'
import { loadScale } from '../../db/bench-data.js'
import { freePort } from '../../db/embedded-postgres.js'
import type { CeilingPages } from './http-ceiling.js'
import type { ServedStep } from './ladder-server.js'
import { imageNode, type Processes, stopProcess } from './processes.js'
import { cpuByOwner, cpuTable, measureSampled, PERF_NODE_ARGS, perfAvailable } from './cpu-samples.js'
import { summarizeProfile } from './profile.js'
import { fixed } from './format.js'

/** The scenario's name for BENCH_ONLY. */
export const LADDER_SCENARIO = 'ablation ladder'
/** Grants loaded: the page-0 client's 1,000 and the table of the bench's smallest default scale. */
export const LADDER_GRANTS = 10_000
/** Rounds below which medians and spreads say little; a shorter run is flagged. */
const MIN_ROUNDS = 5
const WARM_UP_SECONDS = 2

type StepKey = ServedStep | 'service' | 'before'

/** The steps, in order, and what each adds to the one before (scripts/bench/ladder-server.ts). */
export const LADDER_STEPS: ReadonlyArray<{ key: StepKey, adds: string }> = [
  { key: 'minimal', adds: 'Fastify (no logger), a pg.Pool, the best SQL as a prepared statement, the route\'s response schema' },
  { key: 'validated', adds: 'the route\'s path and query schemas, validated as the service does (src/validation.ts)' },
  { key: 'pool', adds: 'plugins/db.ts\'s pool and read() in place of the pg.Pool' },
  { key: 'statement', adds: 'the service\'s statement (listGrantedPermissions) and its 404, in place of the best SQL' },
  { key: 'auth-hs256', adds: 'plugins/auth/: a Bearer token checked, HS256 (verified tokens cached), scope read:resource' },
  { key: 'auth-rs256', adds: 'the same with RS256 (JWT_PUBLIC_KEY), as the service is benched' },
  { key: 'hooks', adds: 'the request id and X-Request-Id, plugins/pressure.ts, plugins/metrics.ts' },
  { key: 'headers', adds: 'the route itself: ETag, If-None-Match, Link, X-Total-Count, its page cache off (every read builds its page)' },
  { key: 'kept-pages', adds: 'the route\'s page cache (LIST_PAGE_CACHE_BYTES): the page unchanged, the database sends its version only' },
  { key: 'service', adds: 'the rest of the service (dist/src/server.js): logger, server options, error handling, other plugins and routes' }
]
const indexOf = (key: StepKey) => LADDER_STEPS.findIndex((step) => step.key === key)

interface Run {
  reqPerSec: number
  p50?: number
  p99?: number
  /** Answers other than 2xx, connection errors and timeouts (failed transactions in pgbench). */
  errors: number
  /** The server process's own CPU time per answer in the round (user and system), µs. */
  cpuMicros?: number
}

export interface Spread { median: number, min: number, max: number }

interface Check { check: string, pass: boolean, measured: string }

export interface LadderStepReport {
  key: StepKey
  adds: string
  rounds: Run[]
  reqPerSec: Spread
  p50: number
  p99: number
  errors: number
  /** Median req/s ÷ the minimal's. */
  ratio: number
  /** What the step adds to the previous one, µs per request: (1/median − 1/previous median) × 10^6. */
  costUs?: number
  /** The step's process: its CPU time per answer, µs (median of the rounds [min–max]). */
  cpuMicros: Spread
  /** What the step adds to the previous one in its process's CPU per answer, µs (of the medians). */
  cpuCostUs?: number
  /** The step's process at the end: resident set and its peak, MiB. */
  rssMiB: number
  rssPeakMiB: number
}

export interface LadderReport {
  path: string
  grants: number
  rounds: number
  seconds: number
  connections: number
  steps: LadderStepReport[]
  /** Bare Fastify answering the page from memory, measured in the same rounds. */
  httpCeiling: { reqPerSec: Spread, errors: number, rounds: Run[] }
  /** The minimal's statement in pgbench (without pgbench: not measured). */
  bestSql?: { tps: Spread, rounds: number[] }
  /** 1 / (1/HTTP ceiling + 1/best SQL), as the bench's table computes its ceiling. */
  machineCeiling?: number
  serviceToMinimal: number
  serviceToCeiling?: number
  minimalToCeiling?: number
  /** The service's cost over the minimal, µs per request: the sum of the steps'. */
  serviceOverMinimalUs: number
  /** The summary's verdicts: the guard, every answer 2xx, enough rounds. */
  checks: Check[]
  /** The guard's checks, one by one (any failure stops the ladder before it measures). */
  guard: Check[]
  /**
   * BENCH_PROFILE without perf: the service step's V8 CPU profile, summed by package and function
   * (scripts/bench/profile.ts).
   */
  profile?: { file: string, summary: string }
  /**
   * BENCH_PROFILE with Linux perf: every step's CPU in the last round, µs per answer by owner, a
   * markdown table (scripts/bench/cpu-samples.ts).
   */
  cpu?: { table: string }
  /** BENCH_LADDER_BASELINE: the service built at that revision, in the same rounds. */
  before?: { revision: string, subject: string, rounds: Run[], reqPerSec: Spread, cpuMicros: Spread, errors: number, serviceToBefore: Spread }
}

export const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b)
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}
export const spread = (values: number[]): Spread => ({ median: median(values), min: Math.min(...values), max: Math.max(...values) })

async function hammer (url: string, headers: Record<string, string>, connections: number, seconds: number, pid?: number): Promise<Run> {
  const cpuBefore = pid === undefined ? 0 : await cpuSecondsOf(pid)
  const result = await autocannon({ url, headers, connections, duration: seconds })
  const cpu = pid === undefined ? NaN : await cpuSecondsOf(pid) - cpuBefore
  return {
    reqPerSec: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    errors: result.non2xx + result.errors + result.timeouts,
    cpuMicros: cpu / result.requests.total * 1e6
  }
}

/** Resident set of a process now and its peak, MiB (NaN once it has exited). */
export async function memoryOf (pid: number): Promise<{ rssMiB: number, rssPeakMiB: number }> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '')
  const mib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN) / 1024
  return { rssMiB: mib('VmRSS'), rssPeakMiB: mib('VmHWM') }
}

/** CPU seconds a process has used so far, user and system (/proc/PID/stat, in clock ticks of 1/100 s). */
export async function cpuSecondsOf (pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '')
  // The fields after the command's name, which is in parentheses and may hold spaces.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return (Number(fields[11]) + Number(fields[12])) / 100
}

async function fetchPage (url: string, headers: Record<string, string>) {
  const res = await fetch(url, { headers })
  return { status: res.status, body: await res.text(), headers: res.headers }
}

/**
 * Waits, up to 15 s, until the database server has room for `wanted` more connections. Seven steps
 * hold up to DATABASE_POOL_MAX connections each, and pgbench wants 50 of its own: more than
 * PostgreSQL's default max_connections (100) together. Only the step under load needs its
 * connections, and the pools close those idle for 10 s (plugins/db.ts), so room comes soon.
 */
async function roomFor (db: pg.Pool, wanted: number): Promise<void> {
  for (const deadline = Date.now() + 15_000; Date.now() < deadline; await sleep(250)) {
    const { rows: [{ free }] } = await db.query<{ free: number }>(`
      SELECT current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int - count(*)::int AS free
      FROM pg_stat_activity WHERE backend_type = 'client backend'`)
    if (free >= wanted) return
  }
}

interface Running { key: StepKey, url: string, child: ChildProcess, headers: Record<string, string>, withoutScope: Record<string, string> }

/**
 * The guard: every step answers the page 200 with the service's body byte for byte; from `hooks` on
 * with an X-Request-Id, from `headers` on with the service's ETag, X-Total-Count and Link (its
 * address aside); from `auth-hs256` on, 401 without a token and 403 without the scope.
 */
async function sameWork (steps: Running[], path: string): Promise<{ checks: Check[], reference: Awaited<ReturnType<typeof fetchPage>> }> {
  const service = steps.find(({ key }) => key === 'service')!
  const reference = await fetchPage(service.url + path, service.headers)
  const linkOf = (page: typeof reference, url: string) => page.headers.get('link')?.replaceAll(url, '')
  const checks: Check[] = []
  for (const step of steps) {
    const page = step === service ? reference : await fetchPage(step.url + path, step.headers)
    // The build before (BENCH_LADDER_BASELINE) is checked as the service is.
    const at = step.key === 'before' ? indexOf('service') : indexOf(step.key)
    checks.push({
      check: `${step.key}: 200 with the service's body, byte for byte`,
      pass: page.status === 200 && reference.status === 200 && page.body === reference.body,
      measured: `${page.status}, ${page.body.length} bytes${page.body === reference.body ? ', the same' : ', different'}`
    })
    if (at >= indexOf('hooks')) {
      const id = page.headers.get('x-request-id')
      checks.push({ check: `${step.key}: X-Request-Id sent`, pass: Boolean(id), measured: id ?? 'none' })
    }
    if (at >= indexOf('headers')) {
      const same = ['etag', 'x-total-count'].every((name) => page.headers.get(name) !== null && page.headers.get(name) === reference.headers.get(name)) &&
        linkOf(page, step.url) !== undefined && linkOf(page, step.url) === linkOf(reference, service.url)
      checks.push({
        check: `${step.key}: the service's ETag, X-Total-Count and Link`,
        pass: same,
        measured: `ETag ${page.headers.get('etag')}, X-Total-Count ${page.headers.get('x-total-count')}, Link ${linkOf(page, step.url)?.length ?? 0} characters`
      })
    }
    if (at >= indexOf('auth-hs256')) {
      const anonymous = await fetchPage(step.url + path, {})
      const unscoped = await fetchPage(step.url + path, step.withoutScope)
      checks.push({
        check: `${step.key}: 401 without a token, 403 without the scope`,
        pass: anonymous.status === 401 && unscoped.status === 403,
        measured: `${anonymous.status}, ${unscoped.status}`
      })
    }
  }
  return { checks, reference }
}

/** What a scenario that runs services of its own side by side, round-robin, is given (the ladder, tracing, kept pages). */
export interface SideBySideOptions {
  /** The bench's database, migrated; the scale is loaded on it. */
  db: pg.Pool
  /** The run's processes: the scenario's services (and whatever else it runs) are started through them. */
  processes: Processes
  grants: number
  /** The environment the bench starts the service with, DATABASE_URL included (RS256 key, issuer, audience…). */
  env: Record<string, string | undefined>
  rounds: number
  seconds: number
  connections: number
  log: (line: string) => void
}

export interface LadderOptions extends SideBySideOptions {
  /** The page's path and query string. */
  path: string
  /** An RS256 Authorization header for a scope, as the bench's tokens are. */
  bearer: (scope: string) => string
  /** A folder for the HTTP ceiling's pages and the profile. */
  folder: string
  /** Where to write the service step's CPU profile and its summary (BENCH_PROFILE); undefined: no profile. */
  profileTo?: string
  /**
   * Another build of the service (BENCH_LADDER_BASELINE, scripts/bench/revision.ts), measured in the
   * same rounds: the service before a change beside the service after it.
   */
  baseline?: { name: string, subject: string, root: string }
  /** The best SQL's tps in pgbench for `seconds`; undefined without pgbench. */
  bestSqlTps?: (seconds: number) => Promise<number>
}

export async function measureLadder (options: LadderOptions): Promise<LadderReport> {
  const { db, processes, grants, path, env, bearer, rounds, seconds, connections, folder, profileTo, baseline, bestSqlTps, log } = options
  const started = Date.now()
  await loadScale(db, grants)
  log(`# ${LADDER_SCENARIO}: ${grants} grants loaded in ${((Date.now() - started) / 1000).toFixed(0)} s`)

  // HS256 tokens as the identity provider would issue them: a secret of this run, the bench's issuer and audience.
  const secret = randomBytes(32).toString('base64url')
  const signHs256 = createSigner({ key: secret, algorithm: 'HS256', expiresIn: 3_600_000, iss: env.JWT_ISSUER, aud: env.JWT_AUDIENCE })
  const hs256 = (scope: string) => `Bearer ${signHs256({ scope, sub: 'bench' })}`
  // /metrics on the API port in every process of the ladder: a METRICS_PORT given to the bench
  // would be bound by three of them at once.
  const ladderEnv = { ...env, METRICS_PORT: undefined }
  const profileFolder = join(folder, 'ladder-profile')
  // perf samples CPU time only; V8's profile samples wall time, which on two shared cores books the
  // waits for a core to the frame they interrupted (scripts/bench/cpu-samples.ts).
  const sampling = profileTo !== undefined && await perfAvailable()
  const nodeArgsOf = (key: StepKey) => sampling ? PERF_NODE_ARGS : profileTo && key === 'service' ? ['--cpu-prof', '--cpu-prof-dir', profileFolder] : []

  const steps: Running[] = []
  const others: ChildProcess[] = []
  try {
    for (const { key } of LADDER_STEPS) {
      const secretKeyed = key === 'auth-hs256'
      const headers = { authorization: secretKeyed ? hs256('read:resource') : bearer('read:resource') }
      const withoutScope = { authorization: secretKeyed ? hs256('delete:resource') : bearer('delete:resource') }
      if (key === 'service') {
        const { url, child } = await processes.startService(ladderEnv, { nodeArgs: nodeArgsOf(key) })
        steps.push({ key, url, child, headers, withoutScope })
      } else {
        const port = await freePort()
        const keys = secretKeyed ? { JWT_PUBLIC_KEY: undefined, JWT_SECRET: secret } : {}
        // With the service's V8 settings, so that the steps differ by their layers only.
        const image = await imageNode()
        const { child, line } = await processes.startAnnouncing([...image.flags, ...nodeArgsOf(key), '--import', 'tsx', 'scripts/bench/ladder-server.ts'],
          { NODE_OPTIONS: image.options, ...ladderEnv, ...keys, LADDER_STEP: key, PORT: String(port) })
        steps.push({ key, url: line, child, headers, withoutScope })
      }
      log(`# ${LADDER_SCENARIO}: ${key} listening`)
    }
    if (baseline) {
      const { url, child } = await processes.startService(ladderEnv, { root: baseline.root })
      steps.push({ key: 'before', url, child, headers: { authorization: bearer('read:resource') }, withoutScope: { authorization: bearer('delete:resource') } })
      log(`# ${LADDER_SCENARIO}: the service at ${baseline.name} (before) listening`)
    }

    const { checks: guard, reference } = await sameWork(steps, path)
    const failed = guard.filter(({ pass }) => !pass)
    if (failed.length > 0) {
      throw new Error(`${LADDER_SCENARIO}: the steps do not do the same work, nothing measured: ` +
        failed.map(({ check, measured }) => `${check} (${measured})`).join('; '))
    }

    // The HTTP ceiling answers the service's page (body, total, Link), as in the bench's table.
    const pages: CeilingPages = {
      [path.slice(path.indexOf('?'))]: { body: JSON.parse(reference.body), total: Number(reference.headers.get('x-total-count')), link: reference.headers.get('link') ?? '' }
    }
    const pagesFile = join(folder, 'ladder-pages.json')
    await writeFile(pagesFile, JSON.stringify(pages))
    const ceiling = await processes.startHttpCeiling(pagesFile)
    others.push(ceiling.child)

    const contenders: Array<{ key: string, name: string, unit: string, measure: (seconds: number) => Promise<Run> }> = [
      ...steps.map(({ key, url, headers, child }) => ({ key, name: key, unit: 'req/s', measure: (s: number) => hammer(url + path, headers, connections, s, child.pid) })),
      { key: 'http-ceiling', name: 'HTTP ceiling', unit: 'req/s', measure: (s: number) => hammer(ceiling.url + path, {}, connections, s, ceiling.child.pid) },
      ...(bestSqlTps
        ? [{
            key: 'best-sql',
            name: 'best SQL in pgbench',
            unit: 'tps',
            measure: async (s: number) => {
              await roomFor(db, connections)
              return { reqPerSec: await bestSqlTps(s), errors: 0 }
            }
          }]
        : [])
    ]
    for (const contender of contenders) await contender.measure(contender.key === 'best-sql' ? 1 : WARM_UP_SECONDS)
    const runs = new Map(contenders.map(({ key }) => [key, [] as Run[]]))
    const samples = new Map<string, { file: string, answers: number }>()
    for (let round = 0; round < rounds; round++) {
      for (let i = 0; i < contenders.length; i++) {
        const contender = contenders[(i + round) % contenders.length]
        const step = steps.find(({ key }) => key === contender.key)
        const lastRoundSampled = sampling && step && round === rounds - 1
        const { run, sample } = await measureSampled(async () => await contender.measure(seconds),
          lastRoundSampled ? { pid: step.child.pid!, seconds, file: join(profileFolder, `${contender.key}.perf`) } : undefined)
        if (sample) samples.set(contender.key, sample)
        runs.get(contender.key)!.push(run)
        log(`# ${LADDER_SCENARIO}, round ${round + 1}/${rounds}: ${contender.name}: ${fixed(run.reqPerSec)} ${contender.unit}` +
          (run.cpuMicros === undefined ? '' : `, ${fixed(run.cpuMicros)} µs CPU each`) +
          (run.errors > 0 ? `, ${run.errors} non-2xx, errors or timeouts` : ''))
      }
    }

    const memory = await Promise.all(steps.map(({ child }) => memoryOf(child.pid!)))
    const reports: LadderStepReport[] = []
    for (const [i, { key, adds }] of LADDER_STEPS.entries()) {
      const own = runs.get(key)!
      const reqPerSec = spread(own.map((run) => run.reqPerSec))
      const cpuMicros = spread(own.map((run) => run.cpuMicros!))
      const previous = reports.at(-1)
      reports.push({
        key,
        adds,
        rounds: own,
        reqPerSec,
        p50: median(own.map((run) => run.p50!)),
        p99: median(own.map((run) => run.p99!)),
        errors: own.reduce((sum, run) => sum + run.errors, 0),
        ratio: reqPerSec.median / (reports[0]?.reqPerSec.median ?? reqPerSec.median),
        costUs: previous && (1 / reqPerSec.median - 1 / previous.reqPerSec.median) * 1e6,
        cpuMicros,
        cpuCostUs: previous && cpuMicros.median - previous.cpuMicros.median,
        ...memory[i]
      })
    }
    const [minimal, serviceStep] = [reports[0], reports.at(-1)!]
    const beforeRuns = runs.get('before')
    const before: LadderReport['before'] = baseline && beforeRuns && {
      revision: baseline.name,
      subject: baseline.subject,
      rounds: beforeRuns,
      reqPerSec: spread(beforeRuns.map((run) => run.reqPerSec)),
      cpuMicros: spread(beforeRuns.map((run) => run.cpuMicros!)),
      errors: beforeRuns.reduce((sum, run) => sum + run.errors, 0),
      // Round by round, the service ÷ the build before: both measured in the same round.
      serviceToBefore: spread(beforeRuns.map((run, round) => runs.get('service')![round].reqPerSec / run.reqPerSec))
    }
    const http = runs.get('http-ceiling')!
    const bestSql = runs.get('best-sql')
    const httpCeiling = { reqPerSec: spread(http.map((run) => run.reqPerSec)), errors: http.reduce((sum, run) => sum + run.errors, 0), rounds: http }
    const bestSqlTpsValues = bestSql?.map((run) => run.reqPerSec)
    const machineCeiling = bestSqlTpsValues ? 1 / (1 / httpCeiling.reqPerSec.median + 1 / median(bestSqlTpsValues)) : undefined

    const erring = [...reports.map(({ key, errors }) => ({ key: String(key), errors })), { key: 'HTTP ceiling', errors: httpCeiling.errors }, ...(before ? [{ key: 'before', errors: before.errors }] : [])]
      .filter(({ errors }) => errors > 0)
    const checks: Check[] = [{
      check: 'the guard: every step answers 200 with the service\'s body byte for byte, and the headers and 401/403 its layers add',
      pass: true,
      measured: `${guard.length} checks, all passed`
    }]
    checks.push({
      check: 'every answer measured was 2xx (no step answered 401, 503… or failed)',
      pass: erring.length === 0,
      measured: erring.length === 0 ? 'all' : erring.map(({ key, errors }) => `${key}: ${errors}`).join(', ')
    })
    checks.push({ check: `at least ${MIN_ROUNDS} rounds, for medians and spreads worth reading`, pass: rounds >= MIN_ROUNDS, measured: String(rounds) })

    const cpu: LadderReport['cpu'] = sampling
      ? {
          table: cpuTable(await Promise.all(steps.filter(({ key }) => samples.has(key)).map(async ({ key }) =>
            ({ label: key, owners: await cpuByOwner(samples.get(key)!.file, samples.get(key)!.answers) }))))
        }
      : undefined
    let profile: LadderReport['profile']
    if (profileTo && !sampling) {
      await stopProcess(steps.find(({ key }) => key === 'service')!.child) // the profile is written as the process exits
      const [written] = (await readdir(profileFolder)).filter((name) => name.endsWith('.cpuprofile'))
      const file = join(profileTo, 'ladder-service.cpuprofile')
      await mkdir(profileTo, { recursive: true })
      await copyFile(join(profileFolder, written), file)
      const summary = await summarizeProfile(file)
      await writeFile(join(profileTo, 'ladder-profile.txt'), summary + '\n')
      profile = { file, summary }
    }

    return {
      path,
      grants,
      rounds,
      seconds,
      connections,
      steps: reports,
      httpCeiling,
      bestSql: bestSqlTpsValues && { tps: spread(bestSqlTpsValues), rounds: bestSqlTpsValues },
      machineCeiling,
      serviceToMinimal: serviceStep.reqPerSec.median / minimal.reqPerSec.median,
      serviceToCeiling: machineCeiling && serviceStep.reqPerSec.median / machineCeiling,
      minimalToCeiling: machineCeiling && minimal.reqPerSec.median / machineCeiling,
      serviceOverMinimalUs: (1 / serviceStep.reqPerSec.median - 1 / minimal.reqPerSec.median) * 1e6,
      checks,
      guard,
      profile,
      cpu,
      before
    }
  } finally {
    await Promise.all([...steps.map(({ child }) => child), ...others].map(stopProcess))
  }
}

/** The ladder as markdown: a row per step, then the ceilings, the ratios and the checks. */
export function ladderSummary (report: LadderReport): string {
  const range = ({ median, min, max }: Spread) => `${fixed(median)} [${fixed(min)}–${fixed(max)}]`
  const minimal = report.steps[0].reqPerSec.median
  return [
    `Ablation ladder: \`GET ${report.path}\`, ${report.grants} grants; ${report.connections} connections, ` +
      `${report.rounds} round${report.rounds === 1 ? '' : 's'} of ${report.seconds} s per step, round-robin, the order rotated each round. ` +
      'req/s: median of the rounds [min–max]; µs/request: what the step adds to the one before, ' +
      '(1/its median − 1/the previous median) × 10^6, as measured (noise can make it negative); CPU µs: the step\'s process\'s own ' +
      'CPU time per answer (user and system), median of the rounds [min–max], and what it adds to the step before. RSS at the end [peak].',
    '',
    '| step | adds | req/s | ÷ minimal | µs/request | CPU µs/answer | CPU µs it adds | p50 ms | p99 ms | non-2xx, errors | RSS MiB |',
    '|---|---|---|---|---|---|---|---|---|---|---|',
    ...report.steps.map((step) => `| ${step.key} | ${step.adds} | ${range(step.reqPerSec)} | ${fixed(step.ratio, 2)} | ` +
      `${step.costUs === undefined ? '—' : fixed(step.costUs, 1)} | ${range(step.cpuMicros)} | ${step.cpuCostUs === undefined ? '—' : fixed(step.cpuCostUs)} | ` +
      `${fixed(step.p50, 1)} | ${fixed(step.p99, 1)} | ` +
      `${step.errors > 0 ? `**${step.errors}**` : 0} | ${fixed(step.rssMiB)} [${fixed(step.rssPeakMiB)}] |`),
    `| HTTP ceiling | bare Fastify, the route's schemas, the page from memory | ${range(report.httpCeiling.reqPerSec)} | ` +
      `${fixed(report.httpCeiling.reqPerSec.median / minimal, 2)} | — | ${range(spread(report.httpCeiling.rounds.map((run) => run.cpuMicros!)))} | — | — | — | ${report.httpCeiling.errors} | — |`,
    report.bestSql
      ? `| DB ceiling | the minimal's statement in pgbench (tps) | ${range(report.bestSql.tps)} | ${fixed(report.bestSql.tps.median / minimal, 2)} | — | — | — | — | — | 0 | — |`
      : '| DB ceiling | not measured: no pgbench | — | — | — | — | — | — | — | — | — |',
    '',
    (report.machineCeiling
      ? `Machine ceiling, 1 / (1/HTTP + 1/DB): ${fixed(report.machineCeiling)} req/s. service ÷ ceiling ${fixed(report.serviceToCeiling, 2)}, ` +
        `minimal ÷ ceiling ${fixed(report.minimalToCeiling, 2)}, `
      : 'Machine ceiling: not measured (no pgbench). ') +
      `service ÷ minimal ${fixed(report.serviceToMinimal, 2)}: the service spends ${fixed(report.serviceOverMinimalUs, 1)} µs per request more than the minimal (the steps' sum).`,
    ...(report.before
      ? ['', `Before and after: the service at ${report.before.revision} ("${report.before.subject}") ${range(report.before.reqPerSec)} req/s in the same rounds, ` +
          `${range(report.before.cpuMicros)} µs of CPU per answer; ` +
          `service ÷ before, round by round: median ${fixed(report.before.serviceToBefore.median, 2)} [${fixed(report.before.serviceToBefore.min, 2)}–${fixed(report.before.serviceToBefore.max, 2)}].`]
      : []),
    '',
    ...report.checks.map(({ check, pass, measured }) => `${pass ? 'PASS' : 'FAIL'}  ${check}: ${measured}`)
  ].join('\n')
}
