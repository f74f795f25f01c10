// The rejection scenarios of the bench's table, at its largest scale: the list asked for without a
// token (401) and without the scope (403), beside the HTTP ceiling's problem+json of the same size.
import { SMALL_CLIENT } from '../../db/bench-data.js'
import { listPath } from './list.js'
import { load } from './measure.js'
import type { TableRun } from './table.js'

/** The scenarios' names, for BENCH_ONLY. */
export const REJECTION_SCENARIOS = ['GET without a token → 401', 'GET without the scope → 403'] as const

export async function measureRejections ({ bench, scale, serviceUrl, ceilingUrl, record }: TableRun): Promise<void> {
  const path = listPath(SMALL_CLIENT)
  const scenarios = ([
    [REJECTION_SCENARIOS[0], {}, 401],
    [REJECTION_SCENARIOS[1], { authorization: bench.tokens.bearer('delete:resource') }, 403]
  ] as const).filter(([scenario]) => bench.selected(scenario))
  if (scenarios.length === 0) return
  const httpRun = await load(bench, { url: `${ceilingUrl}/unauthorized`, expect: 401 })
  for (const [scenario, headers, status] of scenarios) {
    const serviceRun = await load(bench, { url: serviceUrl + path, headers, expect: status })
    record({ scenario, grants: scale.grants, service: serviceRun, httpCeiling: httpRun.reqPerSec })
  }
}
