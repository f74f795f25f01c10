// The write scenarios of the bench's table, at its largest scale: DELETE of a batch of 50 or 500
// ids a filler client holds (a new client and batch every request, so each removes grants that
// exist, and no more requests than there are batches: a run that ran out would time DELETEs of
// nothing), then POST giving them back in the same order; beside the HTTP ceiling and pgbench running
// the service's unauthorize statement and the plainest DELETE, each in a transaction rolled back.
import { fillerPermissionId, grantFillers, RESOURCE_ID } from '../../db/bench-data.js'
import { unauthorizeSql } from '../../db/queries/change.js'
import { loadConfig } from '../../src/config.js'
import { listPath } from './list.js'
import { load, type Run } from './measure.js'
import { pgbench, withPgbenchVariables } from './pgbench.js'
import type { TableRun } from './table.js'

// The bound the service sets on a change's transaction: the setting's default, as the bench's
// services run with it (their environment does not set it).
const STATEMENT_TIMEOUT_MS = loadConfig({}).DATABASE_STATEMENT_TIMEOUT_MS

const BATCH_SIZES = [50, 500] as const
/** The scenarios' names, for BENCH_ONLY. */
export const WRITE_SCENARIOS = BATCH_SIZES.flatMap((size) => [`DELETE ${size} ids`, `POST ${size} ids`])

/** A write's throughput: the table's req/s counts every answer, shed ones (503) included. */
const appliedLine = (scenario: string, run: Run) =>
  `${scenario}: ${run.expectedPerSec.toFixed(1)} changes applied per second (${run.errors} of the answers were not 204)`

/** A slice of the permissions a filler client holds. */
function fillerBatch (client: number, batch: number, size: number): string[] {
  return Array.from({ length: size }, (_, j) => fillerPermissionId(client, batch * size + j))
}

export async function measureWrites ({ bench, scale, serviceUrl, ceilingUrl, record }: TableRun): Promise<void> {
  if (scale.fillerClients === 0) {
    console.warn(`DELETE skipped: at ${scale.grants} grants there are no filler clients to delete from (there are from 102,000 on)`)
    return
  }
  const { connections, seconds } = bench.settings
  for (const size of BATCH_SIZES.filter((size) => bench.selected(`DELETE ${size} ids`))) {
    const batchesPerClient = Math.floor(1000 / size)
    const available = scale.fillerClients * batchesPerClient
    let next = 0
    // Every request removes grants that exist: a new (client, batch) each time, never one twice.
    const serviceRun = await load(bench, {
      budget: available,
      url: serviceUrl,
      method: 'DELETE',
      headers: bench.tokens.deleteHeaders,
      expect: 204,
      requests: [{
        setupRequest: (request) => {
          const n = next++ % available
          const client = Math.floor(n / batchesPerClient) + 1
          return { ...request, path: listPath(`filler-${client}`), body: JSON.stringify(fillerBatch(client, n % batchesPerClient, size)) }
        }
      }]
    })
    if (serviceRun.seconds < seconds - 0.5) {
      console.warn(`DELETE ${size} ids: its ${available} batches at ${scale.grants} grants lasted ${serviceRun.seconds} s of ${seconds}: a larger scale measures longer`)
    }
    // POST gives back what the DELETEs removed, batch by batch in the same order: real work each time.
    const removedBatches = Math.min(next, available)
    if (bench.selected(`POST ${size} ids`)) {
      let granted = 0
      const postRun = await load(bench, {
        budget: removedBatches,
        url: serviceUrl,
        method: 'POST',
        headers: bench.tokens.grantHeaders,
        expect: 204,
        requests: [{
          setupRequest: (request) => {
            const n = granted++ % removedBatches
            const client = Math.floor(n / batchesPerClient) + 1
            return { ...request, path: listPath(`filler-${client}`), body: JSON.stringify(fillerBatch(client, n % batchesPerClient, size)) }
          }
        }]
      })
      record({ scenario: `POST ${size} ids`, grants: scale.grants, service: postRun })
      console.log(appliedLine(`POST ${size} ids`, postRun))
    }
    // Re-grant whatever is still missing, so the next round (and scale) does real work again.
    await grantFillers(bench.db, 1, Math.min(scale.fillerClients, Math.ceil(next / batchesPerClient)))
    const body = JSON.stringify(fillerBatch(1, 0, size))
    const httpRun = await load(bench, { url: ceilingUrl + listPath('filler-1'), method: 'DELETE', headers: { 'content-type': 'application/json' }, body, expect: 204 })
    // In pgbench, each transaction picks a random filler client, deletes a batch it holds and
    // rolls back: real work every time, and concurrent transactions rarely wait on each other.
    // (Picking the batch is one more small query in each transaction: a slightly lower ceiling.)
    const variables = { p1: RESOURCE_ID }
    const transaction = (statement: string) => `\\set c random(1, ${scale.fillerClients})
SELECT 'filler-' || :c AS p2, '{' || string_agg('perm-' || lpad(((:c * 7919 + j) % 100000)::text, 6, '0'), ',') || '}' AS p3 FROM generate_series(0, ${size - 1}) AS j \\gset
BEGIN;
SET LOCAL statement_timeout = ${STATEMENT_TIMEOUT_MS};
${withPgbenchVariables(statement)};
ROLLBACK;
`
    let dbCeiling: number | undefined
    let idealSqlCeiling: number | undefined
    const binary = bench.pgbench
    if (binary) {
      const run = async (statement: string) => (await pgbench(binary, bench.databaseUrl, transaction(statement), {
        connections, seconds, variables, folder: bench.work
      })).tps
      // No If-Match nor If-None-Match (NULL, false); an actor and a request id for the history
      // row, as the service sends.
      dbCeiling = await run(unauthorizeSql.replaceAll('$4::bigint[]', 'NULL::bigint[]')
        .replaceAll('$5', "'bench'").replaceAll('$6', 'NULL::text').replaceAll('$7', "'bench-request'")
        .replaceAll('$8::bigint[]', 'NULL::bigint[]').replaceAll('$9::boolean', 'false'))
      idealSqlCeiling = await run('DELETE FROM grants WHERE resource_id = $1 AND client_id = $2 AND permission_id = ANY ($3::text[])')
    }
    record({ scenario: `DELETE ${size} ids`, grants: scale.grants, service: serviceRun, httpCeiling: httpRun.reqPerSec, dbCeiling, idealSqlCeiling })
    console.log(appliedLine(`DELETE ${size} ids`, serviceRun))
  }
}
