// The change feed streamed, at its consumer's pace (src/routes/feed/stream.ts): a consumer that
// stops reading is cut once more than FEED_STREAM_BUFFER_BYTES wait for it, or once it takes nothing
// for FEED_STALL_TIMEOUT_MS; one reading slowly is not; a close is not held up by one that reads
// nothing. Over real sockets, with more bytes than the kernel's buffers hold. The rest of the stream
// is test/routes/feed-stream.test.ts.
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { pruneChanges } from '../../db/queries/history.js'
import { FEED_PAGE_SIZE } from '../../src/feed-events.js'
import { ordersFixture } from '../support/fixtures.js'
import { build } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { streamInWorker } from '../support/stream-in-worker.js'
import { readToken } from '../support/tokens.js'
import { until } from '../support/waiting.js'
import { change, changesBeyondSocketBuffers, heartbeatClock, ids, increasing, recordBeyondSocketBuffers, sentinel, shown, stream } from '../support/feed-stream.js'

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
  await shown(harness)

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
  const harness = await build(t, { FEED_STREAM_BUFFER_BYTES: String(64 * 1024 ** 2), FEED_HEARTBEAT_MS: '100', FEED_STALL_TIMEOUT_MS: '5000' })
  await harness.seed(ordersFixture())
  // Live as soon as it is open (its first page is short, and with this bound it waits for no room), then
  const slow = await stream(t, harness, '', { paused: true })
  // twice changesBeyondSocketBuffers() (here 25 MB, 17 MB more than its sockets hold), recorded
  // faster than it reads them, at 2 MB a second at most: bytes wait for it for 8 s at least,
  // longer than the stall timeout however fast the machine. The kernel lets more in once about
  // 1.5 MB more was read (a third of the send buffer): every second or so, up to 1.7 s with cores
  // shared by other test files; a stall timeout of 2 s, with half the changes, cut it there. It
  // reads from the start: paused while the changes were recorded, with bytes waiting, it could be
  // cut before it read any, were the recording slower than the timeout.
  slow.res.on('data', (chunk: Buffer) => {
    slow.pause()
    setTimeout(() => { slow.resume() }, Math.ceil(chunk.length / 2000))
  })
  slow.resume()
  await recordBeyondSocketBuffers(harness)
  const recorded = await recordBeyondSocketBuffers(harness)
  await slow.until('every change', () => slow.events.length >= recorded, 120_000)
  t.equal(slow.events.length, recorded)
  t.equal(slow.outcome, undefined, 'still open')
  t.equal(harness.app.feed.cut, 0, 'not cut')
})

t.test('a stall of the service\'s event loop past FEED_STALL_TIMEOUT_MS while its consumer reads: not cut, it gets every change', async (t) => {
  // After a stall the loop runs its timers (the heartbeat's check) before it reads its sockets: the
  // bytes the consumer took meanwhile are seen only once the socket is told it may write again.
  const harness = await build(t, { FEED_STREAM_BUFFER_BYTES: String(64 * 1024 ** 2), FEED_HEARTBEAT_MS: '100', FEED_STALL_TIMEOUT_MS: '2000' })
  await harness.seed(ordersFixture())
  const recorded = await recordBeyondSocketBuffers(harness)
  // Its consumer reads on a thread of its own, on while this one (the server's) is blocked.
  const consumer = await streamInWorker(t, `${harness.baseUrl}/permission_changes`, { headers: { authorization: `Bearer ${readToken()}` }, paused: true })
  t.equal(consumer.status, 200)
  // Paused for a moment, well within the stall timeout: its sockets fill, and bytes wait for it.
  await sleep(500)
  await consumer.resume()
  // The service's loop blocked past the stall timeout, the consumer reading all along. Blocked in
  // an I/O callback (the worker's answer), as by a long request handler: the loop's next turn runs
  // the timers that came due meanwhile first. (In a timer's callback, the loop's clock stays where
  // it was until the turn after: its I/O is read first.)
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 2500)
  await until('every change, by the consumer', async () => (await consumer.state()).events >= recorded || harness.app.feed.cut > 0, 60_000)
  t.equal(harness.app.feed.cut, 0, 'not cut')
  const { events, ids: got, outcome } = await consumer.state()
  t.equal(events, recorded)
  t.ok(increasing(got), 'in order')
  t.equal(outcome, undefined, 'still open')
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
