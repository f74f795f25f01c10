// Each plugin is registered under its own name and declares the plugins it needs: registered
// without one of them, the boot fails at once naming it (Fastify's dependency check), instead of
// failing later on a decorator that is not there.
import { setTimeout as sleep } from 'node:timers/promises'
import Fastify, { type FastifyPluginAsync } from 'fastify'
import fp from 'fastify-plugin'
import pg from 'pg'
import t, { type Test } from 'tap'
import auth from '../../plugins/auth/index.js'
import db from '../../plugins/db.js'
import { lockWaitExpired } from '../../db/errors.js'
import docs from '../../plugins/docs.js'
import env from '../../plugins/env.js'
import lifecycle from '../../plugins/lifecycle.js'
import listPages from '../../plugins/list-pages.js'
import metrics from '../../plugins/metrics.js'
import pressure from '../../plugins/pressure.js'
import serviceApp from '../../src/app.js'
import { loadConfig } from '../../src/config.js'
import { newDatabase } from '../support/database.js'
import { build } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { TEST_SECRET } from '../support/tokens.js'

const plugins = { auth, db, docs, env, lifecycle, 'list-pages': listPages, metrics, pressure }
const dependenciesOf = { db: ['env'], 'list-pages': ['env'], metrics: ['env', 'db', 'feed', 'list-pages'], pressure: ['env'] }

for (const [name, dependencies] of Object.entries(dependenciesOf) as Array<[keyof typeof dependenciesOf, string[]]>) {
  for (const missing of dependencies) {
    t.test(`${name} registered without ${missing}: the boot fails, naming both`, async (t) => {
      const app = Fastify({ logger: false })
      // Fastify checks the names before the plugin runs: the others need only be there by name.
      for (const present of dependencies.filter((dependency) => dependency !== missing)) {
        app.register(fp(async () => {}, { name: present }))
      }
      app.register(plugins[name] as FastifyPluginAsync)
      await t.rejects(async () => { await app.ready() }, {
        code: 'FST_ERR_PLUGIN_DEPENDENCY_NOT_REGISTERED',
        message: `The dependency '${missing}' of plugin '${name}' is not registered`
      })
    })
  }
}

t.test('the app has every plugin under its own name; lag shedding off (MAX_EVENT_LOOP_DELAY_MS=0) samples nothing', async (t) => {
  const { app } = await build(t, { MAX_EVENT_LOOP_DELAY_MS: '0' })
  for (const name of Object.keys(plugins)) t.ok(app.hasPlugin(name), name)
  t.notOk(app.hasPlugin('@fastify/under-pressure'), 'under-pressure is not registered')
})

t.test('given no DATABASE_URL (outside production, the embedded database fills it in first), the app does not start', async (t) => {
  const app = Fastify({ logger: false })
  app.register(serviceApp, { config: loadConfig({ JWT_SECRET: TEST_SECRET }) })
  await t.rejects(async () => { await app.ready() }, { message: 'DATABASE_URL is required' })
})

/**
 * A migrated database of the test's own, and a session holding its migrations table in an open
 * transaction: every statement on it, the migrations' first, queues behind that lock until the
 * holder commits or the test ends.
 */
async function migrationsLocked (t: Test): Promise<{ database: { url: string }, holder: pg.Client }> {
  const database = await newDatabase({ migrated: true })
  t.teardown(database.drop)
  const holder = new pg.Client({ connectionString: database.url })
  await holder.connect()
  t.teardown(() => holder.end())
  await holder.query('BEGIN; LOCK TABLE migrations IN ACCESS EXCLUSIVE MODE')
  return { database, holder }
}

t.test('migrations waiting on a lock another session holds: the start fails after MIGRATIONS_CONNECTION_WAIT_MS, saying so; once released it starts', async (t) => {
  const { database, holder } = await migrationsLocked(t)
  const env = { DATABASE_URL: database.url, MIGRATIONS_CONNECTION_WAIT_MS: '300' }
  const outcome = await startOutcome(t, env)
  t.match(outcome, { message: /^the migrations waited longer than MIGRATIONS_CONNECTION_WAIT_MS for a lock another session holds \(canceling statement due to lock timeout\)$/ })
  t.ok(lockWaitExpired((outcome as Error).cause), 'the lock wait\'s own error kept as the cause')
  await holder.query('COMMIT')
  await t.resolves(build(t, env), 'starts once the lock is released')
})

