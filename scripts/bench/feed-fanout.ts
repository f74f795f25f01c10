// The change feed streamed, a scenario of `npm run bench` (BENCH_ONLY=feed): many SSE streams open
// on one instance, each its own HTTP connection, while changes are made through the API at a steady
// rate. For every change and every stream, the time from the change's 204 to its event's arrival;
// every stream must get every change (docs/change-feed.md: nothing missed), within about a second.
// The service's RSS before the streams, with them open, at its peak while changes flow, and after.
import { readFile } from 'node:fs/promises'
import { Agent, request as httpRequest, type ClientRequest } from 'node:http'
import { monitorEventLoopDelay, performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import type pg from 'pg'
import { fixed } from './format.js'

/** The scenario's name for BENCH_ONLY. */
export const FEED_FANOUT_SCENARIO = 'feed fan-out'
const RESOURCE = 'bench-feed-live'
const CLIENT = 'bench-feed-writer'
/** The goal: every stream gets every change within this long after its 204. */
const WITHIN_MS = 1000
/** After the last 204, how long the streams may take with the rest before it counts as missed. */
const DRAIN_MS = 5000
/** Once the streams are open: the LISTEN connection is up and every stream has joined the shared reader. */
const SETTLE_MS = 1000
const RSS_INTERVAL_MS = 100

interface Stream {
  request: ClientRequest
  /** When each change's event arrived, by the change's request id. */
  arrivals: Map<string, number>
  duplicates: number
  /** Closed by the service (a stream cut as too slow, or the service gone). */
  cut: boolean
}

export interface FeedFanoutReport {
  streams: number
  rate: number
  seconds: number
  changes: number
  /** Change requests answered other than 204 (no change to expect). */
  changeErrors: number
  deliveries: number
  /** Deliveries read before their change's 204 (counted as 0 ms). */
  ahead: number
  p50?: number
  p99?: number
  max?: number
  missed: number
  duplicates: number
  streamsCut: number
  /** The bench's own event-loop delay, max: its part in the delays. */
  benchLagMs: number
  rssMiB: { before: number, open: number, peak: number, after: number }
  pass: boolean
}

async function rssMiB (pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8')
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? NaN) / 1024
}

/** Opens a stream on its own connection; resolves at its first event (retry:), once the service has it. */
function openStream (url: string, headers: Record<string, string>): Promise<Stream> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(url, { agent: false, headers: { ...headers, accept: 'text/event-stream' } }, (response) => {
      if (response.statusCode !== 200) {
        response.resume()
        reject(new Error(`feed fan-out: a stream answered ${response.statusCode}`))
        return
      }
      const stream: Stream = { request, arrivals: new Map(), duplicates: 0, cut: false }
      let buffer = ''
      response.setEncoding('utf8')
      response.on('data', (chunk: string) => {
        const at = performance.now()
        buffer += chunk
        // A minimal SSE parser: the service ends every line with \n and every event with a blank line.
        for (let end = buffer.indexOf('\n\n'); end !== -1; end = buffer.indexOf('\n\n')) {
          const event = buffer.slice(0, end)
          buffer = buffer.slice(end + 2)
          if (event.startsWith('retry:')) resolve(stream)
          const data = event.split('\n').find((line) => line.startsWith('data:'))
          if (data === undefined) continue // retry, heartbeat
          const { request_id: requestId } = JSON.parse(data.slice(5)) as { request_id: string }
          if (stream.arrivals.has(requestId)) stream.duplicates++
          else stream.arrivals.set(requestId, at)
        }
      })
      // Read before the bench closes them: a close until then is the service's.
      response.on('close', () => {
        stream.cut = true
        reject(new Error('feed fan-out: a stream closed before its first event'))
      })
    })
    request.on('error', reject)
    request.end()
  })
}

/** POSTs a body; resolves with the status and when the answer's head arrived. */
function post (url: string, agent: Agent, headers: Record<string, string>, body: string): Promise<{ status: number, answeredAt: number }> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(url, { method: 'POST', agent, headers }, (response) => {
      // Taken here, as the events' are in their 'data': fetch would add its own steps to one side only.
      resolve({ status: response.statusCode!, answeredAt: performance.now() })
      response.resume()
    })
    request.on('error', reject)
    request.end(body)
  })
}

const percentile = (sorted: number[], p: number) => sorted.length ? sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)] : undefined

