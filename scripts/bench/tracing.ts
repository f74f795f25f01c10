// The tracing scenario of `npm run bench` (BENCH_ONLY=tracing): what tracing costs page 0 (limit 50,
// the 1,000-grant client), off and on, in one run. Each variant is the service's build started as
// the bench starts it, on the same database, side by side:
//   off     no OTEL_* variable: no SDK loaded (src/tracing.ts)
//   on      OTEL_EXPORTER_OTLP_ENDPOINT to a local sink (scripts/bench/otlp-sink.ts, its own process),
//           OTEL_TRACES_SAMPLER=always_on: every request traced; http/protobuf and the batch's defaults
//   unsampled  the same with OTEL_TRACES_SAMPLER=always_off: tracing loaded, no request recorded, as
//           most requests are under a ratio sampler (what sampling leaves of the cost)
//   before  with BENCH_TRACING_BASELINE: the service built at that revision, no OTEL_* variable
// First a guard: every variant answers the page with the same status and body, byte for byte, and
// the sink receives the spans of one request of `on`, or nothing is measured. Then, after a warm-up,
// BENCH_ROUNDS rounds of BENCH_SECONDS, round-robin in an order rotated each round, so the machine's
// drift falls on all alike. The goals are ratios of the same round: on ÷ off ≥ 0.85 (tracing on
// costs at most 15 %), and off ÷ before within noise of 1 (tracing off costs nothing). With
// BENCH_PROFILE and Linux perf, the last round also samples each variant's CPU (scripts/bench/cpu-samples.ts):
// where tracing's cost goes, layer by layer, in µs per answer.
import type { ChildProcess } from 'node:child_process'
import { setTimeout as sleep } from 'node:timers/promises'
import autocannon from 'autocannon'
import { loadScale } from '../../db/bench-data.js'
import { cpuByOwner, cpuTable, measureSampled, PERF_NODE_ARGS, perfAvailable } from './cpu-samples.js'
import { fixed } from './format.js'
import { cpuSecondsOf, median, memoryOf, type SideBySideOptions, spread, type Spread } from './ladder.js'
import type { SinkCounts } from './otlp-sink.js'
import { stopProcess } from './processes.js'

/** The scenario's name for BENCH_ONLY. */
export const TRACING_SCENARIO = 'tracing'
/** Tracing on may cost at most this share of page-0 throughput: on ÷ off ≥ GOAL. */
const GOAL = 0.85
/** Rounds below which medians and spreads say little; a shorter run is flagged. */
const MIN_ROUNDS = 5
const WARM_UP_SECONDS = 2
/** The batch exports after OTEL_BSP_SCHEDULE_DELAY (5 s by default): one request's spans arrive within this. */
const FIRST_EXPORT_WITHIN_MS = 15_000

type VariantKey = 'off' | 'on' | 'unsampled' | 'before'

interface Run {
  reqPerSec: number
  p50: number
  p99: number
  /** Answers other than 2xx, connection errors and timeouts. */
  errors: number
  /**
   * Requests sent: each of `on`'s is traced, those still in flight when the run ends too (up to a
   * connection's worth; autocannon counts them in no answer).
   */
  sent: number
  /** The service process's CPU time per answer in the round (user and system), µs. */
  cpuMicros: number
}

interface Check { check: string, pass: boolean, measured: string }

export interface TracingVariantReport {
  key: VariantKey
  /** What the variant is: the build and its OTEL_* variables. */
  what: string
  rounds: Run[]
  reqPerSec: Spread
  p50: number
  p99: number
  errors: number
  /** The service's CPU time per answer (µs, user and system): median of the rounds. */
  cpuMicros: Spread
  /** The process at the end: resident set and its peak, MiB. */
  rssMiB: number
  rssPeakMiB: number
}

export interface TracingReport {
  path: string
  grants: number
  rounds: number
  seconds: number
  connections: number
  variants: TracingVariantReport[]
  /** Round by round, on's req/s ÷ off's: the goal is on the median. */
  onToOff: Spread & { values: number[] }
  /** With a baseline: round by round, off's req/s ÷ before's. */
  offToBefore?: Spread & { values: number[] }
  baseline?: { revision: string, subject: string }
  /**
   * What the sink received from `on` from the warm-up to its exit (the batch flushed): export
   * requests, bytes, spans, and the spans one request makes (from the guard's request).
   */
  exported: SinkCounts & { spansPerRequest: number, sent: number }
  /**
   * BENCH_PROFILE: the variants' CPU in the last round, sampled by perf, µs per answer by owner (a
   * markdown table), or why there is none.
   */
  cpu?: { table: string } | { missing: string }
  /** The guard's checks (any failure stops the scenario before it measures). */
  guard: Check[]
  checks: Check[]
  goals: Check[]
}

