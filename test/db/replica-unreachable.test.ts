// A replica URL that never answers (issue 28): a loopback server that takes connections and says
// nothing, and a port nobody listens on. The service starts within the probe's deadline, says once
// which replica is down and why, and answers every read from the primary: no hang, no 5xx.
import { once } from 'node:events'
import { createServer, type Socket } from 'node:net'
import t from 'tap'
import { freePort } from '../../db/embedded-postgres.js'
import { parseLsn } from '../../db/lsn.js'
import { historyPath, ordersFixture, ordersPath, tooLargeToGrant } from '../support/fixtures.js'
import { build } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { deleteToken, readToken, token } from '../support/tokens.js'

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

// A Consistency-Token is a position of the primary's, given when a replica may answer the next read
// (plugins/db.ts asks for positions only then): with replicas, even all down, every answer from the
// database carries one, a refused grant's asked after the refusal; without, none does.
t.test('Consistency-Token with replicas (all down) on reads, changes and a grant too large; without replicas on none', async (t) => {
  for (const replicated of [true, false]) {
    const harness = await build(t, replicated ? { DATABASE_REPLICA_URLS: closedUrl } : {})
    await harness.seed(ordersFixture())
    const { resource, client, permission } = await tooLargeToGrant(harness.db)
    const answers = {
      list: await harness.request(ordersPath(), { token: readToken() }),
      history: await harness.request(historyPath(), { token: readToken() }),
      feed: await harness.request('/permission_changes', { token: readToken() }),
      delete: await harness.request(ordersPath(), { method: 'DELETE', token: deleteToken(), json: ['p_read_orders'] }),
      'grant too large': await harness.request(ordersPath(client, resource), { method: 'POST', token: token({ scope: 'create:resource' }), json: [permission] })
    }
    t.same(Object.entries(answers).map(([name, { status }]) => [name, status]),
      [['list', 200], ['history', 200], ['feed', 200], ['delete', 204], ['grant too large', 422]], `replicas: ${replicated}`)
    for (const [name, answer] of Object.entries(answers)) {
      if (replicated) t.match(answer.headers.get('consistency-token'), /^[0-9A-F]+\/[0-9A-F]+$/, `with replicas: ${name}`)
      else t.equal(answer.headers.get('consistency-token'), null, `without replicas: ${name}`)
    }
  }
})

t.test('a token no server has reached (another deployment\'s): the primary answers, with its own older token, as the spec says', async (t) => {
  const harness = await build(t, { DATABASE_REPLICA_URLS: closedUrl })
  await harness.seed(ordersFixture())
  const ahead = await harness.request(ordersPath(), { token: readToken(), headers: { 'consistency-token': 'FFFFFFFF/FFFFFFFF' } })
  t.equal(ahead.status, 200)
  const given = parseLsn(ahead.headers.get('consistency-token')!)
  t.ok(given !== undefined && given < parseLsn('FFFFFFFF/FFFFFFFF')!, `the primary's own position: ${ahead.headers.get('consistency-token')}`)
})

t.test('DATABASE_REPLICA_URLS that are not postgres URLs stop the start with a message naming the setting', async (t) => {
  await t.rejects(build(t, { DATABASE_REPLICA_URLS: 'mysql://db/x' }), /DATABASE_REPLICA_URLS must match pattern/)
  await t.rejects(build(t, { DATABASE_REPLICA_URLS: `${closedUrl},` }), /DATABASE_REPLICA_URLS must match pattern/)
})
