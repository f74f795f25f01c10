// Seed documents shared by the tests.
import type { Queryable } from '../../db/queries/statement.js'
import type { SeedData } from '../../db/seed.js'

/** orders-api with 12 permissions; app-a holds 10 of them, app-b is authorized with none. */
export function ordersFixture (): SeedData {
  const nouns = ['orders', 'invoices', 'refunds']
  const verbs = ['read', 'create', 'update', 'delete']
  const permissions = nouns.flatMap((noun) => verbs.map((verb) => ({
    id: `p_${verb}_${noun}`,
    resource_id: 'orders-api',
    name: `${verb}:${noun}`,
    ...(verb === 'delete' ? {} : { description: `${verb} ${noun}` })
  })))
  return {
    resources: [{ id: 'orders-api' }, { id: 'other-api' }],
    clients: [{ id: 'app-a' }, { id: 'app-b' }, { id: 'app-c' }],
    permissions: [...permissions, { id: 'p_other', resource_id: 'other-api', name: 'read:other' }],
    authorizations: [
      { resource_id: 'orders-api', client_id: 'app-a', permission_ids: permissions.slice(0, 10).map(({ id }) => id) },
      { resource_id: 'orders-api', client_id: 'app-b', permission_ids: [] },
      { resource_id: 'other-api', client_id: 'app-a', permission_ids: ['p_other'] }
    ]
  }
}

/**
 * shelf-api with 40 permissions whose ids, names and descriptions each sort differently: every
 * fourth has no description, the others share eight texts (the empty one included, and U+1F600
 * with U+FFFF, which byte and UTF-16 order put the other way round), so every description order
 * has ties for its second key to break. shelf-app holds 37 of them.
 */
export function shelfFixture (): SeedData {
  // U+1F600 is after U+FFFF in byte (UTF-8) order, the service's, and before it in UTF-16 order, JavaScript's.
  const texts = ['beta', '', 'Beta', 'é', 'alpha', 'beta ', '\u{1F600}', '\uFFFF']
  const permissions = Array.from({ length: 40 }, (_, i) => ({
    id: `s_${String(i).padStart(2, '0')}`,
    resource_id: 'shelf-api',
    // 17 is prime to 40: a permutation of the ids' order.
    name: `n${String((i * 17) % 40).padStart(2, '0')}:shelf`,
    ...(i % 4 === 0 ? {} : { description: texts[(i * 7) % texts.length] })
  }))
  const held = permissions.filter((_, i) => ![5, 22, 39].includes(i))
  return {
    resources: [{ id: 'shelf-api' }],
    clients: [{ id: 'shelf-app' }],
    permissions,
    authorizations: [{ resource_id: 'shelf-api', client_id: 'shelf-app', permission_ids: held.map(({ id }) => id) }]
  }
}

/**
 * The seeding tests' document: two resources (one with a description-less permission), two clients,
 * three authorizations (one with no grants); a fresh copy each call.
 */
export function seedingFixture (): SeedData {
  return {
    resources: [{ id: 'orders-api', name: 'Orders API' }, { id: 'reports-api' }],
    clients: [{ id: 'billing-app', name: 'Billing' }, { id: 'warehouse-app' }],
    permissions: [
      { id: 'p_read_orders', resource_id: 'orders-api', name: 'read:orders', description: 'Read orders' },
      { id: 'p_create_orders', resource_id: 'orders-api', name: 'create:orders' },
      { id: 'p_read_reports', resource_id: 'reports-api', name: 'read:reports' }
    ],
    authorizations: [
      { resource_id: 'orders-api', client_id: 'billing-app', permission_ids: ['p_read_orders', 'p_create_orders'] },
      { resource_id: 'reports-api', client_id: 'billing-app', permission_ids: ['p_read_reports'] },
      { resource_id: 'orders-api', client_id: 'warehouse-app' }
    ]
  }
}

