// A replica URL that never answers (issue 28): a loopback server that takes connections and says
// nothing, and a port nobody listens on. The service starts within the probe's deadline, says once
// which replica is down and why, and answers every read from the primary: no hang, no 5xx.
import { once } from 'node:events'
import { createServer, type Socket } from 'node:net'
import t from 'tap'
import { freePort } from '../../db/embedded-postgres.js'
import { ordersFixture, ordersPath } from '../support/fixtures.js'
import { build } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { readToken } from '../support/tokens.js'

const sockets = new Set<Socket>()
const silent = createServer((socket) => { sockets.add(socket) })
silent.listen(0, '127.0.0.1')
await once(silent, 'listening')
t.teardown(() => {
  for (const socket of sockets) socket.destroy()
  silent.close()
})
const silentUrl = `postgres://u:p@127.0.0.1:${(silent.address() as { port: number }).port}/db`
const closedUrl = `postgres://u:p@127.0.0.1:${await freePort()}/db`

t.test('a replica that never answers and one refusing connections: started in time, each reported once, reads from the primary', async (t) => {
  const logs = captureLogs()
  const started = Date.now()
  const harness = await build(t, { DATABASE_REPLICA_URLS: `${silentUrl}, ${closedUrl}`, LOG_LEVEL: 'warn' }, { logs: logs.stream })
  t.ok(Date.now() - started < 15_000, `started (${Date.now() - started} ms): the first probe waits a deadline, not for ever`)
  await harness.seed(ordersFixture())
  for (let i = 0; i < 4; i++) {
    const res = await harness.request(ordersPath(), { token: readToken() })
    t.equal(res.status, 200, `read ${i}`)
    t.match(res.headers.get('consistency-token'), /^[0-9A-F]+\/[0-9A-F]+$/, 'the primary\'s position')
  }
  const down = logs.lines.filter((line) => line.msg === 'database replica down: its reads go elsewhere')
  t.same(down.map((line) => line.replica).sort(), ['replica-1', 'replica-2'], 'each once, by name')
  t.notMatch(JSON.stringify(down), /u:p@/, 'never the URL and its password')
  t.ok(down.every((line) => typeof line.reason === 'string' && line.reason.length > 0), 'with the reason')
  t.equal((await harness.request('/readyz')).status, 200, 'the primary answers: ready')
  const metrics = await (await fetch(`${harness.baseUrl}/metrics`)).text()
  t.match(metrics, /db_read_fallbacks_total\{reason="none_up"\} [4-9]/)
  t.match(metrics, /db_replica_up\{replica="replica-1"\} 0/)
})

t.test('DATABASE_REPLICA_URLS that are not postgres URLs stop the start with a message naming the setting', async (t) => {
  await t.rejects(build(t, { DATABASE_REPLICA_URLS: 'mysql://db/x' }), /DATABASE_REPLICA_URLS must match pattern/)
  await t.rejects(build(t, { DATABASE_REPLICA_URLS: `${closedUrl},` }), /DATABASE_REPLICA_URLS must match pattern/)
})
