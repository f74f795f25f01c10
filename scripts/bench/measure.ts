// The bench's two measurements: the service (or the HTTP ceiling) under autocannon, and a statement
// in pgbench, the database ceiling; both at the bench's concurrency, each after a 1 s warm-up.
import autocannon from 'autocannon'
import type { Bench } from './context.js'
import { pgbench, withPgbenchVariables } from './pgbench.js'

export interface Run { reqPerSec: number, p50: number, p99: number, errors: number, requests: number }

/** autocannon at the bench's connections for BENCH_SECONDS; an answer other than `expect` counts as an error. */
export async function load (bench: Bench, options: autocannon.Options & { expect: number }): Promise<Run> {
  const { connections, seconds } = bench.settings
  await autocannon({ ...options, connections, duration: 1 }) // warm-up: JIT, pools, caches
  const result = await autocannon({ ...options, connections, duration: seconds })
  const unexpected = Object.entries(result.statusCodeStats ?? {})
    .filter(([status]) => status !== String(options.expect))
    .reduce((sum, [, { count = 0 }]) => sum + count, 0)
  return {
    reqPerSec: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    errors: result.errors + result.timeouts + unexpected,
    requests: result.requests.sent
  }
}

/**
 * `sql` (one statement, $1… as the variables p1…) in pgbench at the bench's connections for
 * `seconds`, on `databaseUrl` (default the bench's): its tps. Throws when a transaction failed.
 */
export async function statementTps (bench: Bench & { pgbench: string }, sql: string, variables: Record<string, string>, seconds: number,
  databaseUrl = bench.databaseUrl): Promise<number> {
  const script = `${withPgbenchVariables(sql)};\n`
  const result = await pgbench(bench.pgbench, databaseUrl, script, { connections: bench.settings.connections, seconds, variables, folder: bench.work })
  if (result.failed > 0) throw new Error(`pgbench: ${result.failed} failed transactions`)
  return result.tps
}

/** The database ceiling of `sql`: its tps for BENCH_SECONDS after a 1 s warm-up; undefined without pgbench. */
export async function databaseCeiling (bench: Bench, sql: string, variables: Record<string, string>): Promise<number | undefined> {
  if (!hasPgbench(bench)) return undefined
  const { connections, seconds } = bench.settings
  const script = `${withPgbenchVariables(sql)};\n`
  await pgbench(bench.pgbench, bench.databaseUrl, script, { connections, seconds: 1, variables, folder: bench.work })
  return await statementTps(bench, sql, variables, seconds)
}

export const hasPgbench = (bench: Bench): bench is Bench & { pgbench: string } => bench.pgbench !== undefined
