// Each plugin is registered under its own name and declares the plugins it needs: registered
// without one of them, the boot fails at once naming it (Fastify's dependency check), instead of
// failing later on a decorator that is not there.
import { setTimeout as sleep } from 'node:timers/promises'
import Fastify, { type FastifyPluginAsync } from 'fastify'
import fp from 'fastify-plugin'
import pg from 'pg'
import t from 'tap'
import auth from '../../plugins/auth/index.js'
import db from '../../plugins/db.js'
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

t.test('migrations waiting on a lock another session holds: the start fails after MIGRATIONS_CONNECTION_WAIT_MS, saying so; once released it starts', async (t) => {
  const database = await newDatabase({ migrated: true })
  t.teardown(database.drop)
  const holder = new pg.Client({ connectionString: database.url })
  await holder.connect()
  t.teardown(() => holder.end())
  // An open transaction holding a table the migrations read: every statement on it queues behind them.
  await holder.query('BEGIN; LOCK TABLE migrations IN ACCESS EXCLUSIVE MODE')
  const env = { DATABASE_URL: database.url, MIGRATIONS_CONNECTION_WAIT_MS: '300' }
  const started = build(t, env).then(() => 'started', (error: Error) => error.message)
  const outcome = await Promise.race([started, sleep(10_000, 'still waiting after 10 s')])
  t.match(outcome, /^the migrations waited longer than MIGRATIONS_CONNECTION_WAIT_MS for a lock another session holds \(canceling statement due to lock timeout\)$/)
  await holder.query('COMMIT')
  await t.resolves(build(t, env), 'starts once the lock is released')
})
