// The overload scenario of `npm run bench`: the heavy list request (limit 500, big-client, a middle
// page) for each sort order, at the connection count that saturates the service, then 4× and 8×
// that. A burst above capacity should be shed (503 /problems/overloaded, answered within the
// configured connection wait) while the requests the service does take are served at the
// saturated rate, and /readyz keeps answering 200. Per run: goodput (200s per second) against the
// saturated goodput, latency of the 200s, latency of the shed (503) answers, status counts by
// problem type, 5xx other than 503 overloaded, and /readyz sampled every 250 ms throughout.
//
// The load is a loop of our own rather than autocannon: autocannon ends a run by closing its
// connections with their requests in flight, and under overload those are the slow ones, the
// requests queued for a pooled connection. A shed answer slower than the run would never be seen
// (a 2 s run of a service that sheds after 5 s would report nothing shed, and its p99 would be cut
// at 2 s). Here each connection stops sending at the end of the run and waits for the answer to
// the request it has in flight (10 s at most): every request sent is counted, with its outcome.
import { Agent, request as httpRequest } from 'node:http'
import { monitorEventLoopDelay, performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import { BIG_CLIENT, RESOURCE_ID, type Scale } from '../../db/bench-data.js'
import { loadConfig } from '../../src/config.js'
import { fixed } from './format.js'

/** The scenario's name for BENCH_ONLY. */
export const OVERLOAD_SCENARIO = 'overload'
export const OVERLOAD_ORDERS = ['name.asc', 'id.desc', 'description.desc']
const LIMIT = 500
/** The saturation search doubles the connections from 1 up to this. */
const MAX_RAMP_CONNECTIONS = 64
/** Seconds per step of the saturation search (short: it only compares steps with each other). */
const RAMP_SECONDS = 2
/** A step must beat the best so far by this much to count as growth. */
const GROWTH = 1.05
/**
 * The saturating count is the smallest that reached this share of the best step's goodput: a 2 s
 * step of a slow order counts a few dozen answers, and on a machine shared with other work steps
 * differ by ±10 % with nothing changed; "the best step" alone crept from 4 to 64 connections for
 * description order, 9 → 10 answers per second, in one run.
 */
const SATURATED_SHARE = 0.9
const MULTIPLES = [1, 4, 8]
const READYZ_INTERVAL_MS = 250
const READYZ_TIMEOUT_MS = 2000
/** A request unanswered after this long is given up (autocannon's default timeout). */
const REQUEST_TIMEOUT_MS = 10_000
/**
 * The connection wait the shedding change introduces, used when this build has no such setting.
 * The bound on shed answers is this wait plus SHED_SLACK_MS.
 */
const ASSUMED_WAIT_MS = 1000
/**
 * The wait only bounds the time a request spends queued for a pooled connection. A shed answer's
 * latency, as the bench sees it, also holds the time before the handler asks the pool (the
 * service's event loop reads the request, parses it, checks its token), the time after (the
 * problem is serialized and written), and the bench's own lateness in reading it, on two cores
 * that the service, PostgreSQL and the load share. The bench's part is measured in each run (its
 * event-loop delay, max) and added to the bound; the service's part gets this slack: a fifth of
 * the default wait, for a request that does nothing but wait and answer a small problem. On the
 * service before the shedding change (a 5,000 ms wait) shed answers came 43–1,849 ms late, more
 * the more connections (64: 43–179 ms, 512: 1,849 ms, with the bench's own delay ≤ 312 ms): its
 * event loop, busy writing 500-row pages for hundreds of connections, reads new requests and fires
 * pg-pool's timer late. That part is the service's to keep small, so it is not in the slack.
 */
export const SHED_SLACK_MS = 200
/** After a run, the requests still queued in the service are waited out, for at most this long. */
const SETTLE_MAX_MS = 30_000

export interface ConnectionWait { ms: number, source: string }

/**
 * BENCH_OVERLOAD_CONNECTIONS: the saturating count, given instead of searched for: "8" for every
 * order, or "name.asc=4,id.desc=8,description.desc=4". To compare two builds (before and after a
 * change) at the same connection counts, since on a shared machine the search can land elsewhere.
 */
export function givenConnections (text: string | undefined): (sortBy: string) => number | undefined {
  const entries = (text ?? '').split(',').map((part) => part.trim()).filter(Boolean)
  const parsed = entries.map((entry) => {
    const [order, count] = entry.includes('=') ? entry.split('=') : ['*', entry]
    const value = Number(count)
    if (!Number.isInteger(value) || value < 1 || value > MAX_RAMP_CONNECTIONS) {
      throw new Error(`BENCH_OVERLOAD_CONNECTIONS: "${entry}" is not a count from 1 to ${MAX_RAMP_CONNECTIONS} (optionally order=count)`)
    }
    return [order.trim(), value] as const
  })
  const counts = new Map(parsed)
  return (sortBy) => counts.get(sortBy) ?? counts.get('*')
}

/** What a build without the setting does: pg-pool's connectionTimeoutMillis (plugins/db.ts). */
const TODAY = ' and waits up to 5,000 ms for a connection'

/**
 * The connection wait the service runs with: its own configuration read from the environment it
 * is given (the setting's default once the service has it), else the variable as set, else the
 * default announced for the shedding change.
 */
export function connectionWaitOf (env: Record<string, string | undefined>): ConnectionWait & { poolMax?: number } {
  let config: Record<string, unknown> = {}
  try {
    config = loadConfig(env) as unknown as Record<string, unknown>
  } catch { /* the service would refuse the same environment; its start reports why */ }
  const poolMax = typeof config.DATABASE_POOL_MAX === 'number' ? config.DATABASE_POOL_MAX : undefined
  if (typeof config.DATABASE_CONNECTION_WAIT_MS === 'number') {
    const set = env.DATABASE_CONNECTION_WAIT_MS !== undefined && env.DATABASE_CONNECTION_WAIT_MS !== ''
    return { ms: config.DATABASE_CONNECTION_WAIT_MS, source: set ? 'DATABASE_CONNECTION_WAIT_MS' : 'the service\'s default', poolMax }
  }
  const given = Number(env.DATABASE_CONNECTION_WAIT_MS)
  if (env.DATABASE_CONNECTION_WAIT_MS && Number.isFinite(given)) {
    return { ms: given, source: `DATABASE_CONNECTION_WAIT_MS, which this build ignores${TODAY}`, poolMax }
  }
  return { ms: ASSUMED_WAIT_MS, source: `assumed: this build has no DATABASE_CONNECTION_WAIT_MS${TODAY}`, poolMax }
}

/**
 * The page asked for: the middle one. The list reads a page in the back half of the list backwards
 * from its end, so page 0 and the deepest page both cost a page's worth of index entries; the
 * middle page skips the most (50,000 of 100,000 for name and id order) and is the costliest page
 * an order served by an index has. Sorting by description reads and sorts all the grants whatever
 * the page. The heavier the request, the longer it holds its pooled connection and the longer the
 * queue for the pool grows under overload: that queue is what the connection wait bounds.
 */
export const overloadPage = (scale: Scale) => Math.floor(Math.ceil(scale.bigGrants / LIMIT) / 2)

const overloadPath = (sortBy: string, page: number) =>
  `/resources/${RESOURCE_ID}/authorized_clients/${BIG_CLIENT}/permissions?limit=${LIMIT}&offset=${page}&sort_by=${sortBy}`

// ---------------------------------------------------------------------------------------------
// A small HTTP client: keep-alive connections of an Agent, a timeout per request.

interface Answer { status: number | 'timeout' | 'error', ms: number, body: string }

/** One GET; the body is kept for answers other than 2xx (problems), read and dropped otherwise. */
function get (url: string, agent: Agent, timeoutMs: number, headers: Record<string, string> = {}): Promise<Answer> {
  const started = performance.now()
  const signal = AbortSignal.timeout(timeoutMs)
  return new Promise((resolve) => {
    // The first of these settles the answer; a timeout may cut a response halfway through its body.
    const done = (status: Answer['status'], body = '') => resolve({ status, ms: performance.now() - started, body })
    const failed = () => done(signal.aborted ? 'timeout' : 'error')
    const req = httpRequest(url, { agent, headers, signal }, (res) => {
      const status = res.statusCode ?? 0
      let body = ''
      if (status >= 200 && status < 300) {
        res.resume()
      } else {
        res.setEncoding('utf8')
        res.on('data', (chunk: string) => { body += chunk })
      }
      res.on('end', () => done(status, body))
      res.on('error', failed)
      res.on('close', () => { if (!res.complete) failed() })
    })
    req.on('error', failed)
    req.end()
  })
}

/** "503 database-unavailable" for a problem, "200" for a success, "timeout" for no answer. */
function outcome (status: Answer['status'], body: string): string {
  if (typeof status !== 'number' || (status >= 200 && status < 300)) return String(status)
  try {
    const type = (JSON.parse(body) as { type?: unknown }).type
    return `${status} ${typeof type === 'string' ? type.replace(/^\/problems\//, '') : '(no type)'}`
  } catch {
    return `${status} (not JSON)`
  }
}

const increment = (counts: Record<string, number>, key: string) => { counts[key] = (counts[key] ?? 0) + 1 }

function assertLoopback (url: string): void {
  const { hostname } = new URL(url)
  if (!['127.0.0.1', 'localhost', '[::1]'].includes(hostname)) throw new Error(`the overload scenario only drives loopback addresses, not ${hostname}`)
}

// ---------------------------------------------------------------------------------------------
// /readyz, sampled throughout a run.

export interface ReadyzSamples { samples: number, ok: number, maxMs: number, failures: Record<string, number> }

/** Samples /readyz every 250 ms (one at a time, 2 s timeout each) until `stop` resolves. */
async function sampleReadyz (url: string, stop: Promise<unknown>, maxSamples: number): Promise<ReadyzSamples> {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 })
  const result: ReadyzSamples = { samples: 0, ok: 0, maxMs: 0, failures: {} }
  const run = { over: false }
  stop.finally(() => { run.over = true }).catch(() => {})
  let next = performance.now()
  while (!run.over && result.samples < maxSamples) {
    const answer = await get(url, agent, READYZ_TIMEOUT_MS)
    result.samples++
    result.maxMs = Math.max(result.maxMs, answer.ms)
    if (answer.status === 200) result.ok++
    else increment(result.failures, outcome(answer.status, answer.body))
    // On a fixed 250 ms grid; a sample that overran it is followed at once by the next.
    next = Math.max(next + READYZ_INTERVAL_MS, performance.now())
    await Promise.race([sleep(next - performance.now()), stop])
  }
  agent.destroy()
  return result
}

