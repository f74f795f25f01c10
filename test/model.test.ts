// Model-based tests (fast-check commands): random sequences of list and unauthorize calls (valid,
// invalid, repeated, concurrent pairs) run against the service and against a plain in-memory model
// of the grants. After every step the service's pages, X-Total-Count and Link match the model
// exactly, and the database holds exactly the model's grants, within its invariants.
import fc from 'fast-check'
import t from 'tap'
import { compareListed as compare, ordersFixture, ordersPath, type ListedPermission as Permission, type SortKey } from './fixtures.js'
import { build } from './helper.js'
import { deleteToken, readToken } from './tokens.js'

const seed = Number(process.env.FUZZ_SEED ?? Date.now() % 2 ** 31)
t.comment(`fast-check seed ${seed} (replay with FUZZ_SEED=${seed})`)

interface Model { grants: Map<string, Set<string>> }
interface Real { harness: Awaited<ReturnType<typeof build>> }

const fixture = ordersFixture()
const permissions = new Map<string, Permission>(fixture.permissions!
  .filter(({ resource_id: resource }) => resource === 'orders-api')
  .map(({ id, name, description }) => [id, description === undefined ? { id, name } : { id, name, description }]))
const clients = ['app-a', 'app-b', 'app-c'] // app-c is not authorized on orders-api
const read = readToken()
const remove = deleteToken()

function initialModel (): Model {
  const grants = new Map<string, Set<string>>()
  for (const { resource_id: resource, client_id: client, permission_ids: ids } of fixture.authorizations!) {
    if (resource === 'orders-api') grants.set(client, new Set(ids))
  }
  return { grants }
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
  }

  toString () { return `list(${this.client}, limit=${this.limit}, page=${this.page}, ${sortByText(this.keys)})` }
}

/** The answer the model expects for an unauthorize, and the model after it. */
function unauthorizeInModel (model: Model, client: string, ids: string[]): number {
  const granted = model.grants.get(client)
  if (!granted) return 404
  if (ids.some((id) => !permissions.has(id))) return 422
  for (const id of ids) granted.delete(id)
  return 204
}

class UnauthorizeCommand implements fc.AsyncCommand<Model, Real> {
  constructor (readonly client: string, readonly ids: string[]) {}
  check () { return true }
  async run (model: Model, { harness }: Real) {
    const res = await harness.request(ordersPath(this.client), { method: 'DELETE', token: remove, json: this.ids })
    const expected = unauthorizeInModel(model, this.client, this.ids)
    if (res.status !== expected) throw new Error(`expected ${expected}, got ${res.status} ${res.text}`)
    await assertDatabaseMatches(model, harness)
  }

  toString () { return `unauthorize(${this.client}, ${JSON.stringify(this.ids)})` }
}

class ConcurrentUnauthorizeCommand implements fc.AsyncCommand<Model, Real> {
  constructor (readonly client: string, readonly first: string[], readonly second: string[]) {}
  check () { return true }
  async run (model: Model, { harness }: Real) {
    const [a, b] = await Promise.all([this.first, this.second].map((ids) =>
      harness.request(ordersPath(this.client), { method: 'DELETE', token: remove, json: ids })))
    // Either order gives the same answers: each request is judged on ids, not on grants.
    const expected = [unauthorizeInModel(model, this.client, this.first), unauthorizeInModel(model, this.client, this.second)]
    if (a.status !== expected[0] || b.status !== expected[1]) throw new Error(`expected ${expected}, got ${[a.status, b.status]}`)
    await assertDatabaseMatches(model, harness)
  }

  toString () { return `concurrently(${this.client}, ${JSON.stringify(this.first)}, ${JSON.stringify(this.second)})` }
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
}

const clientArb = fc.constantFrom(...clients, 'app-a', 'app-a') // app-a, holding grants, most often
const idArb = fc.oneof({ weight: 8, arbitrary: fc.constantFrom(...permissions.keys()) }, { weight: 1, arbitrary: fc.constantFrom('p_typo', 'p_other', 'missing') })
const idsArb = fc.array(idArb, { minLength: 1, maxLength: 6 })
const sortKeyArb = fc.tuple(fc.constantFrom<keyof Permission>('id', 'name', 'description'), fc.constantFrom<'asc' | 'desc'>('asc', 'desc'))
const commands = [
  fc.tuple(clientArb, fc.integer({ min: 1, max: 12 }), fc.integer({ min: 0, max: 6 }), fc.array(sortKeyArb, { minLength: 1, maxLength: 3 }))
    .map(([client, limit, page, keys]) => new ListCommand(client, limit, page, keys)),
  fc.tuple(clientArb, idsArb).map(([client, ids]) => new UnauthorizeCommand(client, ids)),
  fc.tuple(clientArb, idsArb, idsArb).map(([client, first, second]) => new ConcurrentUnauthorizeCommand(client, first, second))
]

const harness = await build(t)

t.test('random sequences of list and unauthorize calls agree with the model after every step', async (t) => {
  let runs = 0
  await fc.assert(fc.asyncProperty(fc.commands(commands, { maxCommands: 25 }), async (sequence) => {
    runs++
    await harness.db.query('TRUNCATE resources, clients CASCADE')
    await harness.seed(fixture)
    await fc.asyncModelRun(() => ({ model: initialModel(), real: { harness } }), sequence)
  }), { seed, numRuns: 60 })
  t.equal(runs, 60, 'sequences run')
})