/**
 * How a start ends: its error, or 'started', or 'still waiting after 10 s'. The 10 s timer ends with
 * the start: left running, it held the test's process 10 s after its last test.
 */
async function startOutcome (t: Test, env: Record<string, string>): Promise<unknown> {
  const settled = new AbortController()
  const started = build(t, env).then(() => 'started', (error: unknown) => error).finally(() => settled.abort())
  const waited = sleep(10_000, 'still waiting after 10 s', { signal: settled.signal }).catch(() => started)
  return await Promise.race([started, waited])
}

t.test('migrations failing for another reason than a lock wait: the start fails with their own error', async (t) => {
  const database = await newDatabase({ migrated: true })
  t.teardown(database.drop)
  const missing = Object.assign(new URL(database.url), { pathname: '/no_such_database' }).toString()
  const outcome = await startOutcome(t, { DATABASE_URL: database.url, MIGRATIONS_DATABASE_URL: missing })
  t.match(outcome, { code: '3D000', message: 'database "no_such_database" does not exist' })
})

t.test('a database migrated by a newer version (a migration this one has no file for): the start warns, naming it, and serves', async (t) => {
  const database = await newDatabase({ migrated: true })
  t.teardown(database.drop)
  const client = new pg.Client({ connectionString: database.url })
  await client.connect()
  await client.query("INSERT INTO migrations (id, name, hash) VALUES (9001, 'from_a_newer_version', 'x')")
  await client.end()
  const logs = captureLogs()
  const started = await build(t, { LOG_LEVEL: 'info' }, { database: { url: database.url, drop: async () => {} }, logs: logs.stream })
  const warned = logs.lines.filter((line) => line.level === 40 && /ahead of this version/.test(String(line.msg)))
  t.same(warned.map((line) => line.migrations), [['9001_from_a_newer_version']], 'one warning, naming the migration')
  t.equal((await started.request('/readyz')).status, 200, 'and it serves')
})

// Behind a transaction pooler nothing is sent with DATABASE_URL's connections (PgBouncer refuses
// startup parameters): migrations on it wait as long as the role or database says; on a direct
// MIGRATIONS_DATABASE_URL they still get MIGRATIONS_CONNECTION_WAIT_MS. Direct connections here,
// told apart by their URLs, so that a lock_timeout sent shows as a wait of its length.
t.test('DATABASE_POOLER=transaction: lock_timeout is sent to MIGRATIONS_DATABASE_URL only, not to DATABASE_URL', async (t) => {
  const { database } = await migrationsLocked(t)
  const lockWaited = { message: /^the migrations waited longer than MIGRATIONS_CONNECTION_WAIT_MS for a lock another session holds/ }
  const direct = Object.assign(new URL(database.url), { search: '?application_name=migrations' }).toString()
  const ownUrl = await startOutcome(t, { DATABASE_URL: database.url, DATABASE_POOLER: 'transaction', MIGRATIONS_DATABASE_URL: direct, MIGRATIONS_CONNECTION_WAIT_MS: '300' })
  t.match(ownUrl, lockWaited, 'a MIGRATIONS_DATABASE_URL of its own: MIGRATIONS_CONNECTION_WAIT_MS bounds the wait')
  // The database's lock_timeout is the one that applies on DATABASE_URL: MIGRATIONS_CONNECTION_WAIT_MS
  // sent there would be a wait of a minute.
  const admin = new pg.Client({ connectionString: database.url })
  await admin.connect()
  await admin.query("DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET lock_timeout = %L', current_database(), '300ms'); END $$")
  await admin.end()
  const sameUrl = await startOutcome(t, { DATABASE_URL: database.url, DATABASE_POOLER: 'transaction', MIGRATIONS_CONNECTION_WAIT_MS: '60000' })
  t.match(sameUrl, lockWaited, 'on DATABASE_URL: the database\'s lock_timeout, nothing sent')
})
