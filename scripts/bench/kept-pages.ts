// The page cache's scenario of `npm run bench` (BENCH_ONLY="kept pages"): what keeping pages by the
// authorization's version (LIST_PAGE_CACHE_BYTES, src/page-cache.ts) gives at the hit rates a
// cache of a given size gets, not only when every request reads the same page (the ladder's and
// the table's page 0). The reads: page 0 (limit 50) of READERS clients holding 50 grants each, one
// picked at random for every request, so that the pages read are spread evenly and no two
// connections walk them in step. Each variant is the service's build, started as the bench starts
// it, on the same data, with another LIST_PAGE_CACHE_BYTES:
//   all      the default (8 MiB): every reader's page fits, so after the warm-up each read is a hit
//   quarter  room for about a quarter of the pages: about one read in four is a hit
//   off      0: no page is kept, each read is built by the database (as before the cache)
// The hit rate is each variant's own count (/metrics, list_page_cache_reads_total), round by round.
// First a guard: every variant answers the same pages byte for byte. Then BENCH_ROUNDS rounds of
// BENCH_SECONDS, round-robin in an order rotated each round; the ratios to `off` are of the same round.
import type { ChildProcess } from 'node:child_process'
import autocannon from 'autocannon'
import { loadReaders, loadScale, RESOURCE_ID } from '../../db/bench-data.js'
import { fixed } from './format.js'
import { cpuSecondsOf, median, memoryOf, type SideBySideOptions, spread, type Spread } from './ladder.js'
import { stopProcess } from './processes.js'

/** The scenario's name for BENCH_ONLY. */
export const KEPT_PAGES_SCENARIO = 'kept pages'
/** The readers whose page 0 the requests spread over. */
const READERS = 1_000
const MIN_ROUNDS = 5
const WARM_UP_SECONDS = 3

type VariantKey = 'all' | 'quarter' | 'off'

interface Run {
  reqPerSec: number
  p50: number
  p99: number
  errors: number
  /** The service process's CPU time per answer in the round (user and system), µs. */
  cpuMicros: number
  /** Of the pages the variant sent in the round, the share served as kept; undefined without a cache. */
  hitRate?: number
}

interface Check { check: string, pass: boolean, measured: string }

export interface KeptPagesVariantReport {
  key: VariantKey
  cacheBytes: number
  rounds: Run[]
  reqPerSec: Spread
  /** Round by round, this variant's req/s ÷ off's. */
  toOff: Spread
  hitRate?: Spread
  cpuMicros: Spread
  p50: number
  p99: number
  errors: number
  rssMiB: number
  rssPeakMiB: number
}

export interface KeptPagesReport {
  readers: number
  pageBytes: number
  rounds: number
  seconds: number
  connections: number
  variants: KeptPagesVariantReport[]
  guard: Check[]
  checks: Check[]
}

/** The readers are loaded on `db` beside the scale. */
export interface KeptPagesOptions extends SideBySideOptions {
  /** The read token's Authorization header. */
  headers: Record<string, string>
}

interface Running { key: VariantKey, cacheBytes: number, url: string, child: ChildProcess }

const pathOf = (client: string) => `/resources/${RESOURCE_ID}/authorized_clients/${client}/permissions?limit=50&offset=0&sort_by=name.asc`

/** A seeded pseudo-random sequence in [0, 1) (mulberry32): the same picks in every run. */
function randomFrom (seed: number): () => number {
  let state = seed
  return () => {
    state = (state + 0x6D2B79F5) | 0
    let x = Math.imul(state ^ (state >>> 15), 1 | state)
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x
    return ((x ^ (x >>> 14)) >>> 0) / 2 ** 32
  }
}

/** The cache's counters as the variant's /metrics shows them; undefined without a cache. */
async function cacheReads (url: string): Promise<{ hit: number, miss: number } | undefined> {
  const text = await (await fetch(`${url}/metrics`)).text()
  const value = (outcome: string) => new RegExp(`^list_page_cache_reads_total\\{outcome="${outcome}"\\} (\\d+)$`, 'm').exec(text)?.[1]
  const [hit, miss] = [value('hit'), value('miss')]
  return hit === undefined || miss === undefined ? undefined : { hit: Number(hit), miss: Number(miss) }
}

