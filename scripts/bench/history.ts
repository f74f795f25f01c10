// The history scenario of the bench's table, at its largest scale, after the write scenarios: the
// newest page of the change history of a client they changed.
import { RESOURCE_ID } from '../../db/bench-data.js'
import { load } from './measure.js'
import type { TableRun } from './table.js'

/** The scenario's name, for BENCH_ONLY. */
export const HISTORY_SCENARIO = 'GET change history, limit 50'

export async function measureHistory ({ bench, scale, serviceUrl, record }: TableRun): Promise<void> {
  if (!bench.selected(HISTORY_SCENARIO) || scale.fillerClients === 0) return
  const path = `/resources/${RESOURCE_ID}/authorized_clients/filler-1/permission_changes?limit=50`
  const serviceRun = await load(bench, { url: serviceUrl + path, headers: bench.tokens.readHeaders, expect: 200 })
  record({ scenario: HISTORY_SCENARIO, grants: scale.grants, service: serviceRun })
}