/** The variants and the sink are started through `processes`. */
export interface TracingOptions extends SideBySideOptions {
  /** The page's path and query string. */
  path: string
  /** The read token's Authorization header. */
  headers: Record<string, string>
  /** The service built at another revision (BENCH_TRACING_BASELINE, scripts/bench/revision.ts). */
  baseline?: { name: string, subject: string, root: string }
  /** BENCH_PROFILE: a folder for perf's samples of the last round; undefined: none taken. */
  profileTo?: string
}

interface Running { key: VariantKey, what: string, url: string, child: ChildProcess }

async function hammer (url: string, headers: Record<string, string>, connections: number, seconds: number, pid: number): Promise<Run> {
  const cpuBefore = await cpuSecondsOf(pid)
  const result = await autocannon({ url, headers, connections, duration: seconds })
  const cpu = await cpuSecondsOf(pid) - cpuBefore
  return {
    cpuMicros: cpu / result.requests.total * 1e6,
    reqPerSec: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    errors: result.non2xx + result.errors + result.timeouts,
    sent: result.requests.sent
  }
}

async function sinkCounts (sinkUrl: string): Promise<SinkCounts> {
  return await (await fetch(`${sinkUrl}/counts`)).json() as SinkCounts
}

const ratios = (values: number[]) => ({ ...spread(values), values })