async function hammer (variant: Running, paths: string[], headers: Record<string, string>, connections: number, seconds: number): Promise<Run> {
  const random = randomFrom(seconds * 7919 + connections)
  const [cpuBefore, readsBefore] = [await cpuSecondsOf(variant.child.pid!), await cacheReads(variant.url)]
  const result = await autocannon({
    url: variant.url,
    headers,
    connections,
    duration: seconds,
    requests: [{ method: 'GET', setupRequest: (request) => ({ ...request, path: paths[Math.floor(random() * paths.length)] }) }]
  })
  const [cpu, readsAfter] = [await cpuSecondsOf(variant.child.pid!) - cpuBefore, await cacheReads(variant.url)]
  const hits = readsAfter && readsBefore && readsAfter.hit - readsBefore.hit
  const misses = readsAfter && readsBefore && readsAfter.miss - readsBefore.miss
  return {
    reqPerSec: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    errors: result.non2xx + result.errors + result.timeouts,
    cpuMicros: cpu / result.requests.total * 1e6,
    hitRate: hits === undefined || misses === undefined ? undefined : hits / (hits + misses)
  }
}

export async function measureKeptPages (options: KeptPagesOptions): Promise<KeptPagesReport> {
  const { db, processes, grants, env, headers, rounds, seconds, connections, log } = options
  const started = Date.now()
  await loadScale(db, grants)
  const readers = await loadReaders(db, READERS)
  log(`# ${KEPT_PAGES_SCENARIO}: ${grants} grants and ${READERS} readers loaded in ${((Date.now() - started) / 1000).toFixed(0)} s`)
  const paths = readers.map(pathOf)
  // /metrics on the API port in every variant (it tells the hit rate): a METRICS_PORT given to the bench would be bound by each.
  const variantEnv = { ...env, METRICS_PORT: undefined, LIST_PAGE_CACHE_BYTES: undefined }

  const variants: Running[] = []
  try {
    const start = async (key: VariantKey, cacheBytes?: number) => {
      const { url, child } = await processes.startService({ ...variantEnv, LIST_PAGE_CACHE_BYTES: cacheBytes?.toString() })
      variants.push({ key, cacheBytes: cacheBytes ?? 8 * 2 ** 20, url, child })
      log(`# ${KEPT_PAGES_SCENARIO}: ${key} listening`)
    }
    await start('off', 0)
    const pageBytes = (await (await fetch(variants[0].url + paths[0], { headers })).arrayBuffer()).byteLength
    await start('all')
    // A kept page costs its body and about 700 bytes more (src/page-cache.ts): room for a quarter of the readers'.
    await start('quarter', Math.round(READERS / 4 * (pageBytes + 700)))

    // The guard: a variant that answered less (a 401, a 404, a shorter page) would look cheap.
    const guard: Check[] = []
    for (const path of [paths[0], paths[READERS / 2], paths[READERS - 1]]) {
      const pages = await Promise.all(variants.map(async ({ url }) => {
        const res = await fetch(url + path, { headers })
        return { status: res.status, body: await res.text() }
      }))
      guard.push({
        check: `${path}: every variant answers 200 with the same body, byte for byte`,
        pass: pages.every(({ status, body }) => status === 200 && body === pages[0].body && body.length > 2),
        measured: pages.map(({ status, body }) => `${status}, ${body.length} bytes`).join('; ')
      })
    }
    const failed = guard.filter(({ pass }) => !pass)
    if (failed.length > 0) throw new Error(`${KEPT_PAGES_SCENARIO}: the guard failed, nothing measured: ${failed.map(({ check, measured }) => `${check} (${measured})`).join('; ')}`)

    // JIT, pools and the caches themselves warm before the first round.
    for (const variant of variants) await hammer(variant, paths, headers, connections, WARM_UP_SECONDS)
    const runs = new Map(variants.map(({ key }) => [key, [] as Run[]]))
    for (let round = 0; round < rounds; round++) {
      for (let i = 0; i < variants.length; i++) {
        const variant = variants[(i + round) % variants.length]
        const run = await hammer(variant, paths, headers, connections, seconds)
        runs.get(variant.key)!.push(run)
        log(`# ${KEPT_PAGES_SCENARIO}, round ${round + 1}/${rounds}: ${variant.key}: ${fixed(run.reqPerSec)} req/s, ${fixed(run.cpuMicros)} µs CPU each` +
          (run.hitRate === undefined ? '' : `, ${fixed(run.hitRate * 100)} % hits`) + (run.errors > 0 ? `, ${run.errors} non-2xx, errors or timeouts` : ''))
      }
    }

    const memory = await Promise.all(variants.map(({ child }) => memoryOf(child.pid!)))
    const off = runs.get('off')!
    const reports: KeptPagesVariantReport[] = variants.map(({ key, cacheBytes }, i) => {
      const own = runs.get(key)!
      const hitRates = own.flatMap(({ hitRate }) => hitRate === undefined ? [] : [hitRate])
      return {
        key,
        cacheBytes,
        rounds: own,
        reqPerSec: spread(own.map((run) => run.reqPerSec)),
        toOff: spread(own.map((run, round) => run.reqPerSec / off[round].reqPerSec)),
        hitRate: hitRates.length > 0 ? spread(hitRates) : undefined,
        cpuMicros: spread(own.map((run) => run.cpuMicros)),
        p50: median(own.map((run) => run.p50)),
        p99: median(own.map((run) => run.p99)),
        errors: own.reduce((sum, run) => sum + run.errors, 0),
        ...memory[i]
      }
    })
    const erring = reports.filter(({ errors }) => errors > 0)
    const checks: Check[] = [
      { check: 'every answer measured was 2xx', pass: erring.length === 0, measured: erring.length === 0 ? 'all' : erring.map(({ key, errors }) => `${key}: ${errors}`).join(', ') },
      { check: `at least ${MIN_ROUNDS} rounds, for medians and spreads worth reading`, pass: rounds >= MIN_ROUNDS, measured: String(rounds) }
    ]
    return { readers: READERS, pageBytes, rounds, seconds, connections, variants: reports, guard, checks }
  } finally {
    await Promise.all(variants.map(({ child }) => stopProcess(child)))
  }
}

