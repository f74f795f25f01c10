// What `npm start` gives a laptop beyond the configuration (src/local-dev.ts): here, the demo
// token's scopes and lifetime, and the secret kept in .data/. Its printing is run by .ci/smoke-start, which uses the token for a DELETE and the
// POST that undoes it.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { readdirSync, readFileSync } from 'node:fs'
import { readFile, stat, writeFile } from 'node:fs/promises'
import { createServer, type AddressInfo } from 'node:net'
import { join } from 'node:path'
import pg from 'pg'
import t from 'tap'
import { parse } from 'yaml'
import { freePort, startEmbeddedPostgres } from '../../db/embedded-postgres.js'
import { migrateDatabase } from '../../db/migrate.js'
import { seedDatabase } from '../../db/seed.js'
import { loadConfig } from '../../src/config.js'
import { demoToken, everyScope, lifetimeText, localJwtSecret } from '../../src/local-dev.js'
import { migrationsDir, projectRoot } from '../../src/project-root.js'
import { endsWithTest } from '../support/at-exit.js'
import { ordersFixture, ordersPath } from '../support/fixtures.js'
import { build } from '../support/harness.js'
import { projectCopy } from '../support/server-process.js'
import { TEST_SECRET } from '../support/tokens.js'
import { until } from '../support/waiting.js'

t.test('the demo token carries every scope an operation of the spec asks for, each once, and nothing else', async (t) => {
  type Security = Array<Record<string, string[]>>
  const spec = parse(readFileSync(join(projectRoot, 'openapi', 'openapi.yaml'), 'utf8')) as { security?: Security, paths: Record<string, Record<string, { security?: Security }>> }
  const asked = new Set<string>()
  for (const path of Object.values(spec.paths)) {
    for (const operation of Object.values(path)) {
      for (const requirement of operation.security ?? spec.security ?? []) for (const scope of Object.values(requirement).flat()) asked.add(scope)
    }
  }
  t.same([...everyScope].sort(), [...asked].sort())
  t.same([...everyScope].sort(), ['create:resource', 'delete:resource', 'read:resource'], 'list, unauthorize, grant')
  t.equal(new Set(everyScope).size, everyScope.length, 'each once')
})

t.test('the demo token is accepted by the service it is printed for: 12 h, or JWT_MAX_LIFETIME_S when that is shorter', async (t) => {
  for (const [env, lifetimeS] of [[{}, 12 * 3600], [{ JWT_MAX_LIFETIME_S: '86400' }, 12 * 3600], [{ JWT_MAX_LIFETIME_S: '600' }, 600]] as const) {
    const harness = await build(t, env)
    await harness.seed(ordersFixture())
    // Signed as `npm start` signs it, with the secret the harness's service verifies with.
    const demo = demoToken(loadConfig({ JWT_SECRET: TEST_SECRET, ...env }))
    const label = JSON.stringify(env)
    t.equal(demo.lifetimeS, lifetimeS, `${label}: lifetime`)
    const { exp, iat } = JSON.parse(Buffer.from(demo.token.split('.')[1], 'base64url').toString()) as { exp: number, iat: number }
    t.equal(exp - iat, lifetimeS, `${label}: exp − iat`)
    const res = await harness.request(ordersPath(), { headers: { authorization: `Bearer ${demo.token}` } })
    t.equal(res.status, 200, `${label}: accepted`)
  }
})

t.test('lifetimeText says a lifetime as people do', async (t) => {
  t.equal(lifetimeText(12 * 3600), '12 h')
  t.equal(lifetimeText(600), '10 min')
  t.equal(lifetimeText(90), '90 s')
})