export const ordersPath = (client = 'app-a', resource = 'orders-api') =>
  `/resources/${encodeURIComponent(resource)}/authorized_clients/${encodeURIComponent(client)}/permissions`

/** The change history of a client's grants on a resource. */
/**
 * Path ids at, above and below their bounds (1 to 255 characters): [resource, client, status, and
 * the problem type of a 404 or the pointer of a 400's error].
 */
export const pathIdBounds: ReadonlyArray<[string, string, number, string]> = [
  ['r'.repeat(255), 'app-a', 404, '/problems/resource-not-found'],
  ['orders-api', 'c'.repeat(255), 404, '/problems/client-not-found'],
  ['r'.repeat(256), 'app-a', 400, '/resource_id'],
  ['orders-api', 'c'.repeat(256), 400, '/client_id'],
  ['', 'app-a', 400, '/resource_id'],
  ['orders-api', '', 400, '/client_id']
]

export const historyPath = (client = 'app-a', resource = 'orders-api') =>
  `/resources/${encodeURIComponent(resource)}/authorized_clients/${encodeURIComponent(client)}/permission_changes`

export interface ListedPermission { id: string, name: string, description?: string }
export type SortKey = [keyof ListedPermission, 'asc' | 'desc']

/**
 * The documented order, as a comparator: each key in turn (missing descriptions last ascending,
 * first descending), then id; text in byte order. Keys are taken as given: drop repeats first.
 */
export function compareListed (a: ListedPermission, b: ListedPermission, keys: SortKey[]): number {
  for (const [property, direction] of [...keys, ['id', 'asc'] as SortKey]) {
    const x = a[property]
    const y = b[property]
    if (x === y) continue
    // Byte order of UTF-8, as the "C" collation orders (db/migrations/0001): JavaScript's < compares
    // UTF-16 code units, which put U+10000 and above (surrogates) before U+E000-U+FFFF.
    const ascending = x === undefined ? 1 : y === undefined ? -1 : Buffer.compare(Buffer.from(x), Buffer.from(y))
    return direction === 'asc' ? ascending : -ascending
  }
  return 0
}

// CI (and `npm run mutation`) run the property-based suites with a pinned seed, so a red run is the
// code's doing and replays exactly; elsewhere each run explores a new one. FUZZ_SEED chooses: a
// number, "pinned" or "random".
const PINNED_SEED = 20261124

/** The fast-check seed of this run, printed so any run can be replayed with FUZZ_SEED. */
export function fastCheckSeed (t: { comment: (message: string) => void }): number {
  const chosen = process.env.FUZZ_SEED ?? (process.env.CI ? 'pinned' : 'random')
  const seed = chosen === 'pinned' ? PINNED_SEED : chosen === 'random' ? Date.now() % 2 ** 31 : Number(chosen)
  t.comment(`fast-check seed ${seed} (replay with FUZZ_SEED=${seed})`)
  return seed
}

/**
 * A client authorized on a resource with one permission, whose grant is within every bound of the
 * contract and over a grant's index entry (about 2.7 kB): 255 characters of four bytes each (which
 * compression cannot shrink) in the resource, client and permission ids.
 */
export async function tooLargeToGrant (db: Queryable): Promise<{ resource: string, client: string, permission: string }> {
  const long = (first: number) => Array.from({ length: 255 }, (_, i) => String.fromCodePoint(0x20000 + ((first * 7919 + i * 104729) % 0xa6d0))).join('')
  const [resource, client, permission] = [long(1), long(2), long(3)]
  await db.query('INSERT INTO resources (id) VALUES ($1)', [resource])
  await db.query('INSERT INTO clients (id) VALUES ($1)', [client])
  await db.query('INSERT INTO permissions (resource_id, id, name) VALUES ($1, $2, \'read:new\')', [resource, permission])
  await db.query('INSERT INTO authorizations (resource_id, client_id) VALUES ($1, $2)', [resource, client])
  return { resource, client, permission }
}