/** The scenario as markdown: a row per variant, then the checks. */
export function keptPagesSummary (report: KeptPagesReport): string {
  const range = ({ median, min, max }: Spread, digits = 0, scale = 1) => `${fixed(median * scale, digits)} [${fixed(min * scale, digits)}–${fixed(max * scale, digits)}]`
  return [
    `Kept pages: page 0 (limit 50, ${report.pageBytes} bytes) of ${report.readers} readers, one picked at random for each request; ` +
      `${report.connections} connections, ${report.rounds} rounds of ${report.seconds} s per variant, round-robin, the order rotated each round. ` +
      'req/s, hits (the variant\'s own count) and CPU per answer (the service process\'s, user and system): median of the rounds [min–max]; ' +
      '÷ off: round by round, median [min–max]; RSS at the end [peak].',
    '',
    '| variant | LIST_PAGE_CACHE_BYTES | hits % | req/s | ÷ off | CPU µs/answer | p50 ms | p99 ms | non-2xx, errors | RSS MiB |',
    '|---|---|---|---|---|---|---|---|---|---|',
    ...report.variants.map((variant) => `| ${variant.key} | ${variant.cacheBytes} | ${variant.hitRate ? range(variant.hitRate, 0, 100) : '—'} | ` +
      `${range(variant.reqPerSec)} | ${range(variant.toOff, 2)} | ${range(variant.cpuMicros)} | ${fixed(variant.p50, 1)} | ${fixed(variant.p99, 1)} | ` +
      `${variant.errors > 0 ? `**${variant.errors}**` : 0} | ${fixed(variant.rssMiB)} [${fixed(variant.rssPeakMiB)}] |`),
    '',
    ...[...report.guard, ...report.checks].map(({ check, pass, measured }) => `${pass ? 'PASS' : 'FAIL'}  ${check}: ${measured}`)
  ].join('\n')
}
