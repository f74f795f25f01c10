// Stryker stops a test file at its first failure (SIGTERM, on which its hook exits at once), so no
// teardown runs: test/support/at-exit.ts ends what the file started anyway. Checked with Stryker's own hook.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { existsSync, readFileSync } from 'node:fs'
import { rm } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import t from 'tap'
import { projectRoot } from '../../src/project-root.js'
import { testDatabaseUrl } from '../support/database.js'
import { nodeArgsOf } from '../support/node-args.js'

const strykerHook = join(projectRoot, 'node_modules', '@stryker-mutator', 'tap-runner', 'dist', 'src', 'setup', 'hook.cjs')

/** Whether process `pid` runs: it has an entry in /proc that is not a zombie's. */
function running (pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'))
  } catch {
    return false
  }
}

async function stopped (pid: number): Promise<boolean> {
  for (let waited = 0; waited < 10_000 && running(pid); waited += 50) await sleep(50)
  return !running(pid)
}

t.test('a test file SIGTERMed under Stryker leaves no process, server, folder or database behind', async (t) => {
  const file = spawn(process.execPath, ['-r', strykerHook, ...nodeArgsOf('test/system/at-exit.fixture.ts')], {
    cwd: projectRoot,
    stdio: ['ignore', 'pipe', 'pipe']
  })
  // The hook writes its findings to stryker-output-<pid>.json in the working folder as it exits.
  const hookOutput = join(projectRoot, `stryker-output-${file.pid}.json`)
  t.teardown(() => rm(hookOutput, { force: true }))
  let stdout = ''
  let stderr = ''
  file.stdout.setEncoding('utf8').on('data', (chunk: string) => { stdout += chunk })
  file.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
  // Its first line on stderr says what it started; a fixture that fails first (its TAP on stdout)
  // ends without one.
  const ended = once(file, 'close')
  while (!stderr.includes('\n')) {
    if (await Promise.race([ended.then(() => true), once(file.stderr, 'data').then(() => false)])) {
      throw new Error(`the fixture ended early:\n${stdout}${stderr}`)
    }
  }
  const started = JSON.parse(stderr.split('\n')[0]) as { database: string, postmaster: number, dataDir: string, child: number }
  const databases = async () => {
    const client = new pg.Client({ connectionString: testDatabaseUrl() })
    await client.connect()
    try {
      return (await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [started.database])).rows.length
    } finally {
      await client.end()
    }
  }
  t.ok(running(started.child) && running(started.postmaster) && existsSync(started.dataDir), 'all started')
  t.equal(await databases(), 1)

  file.kill('SIGTERM')
  await once(file, 'exit')
  t.ok(existsSync(hookOutput), "exited through Stryker's hook")
  t.ok(await stopped(started.child), 'the child process is ended')
  t.ok(await stopped(started.postmaster), 'the PostgreSQL server is shut down')
  t.notOk(existsSync(dirname(started.dataDir)), 'its folder is removed')
  // Dropped by a process of its own, once the file's last connection is gone.
  for (let waited = 0; waited < 10_000 && await databases() > 0; waited += 100) await sleep(100)
  t.equal(await databases(), 0, 'the database is dropped')
})
