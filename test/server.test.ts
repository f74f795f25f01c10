// src/server.ts as operators run it: a real process, configured by its environment.
import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import { join } from 'node:path'
import t from 'tap'
import { projectRoot } from '../src/project-root.js'
import { createTestDatabase } from './helper.js'
import { readToken, TEST_SECRET } from './tokens.js'

const tsx = join(projectRoot, 'node_modules', '.bin', 'tsx')
const serverFile = join(projectRoot, 'src', 'server.ts')

function startServer (env: Record<string, string>): { child: ChildProcess, output: () => string } {
  // Only what the test names: the server must not depend on anything else in the environment.
  const child = spawn(tsx, [serverFile], {
    env: { PATH: process.env.PATH, HOST: '127.0.0.1', PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe']
  })
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

t.test('production without DATABASE_URL, without a key, or with two keys → refuses to start, says why', async (t) => {
  const cases: Array<[Record<string, string>, RegExp]> = [
    [{ NODE_ENV: 'production', JWT_SECRET: TEST_SECRET }, /DATABASE_URL is required in production/],
    [{ NODE_ENV: 'production', DATABASE_URL: 'postgres://u@127.0.0.1:1/db' }, /one of JWKS_URL, JWT_PUBLIC_KEY or JWT_SECRET is required/],
    [{ JWT_SECRET: TEST_SECRET, JWT_PUBLIC_KEY: 'x', DATABASE_URL: 'postgres://u@127.0.0.1:1/db' }, /set only one of JWKS_URL, JWT_PUBLIC_KEY, JWT_SECRET/],
    [{ JWKS_URL: 'https://idp.example/jwks.json', JWT_SECRET: TEST_SECRET, DATABASE_URL: 'postgres://u@127.0.0.1:1/db' }, /set only one of JWKS_URL, JWT_PUBLIC_KEY, JWT_SECRET \(got JWKS_URL and JWT_SECRET\)/],
    [{ NODE_ENV: 'production', JWKS_URL: 'http://idp.example/jwks.json', DATABASE_URL: 'postgres://u@127.0.0.1:1/db' }, /JWKS_URL must be https:\/\/ in production/],
    [{ JWT_SECRET: 'short', DATABASE_URL: 'postgres://u@127.0.0.1:1/db' }, /JWT_SECRET must NOT have fewer than 32 characters/],
    [{ PORT: 'eighty', JWT_SECRET: TEST_SECRET, DATABASE_URL: 'postgres://u@127.0.0.1:1/db' }, /PORT must be integer/],
    [{ JWT_PUBLIC_KEY: 'not a pem', DATABASE_URL: 'postgres://u@127.0.0.1:1/db' }, /JWT_PUBLIC_KEY is not a PEM public key/]
  ]
  for (const [env, message] of cases) {
    const { child, output } = startServer(env)
    t.equal(await exitOf(child), 1, JSON.stringify(env))
    t.match(output(), message)
  }
})

t.test('production with a database that refuses connections → exit 1 with one JSON line saying so', async (t) => {
  const { child, output } = startServer({ NODE_ENV: 'production', JWT_SECRET: TEST_SECRET, DATABASE_URL: 'postgres://u:p@127.0.0.1:1/db' })
  t.equal(await exitOf(child), 1)
  const lines = output().split('\n').filter(Boolean)
  for (const line of lines) t.doesNotThrow(() => JSON.parse(line), `JSON: ${line.slice(0, 80)}`)
  t.match(JSON.parse(lines.at(-1)!), { level: 60, msg: 'could not start: the database at DATABASE_URL cannot be reached' })
})

t.test('with DATABASE_URL and a key: migrates, serves, logs JSON, and exits 0 on SIGTERM', async (t) => {
  const databaseUrl = await createTestDatabase(t)
  const { child, output } = startServer({ DATABASE_URL: databaseUrl, JWT_SECRET: TEST_SECRET, NODE_ENV: 'production' })
  t.teardown(() => { child.kill('SIGKILL') })
  let address: string | undefined
  for (let waited = 0; !address && waited < 30_000; waited += 100) {
    address = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(output())?.[1]
    if (!address) await new Promise((resolve) => setTimeout(resolve, 100))
  }
  t.ok(address, 'listening')
  const ready = await fetch(`${address}/readyz`)
  t.equal(ready.status, 200)
  const res = await fetch(`${address}/resources/r/authorized_clients/c/permissions`, { headers: { authorization: `Bearer ${readToken()}` } })
  t.equal(res.status, 404, 'the migrated, empty database answers')
  for (const line of output().split('\n').filter(Boolean)) {
    t.doesNotThrow(() => JSON.parse(line), `every line of output is a JSON log line: ${line.slice(0, 80)}`)
  }
  t.notMatch(output(), /eyJ/, 'no token is printed or logged in production')
  child.kill('SIGTERM')
  t.equal(await exitOf(child), 0)
})