// ---------------------------------------------------------------------------------------------
// One load run: every answer's status, problem type and latency.

export interface OverloadRun {
  sortBy: string
  connections: number
  multiple: number
  seconds: number
  goodput: number
  goodputRatio?: number
  okP50?: number
  okP99?: number
  shed: number
  shedP99?: number
  shedMax?: number
  statuses: Record<string, number>
  /** 5xx answers other than 503 /problems/overloaded. */
  other5xx: number
  /** Requests with no answer: timeouts (10 s) and connection errors. */
  errors: number
  /** How long the last answers took to come after the end of the run. */
  tailMs: number
  /**
   * The load generator's own event-loop delay during the run (max): every latency measured here
   * includes up to this much of the bench's own lateness in noticing an answer.
   */
  benchLagMs: number
  readyz?: ReadyzSamples
}

function percentile (sorted: number[], p: number): number | undefined {
  if (sorted.length === 0) return undefined
  return sorted[Math.min(sorted.length - 1, Math.ceil(p / 100 * sorted.length) - 1)]
}

/**
 * `connections` keep-alive connections, each sending the request again as soon as it is answered,
 * for `seconds`; then each waits for its last answer. Goodput counts the 200s answered within the
 * `seconds`; statuses and latencies count every request sent, the last ones included.
 */
