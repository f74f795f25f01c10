// The change feed streamed (GET /permission_changes, Accept: text/event-stream) over real sockets:
// what a stream carries and from where, live changes, heartbeats, a consumer too slow or stalled, the limit on
// streams, shutdown, a pruned cursor (and a stream whose next changes are pruned), and the two things that hold a stream up without breaking it
// (its LISTEN connection lost, a transaction left open). The PostgreSQL cluster is shared with the
// test files running beside this one, and a transaction open in any of its databases holds the feed
// back: waits have generous deadlines, and nothing here asserts how soon a change arrives.
import { readFileSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import Fastify from 'fastify'
import fp from 'fastify-plugin'
import t, { type Test } from 'tap'
import feed from '../../plugins/feed.js'
import { pruneChanges } from '../../db/queries/history.js'
import { FEED_PAGE_SIZE } from '../../src/feed-events.js'
import { checkContract } from '../support/contract.js'
import { historyPath, ordersFixture, ordersPath } from '../support/fixtures.js'
import { build, type Harness } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { openStream, type OpenOptions, type SseStream } from '../support/sse.js'
import { readToken, token } from '../support/tokens.js'
import { until } from '../support/waiting.js'

interface FeedEntry { id: string, resource_id: string, client_id: string, action: string, permission_ids: string[], request_id: string }

const writer = () => token({ scope: 'delete:resource create:resource', sub: 'alice' })

/** A change through the API: DELETE (unauthorized) or POST (granted) of ids on a client's grants. */
async function change (harness: Harness, method: 'DELETE' | 'POST', ids: string[], path = ordersPath()): Promise<string> {
  const answer = await harness.request(path, { method, token: writer(), json: ids })
  if (answer.status !== 204) throw new Error(`${method} ${path} → ${answer.status}: ${answer.text}`)
  return answer.headers.get('x-request-id')!
}

/** Four changes on orders-api (app-a), recorded in this order. */
async function fourChanges (harness: Harness): Promise<void> {
  await change(harness, 'DELETE', ['p_read_orders'])
  await change(harness, 'POST', ['p_read_orders', 'p_update_refunds'])
  await change(harness, 'DELETE', ['p_create_orders', 'p_read_invoices'])
  await change(harness, 'POST', ['p_create_orders'])
}

/**
 * The feed polled once it shows every change committed (after the query's after, of its resource_id): a
 * transaction open anywhere on the test cluster (other test files run beside this one) holds
 * changes back for a while. Not settled: what is readable now.
 */
async function poll (harness: Harness, query = '', { settled = true } = {}): Promise<FeedEntry[]> {
  const parameters = new URLSearchParams(query)
  const { rows } = await harness.db.query<{ id: string }>(`
    SELECT id::text FROM permission_changes WHERE ($1::text IS NULL OR resource_id = $1) AND ($2::bigint IS NULL OR id > $2) ORDER BY id`,
  [parameters.get('resource_id'), parameters.get('after')])
  const committed = rows.map(({ id }) => id).join()
  for (const deadline = Date.now() + 30_000; ; await sleep(50)) {
    const answer = await harness.request(`/permission_changes?limit=500${query}`, { token: readToken() })
    if (answer.status !== 200) throw new Error(`poll → ${answer.status}: ${answer.text}`)
    const entries = answer.body as FeedEntry[]
    if (!settled || entries.map(({ id }) => id).join() === committed || Date.now() > deadline) return entries
  }
}

/** A stream of the feed, closed from this side when the test ends. */
async function stream (t: Test, harness: Harness, query = '', { headers, ...options }: OpenOptions = {}): Promise<SseStream> {
  const opened = await openStream(`${harness.baseUrl}/permission_changes${query}`, { headers: { authorization: `Bearer ${readToken()}`, ...headers }, ...options })
  t.teardown(() => opened.close())
  return opened
}

/**
 * How many changes of ~2.1 KB (40 ids of 40 characters) to record so that bytes wait on the server
 * for a consumer that reads nothing: more than twice the most a loopback socket's send buffer grows
 * to (tcp_wmem's maximum, 4 MB here; its receive buffer does not grow while nothing is read), and
 * at least 10 MB.
 */
function changesBeyondSocketBuffers (): number {
  const sendBufferMax = Number(readFileSync('/proc/sys/net/ipv4/tcp_wmem', 'utf8').trim().split(/\s+/)[2])
  return Math.ceil(Math.max(10 * 1024 ** 2, 2 * sendBufferMax + 4 * 1024 ** 2) / 2100)
}

/** Records changesBeyondSocketBuffers() changes, by SQL; how many the feed then holds in all. */
async function recordBeyondSocketBuffers (harness: Harness): Promise<number> {
  await harness.db.query(`INSERT INTO permission_changes (resource_id, client_id, action, permission_ids, request_id)
    SELECT 'orders-api', 'app-a', 'granted', array_fill(repeat('p', 40), ARRAY[40]), 'many-' || n
    FROM generate_series(1, $1::int) AS n`, [changesBeyondSocketBuffers()])
  const { rows: [{ recorded }] } = await harness.db.query<{ recorded: number }>('SELECT count(*)::int AS recorded FROM permission_changes')
  return recorded
}

const ids = (events: ReadonlyArray<{ id?: string }>) => events.map(({ id }) => id)
const increasing = (list: ReadonlyArray<string | undefined>) => list.every((id, index) => index === 0 || BigInt(id!) > BigInt(list[index - 1]!))

/**
 * Makes one more change and waits for it on the stream: whatever the stream sent before it (a
 * duplicate, a change it should not have sent) is then in `events` too. Returns the new entry.
 * Once per database: it grants app-b p_delete_refunds, which it then holds.
 */
async function sentinel (t: Test, harness: Harness, s: SseStream): Promise<FeedEntry> {
  const from = s.events.length
  const requestId = await change(harness, 'POST', ['p_delete_refunds'], ordersPath('app-b'))
  const sent = () => s.events.slice(from).find((event) => (JSON.parse(event.data) as FeedEntry).request_id === requestId)
  await s.until('the sentinel change', () => sent() !== undefined, 30_000)
  const { id } = sent()!
  const [entry] = await poll(harness, `&after=${BigInt(id!) - 1n}`)
  t.same(entry, JSON.parse(sent()!.data), 'the sentinel sent as polled')
  return entry
}

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
  t.match(s.text(), /^retry: 1000\n\n(: heartbeat\n\n)+$/, 'nothing else on the wire')
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
    await until('the first read waiting on the lock', async () => (await harness.db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()")).rows[0].n > 0)
    await sleep(400)
  } finally {
    await locker.query('ROLLBACK')
    locker.release()
  }
  const s = await opening!
  await s.until('two heartbeats', () => s.comments.length >= 2, 10_000)
  t.match(s.text(), /^retry: 1000\n\n(: heartbeat\n\n)+$/, 'the retry field first, then heartbeats only')
})