export async function measureFeedFanout (options: {
  db: pg.Pool
  serviceUrl: string
  servicePid: number
  readHeaders: Record<string, string>
  grantHeaders: Record<string, string>
  streams: number
  /** Changes per second, and for how long. */
  rate: number
  seconds: number
  log?: (line: string) => void
}): Promise<FeedFanoutReport> {
  const { db, serviceUrl, servicePid, rate, seconds, log = () => {} } = options
  const count = Math.round(rate * seconds)
  if (!(count >= 1)) throw new Error(`feed fan-out: ${rate}/s for ${seconds} s makes no change`)
  // A permission per change: each POST grants one not held yet, so each records exactly one change.
  await db.query("INSERT INTO resources (id, name) VALUES ($1, 'Feed bench') ON CONFLICT DO NOTHING", [RESOURCE])
  await db.query(`INSERT INTO permissions (id, resource_id, name)
    SELECT 'live-' || lpad(i::text, 6, '0'), $1, 'live:' || i FROM generate_series(0, $2::int - 1) AS i ON CONFLICT DO NOTHING`, [RESOURCE, count])
  await db.query('INSERT INTO clients (id) VALUES ($1) ON CONFLICT DO NOTHING', [CLIENT])
  await db.query('INSERT INTO authorizations (resource_id, client_id) VALUES ($1, $2) ON CONFLICT DO NOTHING', [RESOURCE, CLIENT])

  // From the newest change on: a stream from the start would first replay the whole history.
  const { rows: [{ newest }] } = await db.query<{ newest: string | null }>('SELECT max(id)::text AS newest FROM permission_changes')
  const feedUrl = `${serviceUrl}/permission_changes${newest === null ? '' : `?after=${newest}`}`
  const before = await rssMiB(servicePid)
  const opened = await Promise.allSettled(Array.from({ length: options.streams }, () => openStream(feedUrl, options.readHeaders)))
  const streams = opened.flatMap((result) => result.status === 'fulfilled' ? [result.value] : [])
  try {
    const failed = opened.find((result) => result.status === 'rejected')
    if (failed) throw failed.reason
    await sleep(SETTLE_MS)
    const open = await rssMiB(servicePid)
    log(`# ${FEED_FANOUT_SCENARIO}: ${streams.length} streams open; ${count} changes at ${rate}/s`)

    let peak = open
    const sampler = setInterval(() => { rssMiB(servicePid).then((mib) => { peak = Math.max(peak, mib) }, () => {}) }, RSS_INTERVAL_MS)
    const lag = monitorEventLoopDelay({ resolution: 10 })
    lag.enable()
    const changeUrl = `${serviceUrl}/resources/${RESOURCE}/authorized_clients/${CLIENT}/permissions`
    const agent = new Agent({ keepAlive: true })
    const change = async (i: number) => {
      const requestId = `bench-feed-live-${i}`
      const answer = await post(changeUrl, agent, { ...options.grantHeaders, 'x-request-id': requestId }, JSON.stringify([`live-${String(i).padStart(6, '0')}`]))
      return { requestId, ...answer }
    }
    // Open loop, on a fixed schedule: a slow answer does not slow the rate down.
    const started = performance.now()
    const pending = []
    for (let i = 0; i < count; i++) {
      await sleep(Math.max(0, started + (i * 1000) / rate - performance.now()))
      pending.push(change(i))
    }
    const answers = await Promise.all(pending)
    agent.destroy()
    const made = answers.filter(({ status }) => status === 204)
    const delivered = () => streams.every((stream) => made.every(({ requestId }) => stream.arrivals.has(requestId)))
    const lastAnswer = Math.max(...answers.map(({ answeredAt }) => answeredAt))
    while (!delivered() && performance.now() < lastAnswer + DRAIN_MS) await sleep(50)
    lag.disable()
    clearInterval(sampler)

    const delays: number[] = []
    let missed = 0
    let ahead = 0
    for (const { requestId, answeredAt } of made) {
      for (const stream of streams) {
        const at = stream.arrivals.get(requestId)
        // Once the change commits, its 204 and its event race (a notification wakes the reader): an event first is no delay.
        if (at === undefined) missed++
        else {
          if (at < answeredAt) ahead++
          delays.push(Math.max(0, at - answeredAt))
        }
      }
    }
    delays.sort((a, b) => a - b)
    const streamsCut = streams.filter((stream) => stream.cut).length
    for (const stream of streams) stream.request.destroy()
    // The service lets go of what the streams held once it has seen them close.
    await sleep(SETTLE_MS)
    const report = {
      streams: streams.length,
      rate,
      seconds,
      changes: made.length,
      changeErrors: answers.length - made.length,
      deliveries: delays.length,
      ahead,
      p50: percentile(delays, 0.5),
      p99: percentile(delays, 0.99),
      max: delays.at(-1),
      missed,
      duplicates: streams.reduce((sum, stream) => sum + stream.duplicates, 0),
      streamsCut,
      benchLagMs: lag.max / 1e6,
      rssMiB: { before, open, peak, after: await rssMiB(servicePid) }
    }
    const pass = report.changeErrors === 0 && missed === 0 && report.duplicates === 0 && (report.max ?? 0) <= WITHIN_MS
    log(feedFanoutCells({ ...report, pass }).join(' | '))
    return { ...report, pass }
  } finally {
    for (const stream of streams) stream.request.destroy()
  }
}

const columns = ['streams', 'changes', 'deliveries', 'before 204', 'p50 ms', 'p99 ms', 'max ms', 'missed', 'twice', 'change errors', 'streams cut',
  'bench lag ms', 'RSS MiB: before → open → peak → after']

function feedFanoutCells (report: FeedFanoutReport): string[] {
  const { rssMiB: rss } = report
  return [
    String(report.streams), String(report.changes), String(report.deliveries), String(report.ahead), fixed(report.p50, 1), fixed(report.p99, 1), fixed(report.max, 1),
    String(report.missed), String(report.duplicates), String(report.changeErrors), String(report.streamsCut), fixed(report.benchLagMs),
    `${fixed(rss.before)} → ${fixed(rss.open)} → ${fixed(rss.peak)} → ${fixed(rss.after)}`
  ]
}

/** The scenario's markdown table, its settings and its PASS/FAIL line. */
export function feedFanoutSummary (report: FeedFanoutReport): string {
  return [
    `Feed fan-out: ${report.streams} SSE streams (one connection each) on one instance; changes through the API ` +
      `(POST, one grant each) at ${report.rate}/s for ${report.seconds} s; delay = event's arrival − change's 204, over every ` +
      'change × stream (0 when the event was read first); RSS of the service before the streams, with them open, at its peak while changing, after they closed.',
    '',
    `| ${columns.join(' | ')} |`,
    `|${columns.map(() => '---').join('|')}|`,
    `| ${feedFanoutCells(report).join(' | ')} |`,
    '',
    `${report.pass ? 'PASS' : 'FAIL'}  every stream got every change once, within ${WITHIN_MS} ms of its 204: ` +
      `${report.missed} missed, ${report.duplicates} twice, ${report.changeErrors} change errors, max ${fixed(report.max, 1)} ms`
  ].join('\n')
}
