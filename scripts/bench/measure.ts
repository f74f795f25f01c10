// The bench's two measurements: the service (or the HTTP ceiling) under autocannon, and a statement
// in pgbench, the database ceiling; both at the bench's concurrency, each after a 1 s warm-up.
import autocannon from 'autocannon'
import type { Bench } from './context.js'
import { pgbench, withPgbenchVariables } from './pgbench.js'

export interface Run {
  reqPerSec: number
  p50: number
  p99: number
  errors: number
  requests: number
  /** How long the measurement ran: BENCH_SECONDS, or less when a budget ended it. */
  seconds: number
  /** Answers with the expected status per second: for a write, the changes applied (a shed request is answered too). */
  expectedPerSec: number
}

/**
 * autocannon at the bench's connections for BENCH_SECONDS; an answer other than `expect` counts as
 * an error. With `budget`, at most that many requests in all, warm-up included (requests that use
 * up what they change, such as a DELETE of grants that exist): the warm-up takes a tenth, the
 * measurement the rest, and stops early when the budget runs out.
 */
export async function load (bench: Bench, options: autocannon.Options & { expect: number, budget?: number }): Promise<Run> {
  const { connections, seconds } = bench.settings
  const { budget, ...request } = options
  // autocannon shares maxOverallRequests among the connections; a connection given none has no bound.
  const bounded = (requests: number | undefined) => requests === undefined
    ? { connections }
    : { connections: Math.min(connections, requests), maxOverallRequests: requests }
  const warmUp = budget === undefined ? undefined : Math.max(1, Math.floor(budget / 10))
  await autocannon({ ...request, ...bounded(warmUp), duration: 1 }) // warm-up: JIT, pools, caches
  const result = await autocannon({ ...request, ...bounded(budget === undefined ? undefined : budget - warmUp!), duration: seconds })
  // Answers by whether their status is the expected one.
  let expected = 0
  let unexpected = 0
  for (const [status, { count = 0 }] of Object.entries(result.statusCodeStats ?? {})) {
    if (status === String(options.expect)) expected += count
    else unexpected += count
  }
  return {
    // The average of whole seconds; with a budget, which may end the run early, the rate over the run.
    reqPerSec: budget === undefined ? result.requests.average : result.requests.total / result.duration,
    p50: result.latency.p50,
    p99: result.latency.p99,
    errors: result.errors + result.timeouts + unexpected,
    requests: result.requests.sent,
    seconds: result.duration,
    expectedPerSec: expected / result.duration
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
