// src/server.ts as operators run it: a real process, configured by its environment.
import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import t from 'tap'
import { endsWithTest } from './at-exit.js'
import { createTestDatabase, serverProcess } from './helper.js'
import { PRODUCTION_AUDIENCE, PRODUCTION_ISSUER, productionClaims, TEST_SECRET, token } from './tokens.js'

function startServer (env: Record<string, string>): { child: ChildProcess, output: () => string } {
  // Only what the test names: the server must not depend on anything else in the environment.
  const child = endsWithTest(spawn(serverProcess.command, serverProcess.args, {
    env: { PATH: process.env.PATH, HOST: '127.0.0.1', PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe']
  }))
  let output = ''
  child.stdout!.on('data', (chunk) => { output += chunk })
  child.stderr!.on('data', (chunk) => { output += chunk })
  return { child, output: () => output }
}

async function exitOf (child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null) return child.exitCode
  const [code] = await once(child, 'exit')
  return code
}

const unreachable = 'postgres://u@127.0.0.1:1/db'
const production = { NODE_ENV: 'production', JWT_ISSUER: PRODUCTION_ISSUER, JWT_AUDIENCE: PRODUCTION_AUDIENCE }

t.test('a configuration it cannot start with → exit 1 and one line on stderr saying why', async (t) => {
  // Every such case, in-process: test/config.test.ts (loadStartupConfig). This is the wiring.
  const { child, output } = startServer({ ...production, JWT_AUDIENCE: '', JWT_SECRET: TEST_SECRET, DATABASE_URL: unreachable })
  t.equal(await exitOf(child), 1)
  t.equal(output(), 'Refusing to start: JWT_AUDIENCE is required in production (NODE_ENV=production).\n')
})

t.test('production with a database that refuses connections → exit 1 with one JSON line saying so', async (t) => {
  const { child, output } = startServer({ ...production, JWT_SECRET: TEST_SECRET, DATABASE_URL: 'postgres://u:p@127.0.0.1:1/db' })
  t.equal(await exitOf(child), 1)
  const lines = output().split('\n').filter(Boolean)
  for (const line of lines) t.doesNotThrow(() => JSON.parse(line), `JSON: ${line.slice(0, 80)}`)
  t.match(JSON.parse(lines.at(-1)!), { level: 60, msg: 'could not start: the database at DATABASE_URL cannot be reached' })
})

/** Waits for the listening line; the address, or undefined when the process ended first. */
async function listeningAddress (child: ChildProcess, output: () => string): Promise<string | undefined> {
  for (let waited = 0; waited < 30_000 && child.exitCode === null; waited += 100) {
    const address = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(output())?.[1]
    if (address) return address
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

t.test('with DATABASE_URL and a key: migrates, serves, logs JSON, and exits 0 on SIGTERM', async (t) => {
  const databaseUrl = await createTestDatabase(t)
  // Event-loop shedding off: the other test files share the cores, and their lag is not this
  // server's (shedding: test/pressure.test.ts).
  const { child, output } = startServer({ ...production, DATABASE_URL: databaseUrl, JWT_SECRET: TEST_SECRET, MAX_EVENT_LOOP_DELAY_MS: '0' })
  t.teardown(() => { child.kill('SIGKILL') })
  const address = await listeningAddress(child, output)
  t.ok(address, 'listening')
  const ready = await fetch(`${address}/readyz`)
  t.equal(ready.status, 200)
  const res = await fetch(`${address}/resources/r/authorized_clients/c/permissions`, { headers: { authorization: `Bearer ${token({ scope: 'read:resource', ...productionClaims })}` } })
  t.equal(res.status, 404, `the migrated, empty database answers: ${await res.clone().text()}`)
  const otherApi = token({ scope: 'read:resource', ...productionClaims, aud: 'another-api' })
  const refused = await fetch(`${address}/resources/r/authorized_clients/c/permissions`, { headers: { authorization: `Bearer ${otherApi}` } })
  t.equal(refused.status, 401, `a token the same issuer made for another API is refused: ${await refused.clone().text()}`)
  for (const line of output().split('\n').filter(Boolean)) {
    t.doesNotThrow(() => JSON.parse(line), `every line of output is a JSON log line: ${line.slice(0, 80)}`)
  }
  t.notMatch(output(), /eyJ/, 'no token is printed or logged in production')
  child.kill('SIGTERM')
  t.equal(await exitOf(child), 0)
})