async function loadRun (options: {
  serviceUrl: string, path: string, headers: Record<string, string>, connections: number, seconds: number, readyz: boolean
}): Promise<Omit<OverloadRun, 'sortBy' | 'multiple'>> {
  const { serviceUrl, path, headers, connections, seconds } = options
  const agent = new Agent({ keepAlive: true, maxSockets: connections })
  const okMs: number[] = []
  const shedMs: number[] = []
  const statuses: Record<string, number> = {}
  let okInTime = 0
  let other5xx = 0
  let errors = 0
  const lag = monitorEventLoopDelay({ resolution: 10 })
  lag.enable()
  const started = performance.now()
  const end = started + seconds * 1000
  // Bounded by time and by count: no connection sends more than one request per millisecond.
  const maxPerConnection = seconds * 1000
  const connection = async () => {
    for (let sent = 0; sent < maxPerConnection && performance.now() < end; sent++) {
      const answer = await get(serviceUrl + path, agent, REQUEST_TIMEOUT_MS, headers)
      const key = outcome(answer.status, answer.body)
      increment(statuses, key)
      if (answer.status === 200) {
        okMs.push(answer.ms)
        if (performance.now() <= end) okInTime++
      } else if (answer.status === 503) {
        shedMs.push(answer.ms)
      }
      if (typeof answer.status !== 'number') errors++
      else if (answer.status >= 500 && key !== '503 overloaded') other5xx++
      // A refused or reset connection is not retried in a tight loop.
      if (answer.status === 'error') await sleep(50)
    }
  }
  const finished = Promise.all(Array.from({ length: connections }, connection))
  const readyz = options.readyz
    ? sampleReadyz(`${serviceUrl}/readyz`, finished, Math.ceil((seconds * 1000 + REQUEST_TIMEOUT_MS) / READYZ_INTERVAL_MS) + 10)
    : undefined
  await finished
  const tailMs = performance.now() - end
  lag.disable()
  agent.destroy()
  okMs.sort((a, b) => a - b)
  shedMs.sort((a, b) => a - b)
  return {
    connections,
    seconds,
    goodput: okInTime / seconds,
    okP50: percentile(okMs, 50),
    okP99: percentile(okMs, 99),
    shed: shedMs.length,
    shedP99: percentile(shedMs, 99),
    shedMax: shedMs.at(-1),
    statuses,
    other5xx,
    errors,
    tailMs: Math.max(0, tailMs),
    benchLagMs: lag.max / 1e6,
    readyz: readyz && await readyz
  }
}