t.test('npm start on a local database whose data the demo data conflicts with: it starts without the demo data, saying why in one line', async (t) => {
  const { args, clusterDir } = await projectCopy(t)
  const port = await freePort()
  // The developer's own data, loaded before (npm run db:seed on the same .data/): read:orders on
  // orders-api under an id of theirs, where the demo data names it perm_read_orders.
  const cluster = await startEmbeddedPostgres({ dataDir: clusterDir, port })
  try {
    const pool = new pg.Pool({ connectionString: cluster.url, max: 1 })
    // pool.end() resolves before its client's socket has closed: the cluster stopping next may
    // still reach that client with its shutdown notice (57P01), unhandled an uncaught error.
    pool.on('error', () => {})
    try {
      await migrateDatabase(pool, migrationsDir)
      await seedDatabase(pool, { resources: [{ id: 'orders-api' }], permissions: [{ id: 'my_read_orders', resource_id: 'orders-api', name: 'read:orders' }] })
    } finally {
      await pool.end()
    }
  } finally {
    await cluster.stop()
  }

  const child = endsWithTest(spawn(process.execPath, args, {
    env: { PATH: process.env.PATH, HOST: '127.0.0.1', PORT: '0', EMBEDDED_POSTGRES_PORT: String(port), MAX_EVENT_LOOP_DELAY_MS: '0' },
    stdio: ['ignore', 'pipe', 'pipe']
  }))
  t.teardown(() => { child.kill('SIGKILL') })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (chunk) => { stdout += chunk })
  child.stderr.on('data', (chunk) => { stderr += chunk })
  // It failed the start with the seed's error and a stack trace (an unhandled rejection), exit 1.
  await until('the token printed, or the process gone', () => /export TOKEN=/.test(stdout) || child.exitCode !== null, 120_000)
  t.equal(child.exitCode, null, `still running\n${stdout}\n${stderr}`)
  t.equal(stderr, 'The demo data (db/demo-data.json) was not loaded: permissions[0] "perm_read_orders": conflicts with an existing row ' +
    '(Key (resource_id, name)=(orders-api, read:orders) already exists.)\n', 'one line on stderr, no stack trace')
  t.notMatch(stdout, /Demo data loaded/, 'no claim that it was')
  child.kill('SIGTERM')
  const [code] = child.exitCode !== null ? [child.exitCode] : await once(child, 'exit')
  t.equal(code, 0, 'stops as usual')
})

t.test('the local secret: made once, kept, made again when the file holds less than a secret; made at once by several, one for all', async (t) => {
  const dir = t.testdir({})
  const file = join(dir, 'dev-jwt-secret')
  const made = await localJwtSecret(dir)
  t.ok(made.length >= 32, 'a secret as long as JWT_SECRET must be')
  t.equal((await stat(file)).mode & 0o777, 0o600, 'readable by its owner only')
  t.equal(await localJwtSecret(dir), made, 'kept')
  for (const short of ['\n', 'short\n', `${'x'.repeat(31)}\n`]) {
    await writeFile(file, short)
    const again = await localJwtSecret(dir)
    t.ok(again.length >= 32 && again !== short.trim(), `${JSON.stringify(short)}: made again`)
    t.equal((await readFile(file, 'utf8')).trim(), again, 'and kept in place')
  }
  const fresh = t.testdir({})
  const secrets = await Promise.all(Array.from({ length: 8 }, () => localJwtSecret(fresh)))
  t.same(new Set(secrets).size, 1, 'eight at once: one secret')
  t.same(readdirSync(fresh), ['dev-jwt-secret'], 'nothing else left in the folder')
})

t.test('npm start while another process runs the embedded PostgreSQL of the same .data/: exit 1, one line saying what to do, not to change the port', async (t) => {
  // That other process: this one (a node process, as a sibling `npm start` is), its cluster running.
  const { args, clusterDir } = await projectCopy(t)
  const cluster = await startEmbeddedPostgres({ dataDir: clusterDir, port: await freePort() })
  t.teardown(() => cluster.stop())
  const start = async (port: number) => {
    const child = endsWithTest(spawn(process.execPath, args, {
      env: { PATH: process.env.PATH, HOST: '127.0.0.1', PORT: '0', EMBEDDED_POSTGRES_PORT: String(port), MAX_EVENT_LOOP_DELAY_MS: '0' },
      stdio: ['ignore', 'pipe', 'pipe']
    }))
    t.teardown(() => { child.kill('SIGKILL') })
    let stderr = ''
    child.stderr.on('data', (chunk) => { stderr += chunk })
    const [code] = child.exitCode !== null ? [child.exitCode] : await once(child, 'exit')
    return { code, stderr }
  }
  const sibling = await start(await freePort())
  t.equal(sibling.code, 1)
  // It began "set another port": another port starts nothing on a cluster a running PostgreSQL holds.
  t.match(sibling.stderr, /^Could not start the embedded PostgreSQL: another process is using the embedded PostgreSQL in .+ \(postmaster pid \d+\): stop that `npm start` first, or set DATABASE_URL\n$/)
  t.notMatch(sibling.stderr, /another port/)

  // That process gone, a port another program holds: then another port is the way out, and said.
  await cluster.stop()
  const holder = createServer().listen(0, '127.0.0.1')
  await once(holder, 'listening')
  t.teardown(() => { holder.close() })
  const port = (holder.address() as AddressInfo).port
  const taken = await start(port)
  t.equal(taken.code, 1)
  t.match(taken.stderr, new RegExp(`^Could not start the embedded PostgreSQL \\(EMBEDDED_POSTGRES_PORT=${port}; set another port, or DATABASE_URL for a server of your own\\): PostgreSQL did not start in .+\n$`))
})
