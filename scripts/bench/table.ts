// The bench's table: a row per scenario and scale, the service beside its ceilings (HTTP, the
// database with our SQL and with the best SQL, and both together), printed as each row is measured
// and again as markdown at the end. The table's scenarios (list.ts, writes.ts, history.ts,
// rejections.ts) run at one scale with a TableRun and record their rows through it.
import type { Scale } from '../../db/bench-data.js'
import type { Bench } from './context.js'
import type { Run } from './measure.js'
import { fixed } from './format.js'

export interface Row {
  scenario: string
  grants: number
  service: Run
  httpCeiling?: number
  dbCeiling?: number
  idealSqlCeiling?: number
}

/** What a table scenario runs with: the bench, the scale loaded, the service and the HTTP ceiling answering. */
export interface TableRun {
  bench: Bench
  scale: Scale
  serviceUrl: string
  ceilingUrl: string
  /** Adds the row to the table, and prints it. */
  record: (row: Row) => void
}

/** Both halves share the machine's cores with the load generator: 1 / (1/HTTP + 1/best SQL). */
export const machineCeiling = (row: Row) => row.httpCeiling && row.idealSqlCeiling
  ? 1 / (1 / row.httpCeiling + 1 / row.idealSqlCeiling)
  : row.httpCeiling

export const columns = ['scenario', 'grants', 'req/s', 'p50 ms', 'p99 ms', 'errors', 'HTTP ceil', 'DB (our SQL)', 'DB (best SQL)', 'ceiling', '÷HTTP', '÷DB', '÷ceiling'] as const

export function cells (row: Row): string[] {
  const ceilingValue = machineCeiling(row)
  return [
    row.scenario, row.grants.toExponential(0).replace('e+', 'e'), fixed(row.service.reqPerSec), fixed(row.service.p50, 1), fixed(row.service.p99, 1),
    String(row.service.errors), fixed(row.httpCeiling), fixed(row.dbCeiling), fixed(row.idealSqlCeiling), fixed(ceilingValue),
    row.httpCeiling ? fixed(row.service.reqPerSec / row.httpCeiling, 2) : '—',
    row.idealSqlCeiling ? fixed(row.service.reqPerSec / row.idealSqlCeiling, 2) : '—',
    ceilingValue ? fixed(row.service.reqPerSec / ceilingValue, 2) : '—'
  ]
}

export function markdownTable (rows: Row[]): string {
  return [`| ${columns.join(' | ')} |`, `|${columns.map(() => '---').join('|')}|`, ...rows.map((row) => `| ${cells(row).join(' | ')} |`)].join('\n')
}
