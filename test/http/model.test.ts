// Model-based tests (fast-check commands): random sequences of list, unauthorize and grant calls
// (valid, invalid, repeated, conditional on a current or a stale ETag, concurrent pairs) run against
// the service and against a plain in-memory model of the grants and their history. After every step
// the service's pages, X-Total-Count, Link and ETag match the model exactly, and the database holds
// exactly the model's grants, within its invariants, and exactly the model's change history.
import fc from 'fast-check'
import pg from 'pg'
import t from 'tap'
import { compareListed as compare, fastCheckSeed, ordersFixture, ordersPath, type ListedPermission as Permission, type SortKey } from '../support/fixtures.js'
import { build } from '../support/harness.js'
import { postgresServerBin, replicatedPostgres } from '../support/replication.js'
import { readToken, token } from '../support/tokens.js'

const seed = fastCheckSeed(t)

interface Change { client_id: string, action: 'granted' | 'unauthorized', permission_ids: string[] }
interface Model {
  grants: Map<string, Set<string>>
  history: Change[]
  /** How many times each client's grants changed: its ETag must change exactly as often. */
  versions: Map<string, number>
  /** The ETag last listed for each client, at the model version it was listed at. */
  seen: Map<string, { etag: string, version: number }>
}
interface Real { harness: Awaited<ReturnType<typeof build>> }

const fixture = ordersFixture()
const permissions = new Map<string, Permission>(fixture.permissions!
  .filter(({ resource_id: resource }) => resource === 'orders-api')
  .map(({ id, name, description }) => [id, description === undefined ? { id, name } : { id, name, description }]))
const clients = ['app-a', 'app-b', 'app-c'] // app-c is not authorized on orders-api
const read = readToken()
const write = token({ scope: 'delete:resource create:resource' }, { expiresIn: 3600 })

function initialModel (): Model {
  const grants = new Map<string, Set<string>>()
  for (const { resource_id: resource, client_id: client, permission_ids: ids } of fixture.authorizations!) {
    if (resource === 'orders-api') grants.set(client, new Set(ids))
  }
  return { grants, history: [], versions: new Map(), seen: new Map() }
}

/** A change of the model's grants: its version moves on, and the history gains the change. */
function recordInModel (model: Model, client: string, action: Change['action'], ids: string[]) {
  if (ids.length === 0) return
  model.history.push({ client_id: client, action, permission_ids: ids })
  model.versions.set(client, (model.versions.get(client) ?? 0) + 1)
}

const sortByText = (keys: SortKey[]) => keys.map(([property, direction]) => `${property}.${direction}`).join(',')

