// A change whose COMMIT goes unanswered past DATABASE_QUERY_TIMEOUT_MS is answered 503
// database-unavailable, but the server may still receive and apply the COMMIT: the caller cannot be
// told that nothing changed. A proxy between the service and PostgreSQL holds the COMMIT back,
// as a network that delays a packet does.
import { createServer, connect, type Socket } from 'node:net'
import t from 'tap'
import { newDatabase } from '../support/database.js'
import { ordersFixture, ordersPath } from '../support/fixtures.js'
import { build } from '../support/harness.js'
import { deleteToken } from '../support/tokens.js'
import { until } from '../support/waiting.js'

// Roomy: the DELETE itself must be answered within the bound on a loaded machine, or it is the
// statement that is cut off, not its COMMIT.
const QUERY_TIMEOUT_MS = 2000
const HOLD_MS = 2 * QUERY_TIMEOUT_MS

const database = await newDatabase({ migrated: true })
const target = new URL(database.url)
let holdNextCommit = false
let commitForwarded = false
const sockets = new Set<Socket>()
const proxy = createServer((client) => {
  const server = connect(Number(target.port), target.hostname)
  sockets.add(client).add(server)
  server.pipe(client)
  server.on('error', () => client.destroy())
  client.on('error', () => {})
  let held: Buffer[] | undefined
  // The COMMIT held is the one of the connection that sent the unauthorize statement (by its
  // prepared statement's name), not another connection's.
  let changed = false
  client.on('data', (chunk: Buffer) => {
    if (held) { held.push(chunk); return }
    if (holdNextCommit && chunk.includes('unauthorize')) changed = true
    if (holdNextCommit && changed && chunk.includes('COMMIT')) {
      holdNextCommit = false
      held = [chunk]
      // Late, after the service gave up on it: the server still reads and runs it.
      setTimeout(() => {
        server.write(Buffer.concat(held!), () => { commitForwarded = true })
        held = undefined
        if (client.destroyed) server.end()
      }, HOLD_MS)
      return
    }
    server.write(chunk)
  })
  client.on('close', () => { if (!held) server.end() })
})
await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve))
t.teardown(() => {
  for (const socket of sockets) socket.destroy()
  proxy.close()
})
const proxied = Object.assign(new URL(database.url), { port: String((proxy.address() as { port: number }).port) }).toString()

const harness = await build(t, {
  DATABASE_URL: proxied,
  DATABASE_STATEMENT_TIMEOUT_MS: String(QUERY_TIMEOUT_MS / 2),
  DATABASE_QUERY_TIMEOUT_MS: String(QUERY_TIMEOUT_MS)
}, { database })
await harness.seed(ordersFixture())
const granted = async () => (await harness.db.query(
  "SELECT 1 FROM grants WHERE resource_id = 'orders-api' AND client_id = 'app-a' AND permission_id = 'p_read_orders'")).rows.length === 1

t.test('a COMMIT unanswered past the query bound: 503 database-unavailable, and the change may still be applied', async (t) => {
  holdNextCommit = true
  const res = await harness.request(ordersPath(), { method: 'DELETE', token: deleteToken(), json: ['p_read_orders'] })
  t.equal(res.status, 503)
  t.match(res.body, { type: '/problems/database-unavailable' })
  await until('the held COMMIT reached the server', () => commitForwarded)
  await until('the server ended the connection', async () => (await harness.db.query(
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle in transaction'")).rows[0].n === 0)
  t.notOk(await granted(), 'applied after all, though the caller was told 503')
  const retried = await harness.request(ordersPath(), { method: 'DELETE', token: deleteToken(), json: ['p_read_orders'] })
  t.equal(retried.status, 204, 'so a retry without If-Match is what is safe: it answers 204')
})
