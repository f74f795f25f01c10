// The change feed's shared reader (src/feed-hub.ts) against a real database, with consumers the
// test holds back: a subscriber whose cursor a prune passes before it was given the changes there
// is ended, not moved on past them, whether it was catching up or live.
import pg from 'pg'
import t, { type Test } from 'tap'
import { readFeed } from '../../db/queries/feed.js'
import { pruneChanges } from '../../db/queries/history.js'
import { seedDatabase } from '../../db/seed.js'
import { FeedHub, type FeedSubscriber } from '../../src/feed-hub.js'
import { newDatabase } from '../support/database.js'
import { ordersFixture } from '../support/fixtures.js'
import { until } from '../support/waiting.js'

const PAGE_SIZE = 2

/** A consumer whose room for more the test gives: what it was given, and the mark it was told it missed. */
function consumer () {
  let open = () => {}
  let room = Promise.resolve()
  const given: string[] = []
  const seen: { missed?: bigint } = {}
  const subscriber: FeedSubscriber & { closed: boolean } = {
    after: -1n,
    closed: false,
    write: (changes) => { given.push(...changes.map(({ id }) => String(id))) },
    room: () => room,
    missed: (prunedThrough) => {
      seen.missed = prunedThrough
      subscriber.closed = true
    }
  }
  return {
    subscriber,
    given,
    seen,
    hold: () => { room = new Promise((resolve) => { open = resolve }) },
    release: () => open()
  }
}

async function setUp (t: Test) {
  const { url, drop } = await newDatabase({ migrated: true })
  const pool = new pg.Pool({ connectionString: url, max: 3 })
  // pool.end() resolves once it has let its connections go, not once they are closed: one still
  // closing when the database is dropped (WITH FORCE) hears 57P01 from the server.
  pool.on('error', () => {})
  let closed = false
  const hub = new FeedHub({
    read: (input) => readFeed(pool, input, { prepared: false }),
    encode: (change) => Buffer.from(change.entry),
    pageSize: PAGE_SIZE,
    heldBackRetryMs: 20,
    pollMs: 60_000,
    onError: (error) => { if (!closed) t.error(error) }
  })
  // The hub first: a read it still has under way ends with the pool, before the database goes.
  t.teardown(async () => {
    closed = true
    hub.close()
    await pool.end()
    await drop()
  })
  await seedDatabase(pool, ordersFixture())
  /** Records `count` changes with a time `daysAgo` days back; their ids, in feed order. */
  const record = async (count: number, daysAgo: number) => {
    const { rows } = await pool.query<{ id: string }>(`INSERT INTO permission_changes (at, resource_id, client_id, action, permission_ids, request_id)
      SELECT now() - make_interval(days => $2), 'orders-api', 'app-a', 'granted', ARRAY['p_read_orders'], 'r-' || n
      FROM generate_series(1, $1::int) AS n RETURNING id`, [count, daysAgo])
    return rows.map(({ id }) => id).sort((a, b) => (BigInt(a) < BigInt(b) ? -1 : 1))
  }
  const firstPage = () => readFeed(pool, { limit: PAGE_SIZE }, { prepared: false })
  return { pool, hub, record, firstPage }
}

t.test('catching up: a prune that passes the cursor while the consumer is slow ends it, after what it was given; nothing past the gap', async (t) => {
  const { pool, hub, record, firstPage } = await setUp(t)
  const old = await record(6, 40)
  const [recent] = await record(1, 0)
  const c = consumer()
  c.hold()
  const following = hub.follow(c.subscriber, await firstPage())
  await until('the first page given', () => c.given.length === PAGE_SIZE)
  t.same(c.given, old.slice(0, PAGE_SIZE), 'the oldest two')

  t.equal(await pruneChanges(pool, 30), old.length, 'the old changes pruned while it waits for room')
  c.release()
  await following
  t.equal(c.seen.missed, BigInt(old.at(-1)!), 'told the mark it missed')
  t.same(c.given, old.slice(0, PAGE_SIZE), `given nothing after the gap (not ${recent})`)
})

t.test('live: changes written with an old time and pruned before the shared reader read them end the subscribers behind the mark; one ahead of it goes on', async (t) => {
  const { pool, hub, record, firstPage } = await setUp(t)
  const c = consumer()
  await hub.follow(c.subscriber, await firstPage())
  t.ok(c.subscriber.after >= 0n, 'caught up (nothing recorded yet) and live')

  // A backfill's changes (an old `at`) that the shared reader has not read yet, then the prune: with
  // nothing recorded within 30 days, it deletes everything below the horizon.
  const backfilled = await record(2, 40)
  t.equal(await pruneChanges(pool, 30), 2)
  // A consumer that starts now, from the oldest kept: ahead of the mark.
  const later = consumer()
  await hub.follow(later.subscriber, await firstPage())
  const [next] = await record(1, 0)
  hub.wake()
  await until('the later consumer given the next change', () => later.given.includes(next))
  t.equal(c.seen.missed, BigInt(backfilled.at(-1)!), 'the first subscriber told the mark it missed')
  t.same(c.given, [], 'and given nothing')
  t.equal(later.seen.missed, undefined, 'the later one missed nothing')
  t.same(later.given, [next])
})

t.test('without a prune in between, a slow consumer catching up gets every change once, in order', async (t) => {
  const { hub, record, firstPage } = await setUp(t)
  const recorded = await record(7, 0)
  const c = consumer()
  c.hold()
  const following = hub.follow(c.subscriber, await firstPage())
  await until('the first page given', () => c.given.length === PAGE_SIZE)
  c.release()
  await following
  t.same(c.given, recorded)
  t.equal(c.seen.missed, undefined)
})