class ListCommand implements fc.AsyncCommand<Model, Real> {
  constructor (readonly client: string, readonly limit: number, readonly page: number, readonly keys: SortKey[]) {}
  check () { return true }
  async run (model: Model, { harness }: Real) {
    const sortBy = sortByText(this.keys)
    const res = await harness.request(`${ordersPath(this.client)}?limit=${this.limit}&offset=${this.page}&sort_by=${sortBy}`, { token: read })
    const granted = model.grants.get(this.client)
    if (!granted) {
      if (res.status !== 404) throw new Error(`expected 404 for ${this.client}, got ${res.status}`)
      return
    }
    // A repeated property keeps its first direction, as documented.
    const seen = new Set<string>()
    const keys = this.keys.filter(([property]) => !seen.has(property) && seen.add(property))
    const all = [...granted].map((id) => permissions.get(id)!).sort((a, b) => compare(a, b, keys))
    const expected = all.slice(this.limit * this.page, this.limit * (this.page + 1))
    if (res.status !== 200) throw new Error(`expected 200, got ${res.status} ${res.text}`)
    if (JSON.stringify(res.body) !== JSON.stringify(expected)) {
      throw new Error(`page differs:\n service ${JSON.stringify(res.body)}\n model   ${JSON.stringify(expected)}`)
    }
    if (res.headers.get('x-total-count') !== String(all.length)) throw new Error(`X-Total-Count ${res.headers.get('x-total-count')} ≠ ${all.length}`)
    const last = Math.max(0, Math.ceil(all.length / this.limit) - 1)
    const rels: Record<string, number> = { first: 0, last }
    if (this.page > 0) rels.prev = Math.min(this.page - 1, last)
    if (this.page < last) rels.next = this.page + 1
    const links = Object.fromEntries((res.headers.get('link') ?? '').split(', ').map((part) => {
      const [, url, rel] = /^<([^>]+)>; rel="(\w+)"$/.exec(part)!
      return [rel, new URL(url)]
    }))
    for (const [rel, page] of Object.entries(rels)) {
      const link = links[rel]
      if (!link || link.searchParams.get('offset') !== String(page) || link.searchParams.get('limit') !== String(this.limit) ||
        link.searchParams.get('sort_by') !== sortBy) {
        throw new Error(`Link ${rel} should be page ${page}: ${res.headers.get('link')}`)
      }
    }
    if (Object.keys(links).length !== Object.keys(rels).length) throw new Error(`unexpected links: ${res.headers.get('link')}`)
    // The ETag changes exactly when the model's grants of this client changed.
    const etag = res.headers.get('etag')!
    const version = model.versions.get(this.client) ?? 0
    const listed = model.seen.get(this.client)
    if (listed && (listed.version === version) !== (listed.etag === etag)) {
      throw new Error(`ETag ${listed.etag} → ${etag} while the model went from version ${listed.version} to ${version}`)
    }
    model.seen.set(this.client, { etag, version })
  }

  toString () { return `list(${this.client}, limit=${this.limit}, page=${this.page}, ${sortByText(this.keys)})` }
}

type Method = 'DELETE' | 'POST'
type Condition = 'none' | 'current' | 'stale'

/** The answer the model expects for a change, and the model after it (grants and history). */
function changeInModel (model: Model, method: Method, client: string, ids: string[], condition: Condition): number {
  const granted = model.grants.get(client)
  if (!granted) return 404
  if (condition === 'stale') return 412
  if (ids.some((id) => !permissions.has(id))) return 422
  const changed = [...new Set(ids)].filter((id) => method === 'DELETE' ? granted.has(id) : !granted.has(id))
  for (const id of changed) method === 'DELETE' ? granted.delete(id) : granted.add(id)
  recordInModel(model, client, method === 'DELETE' ? 'unauthorized' : 'granted', changed)
  return 204
}

/** A DELETE or POST, with If-Match naming the ETag just read, one that was never current, or none. */
async function send (harness: Real['harness'], method: Method, client: string, ids: string[], condition: Condition) {
  const headers: Record<string, string> = {}
  if (condition === 'stale') headers['if-match'] = '"0"'
  if (condition === 'current') {
    const current = (await harness.request(ordersPath(client), { token: read })).headers.get('etag')
    headers['if-match'] = current ?? '*'
  }
  return harness.request(ordersPath(client), { method, token: write, json: ids, headers })
}

class ChangeCommand implements fc.AsyncCommand<Model, Real> {
  constructor (readonly method: Method, readonly client: string, readonly ids: string[], readonly condition: Condition) {}
  check () { return true }
  async run (model: Model, { harness }: Real) {
    const res = await send(harness, this.method, this.client, this.ids, this.condition)
    const expected = changeInModel(model, this.method, this.client, this.ids, this.condition)
    if (res.status !== expected) throw new Error(`expected ${expected}, got ${res.status} ${res.text}`)
    await assertDatabaseMatches(model, harness)
  }

  toString () { return `${this.method}(${this.client}, ${JSON.stringify(this.ids)}, if-match ${this.condition})` }
}

