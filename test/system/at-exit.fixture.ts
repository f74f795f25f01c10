// Run by test/system/at-exit.test.ts under Stryker's tap hook: starts what test files start (a database,
// a PostgreSQL server of its own, a child process), says what they are on stderr, and waits for
// the SIGTERM with which Stryker stops a test file at its first failure.
import { spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { endsWithTest } from '../support/at-exit.js'
import { createTestDatabase, ownPostgres } from '../support/database.js'

t.test('stopped midway', async (t) => {
  const database = new URL(await createTestDatabase(t)).pathname.slice(1)
  const own = await ownPostgres(t)
  const postmaster = Number(readFileSync(join(own.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0])
  const child = endsWithTest(spawn('sleep', ['60'], { stdio: 'ignore' }))
  process.stderr.write(JSON.stringify({ database, postmaster, dataDir: own.dataDir, child: child.pid }) + '\n')
  await new Promise(() => {})
})