t.test('a consumer that stops reading is cut when changes come while more than FEED_STREAM_BUFFER_BYTES wait for it; one reading normally gets every change; the count returns to 0', async (t) => {
  const logs = captureLogs()
  // The reader shares this process, and the cores, with the server: it keeps up batch by batch, and
  // a batch is two pages, so however late it reads within one it never has more waiting than a page
  // when the next is written (the bound is the page's size). Flooded in one go, it once fell more
  // than the bound plus a page behind and was cut itself.
  const bufferBytes = 1024 * 1024
  // The paused consumer is cut for falling behind, never for having stopped reading (below).
  const harness = await build(t, { FEED_STREAM_BUFFER_BYTES: String(bufferBytes), FEED_STALL_TIMEOUT_MS: '3600000', LOG_LEVEL: 'info' }, { logs: logs.stream })
  await harness.seed(ordersFixture())
  const slow = await stream(t, harness, '', { paused: true })
  const reader = await stream(t, harness)
  t.equal(harness.app.feed.streams, 2)
  const { rows: [{ seeded }] } = await harness.db.query<{ seeded: number }>('SELECT count(*)::int AS seeded FROM permission_changes')
  // Read through the seeded changes first, so that each batch is two whole pages.
  await reader.until('the seeded changes', () => reader.events.length >= seeded)
  // About 17 MB of changes, far more than the sockets' buffers and the bound hold (loopback's reach
  // a few MB: the paused consumer had taken about 4 MB when it was cut at 4 KiB), written by SQL in
  // eight transactions of two pages each (FEED_PAGE_SIZE): each change ~2.1 KB (40 ids of 40 characters).
  const batches = 8
  const perBatch = 2 * FEED_PAGE_SIZE
  for (let batch = 0; batch < batches; batch++) {
    await harness.db.query(`INSERT INTO permission_changes (resource_id, client_id, action, permission_ids, request_id)
      SELECT 'orders-api', 'app-a', 'granted', array_fill(repeat('p', 40), ARRAY[40]), 'flood-${batch}-' || n FROM generate_series(1, $1::int) AS n`, [perBatch])
    await reader.until(`batch ${batch + 1} of ${batches}, by the consumer that reads`, () => reader.events.length >= seeded + (batch + 1) * perBatch, 60_000)
  }
  await until('the slow consumer cut', () => harness.app.feed.streams === 1, 60_000)
  t.equal(harness.app.feed.cut, 1, 'counted as cut')
  const metrics = await (await fetch(`${harness.baseUrl}/metrics`)).text()
  t.match(metrics, /^# TYPE feed_streams_cut_total counter\nfeed_streams_cut_total 1$/m, 'in the metrics too, a counter')
  t.match(metrics, /^feed_streams_cut 1$/m, 'and under its first name, a gauge')
  t.ok(logs.lines.some((line) => line.msg === 'change feed: consumer too slow, disconnected' && line.bufferBytes === bufferBytes), 'logged')
  const recorded = (await harness.db.query<{ id: string }>('SELECT id FROM permission_changes ORDER BY id')).rows.map(({ id }) => id)
  t.equal(reader.events.length, recorded.length)
  t.ok(ids(reader.events).every((id, index) => id === recorded[index]), 'every change once, in order')
  t.equal(reader.outcome, undefined, 'the reader is still connected')

  slow.resume()
  t.equal(await slow.finished, 'cut', 'the slow consumer sees its connection closed, not an end')
  t.ok(slow.events.length < recorded.length, `it had read ${slow.events.length} of ${recorded.length}`)
  t.ok(increasing(ids(slow.events)), 'what it got is in order: it resumes with Last-Event-ID')

  // The reader still follows.
  await sentinel(t, harness, reader)
  t.equal(reader.events.length, recorded.length + 1)
  reader.close()
  await until('no stream counted', () => harness.app.feed.streams === 0)
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

t.test('catching up, a consumer that reads nothing for a while gathers no listeners; changes pruned before it got them end its stream, and resuming answers 410', async (t) => {
  const warnings: Error[] = []
  const onWarning = (warning: Error) => { warnings.push(warning) }
  process.on('warning', onWarning)
  t.teardown(() => { process.off('warning', onWarning) })
  const logs = captureLogs()
  const harness = await build(t, { FEED_STREAM_BUFFER_BYTES: '1024', LOG_LEVEL: 'info' }, { logs: logs.stream })
  await harness.seed(ordersFixture())
  // Changes recorded 40 days ago, more than the socket buffers take for a consumer that reads
  // nothing: its stream waits for room, page by page.
  const { rows } = await harness.db.query<{ id: string }>(`INSERT INTO permission_changes (at, resource_id, client_id, action, permission_ids, request_id)
    SELECT now() - interval '40 days', 'orders-api', 'app-a', 'granted', array_fill(repeat('p', 40), ARRAY[40]), 'old-' || n
    FROM generate_series(1, $1::int) AS n RETURNING id`, [changesBeyondSocketBuffers()])
  const old = rows.map(({ id }) => id).sort((a, b) => (BigInt(a) < BigInt(b) ? -1 : 1))
  await change(harness, 'DELETE', ['p_read_orders'])

  const slow = await stream(t, harness, '', { paused: true })
  // More than ten of the stream's checks for room (one each 100 ms): before, each left two
  // listeners on the response, and the eleventh 'drain' listener drew Node's warning.
  await sleep(1_500)
  t.same(warnings.filter(({ name }) => name === 'MaxListenersExceededWarning').map(String), [], 'no listener left behind while it waits')

  t.equal(await pruneChanges(harness.db, 30), old.length, 'the old changes pruned while it waits')
  slow.resume()
  await slow.until('its stream over', () => slow.outcome !== undefined, 30_000)
  t.equal(slow.outcome, 'end', 'its stream ends, cleanly')
  const got = ids(slow.events)
  t.ok(got.length > 0 && got.length < old.length, `it got ${got.length} of the ${old.length} old changes`)
  t.same(got, old.slice(0, got.length), 'those from the start, in order: nothing after the gap')
  t.ok(logs.lines.some((line) => /^change feed: changes the stream had yet to send were pruned/.test(String(line.msg)) && line.prunedThrough === old.at(-1)), 'logged')

  const resumed = await stream(t, harness, '', { headers: { 'last-event-id': got.at(-1)! } })
  t.equal(resumed.status, 410, 'resuming from its last event: the changes after it are gone')
  t.match(JSON.parse(resumed.text()), { type: '/problems/changes-pruned', pruned_through: old.at(-1) })
  await until('no stream counted', () => harness.app.feed.streams === 0)
})

t.test('a consumer that takes nothing of what waits for it for FEED_STALL_TIMEOUT_MS is cut, catching up; one reading beside it is not', async (t) => {
  const logs = captureLogs()
  // Catching up, a stream reads its next page once at most half the bound waits: 2 MiB, so that
  // what it read ahead for its stalled consumer is told apart from a page.
  const bufferBytes = 2 * 1024 ** 2
  const harness = await build(t, { FEED_STREAM_BUFFER_BYTES: String(bufferBytes), FEED_HEARTBEAT_MS: '200', FEED_STALL_TIMEOUT_MS: '1000', LOG_LEVEL: 'info' }, { logs: logs.stream })
  await harness.seed(ordersFixture())
  const recorded = await recordBeyondSocketBuffers(harness)
  const stalled = await stream(t, harness, '', { paused: true })
  const reader = await stream(t, harness)
  await until('the stalled consumer cut', () => harness.app.feed.streams === 1, 60_000)
  t.equal(harness.app.feed.cut, 1, 'counted as cut')
  const line = logs.lines.find((line) => line.msg === 'change feed: consumer stopped reading, disconnected')
  t.match(line, { stallTimeoutMs: 1000 }, 'logged, with the timeout')
  t.ok(Number(line?.waiting) > 0, `with what waited for it: ${String(line?.waiting)} bytes`)
  await reader.until('every change, by the consumer that reads', () => reader.events.length >= recorded, 60_000)
  t.equal(reader.events.length, recorded)
  t.equal(reader.outcome, undefined, 'the reader is still connected')
  t.equal(harness.app.feed.cut, 1, 'and was not cut')
  // The largest page as written (an event's bytes, and a chunk's framing on the wire for each).
  const pageBytes = FEED_PAGE_SIZE * (Math.max(...reader.events.map(({ id, data }) => Buffer.byteLength(`id: ${id}\ndata: ${data}\n\n`))) + 16)
  t.ok(Number(line?.waiting) <= bufferBytes / 2 + pageBytes, `what waited for it is at most half the bound and a page: ${String(line?.waiting)} bytes`)

  stalled.resume()
  t.equal(await stalled.finished, 'cut', 'the stalled consumer sees its connection closed, not an end')
  t.ok(stalled.events.length < recorded, `it had read ${stalled.events.length} of ${recorded}`)
  t.ok(increasing(ids(stalled.events)), 'what it got is in order: it resumes with Last-Event-ID')
  reader.close()
  await until('no stream counted', () => harness.app.feed.streams === 0)
})

/** A stream that gets only heartbeats (a cursor past every change): each comment on it is one tick of the feed's heartbeat. */
async function heartbeatClock (t: Test, harness: Harness): Promise<SseStream> {
  return await stream(t, harness, '?after=999999999999999999')
}

/** The blocks of a stream's text that carry an id and no data: the cursor moved on (EventSource fires no event for them). */
const cursorBlocks = (text: string) => text.split('\n\n').filter((block) => /^id: \d+$/.test(block)).map((block) => block.slice('id: '.length))

t.test('a consumer that takes nothing is not cut before FEED_STALL_TIMEOUT_MS: its stream waits across heartbeats, then it gets every change', async (t) => {
  const harness = await build(t, { FEED_STREAM_BUFFER_BYTES: '1024', FEED_HEARTBEAT_MS: '100' })
  await harness.seed(ordersFixture())
  const recorded = await recordBeyondSocketBuffers(harness)
  const paused = await stream(t, harness, '', { paused: true })
  const clock = await heartbeatClock(t, harness)
  // Twenty ticks, the most of them with more written for the paused consumer than its sockets hold
  // (read a page at a time) and none of it taken: none may cut it, the stall timeout (60 s) is far.
  await clock.until('twenty heartbeats', () => clock.comments.length >= 20, 30_000)
  t.equal(harness.app.feed.streams, 2, 'the paused consumer is still connected')
  t.equal(harness.app.feed.cut, 0, 'and was not cut')
  paused.resume()
  await paused.until('every change', () => paused.events.length >= recorded, 60_000)
  t.equal(paused.events.length, recorded)
  t.equal(paused.outcome, undefined, 'still open')
})

t.test('a consumer that stops reading while live is cut for it after FEED_STALL_TIMEOUT_MS, even as changes keep coming within the bound', async (t) => {
  const logs = captureLogs()
  // The bound (64 MiB) holds every change made here: the consumer is cut for having stopped, not for its pace.
  const harness = await build(t, { FEED_STREAM_BUFFER_BYTES: String(64 * 1024 ** 2), FEED_HEARTBEAT_MS: '100', FEED_STALL_TIMEOUT_MS: '1000', LOG_LEVEL: 'info' }, { logs: logs.stream })
  await harness.seed(ordersFixture())
  // Live as soon as it is open: its first page is short, and with this bound it waits for no room.
  const stalled = await stream(t, harness, '', { paused: true })
  // Then more than its sockets hold, in one go.
  await recordBeyondSocketBuffers(harness)
  // A change every 50 ms or so: each one is more written for it, none taken by it.
  let made = 0
  await until('the stalled consumer cut', async () => {
    if (harness.app.feed.cut > 0) return true
    await harness.db.query(`INSERT INTO permission_changes (resource_id, client_id, action, permission_ids, request_id)
      VALUES ('orders-api', 'app-a', 'granted', ARRAY['p_read_orders'], 'trickle-' || $1::text)`, [made++])
    return false
  }, 30_000)
  t.ok(made > 0, `${made} changes made while it stalled`)
  t.ok(logs.lines.some((line) => line.msg === 'change feed: consumer stopped reading, disconnected'), 'cut as stalled')
  t.notOk(logs.lines.some((line) => line.msg === 'change feed: consumer too slow, disconnected'), 'not as too slow')
  stalled.resume()
  t.equal(await stalled.finished, 'cut')
})

t.test('a consumer reading slowly, with bytes waiting for it for longer than FEED_STALL_TIMEOUT_MS, is not cut: it takes some between heartbeats', async (t) => {
  const harness = await build(t, { FEED_STREAM_BUFFER_BYTES: String(64 * 1024 ** 2), FEED_HEARTBEAT_MS: '100', FEED_STALL_TIMEOUT_MS: '2000' })
  await harness.seed(ordersFixture())
  // Live as soon as it is open (its first page is short, and with this bound it waits for no room), then
  const slow = await stream(t, harness, '', { paused: true })
  // several MB more than its sockets hold, which it reads at about 2 MB a second: bytes
  // wait for it for several stall timeouts, and the kernel lets more in every second or so.
  const recorded = await recordBeyondSocketBuffers(harness)
  slow.res.on('data', (chunk: Buffer) => {
    slow.pause()
    setTimeout(() => { slow.resume() }, Math.ceil(chunk.length / 2000))
  })
  slow.resume()
  await slow.until('every change', () => slow.events.length >= recorded, 120_000)
  t.equal(slow.events.length, recorded)
  t.equal(slow.outcome, undefined, 'still open')
  t.equal(harness.app.feed.cut, 0, 'not cut')
})

t.test('fastify.close() with a consumer that reads nothing and bytes waiting for it: the close is not held up, its connection is cut', async (t) => {
  const harness = await build(t, { FEED_STREAM_BUFFER_BYTES: '1024', FEED_HEARTBEAT_MS: '100' })
  await harness.seed(ordersFixture())
  await recordBeyondSocketBuffers(harness)
  const paused = await stream(t, harness, '', { paused: true })
  const clock = await heartbeatClock(t, harness)
  // By then it has read, a page at a time, more than the paused consumer's sockets hold.
  await clock.until('twenty heartbeats', () => clock.comments.length >= 20, 30_000)
  let timer: NodeJS.Timeout | undefined
  const closed = await Promise.race([
    harness.app.close().then(() => 'closed'),
    new Promise<string>((resolve) => { timer = setTimeout(() => resolve('still closing'), 15_000) })
  ])
  clearTimeout(timer)
  t.equal(closed, 'closed', 'the close resolved')
  paused.resume()
  t.equal(await paused.finished, 'cut', 'what it had yet to take is not sent: its connection is cut')
  t.equal(await clock.finished, 'end', 'the stream whose consumer reads ends cleanly')
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
  t.ok(logs.lines.some((line) => line.msg === 'change feed: the token that opened the stream expired; ended (the consumer resumes with a fresh one)'), 'logged')
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
  const live = await stream(t, harness)
  const recorded = await recordBeyondSocketBuffers(harness)
  const catchingUp = await stream(t, harness, '', { paused: true })
  await live.until('every change, live', () => live.events.length >= recorded, 60_000)

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

t.test('HEAD with Accept: text/event-stream answers without starting a stream', async (t) => {
  const harness = await build(t)
  const head = await harness.request('/permission_changes', { method: 'HEAD', token: readToken(), headers: { accept: 'text/event-stream' } })
  t.equal(head.status, 200)
  t.equal(head.text, '')
  t.notMatch(head.headers.get('content-type') ?? '', /event-stream/)
  t.equal(harness.app.feed.streams, 0)
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