// ---------------------------------------------------------------------------------------------
// The scenario.

export interface OverloadOrder {
  sortBy: string
  /** One request alone: the median of three. */
  aloneMs: number
  /** The saturation search's steps; empty when the count was given. */
  ramp: { connections: number, goodput: number }[]
  saturatedConnections: number
  runs: OverloadRun[]
}

export interface OverloadGoal { goal: string, pass: boolean, measured: string }

export interface OverloadReport {
  page: number
  path: string
  connectionWait: ConnectionWait
  poolMax?: number
  shedSlackMs: number
  rampSeconds: number
  seconds: number
  orders: OverloadOrder[]
  goals: OverloadGoal[]
  durationSeconds: number
}

/**
 * Waits until the requests a run left queued in the service have been answered: one heavy request
 * at a time until one is answered about as fast as it is alone (at most SETTLE_MAX_MS).
 */
async function settle (url: string, headers: Record<string, string>, aloneMs: number): Promise<number> {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 })
  const started = performance.now()
  try {
    while (performance.now() - started < SETTLE_MAX_MS) {
      const answer = await get(url, agent, REQUEST_TIMEOUT_MS, headers)
      if (answer.status === 200 && answer.ms <= 2 * aloneMs + 20) break
      if (answer.status !== 200) await sleep(100)
    }
  } finally {
    agent.destroy()
  }
  return performance.now() - started
}