class ConcurrentUnauthorizeCommand implements fc.AsyncCommand<Model, Real> {
  constructor (readonly client: string, readonly first: string[], readonly second: string[]) {}
  check () { return true }
  async run (model: Model, { harness }: Real) {
    const [a, b] = await Promise.all([this.first, this.second].map((ids) =>
      harness.request(ordersPath(this.client), { method: 'DELETE', token: write, json: ids })))
    // Either order gives the same answers and grants: each request is judged on ids, not on grants.
    const before = model.history.length
    const expected = [this.first, this.second].map((ids) => changeInModel(model, 'DELETE', this.client, ids, 'none'))
    if (a.status !== expected[0] || b.status !== expected[1]) throw new Error(`expected ${expected}, got ${[a.status, b.status]}`)
    // The model recorded the first request's change, then the second's. The service may have run
    // them the other way round, which moves the ids both named from one change to the other: the
    // same ids removed, by unauthorize changes of this client, is what both orders share.
    // (One change or two: the ids both named go to whichever ran first.)
    const recorded = await historyOf(harness)
    const idsOf = (changes: Change[]) => changes.flatMap((change) => change.permission_ids).sort().join()
    const sameBefore = JSON.stringify(recorded.slice(0, before)) === JSON.stringify(model.history.slice(0, before))
    const tail = recorded.slice(before)
    const fromOneRequest = (change: Change) => [this.first, this.second].some((ids) => change.permission_ids.every((id) => ids.includes(id)))
    if (sameBefore && tail.length <= 2 && idsOf(tail) === idsOf(model.history.slice(before)) &&
      tail.every((change) => change.client_id === this.client && change.action === 'unauthorized' && fromOneRequest(change))) {
      model.history = recorded
    }
    await assertDatabaseMatches(model, harness)
  }

  toString () { return `concurrently(${this.client}, ${JSON.stringify(this.first)}, ${JSON.stringify(this.second)})` }
}

// The history is append-only (migration 0006) and outlives the TRUNCATE between runs: a run's own
// changes are those after the last id recorded when it started.
let runStartsAfter = '0'

async function historyOf (harness: Real['harness']): Promise<Change[]> {
  const { rows } = await harness.db.query<Change>(
    "SELECT client_id, action, permission_ids FROM permission_changes WHERE resource_id = 'orders-api' AND id > $1 ORDER BY id", [runStartsAfter])
  return rows
}

async function assertDatabaseMatches (model: Model, harness: Real['harness']) {
  const { rows } = await harness.db.query<{ client_id: string, ids: string[] }>(`
    SELECT a.client_id, coalesce(array_agg(g.permission_id ORDER BY g.permission_id) FILTER (WHERE g.permission_id IS NOT NULL), '{}') AS ids
    FROM authorizations a LEFT JOIN grants g USING (resource_id, client_id)
    WHERE a.resource_id = 'orders-api' GROUP BY a.client_id ORDER BY a.client_id`)
  const expected = [...model.grants].sort(([a], [b]) => (a < b ? -1 : 1)).map(([client, ids]) => ({ client_id: client, ids: [...ids].sort() }))
  if (JSON.stringify(rows) !== JSON.stringify(expected)) throw new Error(`database ${JSON.stringify(rows)} ≠ model ${JSON.stringify(expected)}`)
  const { rows: [broken] } = await harness.db.query(`
    SELECT count(*)::int AS n FROM grants g
    LEFT JOIN authorizations a USING (resource_id, client_id)
    LEFT JOIN permissions p ON p.id = g.permission_id AND p.resource_id = g.resource_id
    WHERE a.client_id IS NULL OR p.id IS NULL`)
  if (broken.n !== 0) throw new Error(`${broken.n} grants break the invariants`)
  const history = await historyOf(harness)
  if (JSON.stringify(history) !== JSON.stringify(model.history)) {
    throw new Error(`history ${JSON.stringify(history)} ≠ model ${JSON.stringify(model.history)}`)
  }
}

