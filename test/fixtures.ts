// Seed documents shared by the route tests.
import type { SeedData } from '../db/seed.js'

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

export const ordersPath = (client = 'app-a', resource = 'orders-api') =>
  `/resources/${encodeURIComponent(resource)}/authorized_clients/${encodeURIComponent(client)}/permissions`
