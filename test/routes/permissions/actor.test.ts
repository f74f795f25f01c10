// Who made a change, as the history records it (src/routes/permissions/actor.ts): `sub`, and
// `client_id` or else `azp`, from the verified token; only text of 1 to 1,024 characters. Each case
// is a real change through the API, read back from the client's history.
import t from 'tap'
import { historyPath, ordersFixture, ordersPath } from '../../support/fixtures.js'
import { build } from '../../support/harness.js'
import { readToken, token } from '../../support/tokens.js'

t.test('who made a change: sub, and client_id or else azp; only text of 1 to 1,024 characters', async (t) => {
  const harness = await build(t)
  await harness.seed(ordersFixture())
  const cases: Array<[string, Record<string, unknown>, Record<string, string>]> = [
    ['client_id before azp', { sub: 'user-1', client_id: 'app-1', azp: 'app-2' }, { sub: 'user-1', client_id: 'app-1' }],
    ['azp without client_id', { sub: 'user-1', azp: 'app-2' }, { sub: 'user-1', client_id: 'app-2' }],
    ['an empty client_id counts as none', { client_id: '', azp: 'app-2' }, { client_id: 'app-2' }],
    ['1,024 characters kept, 1,025 dropped', { sub: 'x'.repeat(1024), client_id: 'y'.repeat(1025) }, { sub: 'x'.repeat(1024) }],
    ['not text: dropped', { sub: 42, client_id: ['app-1'], azp: { id: 'app-2' } }, {}],
    ['no claims: nobody named', {}, {}],
    // PostgreSQL text cannot hold NUL: such a claim is no name to record, not a 500 for every change.
    ['a NUL in a claim: dropped', { sub: 'user\u00001', client_id: 'app\u0000', azp: 'app-2' }, { client_id: 'app-2' }]
  ]
  for (const [index, [label, claims, actor]] of cases.entries()) {
    // Alternately taken away and given back: each request changes something, so each is recorded.
    const method = index % 2 === 0 ? 'DELETE' : 'POST'
    const answer = await harness.request(ordersPath(), { method, token: token({ scope: 'delete:resource create:resource', ...claims }), json: ['p_read_orders'] })
    t.equal(answer.status, 204, `${label}: changed`)
    const [newest] = (await harness.request(historyPath(), { token: readToken() })).body as Array<{ actor: Record<string, string>, request_id: string }>
    t.equal(newest.request_id, answer.headers.get('x-request-id'), `${label}: its change`)
    t.same(newest.actor, actor, label)
  }
})