export async function measureOverload (options: {
  serviceUrl: string
  headers: Record<string, string>
  scale: Scale
  seconds: number
  connectionWait: ConnectionWait
  poolMax?: number
  /** The saturating count per order when given (BENCH_OVERLOAD_CONNECTIONS), else searched for. */
  connections?: (sortBy: string) => number | undefined
  log?: (line: string) => void
}): Promise<OverloadReport> {
  const { serviceUrl, headers, scale, seconds, connectionWait, log = () => {} } = options
  assertLoopback(serviceUrl)
  const started = performance.now()
  const page = overloadPage(scale)
  const orders: OverloadOrder[] = []
  for (const sortBy of OVERLOAD_ORDERS) {
    const path = overloadPath(sortBy, page)
    const agent = new Agent({ keepAlive: true, maxSockets: 1 })
    const alone: number[] = []
    for (let i = 0; i < 3; i++) {
      const answer = await get(serviceUrl + path, agent, REQUEST_TIMEOUT_MS, headers)
      if (answer.status !== 200) throw new Error(`overload: ${path} answered ${outcome(answer.status, answer.body)} alone`)
      alone.push(answer.ms)
    }
    agent.destroy()
    const aloneMs = alone.sort((a, b) => a - b)[1]

    // The saturating connection count: double the connections while the 200s per second grow by
    // more than 5 % over the best step so far; stop after two steps in a row that do not (one
    // noisy step does not end the search), or at a step answered with anything but 200s (past
    // capacity already). Then take the smallest count within SATURATED_SHARE of the best step.
    const given = options.connections?.(sortBy)
    const ramp: OverloadOrder['ramp'] = []
    let best = 0
    let flat = 0
    const rampTo = given === undefined ? MAX_RAMP_CONNECTIONS : 0
    for (let connections = 1; connections <= rampTo && flat < 2; connections *= 2) {
      const run = await loadRun({ serviceUrl, path, headers, connections, seconds: RAMP_SECONDS, readyz: false })
      ramp.push({ connections, goodput: run.goodput })
      log(`# overload ${sortBy}: ${connections} connections → ${run.goodput.toFixed(1)} 200s/s`)
      flat = run.goodput > best * GROWTH ? 0 : flat + 1
      best = Math.max(best, run.goodput)
      if (Object.keys(run.statuses).some((key) => key !== '200')) break
    }
    const saturatedConnections = given ?? ramp.find((step) => step.goodput >= SATURATED_SHARE * best)!.connections
    const order: OverloadOrder = { sortBy, aloneMs, ramp, saturatedConnections, runs: [] }
    orders.push(order)
    for (const multiple of MULTIPLES) {
      const settledMs = await settle(serviceUrl + path, headers, aloneMs)
      if (settledMs > 1000) log(`# overload ${sortBy}: waited ${(settledMs / 1000).toFixed(1)} s for the service to drain`)
      const run = await loadRun({ serviceUrl, path, headers, connections: saturatedConnections * multiple, seconds, readyz: true })
      const saturated = order.runs[0]?.goodput ?? run.goodput
      order.runs.push({ sortBy, multiple, ...run, goodputRatio: saturated > 0 ? run.goodput / saturated : undefined })
      log(overloadCells(order.runs.at(-1)!).join(' | '))
    }
    await settle(serviceUrl + path, headers, aloneMs)
  }
  const report: Omit<OverloadReport, 'goals'> = {
    page,
    path: overloadPath('<order>', page),
    connectionWait,
    poolMax: options.poolMax,
    shedSlackMs: SHED_SLACK_MS,
    rampSeconds: RAMP_SECONDS,
    seconds,
    orders,
    durationSeconds: Math.round((performance.now() - started) / 1000)
  }
  return { ...report, goals: overloadGoals(report) }
}

// ---------------------------------------------------------------------------------------------
// Goals and output.

