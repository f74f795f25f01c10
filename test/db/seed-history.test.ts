// The demo data and the change history agree: `npm start` seeds db/demo-data.json at every start
// with recordAs (src/server.ts), so a grant the seeding gives back is in the history as granted by
// "demo-seed". Seeding without it (db:seed, the tests' fixtures) records nothing.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import t from 'tap'
import { DEMO_SEED_ACTOR, seedDatabase, type SeedData } from '../../db/seed.js'
import { projectRoot } from '../../src/project-root.js'
import { build } from '../support/harness.js'
import { readToken, token } from '../support/tokens.js'

const demo = (): Required<SeedData> => JSON.parse(readFileSync(join(projectRoot, 'db', 'demo-data.json'), 'utf8'))
const start = (n: number) => ({ recordAs: { sub: DEMO_SEED_ACTOR, requestId: `${DEMO_SEED_ACTOR}-start-${n}` } })

interface Recorded { resource_id: string, client_id: string, action: string, permission_ids: string[], actor_sub: string | null, actor_client_id: string | null, request_id: string }

async function recorded (db: pg.Pool): Promise<Recorded[]> {
  const { rows } = await db.query<Recorded>(`
    SELECT resource_id, client_id, action, permission_ids, actor_sub, actor_client_id, request_id
    FROM permission_changes ORDER BY id`)
  return rows
}

t.test('the first start records each grant of the demo data as granted by demo-seed, in the file\'s order; the next start, with nothing to give back, records nothing', async (t) => {
  const { db } = await build(t)
  const data = demo()
  await seedDatabase(db, data, start(1))
  const expected = data.authorizations.filter(({ permission_ids: ids = [] }) => ids.length > 0).map(({ resource_id: resourceId, client_id: clientId, permission_ids: ids }) => ({
    resource_id: resourceId, client_id: clientId, action: 'granted', permission_ids: ids, actor_sub: 'demo-seed', actor_client_id: null, request_id: 'demo-seed-start-1'
  }))
  t.ok(expected.length >= 2, `${expected.length} authorizations with grants`)
  t.same(await recorded(db), expected)
  await seedDatabase(db, data, start(2))
  t.same(await recorded(db), expected, 'nothing new')
})

t.test('a grant unauthorized, then a restart → granted again, and the history\'s newest entry says so: demo-seed, that start\'s request id, that id only', async (t) => {
  const harness = await build(t)
  await seedDatabase(harness.db, demo(), start(1))
  const path = '/resources/orders-api/authorized_clients/billing-app/permissions'
  const removed = await harness.request(path, { method: 'DELETE', token: token({ scope: 'delete:resource', sub: 'local-developer' }), json: ['perm_read_orders'] })
  t.equal(removed.status, 204)
  await seedDatabase(harness.db, demo(), start(2))

  const listed = await harness.request(path + '?limit=100', { token: readToken() })
  t.ok((listed.body as Array<{ id: string }>).some(({ id }) => id === 'perm_read_orders'), 'granted again')
  const history = await harness.request(path.replace(/permissions$/, 'permission_changes'), { token: readToken() })
  t.equal(history.status, 200)
  t.match(history.body, [
    { action: 'granted', permission_ids: ['perm_read_orders'], actor: { sub: 'demo-seed' }, request_id: 'demo-seed-start-2' },
    { action: 'unauthorized', permission_ids: ['perm_read_orders'], actor: { sub: 'local-developer' } },
    { action: 'granted', actor: { sub: 'demo-seed' }, request_id: 'demo-seed-start-1' }
  ])
  t.equal((history.body as unknown[]).length, 3)
})

t.test('seeding without recordAs (db:seed, the tests\' fixtures) grants the same and records nothing', async (t) => {
  const { db } = await build(t)
  const counts = await seedDatabase(db, demo())
  t.ok(counts.grants > 0, `${counts.grants} grants`)
  t.same(await recorded(db), [])
})

t.test('more than 500 grants given at once → rows of at most 500 ids (the history\'s bound), in the document\'s order, each id once', async (t) => {
  const { db } = await build(t)
  const ids = Array.from({ length: 1201 }, (_, i) => `p_${String(1200 - i).padStart(4, '0')}`)
  const data: SeedData = {
    resources: [{ id: 'big-api' }],
    clients: [{ id: 'big-app' }],
    permissions: ids.map((id) => ({ id, resource_id: 'big-api', name: `read:${id}` })),
    authorizations: [{ resource_id: 'big-api', client_id: 'big-app', permission_ids: [...ids.slice(0, 3), ...ids] }]
  }
  const { grants } = await seedDatabase(db, data, start(1))
  t.equal(grants, 1201)
  const rows = await recorded(db)
  t.same(rows.map((row) => row.permission_ids.length), [500, 500, 201])
  t.same(rows.flatMap((row) => row.permission_ids), ids, 'every id once, in order')
})

t.test('a change in flight when the seeding starts: the seeding waits for it, and the history has the change first, then the grant given back', async (t) => {
  const { db } = await build(t)
  await seedDatabase(db, demo(), start(1))
  // A DELETE as the service makes it (db/queries/change.ts): the authorization's advisory lock
  // first, then the change and its record, in one transaction.
  const change = await db.connect()
  t.teardown(() => change.release())
  await change.query("BEGIN; SELECT pg_advisory_xact_lock(hashtext('orders-api'), hashtext('billing-app'))")
  const seeding = seedDatabase(db, demo(), start(2))
  // The seeding is waiting for that lock, before it has written anything.
  let waiting = false
  for (let waited = 0; waited < 10_000 && !waiting; waited += 50) {
    const { rows: [{ count }] } = await db.query<{ count: number }>(
      "SELECT count(*)::int AS count FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")
    waiting = count > 0
    if (!waiting) await sleep(50)
  }
  t.ok(waiting, 'the seeding waits for the change\'s lock')
  await change.query(`
    WITH removed AS (DELETE FROM grants WHERE resource_id = 'orders-api' AND client_id = 'billing-app' AND permission_id = 'perm_read_orders' RETURNING permission_id)
    INSERT INTO permission_changes (resource_id, client_id, action, permission_ids, actor_sub, request_id)
    SELECT 'orders-api', 'billing-app', 'unauthorized', array_agg(permission_id), 'local-developer', 'in-flight' FROM removed`)
  await change.query('COMMIT')
  await seeding
  const rows = (await recorded(db)).filter(({ request_id: id }) => id !== 'demo-seed-start-1')
  t.same(rows.map(({ action, permission_ids: ids, request_id: requestId }) => [action, ids, requestId]), [
    ['unauthorized', ['perm_read_orders'], 'in-flight'],
    ['granted', ['perm_read_orders'], 'demo-seed-start-2']
  ], 'in the order they were applied (ids, and so the history and the feed)')
})