const clientArb = fc.constantFrom(...clients, 'app-a', 'app-a') // app-a, holding grants, most often
const idArb = fc.oneof({ weight: 8, arbitrary: fc.constantFrom(...permissions.keys()) }, { weight: 1, arbitrary: fc.constantFrom('p_typo', 'p_other', 'missing') })
const idsArb = fc.array(idArb, { minLength: 1, maxLength: 6 })
const sortKeyArb = fc.tuple(fc.constantFrom<keyof Permission>('id', 'name', 'description'), fc.constantFrom<'asc' | 'desc'>('asc', 'desc'))
const commands = [
  fc.tuple(clientArb, fc.integer({ min: 1, max: 12 }), fc.integer({ min: 0, max: 6 }), fc.array(sortKeyArb, { minLength: 1, maxLength: 3 }))
    .map(([client, limit, page, keys]) => new ListCommand(client, limit, page, keys)),
  fc.tuple(fc.constantFrom<Method>('DELETE', 'POST'), clientArb, idsArb, fc.constantFrom<Condition>('none', 'none', 'current', 'stale'))
    .map(([method, client, ids, condition]) => new ChangeCommand(method, client, ids, condition)),
  fc.tuple(clientArb, idsArb, idsArb).map(([client, first, second]) => new ConcurrentUnauthorizeCommand(client, first, second))
]

/** Random sequences against `harness`, each from the fixture, checked against the model after every step. */
async function modelRuns (harness: Real['harness'], numRuns: number, seeded = async () => {}): Promise<number> {
  let runs = 0
  await fc.assert(fc.asyncProperty(fc.commands(commands, { maxCommands: 25 }), async (sequence) => {
    runs++
    await harness.db.query('TRUNCATE resources, clients CASCADE')
    runStartsAfter = (await harness.db.query('SELECT coalesce(max(id), 0)::text AS id FROM permission_changes')).rows[0].id
    await harness.seed(fixture)
    await seeded()
    await fc.asyncModelRun(() => ({ model: initialModel(), real: { harness } }), sequence)
  }), { seed, numRuns })
  return runs
}

t.test('random sequences of list, unauthorize and grant calls agree with the model after every step', async (t) => {
  t.equal(await modelRuns(await build(t), 60), 60, 'sequences run')
})

// Reads answered by a replica whenever it has replayed the caller's latest Consistency-Token, by
// the primary otherwise: a caller passing on its tokens sees exactly what the model says, never an
// older state (test/system/replicas.test.ts covers lag, faults and callers without tokens).
t.test('the same against a primary with a streaming replica, the caller passing on each Consistency-Token', async (t) => {
  if (!postgresServerBin()) {
    if (process.env.CI) throw new Error('Debian\'s PostgreSQL server is not installed, and CI must run the model against a replica')
    t.comment('Debian\'s PostgreSQL server is not installed (apt-get install postgresql): the replica run is skipped')
    return
  }
  const cluster = await replicatedPostgres(t)
  const name = 'model'
  const admin = new pg.Pool({ connectionString: cluster.primaryUrl, max: 1 })
  await admin.query(`CREATE DATABASE ${name}`)
  await admin.end()
  const on = (url: string) => Object.assign(new URL(url), { pathname: `/${name}` }).toString()
  const replicated = await build(t, { DATABASE_REPLICA_URLS: on(cluster.replicaUrl), DATABASE_REPLICA_PROBE_INTERVAL_MS: '50' }, {
    database: { url: on(cluster.primaryUrl), drop: async () => {} },
    passConsistencyTokens: true
  })
  // The fixture is written beside the API, so no token of the caller's covers it: each run starts
  // once the replica shows it, as a caller handed the seed's position would.
  t.equal(await modelRuns(replicated, 15, () => cluster.waitForReplay()), 15, 'sequences run')
  const metrics = await (await fetch(`${replicated.baseUrl}/metrics`)).text()
  t.match(metrics, /db_reads_total\{target="replica-1"\} [1-9]/, 'the replica answered some of the reads')
})
