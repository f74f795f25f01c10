// The change feed streamed (GET /permission_changes, Accept: text/event-stream) over real sockets:
// what a stream carries and from where, live changes, heartbeats, the limit on streams, shutdown, a
// pruned cursor, and the two things that hold a stream up without breaking it (its LISTEN
// connection lost, a transaction left open). A consumer's pace (too slow, stalled, slow but
// reading) is test/routes/feed-stream-pace.test.ts. The PostgreSQL cluster is shared with the
// test files running beside this one, and a transaction open in any of its databases holds the feed
// back: waits have generous deadlines, and nothing here asserts how soon a change arrives.
import { createPublicKey } from 'node:crypto'
import { once } from 'node:events'
import { createServer, request as httpRequest, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import Fastify from 'fastify'
import fp from 'fastify-plugin'
import t from 'tap'
import feed from '../../plugins/feed.js'
import { pruneChanges } from '../../db/queries/history.js'
import { FEED_PAGE_SIZE } from '../../src/feed-events.js'
import type { FeedSubscriber } from '../../src/feed-hub.js'
import { checkContract } from '../support/contract.js'
import { lockWaiter, newDatabase } from '../support/database.js'
import { historyPath, ordersFixture, ordersPath } from '../support/fixtures.js'
import { build } from '../support/harness.js'
import { holdingProxy } from '../support/holding-proxy.js'
import { captureLogs } from '../support/logs.js'
import { type SseStream } from '../support/sse.js'
import { ecKeyPair, readToken, token } from '../support/tokens.js'
import { until } from '../support/waiting.js'
import { change, cursorBlocks, type FeedEntry, fourChanges, ids, increasing, poll, recordBeyondSocketBuffers, sentinel, shown, stream } from '../support/feed-stream.js'

t.test('a stream from the start: retry first, then every change as an event whose id and data are the polled entry\'s; a later change arrives once', async (t) => {
  const harness = await build(t)
  await harness.seed(ordersFixture())
  await fourChanges(harness)
  const polled = await poll(harness)
  t.equal(polled.length, 4)
  const s = await stream(t, harness)
  t.equal(s.status, 200)
  t.equal(s.headers['content-type'], 'text/event-stream; charset=utf-8')
  t.equal(s.headers['cache-control'], 'no-store')
  t.equal(s.headers['x-accel-buffering'], 'no', 'no proxy on the way holds events back')
  await s.until('the four changes', () => s.events.length >= 4)
  t.ok(s.text().startsWith('retry: 1000\n\n'), 'retry: 1000 comes first')
  t.same(s.retries, [1000])
  t.same(ids(s.events), ids(polled))
  t.same(s.events.map((event) => JSON.parse(event.data)), polled, 'data is the entry, as polled')
  t.ok(s.text().includes(`id: ${polled[0].id}\ndata: ${JSON.stringify(polled[0])}\n\n`), 'one id line, one data line, a blank line')

  // Made while the stream is open, through the API.
  const requestId = await change(harness, 'DELETE', ['p_read_refunds'])
  await s.until('the change made after the stream opened', () => s.events.length >= 5, 30_000)
  const [latest] = await poll(harness, `&after=${polled[3].id}`)
  t.equal(latest.request_id, requestId)
  t.same(s.events[4], { id: latest.id, data: JSON.stringify(latest) })
  const last = await sentinel(t, harness, s)
  t.same(ids(s.events), [...ids(polled), latest.id, last.id], 'each once, nothing else')
  t.equal(s.outcome, undefined, 'still open')
})

t.test('resuming: after=N and Last-Event-ID: N give exactly the changes after N; Last-Event-ID wins over after', async (t) => {
  const harness = await build(t)
  await harness.seed(ordersFixture())
  await fourChanges(harness)
  const polled = await poll(harness)

  const fromAfter = await stream(t, harness, `?after=${polled[1].id}`)
  const fromLastEventId = await stream(t, harness, `?after=${polled[0].id}`, { headers: { 'last-event-id': polled[2].id } })
  const fromTheEnd = await stream(t, harness, '', { headers: { 'last-event-id': polled[3].id } })
  t.same([fromAfter.status, fromLastEventId.status, fromTheEnd.status], [200, 200, 200])
  const last = await sentinel(t, harness, fromAfter)
  for (const s of [fromLastEventId, fromTheEnd]) await s.until('the sentinel', () => s.events.some(({ id }) => id === last.id), 30_000)
  t.same(ids(fromAfter.events), [polled[2].id, polled[3].id, last.id], 'after: the changes after it')
  t.same(ids(fromLastEventId.events), [polled[3].id, last.id], 'Last-Event-ID, not after')
  t.same(ids(fromTheEnd.events), [last.id], 'from the last one: only what is new')
})

t.test('resource_id: only that resource\'s changes, from the cursor and live', async (t) => {
  const harness = await build(t)
  await harness.seed(ordersFixture())
  const other = ordersPath('app-a', 'other-api')
  await change(harness, 'DELETE', ['p_read_orders'])
  await change(harness, 'DELETE', ['p_other'], other)
  await change(harness, 'POST', ['p_read_orders'])
  await change(harness, 'POST', ['p_other'], other)
  const polled = await poll(harness, '&resource_id=other-api')
  t.same(polled.map((entry) => [entry.resource_id, entry.action]), [['other-api', 'unauthorized'], ['other-api', 'granted']])

  const s = await stream(t, harness, '?resource_id=other-api')
  await s.until('the two changes of other-api', () => s.events.length >= 2)
  t.same(s.events.map((event) => JSON.parse(event.data)), polled)
  // Live: one of orders-api, then one of other-api; only the second is sent.
  await change(harness, 'DELETE', ['p_read_orders'])
  const requestId = await change(harness, 'DELETE', ['p_other'], other)
  await s.until('the live change of other-api', () => s.events.length >= 3, 30_000)
  const entries = s.events.map((event) => JSON.parse(event.data) as FeedEntry)
  t.same(entries.map((entry) => entry.resource_id), ['other-api', 'other-api', 'other-api'])
  t.equal(entries[2].request_id, requestId)
  t.ok(increasing(ids(s.events)))
})

t.test('an idle stream gets a heartbeat comment every FEED_HEARTBEAT_MS, and no event', async (t) => {
  const harness = await build(t, { FEED_HEARTBEAT_MS: '200' })
  const s = await stream(t, harness)
  // Five at 200 ms are a second; the deadline is for a loaded machine, not a measure.
  await s.until('five heartbeats', () => s.comments.length >= 5, 10_000)
  t.ok(s.comments.every((comment) => comment === 'heartbeat'), 'each ": heartbeat"')
  t.same(s.events, [])
  t.match(s.text(), /^retry: 1000\n\n: heartbeat\n\n(id: \d+\n\n)(: heartbeat\n\n)+$/, 'nothing else on the wire but, after the first, its cursor once (it has none)')
})

t.test('a stream of every resource resumed from its last event: idle, it sends no id, though the feed\'s cursor moves on past it', async (t) => {
  const harness = await build(t, { FEED_HEARTBEAT_MS: '100' })
  await harness.seed(ordersFixture())
  await fourChanges(harness)
  const [last] = (await poll(harness)).slice(-1)
  const s = await stream(t, harness, '', { headers: { 'last-event-id': last.id } })
  // A subscriber of the test's own beside the stream: once its cursor is past the stream's
  // Last-Event-ID, the feed has been read past it, and the stream's cursor, moved by reads that go
  // as far, is past it too.
  const { hub, read } = harness.app.feed
  const beside: FeedSubscriber = { after: BigInt(last.id), closed: false, write () {}, room: async () => {}, missed () {} }
  t.teardown(() => { hub.unfollow(beside) })
  await hub.follow(beside, await read({ after: last.id, limit: FEED_PAGE_SIZE }))
  await until('the feed\'s cursor past the last event', () => beside.after > BigInt(last.id), 30_000, 50)
  const seen = s.comments.length
  await s.until('three more heartbeats', () => s.comments.length >= seen + 3, 10_000)
  t.same(s.events, [])
  t.same(cursorBlocks(s.text()), [], 'no id: nothing lies between its last event and the cursor, which it keeps')
})

t.test('a heartbeat due while the stream\'s first page is read waits: the retry field comes first', async (t) => {
  const harness = await build(t, { FEED_HEARTBEAT_MS: '100' })
  // The first read waits on this lock for several heartbeat ticks. Held briefly: a lock this
  // strong takes a transaction id, which holds back the feed of every test file beside this one.
  const locker = await harness.db.connect()
  let opening: Promise<SseStream> | undefined
  try {
    await locker.query('BEGIN; LOCK TABLE permission_changes IN ACCESS EXCLUSIVE MODE')
    opening = stream(t, harness)
    t.ok(await lockWaiter(harness.db), 'the first read waits on the lock')
    await sleep(400)
  } finally {
    await locker.query('ROLLBACK')
    locker.release()
  }
  const s = await opening!
  await s.until('two heartbeats', () => s.comments.length >= 2, 10_000)
  t.match(s.text(), /^retry: 1000\n\n: heartbeat\n\n(id: \d+\n\n)(: heartbeat\n\n)*$/, 'the retry field first, then heartbeats only (and once, its cursor)')
})

t.test('FEED_MAX_STREAMS=2: a third stream → 503 overloaded with Retry-After, polling still answers; once one closes a new one is admitted', async (t) => {
  const logs = captureLogs()
  const harness = await build(t, { FEED_MAX_STREAMS: '2', LOG_LEVEL: 'warn' }, { logs: logs.stream })
  const first = await stream(t, harness)
  const second = await stream(t, harness)
  t.same([first.status, second.status], [200, 200])
  const third = await stream(t, harness)
  t.equal(third.status, 503)
  t.match(third.headers['content-type'], /^application\/problem\+json(;|$)/)
  t.match(third.headers['retry-after'], /^\d+$/)
  t.equal(await third.finished, 'end', 'a whole answer, not a stream')
  t.match(JSON.parse(third.text()), { type: '/problems/overloaded', status: 503 })
  t.equal(harness.app.feed.streams, 2)
  t.equal((await harness.request('/permission_changes', { token: readToken() })).status, 200, 'polling')
  const metrics = await (await fetch(`${harness.baseUrl}/metrics`)).text()
  t.match(metrics, /^feed_streams 2$/m, 'the open streams, in the metrics')
  t.match(metrics, /^requests_shed_total\{reason="feed_streams"\} 1$/m, 'the refused one counted apart from overload')
  t.match(logs.lines.find((line) => line.msg === 'request shed'), { reason: 'feed_streams' }, 'and logged with that reason, not as event-loop lag')

  first.close()
  await until('the closed stream counted out', () => harness.app.feed.streams === 1)
  const fourth = await stream(t, harness)
  t.equal(fourth.status, 200)
  t.equal(harness.app.feed.streams, 2)
  await fourth.until('its retry field', () => fourth.retries.length === 1)
})

t.test('fastify.close() with a stream open: it resolves promptly and the stream ends cleanly (its last chunk), not reset; the LISTEN connection is closed', async (t) => {
  const harness = await build(t)
  await harness.seed(ordersFixture())
  await change(harness, 'DELETE', ['p_read_orders'])
  const s = await stream(t, harness)
  await s.until('the change', () => s.events.length === 1)
  // This database's only: other test files' listeners share the cluster.
  const listeners = async () => (await harness.db.query<{ pid: number }>(
    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'")).rows.length
  await until('the LISTEN connection', async () => (await listeners()) === 1)
  const started = Date.now()
  await harness.app.close()
  const tookMs = Date.now() - started
  t.ok(tookMs < 5_000, `closed in ${tookMs} ms`)
  t.equal(await s.finished, 'end')
  t.equal(harness.app.feed.streams, 0)
  await until('the LISTEN connection closed', async () => (await listeners()) === 0, 10_000)
})

t.test('once the close has ended the streams, the feed admits none: 503 shutting-down (a stream admitted after would hold the close up)', async (t) => {
  const harness = await build(t)
  // What the route gives the feed, counted in before the close: its end() tells that preClose ran.
  let ended!: () => void
  const endedNow = new Promise<void>((resolve) => { ended = resolve })
  harness.app.feed.admit({ heartbeat () {}, end: () => { ended() } })
  const closed = harness.app.close()
  await endedNow
  let refusal: unknown
  try {
    harness.app.feed.admit({ heartbeat () {}, end () {} })
  } catch (error) {
    refusal = error
  }
  t.match(refusal, { status: 503, type: '/problems/shutting-down' }, 'refused')
  await closed
})

t.test('fastify.close() while a stream\'s first page is read: 503 shutting-down with Retry-After, at once, not an empty 200 or a cut connection', async (t) => {
  const harness = await build(t)
  // The first read waits on this lock. Held briefly: a lock this strong takes a transaction id,
  // which holds back the feed of every test file beside this one.
  const locker = await harness.db.connect()
  let closed: Promise<void> | undefined
  try {
    await locker.query('BEGIN; LOCK TABLE permission_changes IN ACCESS EXCLUSIVE MODE')
    const opening = stream(t, harness)
    t.ok(await lockWaiter(harness.db), 'the first read waits on the lock')
    closed = harness.app.close()
    // Answered while the read still waits: the close is not held up by it, nor the consumer.
    const s = await opening
    t.equal(s.status, 503)
    t.match(s.headers['content-type'], /^application\/problem\+json(;|$)/)
    t.equal(s.headers['retry-after'], '1')
    t.equal(await s.finished, 'end', 'a whole answer, not a stream')
    t.match(JSON.parse(s.text()), { type: '/problems/shutting-down', status: 503 })
  } finally {
    await locker.query('ROLLBACK')
    locker.release()
  }
  await closed
  t.equal(harness.app.feed.streams, 0)
})

t.test('a consumer gone while its stream\'s first page is read never joins the live streams: once the others close, the shared reader has none', async (t) => {
  const harness = await build(t)
  const connections = () => new Promise<number>((resolve, reject) => { harness.app.server.getConnections((error, count) => { if (error) reject(error); else resolve(count) }) })
  // The first read waits on this lock. Held briefly: a lock this strong takes a transaction id,
  // which holds back the feed of every test file beside this one.
  const locker = await harness.db.connect()
  try {
    await locker.query('BEGIN; LOCK TABLE permission_changes IN ACCESS EXCLUSIVE MODE')
    const req = httpRequest(`${harness.baseUrl}/permission_changes`, { agent: false, headers: { accept: 'text/event-stream', authorization: `Bearer ${readToken()}` } })
    req.on('error', () => {})
    req.end()
    t.ok(await lockWaiter(harness.db), 'the first read waits on the lock')
    req.destroy()
    await until('the server sees the consumer gone', async () => (await connections()) === 0)
    t.equal(harness.app.feed.streams, 0, 'counted out')
  } finally {
    await locker.query('ROLLBACK')
    locker.release()
  }
  // A stream that gets a change live: the shared reader has read for everyone live by then.
  const witness = await stream(t, harness)
  await harness.db.query(`INSERT INTO permission_changes (resource_id, client_id, action, permission_ids, request_id)
    VALUES ('orders-api', 'app-a', 'granted', ARRAY['p'], 'after-gone')`)
  await witness.until('the change', () => witness.events.length === 1, 30_000)
  witness.close()
  await until('the witness counted out', () => harness.app.feed.streams === 0)
  // With nobody live, the shared reader has no position, and a subscriber with nothing more to
  // read joins it at once; had the gone stream stayed live, this one would first be caught up
  // from its cursor (0) to where the reader is, past the change.
  const writes: string[][] = []
  const probe: FeedSubscriber = { after: -1n, closed: false, write: (changes) => { writes.push(changes.map(({ id }) => String(id))) }, room: async () => {}, missed: () => {} }
  await harness.app.feed.hub.follow(probe, { changes: [], horizon: '1', heldBack: false })
  harness.app.feed.hub.unfollow(probe)
  t.same(writes, [], 'live at once, nothing to catch up with')
})

t.test('a stream and its 410: Vary: Accept, Last-Event-ID (both chose the answer), a stream Cache-Control: no-store; their heads as the spec declares them', async (t) => {
  const harness = await build(t)
  await harness.seed(ordersFixture())
  const { rows: [{ id: old }] } = await harness.db.query<{ id: string }>(`INSERT INTO permission_changes (at, resource_id, client_id, action, permission_ids, request_id)
    VALUES (now() - interval '40 days', 'orders-api', 'app-a', 'granted', ARRAY['p_read_orders'], 'old') RETURNING id::text`)
  await change(harness, 'DELETE', ['p_read_orders'])
  t.equal(await pruneChanges(harness.db, 30), 1)
  const live = await stream(t, harness)
  t.equal(live.status, 200)
  t.equal(live.headers.vary, 'Accept, Last-Event-ID')
  t.equal(live.headers['cache-control'], 'no-store')
  const gone = await stream(t, harness, '', { headers: { 'last-event-id': String(BigInt(old) - 1n) } })
  t.equal(gone.status, 410)
  t.equal(await gone.finished, 'end')
  t.equal(gone.headers.vary, 'Accept, Last-Event-ID')
  for (const s of [live, gone]) {
    const headers = new Headers()
    for (const [name, value] of Object.entries(s.headers)) headers.set(name, String(value))
    const text = s.status === 200 ? '' : s.text()
    t.doesNotThrow(() => checkContract('GET', '/permission_changes', { status: s.status, headers, body: text && JSON.parse(text), text }), `${s.status}: as the spec says`)
  }
})

t.test('a cursor below the prune mark → 410 changes-pruned as problem+json, no stream; at the mark or without one, a stream', async (t) => {
  const harness = await build(t)
  await harness.seed(ordersFixture())
  const { rows } = await harness.db.query<{ id: string }>(`INSERT INTO permission_changes (at, resource_id, client_id, action, permission_ids, request_id)
    SELECT now() - interval '40 days', 'orders-api', 'app-a', 'granted', ARRAY['p_read_orders'], 'old-' || n FROM generate_series(1, 3) AS n RETURNING id`)
  const old = rows.map(({ id }) => id).sort((a, b) => (BigInt(a) < BigInt(b) ? -1 : 1))
  await change(harness, 'DELETE', ['p_read_orders'])
  t.equal(await pruneChanges(harness.db, 30), 3)
  const [kept] = await poll(harness)

  for (const [what, query, headers] of [
    ['after', `?after=${old[0]}`, {}],
    ['Last-Event-ID', '', { 'last-event-id': old[1] }]
  ] as const) {
    const s = await stream(t, harness, query, { headers })
    t.equal(s.status, 410, what)
    t.match(s.headers['content-type'], /^application\/problem\+json(;|$)/, what)
    t.equal(await s.finished, 'end', `${what}: a whole answer`)
    t.match(JSON.parse(s.text()), { type: '/problems/changes-pruned', status: 410, pruned_through: old[2] }, what)
    t.same(s.retries, [], `${what}: no stream started`)
  }
  t.equal(harness.app.feed.streams, 0, 'none counted')

  for (const query of [`?after=${old[2]}`, '']) {
    const s = await stream(t, harness, query)
    t.equal(s.status, 200, query || 'no cursor')
    await s.until('the change kept', () => s.events.length === 1)
    t.same(ids(s.events), [kept.id], query || 'no cursor: from the oldest kept')
  }
})

t.test('resource_id: an idle stream sends its cursor only when it moves on, each id once', async (t) => {
  const harness = await build(t, { FEED_HEARTBEAT_MS: '100' })
  const { rows: [quiet] } = await harness.db.query<{ id: string }>(`INSERT INTO permission_changes (resource_id, client_id, action, permission_ids, request_id)
    VALUES ('quiet-api', 'app-a', 'granted', ARRAY['p_read_orders'], 'quiet') RETURNING id::text`)
  await poll(harness)
  const s = await stream(t, harness, '?resource_id=quiet-api')
  await s.until('its change', () => s.events.length === 1)
  // Nothing is written meanwhile: the cursor moves rarely, if at all, while the heartbeats come.
  await s.until('ten heartbeats', () => s.comments.length >= 10, 10_000)
  const cursors = cursorBlocks(s.text())
  t.ok(cursors.length <= 10, `${cursors.length} cursors sent`)
  t.ok(increasing([quiet.id, ...cursors]), `each above the last event and the one before: ${cursors.join(', ')}`)
  t.same(ids(s.events), [quiet.id])
})

t.test('a stream ends, cleanly, once the token that opened it is no longer accepted; one opened with a good token goes on', async (t) => {
  const logs = captureLogs()
  const harness = await build(t, { FEED_HEARTBEAT_MS: '100', LOG_LEVEL: 'info' }, { logs: logs.stream })
  // exp 27 s ago: accepted for about 3 s more, within the 30 s of clock tolerance every check allows.
  const expiring = token({ scope: 'read:resource' }, { expiresIn: -27 })
  const s = await stream(t, harness, '', { headers: { authorization: `Bearer ${expiring}` } })
  t.equal(s.status, 200)
  const good = await stream(t, harness)
  t.equal(await s.finished, 'end', 'ended with its last chunk, not cut: the consumer resumes')
  t.match(logs.lines.find((line) => line.msg === 'change feed: the token that opened the stream expired; ended (the consumer resumes with a fresh one)'), { after: /^-?\d+$/ }, 'logged, with where it ended')
  t.equal((await harness.request('/permission_changes', { token: expiring })).status, 401, 'the token is refused now')
  await until('one stream counted', () => harness.app.feed.streams === 1)
  t.equal(good.outcome, undefined, 'the stream opened with a good token is still open')
  t.equal(harness.app.feed.cut, 0, 'not counted as a consumer cut for its pace')
})

t.test('resource_id: an idle stream moves its Last-Event-ID past the other resources\' changes, so resuming after a prune of them is no 410; resuming from its last event is', async (t) => {
  const harness = await build(t, { FEED_HEARTBEAT_MS: '100' })
  // The quiet resource's only change, then other resources' changes after it, all long ago (by SQL:
  // the history cannot be aged).
  const { rows: [quiet] } = await harness.db.query<{ id: string }>(`INSERT INTO permission_changes (at, resource_id, client_id, action, permission_ids, request_id)
    VALUES (now() - interval '41 days', 'quiet-api', 'app-a', 'granted', ARRAY['p_read_orders'], 'quiet') RETURNING id::text`)
  const { rows: [other] } = await harness.db.query<{ id: string }>(`INSERT INTO permission_changes (at, resource_id, client_id, action, permission_ids, request_id)
    VALUES (now() - interval '40 days', 'orders-api', 'app-a', 'granted', ARRAY['p_read_orders'], 'other') RETURNING id::text`)
  await poll(harness)

  const s = await stream(t, harness, '?resource_id=quiet-api')
  await s.until('its resource\'s change', () => s.events.length === 1)
  t.same(ids(s.events), [quiet.id])
  await s.until('a Last-Event-ID past the other resource\'s change', () => s.lastEventId !== '' && BigInt(s.lastEventId) >= BigInt(other.id), 10_000)
  t.same(ids(s.events), [quiet.id], 'no event more: EventSource fires none for an id without data')
  s.close()

  await harness.db.query(`INSERT INTO permission_changes (at, resource_id, client_id, action, permission_ids, request_id)
    VALUES (now() - interval '2 days', 'orders-api', 'app-a', 'granted', ARRAY['p_read_orders'], 'kept')`)
  await poll(harness)
  t.equal(await pruneChanges(harness.db, 30), 2)
  const resumed = await stream(t, harness, '?resource_id=quiet-api', { headers: { 'last-event-id': s.lastEventId } })
  t.equal(resumed.status, 200, 'resumed as EventSource would: it missed nothing of its resource')
  const fromItsEvent = await stream(t, harness, '?resource_id=quiet-api', { headers: { 'last-event-id': quiet.id } })
  t.equal(fromItsEvent.status, 410, 'from its last event, below the other resource\'s pruned change: it cannot be told what it missed')
})

t.test('resource_id: a stream the service ends gives its consumer, last, the cursor it moved to since it last gave one', async (t) => {
  // No heartbeat within the test: only the end can give the cursor.
  const harness = await build(t, { FEED_HEARTBEAT_MS: '15000' })
  const { rows: [quiet] } = await harness.db.query<{ id: string }>(`INSERT INTO permission_changes (resource_id, client_id, action, permission_ids, request_id)
    VALUES ('quiet-api', 'app-a', 'granted', ARRAY['p_read_orders'], 'quiet') RETURNING id::text`)
  const { rows: [other] } = await harness.db.query<{ id: string }>(`INSERT INTO permission_changes (resource_id, client_id, action, permission_ids, request_id)
    VALUES ('orders-api', 'app-a', 'granted', ARRAY['p_read_orders'], 'other') RETURNING id::text`)
  await poll(harness)
  // Its first page reads past the other resource's change: its cursor is beyond its last event.
  const s = await stream(t, harness, '?resource_id=quiet-api')
  await s.until('its change', () => s.events.length === 1)
  await harness.app.close()
  t.equal(await s.finished, 'end')
  t.same(s.comments, [], 'no heartbeat came (which would have given the cursor)')
  const cursors = cursorBlocks(s.text())
  t.equal(cursors.length, 1, `its cursor, once: ${cursors.join(', ')}`)
  t.ok(BigInt(s.lastEventId) >= BigInt(other.id), `past the other resource's change: ${s.lastEventId} ≥ ${other.id}`)
  t.same(ids(s.events), [quiet.id])
})

t.test('no cursor, nothing sent: an idle stream gives its consumer the cursor once, so coming back after a prune of changes recorded since is a 410, not a silent start past them', async (t) => {
  const harness = await build(t, { FEED_HEARTBEAT_MS: '100' })
  // An empty feed: the stream has no event to give, and its consumer no id to keep.
  const s = await stream(t, harness)
  await s.until('a Last-Event-ID', () => s.lastEventId !== '', 10_000)
  await s.until('more heartbeats', () => s.comments.length >= 5, 10_000)
  t.same(s.events, [], 'no event: EventSource fires none for an id without data')
  t.equal(cursorBlocks(s.text()).length, 1, 'its cursor once: a stream of every resource sends each change, so nothing else lies past its last event')
  s.close()

  // While it is away, a change is recorded (long ago, by SQL: the history cannot be aged), then one
  // kept, and the first is pruned.
  const { rows: [gone] } = await harness.db.query<{ id: string }>(`INSERT INTO permission_changes (at, resource_id, client_id, action, permission_ids, request_id)
    VALUES (now() - interval '40 days', 'orders-api', 'app-a', 'granted', ARRAY['p_read_orders'], 'gone') RETURNING id::text`)
  t.ok(BigInt(gone.id) > BigInt(s.lastEventId), 'recorded after the cursor it was given')
  await harness.db.query(`INSERT INTO permission_changes (at, resource_id, client_id, action, permission_ids, request_id)
    VALUES (now() - interval '2 days', 'orders-api', 'app-a', 'granted', ARRAY['p_read_orders'], 'kept')`)
  await poll(harness)
  t.equal(await pruneChanges(harness.db, 30), 1)
  const resumed = await stream(t, harness, '', { headers: { 'last-event-id': s.lastEventId } })
  t.equal(resumed.status, 410, 'resuming as EventSource would: told that a change it never got is gone')
  t.match(JSON.parse(resumed.text()), { type: '/problems/changes-pruned', pruned_through: gone.id })
})

t.test('a cursor past every change: the stream is given none of the changes below it, live', async (t) => {
  const harness = await build(t)
  await harness.seed(ordersFixture())
  const ahead = await stream(t, harness, '?after=999999999999999999')
  const witness = await stream(t, harness)
  await sentinel(t, harness, witness)
  // Given to every live stream in one go: the witness has it, so the other was given it or not.
  await sleep(200)
  t.same(ahead.events, [], 'nothing')
  t.equal(ahead.outcome, undefined, 'still open')
})

t.test('reads failing: a stream catching up ends cleanly (its consumer resumes), a live one stays; both logged; once reads work again, the live one goes on', async (t) => {
  const logs = captureLogs()
  const harness = await build(t, { FEED_STREAM_BUFFER_BYTES: '1024', LOG_LEVEL: 'info' }, { logs: logs.stream })
  await harness.seed(ordersFixture())
  const recorded = await recordBeyondSocketBuffers(harness)
  const catchingUp = await stream(t, harness, '', { paused: true })
  // Opened after the changes, so that it gets them catching up, a page once it took the last: live
  // from the start, it would be given them as fast as the shared reader reads, and a consumer in
  // this process, on cores shared with the server and other test files, fell behind by more than the
  // bound (1 KiB) and a page, and was cut (CI, 2026-11-28).
  const live = await stream(t, harness)
  await live.until('every change, and live', () => live.events.length >= recorded, 60_000)

  // Every read of the feed fails while the table has another name.
  await harness.db.query('ALTER TABLE permission_changes RENAME TO permission_changes_away')
  try {
    catchingUp.resume()
    t.equal(await catchingUp.finished, 'end', 'the stream catching up ends, cleanly')
    t.ok(catchingUp.events.length > 0 && catchingUp.events.length < recorded, `after ${catchingUp.events.length} of ${recorded} changes`)
    const ended = logs.lines.find((line) => /^change feed: catching a stream up failed/.test(String(line.msg)))
    t.match(ended, { err: { message: /permission_changes/ } }, 'logged, with the error')
    await until('the shared reader\'s failure logged', () => logs.lines.some((line) =>
      line.msg === 'change feed: reading new changes failed; trying again' && line.code === '42P01' && /permission_changes/.test(String(line.reason))))
  } finally {
    await harness.db.query('ALTER TABLE permission_changes_away RENAME TO permission_changes')
  }
  t.equal(live.outcome, undefined, 'the live stream stays')
  await sentinel(t, harness, live)
  t.equal(live.events.length, recorded + 1)
})

t.test('a first page of more than half the bound, which the socket takes at once (no \'drain\' comes): the stream still goes live, and a later change arrives', async (t) => {
  const harness = await build(t, { FEED_STREAM_BUFFER_BYTES: '1024' })
  const insert = (count: number) => harness.db.query(`INSERT INTO permission_changes (resource_id, client_id, action, permission_ids, request_id)
    SELECT 'orders-api', 'app-a', 'granted', ARRAY['p'], 'small-' || n FROM generate_series(1, $1::int) AS n`, [count])
  // About 2 KB: the stream waits for room (at most half the bound waiting) before it goes live.
  await insert(10)
  await shown(harness)
  const s = await stream(t, harness)
  await s.until('the ten changes', () => s.events.length === 10)
  await insert(1)
  await s.until('the change made after', () => s.events.length === 11, 30_000)
  t.ok(increasing(ids(s.events)))
})

t.test('a consumer gone while its request waits in a hook, before the handler runs: its stream is counted out at once', async (t) => {
  // The first token waits for the key set's fetch (plugins/auth/key-set.ts), held here until the consumer is gone.
  const held: ServerResponse[] = []
  const jwk = { ...createPublicKey(ecKeyPair().publicKey).export({ format: 'jwk' }), alg: 'ES256', use: 'sig' }
  const keys = createServer((_request, response) => { held.push(response) }).listen(0, '127.0.0.1')
  await once(keys, 'listening')
  t.teardown(() => { keys.closeAllConnections(); keys.close() })
  const harness = await build(t, { JWT_SECRET: '', JWKS_URL: `http://127.0.0.1:${(keys.address() as AddressInfo).port}/jwks.json` })
  const req = httpRequest(`${harness.baseUrl}/permission_changes`, {
    agent: false,
    headers: { accept: 'text/event-stream', authorization: `Bearer ${token({ scope: 'read:resource' }, { algorithm: 'ES256' })}` }
  })
  req.on('error', () => {})
  req.end()
  await until('the key set asked for', () => held.length === 1)
  req.destroy()
  const connections = () => new Promise<number>((resolve, reject) => { harness.app.server.getConnections((error, count) => { if (error) reject(error); else resolve(count) }) })
  await until('the server sees the consumer gone', async () => (await connections()) === 0)
  held[0].setHeader('content-type', 'application/json')
  held[0].end(JSON.stringify({ keys: [jwk] }))
  // The handler counts the stream in and starts the LISTEN connection; the consumer's close, which
  // came before, is never heard again.
  await until('the handler ran', () => harness.app.feed.listening)
  t.equal(harness.app.feed.streams, 0, 'counted out')
})

t.test('HEAD with Accept: text/event-stream answers without starting a stream', async (t) => {
  const harness = await build(t)
  const head = await harness.request('/permission_changes', { method: 'HEAD', token: readToken(), headers: { accept: 'text/event-stream' } })
  t.equal(head.status, 200)
  t.equal(head.text, '')
  t.notMatch(head.headers.get('content-type') ?? '', /event-stream/)
  t.equal(harness.app.feed.streams, 0)
})

t.test('Accept with media type parameters (RFC 9110 §12.5.1): text/event-stream; charset=utf-8 is a stream, a JSON preferred with its charset a page', async (t) => {
  const harness = await build(t)
  for (const [accept, expected] of [
    ['text/event-stream; charset=utf-8', 'text/event-stream; charset=utf-8'],
    ['text/event-stream;charset=UTF-8', 'text/event-stream; charset=utf-8'],
    ['application/json; charset=utf-8, text/event-stream;q=0.5', 'application/json; charset=utf-8'],
    ['text/event-stream;q=0.5, application/json;charset=utf-8', 'application/json; charset=utf-8']
  ] as const) {
    const s = await stream(t, harness, '', { headers: { accept } })
    t.equal(s.status, 200, accept)
    t.equal(s.headers['content-type'], expected, accept)
    t.equal(s.headers.vary, expected.startsWith('text/event-stream') ? 'Accept, Last-Event-ID' : 'Accept', accept)
    s.close()
  }
})

t.test('the LISTEN connection terminated: logged, changes still arrive, and the listener connects again', async (t) => {
  const logs = captureLogs()
  const harness = await build(t, { LOG_LEVEL: 'warn' }, { logs: logs.stream })
  await harness.seed(ordersFixture())
  const s = await stream(t, harness)
  // This database's only: other test files' listeners share the cluster.
  const listeners = async () => (await harness.db.query<{ pid: number }>(
    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'")).rows.map(({ pid }) => pid)
  await until('the LISTEN connection', async () => (await listeners()).length === 1)
  const [pid] = await listeners()
  t.same((await harness.db.query('SELECT pg_terminate_backend($1) AS terminated', [pid])).rows, [{ terminated: true }])
  const lost = await logs.waitFor((line) => line.msg === 'change feed: listening connection lost; polling until it is back', 'the loss logged')
  t.equal(lost.level, 40, 'a warning')

  const first = await change(harness, 'DELETE', ['p_read_orders'])
  await s.until('the change made after the connection was lost', () => s.events.length >= 1, 30_000)
  await until('a new LISTEN connection', async () => { const pids = await listeners(); return pids.length === 1 && pids[0] !== pid }, 30_000)
  const second = await change(harness, 'POST', ['p_read_orders'])
  await s.until('the change made after it reconnected', () => s.events.length >= 2, 30_000)
  t.same(s.events.map((event) => (JSON.parse(event.data) as FeedEntry).request_id), [first, second])
})

t.test('the LISTEN connection\'s server answering nothing: feed_listening 0 while streams are open, 1 once it listens', async (t) => {
  const { url, drop } = await newDatabase({ migrated: true })
  const proxy = await holdingProxy(t, url)
  // Migrated through the proxy at the start, then answered nothing: the listener's connect (with the first stream) hangs.
  const harness = await build(t, { MIGRATIONS_DATABASE_URL: proxy.url }, { database: { url, drop } })
  const listening = async () => /^feed_listening (\d+)$/m.exec(await (await fetch(`${harness.baseUrl}/metrics`)).text())?.[1]
  t.equal(await listening(), '0', 'before the first stream')
  proxy.hold()
  const s = await stream(t, harness)
  await s.until('its retry field', () => s.retries.length === 1)
  t.equal(harness.app.feed.listening, false)
  t.equal(await listening(), '0', 'a stream open, its changes by the poll only')
  proxy.release()
  await until('listening', async () => (await listening()) === '1')
})

t.test('a transaction left open holds back the changes after it; once it commits its change comes first, then the rest, in id order', async (t) => {
  const harness = await build(t)
  await harness.seed(ordersFixture())
  const s = await stream(t, harness)
  const held = await harness.db.connect()
  let heldId: string
  const made: string[] = []
  try {
    await held.query('BEGIN')
    heldId = (await held.query<{ id: string }>(`INSERT INTO permission_changes (resource_id, client_id, action, permission_ids, request_id)
      VALUES ('orders-api', 'app-c', 'granted', ARRAY['p_read_orders'], 'held') RETURNING id`)).rows[0].id
    made.push(await change(harness, 'DELETE', ['p_read_orders']))
    made.push(await change(harness, 'POST', ['p_read_orders']))
    made.push(await change(harness, 'DELETE', ['p_read_invoices']))
    const history = await harness.request(historyPath(), { token: readToken() })
    t.equal((history.body as FeedEntry[]).length, 3, 'committed: the client\'s history lists them')
    // Several of the reader's looks (each second, and on every notification): not one may send them.
    await sleep(3_000)
    t.same(s.events, [], 'nothing sent while the older transaction is open')
    t.same(await poll(harness, '', { settled: false }), [], 'nor polled')
    await held.query('COMMIT')
  } finally {
    await held.query('ROLLBACK').catch(() => {})
    held.release()
  }
  await s.until('the four changes', () => s.events.length >= 4, 30_000)
  const entries = s.events.map((event) => JSON.parse(event.data) as FeedEntry)
  t.equal(entries[0].id, heldId!, 'the held change first')
  t.same(entries.map((entry) => entry.request_id), ['held', ...made], 'then the others, as made')
  t.ok(increasing(ids(s.events)), 'ids strictly increasing')
  t.same(ids(s.events), ids(await poll(harness)), 'as polled')
})

t.test('the feed plugin is registered after the ones it needs (db, env), or the app does not start', async (t) => {
  const app = Fastify()
  await app.register(fp(async () => {}, { name: 'db' }))
  app.register(feed)
  await t.rejects(async () => { await app.ready() }, /dependency 'env' of plugin 'feed' is not registered/)
  const bare = Fastify()
  bare.register(feed)
  await t.rejects(async () => { await bare.ready() }, /dependency 'db' of plugin 'feed' is not registered/)
})

t.test('the streams\' shared reader prepares its statement as the routes do (DATABASE_PREPARED_STATEMENTS), and only then', async (t) => {
  for (const prepared of [true, false]) {
    // One pooled connection: the one that then reads pg_prepared_statements, which is per session.
    const harness = await build(t, { DATABASE_POOL_MAX: '1', DATABASE_PREPARED_STATEMENTS: String(prepared) })
    // What a stream reads; no stream is open and no request was made, so nothing else read the feed.
    await harness.app.feed.read({ limit: 10 })
    const { rows } = await harness.app.db.query<{ name: string }>('SELECT name FROM pg_prepared_statements ORDER BY name')
    t.same(rows.map(({ name }) => name), prepared ? ['feed'] : [], `prepared=${prepared}`)
  }
})