export async function measureTracing (options: TracingOptions): Promise<TracingReport> {
  const { db, processes, grants, path, env, headers, rounds, seconds, connections, baseline, profileTo, log } = options
  const sampling = profileTo !== undefined && await perfAvailable()
  const started = Date.now()
  await loadScale(db, grants)
  log(`# ${TRACING_SCENARIO}: ${grants} grants loaded in ${((Date.now() - started) / 1000).toFixed(0)} s`)

  // No OTEL_* from the bench's own environment reaches a variant: each gets exactly its own.
  const untraced = Object.fromEntries(Object.keys({ ...process.env, ...env }).filter((name) => name.startsWith('OTEL_')).map((name) => [name, undefined]))
  // /metrics on the API port in every variant: a METRICS_PORT given to the bench would be bound by each.
  const variantEnv = { ...env, ...untraced, METRICS_PORT: undefined }

  const variants: Running[] = []
  let sink: ChildProcess | undefined
  try {
    const announced = await processes.startAnnouncing(['--import', 'tsx', 'scripts/bench/otlp-sink.ts'])
    sink = announced.child
    const sinkUrl = announced.line
    log(`# ${TRACING_SCENARIO}: OTLP sink listening on ${sinkUrl}`)
    const start = async (key: VariantKey, what: string, extra: Record<string, string>, root?: string) => {
      const { url, child } = await processes.startService({ ...variantEnv, ...extra }, { root, nodeArgs: sampling ? PERF_NODE_ARGS : [] })
      variants.push({ key, what, url, child })
      log(`# ${TRACING_SCENARIO}: ${key} listening`)
    }
    await start('off', 'the service, tracing off (no OTEL_* variable)', {})
    await start('on', 'the service, tracing on: OTEL_TRACES_SAMPLER=always_on, OTLP http/protobuf to the local sink, the batch\'s defaults',
      { OTEL_EXPORTER_OTLP_ENDPOINT: sinkUrl, OTEL_TRACES_SAMPLER: 'always_on' })
    await start('unsampled', 'the same, but OTEL_TRACES_SAMPLER=always_off: no request recorded',
      { OTEL_EXPORTER_OTLP_ENDPOINT: sinkUrl, OTEL_TRACES_SAMPLER: 'always_off' })
    if (baseline) await start('before', `the service at ${baseline.name}, no OTEL_* variable`, {}, baseline.root)
    const on = variants.find(({ key }) => key === 'on')!

    // The guard: a variant that answered less (a 401, a 404, a shorter page) would look cheap.
    const pages = await Promise.all(variants.map(async ({ url }) => {
      const res = await fetch(url + path, { headers })
      return { status: res.status, body: await res.text() }
    }))
    const reference = pages[0]
    const guard: Check[] = variants.map(({ key }, i) => ({
      check: `${key}: 200 with off's body, byte for byte`,
      pass: pages[i].status === 200 && reference.status === 200 && pages[i].body === reference.body,
      measured: `${pages[i].status}, ${pages[i].body.length} bytes${pages[i].body === reference.body ? ', the same' : ', different'}`
    }))
    // …and `on` really exports: its one request's spans reach the sink once the batch's delay is over.
    let oneRequest = await sinkCounts(sinkUrl)
    for (const deadline = Date.now() + FIRST_EXPORT_WITHIN_MS; oneRequest.spans === 0 && Date.now() < deadline; await sleep(250)) {
      oneRequest = await sinkCounts(sinkUrl)
    }
    guard.push({
      check: 'on: the spans of one request reach the sink',
      pass: oneRequest.spans > 0,
      measured: `${oneRequest.spans} spans in ${oneRequest.requests} export requests`
    })
    const failed = guard.filter(({ pass }) => !pass)
    if (failed.length > 0) {
      throw new Error(`${TRACING_SCENARIO}: the guard failed, nothing measured: ` +
        failed.map(({ check, measured }) => `${check} (${measured})`).join('; '))
    }

    // JIT, pools and caches warm before the first round, which would otherwise pay for them.
    let sentToOn = 0
    for (const variant of variants) {
      const warmUp = await hammer(variant.url + path, headers, connections, WARM_UP_SECONDS, variant.child.pid!)
      if (variant === on) sentToOn += warmUp.sent
    }
    const runs = new Map(variants.map(({ key }) => [key, [] as Run[]]))
    const samples: Array<{ key: VariantKey, file: string, answers: number }> = []
    for (let round = 0; round < rounds; round++) {
      // Rotated: no variant always goes first or always follows the same one.
      for (let i = 0; i < variants.length; i++) {
        const variant = variants[(i + round) % variants.length]
        const lastRoundSampled = sampling && round === rounds - 1
        const { run, sample } = await measureSampled(async () => await hammer(variant.url + path, headers, connections, seconds, variant.child.pid!),
          lastRoundSampled ? { pid: variant.child.pid!, seconds, file: `${profileTo}/tracing-${variant.key}.perf` } : undefined)
        if (sample) samples.push({ key: variant.key, ...sample })
        runs.get(variant.key)!.push(run)
        if (variant === on) sentToOn += run.sent
        log(`# ${TRACING_SCENARIO}, round ${round + 1}/${rounds}: ${variant.key}: ${fixed(run.reqPerSec)} req/s, ${fixed(run.cpuMicros)} µs CPU each` +
          (run.errors > 0 ? `, ${run.errors} non-2xx, errors or timeouts` : ''))
      }
    }

    const memory = await Promise.all(variants.map(({ child }) => memoryOf(child.pid!)))
    const byKey = (sample: { key: VariantKey }) => variants.findIndex(({ key }) => key === sample.key)
    const cpu: TracingReport['cpu'] = profileTo === undefined
      ? undefined
      : sampling
        ? {
            table: cpuTable(await Promise.all(samples.sort((a, b) => byKey(a) - byKey(b))
              .map(async ({ key, file, answers }) => ({ label: key, owners: await cpuByOwner(file, answers) }))))
          }
        : { missing: 'perf is not installed here, or may not sample (Debian: linux-perf; kernel.perf_event_paranoid)' }
    // Stopped, `on` flushes its batch (src/serve.ts): then the sink has all it will get.
    await stopProcess(on.child)
    const atEnd = await sinkCounts(sinkUrl)
    const exported = {
      requests: atEnd.requests - oneRequest.requests,
      bytes: atEnd.bytes - oneRequest.bytes,
      spans: atEnd.spans - oneRequest.spans,
      spansPerRequest: oneRequest.spans,
      sent: sentToOn
    }
    if (exported.requests === 0) throw new Error(`${TRACING_SCENARIO}: the sink received nothing from on under load: its figures are not tracing's`)

    const reports: TracingVariantReport[] = variants.map(({ key, what }, i) => {
      const own = runs.get(key)!
      return {
        key,
        what,
        rounds: own,
        reqPerSec: spread(own.map((run) => run.reqPerSec)),
        p50: median(own.map((run) => run.p50)),
        p99: median(own.map((run) => run.p99)),
        errors: own.reduce((sum, run) => sum + run.errors, 0),
        cpuMicros: spread(own.map((run) => run.cpuMicros)),
        ...memory[i]
      }
    })
    const perRound = (numerator: VariantKey, denominator: VariantKey) =>
      runs.get(numerator)!.map((run, round) => run.reqPerSec / runs.get(denominator)![round].reqPerSec)
    const onToOff = ratios(perRound('on', 'off'))
    const offToBefore = baseline ? ratios(perRound('off', 'before')) : undefined

    const erring = reports.filter(({ errors }) => errors > 0)
    // Errors answered fast would make a variant look cheap.
    const answeredAll = (...keys: VariantKey[]) => !erring.some(({ key }) => keys.includes(key))
    // Whole, or in part: past OTEL_BSP_MAX_QUEUE_SIZE waiting spans the batch drops new ones, and
    // exporting fewer costs less.
    const exportedShare = exported.spans / (exported.spansPerRequest * exported.sent)
    const checks: Check[] = [
      {
        check: 'every answer measured was 2xx',
        pass: erring.length === 0,
        measured: erring.length === 0 ? 'all' : erring.map(({ key, errors }) => `${key}: ${errors}`).join(', ')
      },
      {
        check: 'on exported the spans of every request it was sent (the batch dropped none)',
        pass: exportedShare >= 0.99,
        measured: `${exported.spans} spans of ${exported.spansPerRequest} × ${exported.sent} requests: ${fixed(exportedShare * 100, 1)} %`
      },
      { check: `at least ${MIN_ROUNDS} rounds, for medians and spreads worth reading`, pass: rounds >= MIN_ROUNDS, measured: String(rounds) }
    ]
    const roundByRound = ({ values, median, min, max }: Spread & { values: number[] }) =>
      `${fixed(median, 2)} (rounds ${values.map((value) => fixed(value, 2)).join(', ')}; ${fixed(min, 2)}–${fixed(max, 2)})`
    const goals: Check[] = [{
      check: `tracing on costs at most ${Math.round((1 - GOAL) * 100)} % of page-0 throughput: on ÷ off ≥ ${GOAL}, median of the rounds`,
      pass: onToOff.median >= GOAL && answeredAll('on', 'off'),
      measured: roundByRound(onToOff)
    }]
    if (offToBefore) {
      goals.push({
        check: 'tracing off costs nothing: off ÷ before, round by round, has 1 within its range',
        pass: offToBefore.min <= 1 && offToBefore.max >= 1 && answeredAll('off', 'before'),
        measured: roundByRound(offToBefore)
      })
    }
    return {
      path,
      grants,
      rounds,
      seconds,
      connections,
      variants: reports,
      onToOff,
      offToBefore,
      baseline: baseline && { revision: baseline.name, subject: baseline.subject },
      exported,
      cpu,
      guard,
      checks,
      goals
    }
  } finally {
    await Promise.all([...variants.map(({ child }) => child), ...(sink ? [sink] : [])].map(stopProcess))
  }
}