function overloadGoals (report: Omit<OverloadReport, 'goals'>): OverloadGoal[] {
  const at8 = report.orders.map((order) => ({ order: order.sortBy, run: order.runs.find((run) => run.multiple === 8) }))
  const each = (value: (run: OverloadRun) => string) =>
    at8.map(({ order, run }) => `${order} ${run ? value(run) : 'not run'}`).join(', ')
  const all = (test: (run: OverloadRun) => boolean) => at8.length > 0 && at8.every(({ run }) => run !== undefined && test(run))
  const bound = (run: OverloadRun) => report.connectionWait.ms + report.shedSlackMs + run.benchLagMs
  return [
    {
      goal: '8×: goodput ≥ 0.8 × saturated',
      pass: all((run) => (run.goodputRatio ?? 0) >= 0.8),
      measured: each((run) => `${fixed(run.goodputRatio, 2)}`)
    },
    {
      goal: '8×: 0 database-unavailable',
      pass: all((run) => !run.statuses['503 database-unavailable']),
      measured: each((run) => String(run.statuses['503 database-unavailable'] ?? 0))
    },
    {
      goal: '8×: no 5xx but 503 overloaded (and no request unanswered)',
      pass: all((run) => run.other5xx === 0 && run.errors === 0),
      measured: each((run) => `${run.other5xx} other 5xx, ${run.errors} unanswered`)
    },
    {
      goal: `8×: every shed request answered within the wait (${report.connectionWait.ms} ms + ${report.shedSlackMs} ms slack + the bench's own lag)`,
      pass: all((run) => (run.shedMax ?? 0) <= bound(run)),
      measured: each((run) => run.shed === 0 ? 'none shed' : `max ${fixed(run.shedMax)} ms of ${fixed(bound(run))}`)
    },
    {
      goal: '8×: /readyz 200 on every sample',
      pass: all((run) => run.readyz !== undefined && run.readyz.samples > 0 && run.readyz.ok === run.readyz.samples),
      measured: each((run) => run.readyz ? `${run.readyz.ok}/${run.readyz.samples} (max ${fixed(run.readyz.maxMs)} ms)` : 'not sampled')
    }
  ]
}

const overloadColumns = ['order', 'conns', 'load', 'goodput/s', '÷sat', '200 p50 ms', '200 p99 ms', 'shed', 'shed p99 ms', 'shed max ms',
  'other 5xx', 'no answer', 'statuses', 'readyz 200/n', 'readyz max ms', 'bench lag ms']

function overloadCells (run: OverloadRun): string[] {
  const statuses = Object.entries(run.statuses).sort((a, b) => b[1] - a[1]).map(([key, count]) => `${key}: ${count}`).join(', ')
  const readyzFailures = run.readyz ? Object.entries(run.readyz.failures).map(([key, count]) => `${key}: ${count}`).join(', ') : ''
  return [
    run.sortBy, String(run.connections), run.multiple === 1 ? 'saturated' : `${run.multiple}×`,
    fixed(run.goodput), fixed(run.goodputRatio, 2), fixed(run.okP50), fixed(run.okP99),
    String(run.shed), fixed(run.shedP99), fixed(run.shedMax), String(run.other5xx), String(run.errors), statuses || '—',
    run.readyz ? `${run.readyz.ok}/${run.readyz.samples}${readyzFailures ? ` (${readyzFailures})` : ''}` : '—',
    run.readyz ? fixed(run.readyz.maxMs) : '—',
    fixed(run.benchLagMs)
  ]
}

/** The scenario's markdown table, its settings and a PASS/FAIL line per goal. */
export function overloadSummary (report: OverloadReport): string {
  const runs = report.orders.flatMap((order) => order.runs)
  return [
    `Overload: GET ${report.path}, ${report.seconds} s per run, /readyz every ${READYZ_INTERVAL_MS} ms (${READYZ_TIMEOUT_MS} ms timeout); ` +
      `connection wait ${report.connectionWait.ms} ms (${report.connectionWait.source}); pool of ${report.poolMax ?? '?'} connections; ` +
      `saturation: ${report.orders.map((order) => `${order.sortBy} ${order.saturatedConnections} connections ` +
        `(${order.ramp.length ? `ramp ${order.ramp.map((step) => `${step.connections}→${step.goodput.toFixed(1)}`).join(' ')}` : 'given'}; ` +
        `alone ${order.aloneMs.toFixed(0)} ms)`).join(', ')}; ` +
      `${report.durationSeconds} s in all`,
    '',
    `| ${overloadColumns.join(' | ')} |`,
    `|${overloadColumns.map(() => '---').join('|')}|`,
    ...runs.map((run) => `| ${overloadCells(run).join(' | ')} |`),
    '',
    ...report.goals.map((goal) => `${goal.pass ? 'PASS' : 'FAIL'}  ${goal.goal}: ${goal.measured}`)
  ].join('\n')
}
