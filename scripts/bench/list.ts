// The list scenarios of the bench's table: pages of the small client (1,000 grants) and of the big
// one (up to 10^5), page 0 and the deepest page in each order, beside the HTTP ceiling and pgbench
// running the service's statement and the best one. Also the plans of those statements
// (reports/bench/explain.txt) and the goal that holds the deepest page to page 0.
import { mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { BIG_CLIENT, RESOURCE_ID, scaleOf, SMALL_CLIENT, type Scale } from '../../db/bench-data.js'
import { explainPrepared } from '../../db/explain.js'
import { listGrantedPermissionsSql } from '../../db/queries/list.js'
import { parseSortBy } from '../../db/queries/sort.js'
import { idealListSql } from './best-sql.js'
import type { Bench } from './context.js'
import type { CeilingPages } from './http-ceiling.js'
import { databaseCeiling, load } from './measure.js'
import type { Row, TableRun } from './table.js'

export interface ListScenario {
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
const ORDERS = ['name.asc', 'id.desc', 'description.desc'] as const
export const listScenarios: readonly ListScenario[] = [
  { name: 'GET page 0, limit 50', client: SMALL_CLIENT, limit: 50, page: () => 0, sortBy: 'name.asc' },
  ...ORDERS.flatMap((sortBy) => [
    { name: `GET ${sortBy} page 0, limit 500`, client: BIG_CLIENT, limit: 500, page: () => 0, sortBy },
    { name: `GET ${sortBy} deepest page, limit 500`, client: BIG_CLIENT, limit: 500, page: deepestPage, sortBy, fromEnd: true }
  ]),
  { name: 'GET two-key sort_by', client: SMALL_CLIENT, limit: 50, page: () => 0, sortBy: 'description.desc,name.asc' }
]
/** Page 0, limit 50, of the small client: the request of the replica, ladder and tracing scenarios. */
export const pageZero = listScenarios.find(({ name }) => name === 'GET page 0, limit 50')!

export const listPath = (client: string) => `/resources/${RESOURCE_ID}/authorized_clients/${client}/permissions`
export const search = (scenario: ListScenario, scale: Scale) =>
  `?limit=${scenario.limit}&offset=${scenario.page(scale)}&sort_by=${scenario.sortBy}`
/** Page 0's path and query string at `grants` grants. */
export const pageZeroPath = (grants: number) => listPath(pageZero.client) + search(pageZero, scaleOf(grants))

export async function measureList ({ bench, scale, serviceUrl, ceilingUrl, record }: TableRun): Promise<void> {
  for (const scenario of listScenarios.filter(({ name }) => bench.selected(name))) {
    const path = listPath(scenario.client) + search(scenario, scale)
    const variables = { p1: RESOURCE_ID, p2: scenario.client, p3: String(scenario.limit), p4: String(scenario.page(scale)), p5: '{}' }
    const serviceRun = await load(bench, { url: serviceUrl + path, headers: bench.tokens.readHeaders, expect: 200 })
    const httpRun = await load(bench, { url: ceilingUrl + path, expect: 200 })
    const dbCeiling = await databaseCeiling(bench, listGrantedPermissionsSql(parseSortBy(scenario.sortBy)), variables)
    const idealSqlCeiling = await databaseCeiling(bench, idealListSql(scenario), variables)
    record({ scenario: scenario.name, grants: scale.grants, service: serviceRun, httpCeiling: httpRun.reqPerSec, dbCeiling, idealSqlCeiling })
  }
}

/** The pages the HTTP ceiling answers at this scale, read once from the service itself. */
export async function ceilingPagesOf (serviceUrl: string, headers: Record<string, string>, scale: Scale): Promise<CeilingPages> {
  const pages: CeilingPages = {}
  for (const scenario of listScenarios) {
    const res = await fetch(serviceUrl + listPath(scenario.client) + search(scenario, scale), { headers })
    pages[search(scenario, scale)] = { body: await res.json(), total: Number(res.headers.get('x-total-count')), link: res.headers.get('link') ?? '' }
  }
  return pages
}

/** EXPLAIN (ANALYZE, BUFFERS) of each list statement as the service runs it, for docs/performance.md. */
export async function explainList (bench: Bench, scale: Scale): Promise<void> {
  const sections: string[] = []
  for (const scenario of listScenarios) {
    const values = [RESOURCE_ID, scenario.client, scenario.limit, scenario.page(scale), []]
    const plan = await explainPrepared(bench.db, listGrantedPermissionsSql(parseSortBy(scenario.sortBy)), values)
    sections.push(`-- ${scenario.name} (${search(scenario, scale)}) at ${scale.grants} grants\n${plan}`)
  }
  await mkdir(bench.reportFolder, { recursive: true })
  await writeFile(join(bench.reportFolder, 'explain.txt'), sections.join('\n\n') + '\n')
}

/** The goal for each order: its deepest page's p50 at most 2× its page 0's, at the same scale. */
export function deepestPageGoal (rows: Row[]): string[] {
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