/** The scenario as markdown: a row per variant, the ratios round by round, what was exported, the checks and goals. */
export function tracingSummary (report: TracingReport): string {
  const range = ({ median, min, max }: Spread) => `${fixed(median)} [${fixed(min)}–${fixed(max)}]`
  const off = report.variants.find(({ key }) => key === 'off')!
  const { exported } = report
  return [
    `Tracing: \`GET ${report.path}\`, ${report.grants} grants; ${report.connections} connections, ` +
      `${report.rounds} round${report.rounds === 1 ? '' : 's'} of ${report.seconds} s per variant, round-robin, the order rotated each round. ` +
      'req/s: median of the rounds [min–max]; ÷ off: of the medians; p50 and p99: medians of the rounds; ' +
      'CPU: the service process\'s own CPU time per answer (user and system), median of the rounds [min–max]; RSS at the end [peak].',
    ...(report.baseline ? [`before is the build of ${report.baseline.revision}, "${report.baseline.subject}".`] : []),
    '',
    '| variant | what | req/s | ÷ off | CPU µs/answer | p50 ms | p99 ms | non-2xx, errors | RSS MiB |',
    '|---|---|---|---|---|---|---|---|---|',
    ...report.variants.map((variant) => `| ${variant.key} | ${variant.what} | ${range(variant.reqPerSec)} | ` +
      `${fixed(variant.reqPerSec.median / off.reqPerSec.median, 2)} | ${range(variant.cpuMicros)} | ${fixed(variant.p50, 1)} | ${fixed(variant.p99, 1)} | ` +
      `${variant.errors > 0 ? `**${variant.errors}**` : 0} | ${fixed(variant.rssMiB)} [${fixed(variant.rssPeakMiB)}] |`),
    '',
    `Exported by on, from its warm-up to its exit: ${exported.requests} export requests, ${fixed(exported.bytes / 2 ** 20, 1)} MiB, ` +
      `${exported.spans} spans (${exported.spansPerRequest} per request; ${exported.sent} requests sent), ` +
      `${fixed(exported.bytes / exported.spans)} bytes per span.`,
    '',
    ...(report.cpu === undefined
      ? []
      : 'missing' in report.cpu
        ? [`No CPU samples: ${report.cpu.missing}.`, '']
        : [
            'Where each variant\'s CPU went in the last round (perf, cpu-clock), µs per answer by owner: the innermost frame of a package or of the service\'s build, so a system call made by pg is pg\'s; "other threads" are V8\'s garbage-collection helpers and libuv\'s pool. Answers are estimated from the round\'s rate over the seconds sampled (the round less its first and last half second).',
            '',
            report.cpu.table,
            ''
          ]),
    ...report.checks.map(({ check, pass, measured }) => `${pass ? 'PASS' : 'FAIL'}  ${check}: ${measured}`),
    ...report.goals.map(({ check, pass, measured }) => `${pass ? 'PASS' : 'FAIL'}  ${check}: ${measured}`)
  ].join('\n')
}
