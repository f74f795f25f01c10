// Real PostgreSQL streaming replication for tests: the primary and hot standby of
// db/replicated-postgres.ts (Debian's PostgreSQL, which CI installs), stopped and removed when
// the test ends, or when the process exits without its teardown (test/support/at-exit.ts).
import type { Test } from 'tap'
import { NO_POSTGRES_SERVER, postgresServerBin, startReplicatedPostgres, type Replicated } from '../../db/replicated-postgres.js'
import { atExit } from './at-exit.js'

export { postgresServerBin, type Replicated }

/**
 * The server's bin folder; without one the test file is skipped with a message (it ends here,
 * exit code 0), except under CI, which installs the server and must run the test: there it fails.
 */
export function skipUnlessPostgresServer (t: Test, what = 'this test'): string {
  const bin = postgresServerBin()
  if (bin) return bin
  if (process.env.CI) throw new Error(`${NO_POSTGRES_SERVER}, and CI must run ${what}`)
  t.plan(0, `${NO_POSTGRES_SERVER}: ${what} is skipped`)
  process.exit(0)
}

/**
 * A primary and a streaming replica of it, both stopped (immediate shutdown) and removed when `t`
 * ends. Skip the test file with skipUnlessPostgresServer() first where the server may be missing.
 */
export async function replicatedPostgres (t: Test): Promise<Replicated> {
  if (!postgresServerBin()) throw new Error(`${NO_POSTGRES_SERVER}: call skipUnlessPostgresServer(t) first`)
  return startReplicatedPostgres({
    onCreated: ({ stop, quit }) => {
      const cancel = atExit(quit)
      t.teardown(async () => {
        await stop()
        cancel()
      })
    }
  })
}
