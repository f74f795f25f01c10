// The change feed's shared reader (src/feed-hub.ts) against a real database, with consumers the
// test holds back: a subscriber whose cursor a prune passes before it was given the changes there
// is ended, not moved on past them, whether it was catching up or live.
import pg from 'pg'
import { setTimeout as sleep } from 'node:timers/promises'
import t, { type Test } from 'tap'
import { type FeedInput, readFeed } from '../../db/queries/feed.js'
import { pruneChanges } from '../../db/queries/history.js'
import { seedDatabase } from '../../db/seed.js'
import { FeedHub, type FeedSubscriber } from '../../src/feed-hub.js'
import { newDatabase } from '../support/database.js'
import { ordersFixture } from '../support/fixtures.js'
import { until } from '../support/waiting.js'

const PAGE_SIZE = 2

/**
 * A consumer whose room for more the test gives: what it was given (each write, live or catching
 * up), how often it was asked for room, the mark it was told it missed; `closeAfterWrites` closes
 * it once it has had that many writes (as a stream cut or gone).
 */
function consumer ({ closeAfterWrites = Infinity } = {}) {
  let open = () => {}
  let room = Promise.resolve()
  const given: string[] = []
  const writes: Array<{ ids: string[], live: boolean }> = []
  const seen: { missed?: bigint, rooms: number, writesAfterClose: number } = { rooms: 0, writesAfterClose: 0 }
  const subscriber: FeedSubscriber & { closed: boolean } = {
    after: -1n,
    closed: false,
    write: (changes, live) => {
      if (subscriber.closed) seen.writesAfterClose++
      const ids = changes.map(({ id }) => String(id))
      writes.push({ ids, live })
      given.push(...ids)
      if (writes.length >= closeAfterWrites) subscriber.closed = true
    },
    room: () => {
      seen.rooms++
      return room
    },
    missed: (prunedThrough) => {
      seen.missed = prunedThrough
      subscriber.closed = true
    }
  }
  return {
    subscriber,
    given,
    writes,
    seen,
    hold: () => { room = new Promise((resolve) => { open = resolve }) },
    release: () => open()
  }
}

interface HubSettings {
  pollMs?: number
  /** Reads that fail before the real ones (a database gone for a moment). */
  failingReads?: number
}

async function setUp (t: Test, { pollMs = 60_000, failingReads = 0 }: HubSettings = {}) {
  const { url, drop } = await newDatabase({ migrated: true })
  const pool = new pg.Pool({ connectionString: url, max: 3 })
  // pool.end() resolves once it has let its connections go, not once they are closed: one still
  // closing when the database is dropped (WITH FORCE) hears 57P01 from the server.
  pool.on('error', () => {})
  let closed = false
  const errors: unknown[] = []
  const reads: FeedInput[] = []
  let inFlight = 0
  let gate: Promise<void> | undefined
  const hub = new FeedHub({
    read: async (input) => {
      reads.push(input)
      inFlight++
      try {
        if (failingReads-- > 0) throw new Error('the database is gone for a moment')
        const page = await readFeed(pool, input, { prepared: false })
        await gate
        return page
      } finally {
        inFlight--
      }
    },
    encode: (change) => Buffer.from(change.entry),
    pageSize: PAGE_SIZE,
    heldBackRetryMs: 20,
    pollMs,
    onError: (error) => { if (!closed) errors.push(error) }
  })
  // The hub first: a read it still has under way ends with the pool, before the database goes.
  t.teardown(async () => {
    closed = true
    hub.close()
    await pool.end()
    await drop()
  })
  await seedDatabase(pool, ordersFixture())
  /**
   * Records `count` changes with a time `daysAgo` days back; their ids, in feed order. Settled: once
   * a read may show them, which a transaction open anywhere on the shared server delays (the
   * horizon is the whole server's).
   */
  const record = async (count: number, daysAgo: number, { settled = true } = {}) => {
    const { rows } = await pool.query<{ id: string }>(`INSERT INTO permission_changes (at, resource_id, client_id, action, permission_ids, request_id)
      SELECT now() - make_interval(days => $2), 'orders-api', 'app-a', 'granted', ARRAY['p_read_orders'], 'r-' || n
      FROM generate_series(1, $1::int) AS n RETURNING id`, [count, daysAgo])
    const ids = rows.map(({ id }) => id).sort((a, b) => (BigInt(a) < BigInt(b) ? -1 : 1))
    if (settled) {
      await until('the recorded changes readable', async () =>
        BigInt((await readFeed(pool, { limit: 1 }, { prepared: false })).horizon) > BigInt(ids.at(-1)!))
    }
    return ids
  }
  /** Until the hub has no read under way. */
  const idle = () => until('the hub idle', () => inFlight === 0)
  const firstPage = () => readFeed(pool, { limit: PAGE_SIZE }, { prepared: false })
  /**
   * Wakes the hub and waits until its read is under way; that read, and any after it, is held once
   * it has its page, until the function returned is called.
   */
  const heldRead = async () => {
    let open = () => {}
    gate = new Promise((resolve) => { open = resolve })
    const before = reads.length
    hub.wake()
    await until('a read under way', () => reads.length > before)
    return () => {
      gate = undefined
      open()
    }
  }
  return { pool, hub, record, firstPage, errors, reads, idle, heldRead }
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
  const { pool, hub, record, firstPage, idle } = await setUp(t)
  const c = consumer()
  await hub.follow(c.subscriber, await firstPage())
  t.ok(c.subscriber.after >= 0n, 'caught up (nothing recorded yet) and live')
  // The read its joining woke done: the changes below come after it.
  await idle()

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

t.test('catching up, page by page, none of them live; then live: a full page is read on at once, in pages, never an empty write', async (t) => {
  const { hub, record, firstPage, errors } = await setUp(t)
  const recorded = await record(5, 0)
  const c = consumer()
  await hub.follow(c.subscriber, await firstPage())
  t.same(c.given, recorded)
  t.same(c.writes.map(({ ids, live }) => [ids.length, live]), [[2, false], [2, false], [1, false]], 'caught up by its own reads')
  t.equal(c.seen.rooms, 3, 'asked for room after each')

  // Five more, one wake (no poll, no notification): the shared reader reads on while its pages are full.
  const more = await record(5, 0)
  hub.wake()
  await until('the five more given', () => c.given.length === 10)
  t.same(c.given, [...recorded, ...more])
  t.same(c.writes.slice(3).map(({ ids, live }) => [ids.length, live]), [[2, true], [2, true], [1, true]], 'live, a page at a time')
  t.ok(c.writes.every(({ ids }) => ids.length > 0), 'no empty write')
  t.same(errors, [])
})

t.test('a subscriber ahead of the shared reader gets none of its changes twice; one that left gets nothing more', async (t) => {
  const { hub, record, firstPage, errors } = await setUp(t)
  const first = consumer()
  await hub.follow(first.subscriber, await firstPage())
  const [x] = await record(1, 0)
  // The second starts after x is recorded: its first page has x, and it joins ahead of the reader.
  const second = consumer()
  await hub.follow(second.subscriber, await firstPage())
  t.same(second.given, [x])
  const third = consumer()
  await hub.follow(third.subscriber, await firstPage())
  hub.unfollow(third.subscriber)
  const [y] = await record(1, 0)
  hub.wake()
  await until('y given to the first two', () => first.given.includes(y) && second.given.includes(y))
  t.same(first.given, [x, y])
  t.same(second.given, [x, y], 'x once')
  t.same(third.given, [x], 'the one that left: nothing after it left')
  t.same(errors, [])
})

t.test('a subscriber closed while it is given changes, asked for room or read for is given nothing more', async (t) => {
  const { hub, record, firstPage, errors, reads } = await setUp(t)
  await record(6, 0)
  // Closed by its first write: not asked for room, no more reads for it.
  const cut = consumer({ closeAfterWrites: 1 })
  await hub.follow(cut.subscriber, await firstPage())
  t.equal(cut.seen.rooms, 0, 'closed by a write: not asked for room')
  t.equal(cut.writes.length, 1)
  // Closed while it waits for room.
  const gone = consumer()
  gone.hold()
  const following = hub.follow(gone.subscriber, await firstPage())
  await until('its first page given', () => gone.writes.length === 1)
  gone.subscriber.closed = true
  const readsBefore = reads.length
  gone.release()
  await following
  t.equal(gone.writes.length, 1, 'closed while waiting for room: given nothing more')
  t.equal(reads.length, readsBefore, 'nor read for (its first page was full)')
  // Closed while its next page is read.
  const late = consumer()
  late.subscriber.room = () => {
    setImmediate(() => { late.subscriber.closed = true })
    return Promise.resolve()
  }
  await hub.follow(late.subscriber, await firstPage())
  t.equal(late.writes.length, 1, 'closed during the read: its page is not given')
  // Live, closed by a write (cut as too slow): left out of the next pages, which a witness that
  // stays live is given. Three writes catch it up.
  const live = consumer({ closeAfterWrites: 4 })
  await hub.follow(live.subscriber, await firstPage())
  const witness = consumer()
  await hub.follow(witness.subscriber, await firstPage())
  await record(1, 0)
  hub.wake()
  await until('its live write', () => live.writes.length === 4)
  t.ok(live.writes[3].live)
  const [next] = await record(1, 0)
  hub.wake()
  await until('the next change given to the witness', () => witness.given.includes(next))
  t.equal(live.seen.writesAfterClose, 0, 'a live subscriber that closed is written to no more')
  t.same(errors, [])
})

t.test('nobody live: a wake reads nothing; a read that fails is reported and tried again; changes held back behind an open transaction come once it commits, unprompted', async (t) => {
  const { pool, hub, record, firstPage, errors, reads, idle } = await setUp(t, { failingReads: 1 })
  hub.wake()
  await sleep(50)
  t.same(reads, [], 'no read with nobody to read for')
  const c = consumer()
  const page = await firstPage()
  await hub.follow(c.subscriber, page)
  const [x] = await record(1, 0)
  hub.wake()
  await until('x given after the failed read', () => c.given.includes(x))
  t.equal(errors.length, 1, 'the failure reported once')

  // A transaction left open holds back the change committed after it; no wake comes when it ends.
  const held = await pool.connect()
  try {
    await held.query('BEGIN')
    await held.query(`INSERT INTO permission_changes (resource_id, client_id, action, permission_ids, request_id)
      VALUES ('orders-api', 'app-a', 'granted', ARRAY['p_read_orders'], 'held')`)
    const [after] = await record(1, 0, { settled: false })
    const readsBefore = reads.length
    hub.wake()
    await until('a read while it is held back', () => reads.length > readsBefore)
    await idle()
    t.notOk(c.given.includes(after), 'held back')
    await held.query('COMMIT')
    await until('both given once the transaction ends', () => c.given.length === 3)
  } finally {
    held.release()
  }
})

t.test('the poll reads while anyone is live, whatever wakes it or not', async (t) => {
  const { hub, record, firstPage } = await setUp(t, { pollMs: 50 })
  const c = consumer()
  await hub.follow(c.subscriber, await firstPage())
  const [x] = await record(1, 0)
  await until('x given by the poll alone', () => c.given.includes(x))
})

t.test('a cursor exactly at the prune mark missed nothing; a cursor past every change keeps nobody else from joining the shared reader', async (t) => {
  const { pool, hub, record, firstPage, idle } = await setUp(t)
  const old = await record(2, 40)
  const recent = await record(3, 0)
  const c = consumer()
  c.hold()
  const following = hub.follow(c.subscriber, await firstPage())
  await until('the old two given', () => c.given.length === 2)
  t.equal(await pruneChanges(pool, 30), 2, 'the prune\'s mark: the last change it was given')
  c.release()
  await following
  t.equal(c.seen.missed, undefined, 'at the mark: nothing missed')
  t.same(c.given, [...old, ...recent])

  const ahead = consumer()
  ahead.subscriber.after = 999999999999999999n
  await hub.follow(ahead.subscriber, await readFeed(pool, { after: String(ahead.subscriber.after), limit: PAGE_SIZE }, { prepared: false }))
  await idle()
  const next = consumer()
  await Promise.race([
    hub.follow(next.subscriber, await firstPage()),
    new Promise((_resolve, reject) => setTimeout(() => reject(new Error('never joined: caught up for ever behind the other\'s cursor')), 10_000).unref())
  ])
  const [x] = await record(1, 0)
  hub.wake()
  await until('x given, live', () => next.writes.some(({ ids, live }) => live && ids.includes(x)))
  t.same(ahead.given, [], 'the one ahead: nothing')
})

t.test('a subscriber at the shared reader\'s cursor joins it with no read of its own; after everyone left, the next to join sets where it reads from', async (t) => {
  const { pool, hub, record, firstPage, reads, idle } = await setUp(t)
  await record(1, 0)
  // A transaction holding an id keeps the horizon (the server's xmin) where it is, once every older
  // one (another test file's, in the same cluster) has ended: two first pages read then end at the
  // same cursor.
  const pin = await pool.connect()
  try {
    await pin.query('BEGIN')
    const { rows: [{ xid }] } = await pin.query<{ xid: string }>('SELECT pg_current_xact_id()::text AS xid')
    await until('the pin the oldest transaction running', async () =>
      (await pool.query<{ xmin: string }>('SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS xmin')).rows[0].xmin === xid)
    const first = consumer()
    await hub.follow(first.subscriber, await firstPage())
    await idle()
    const second = consumer()
    const page = await firstPage()
    const readsBefore = reads.length
    await Promise.race([
      hub.follow(second.subscriber, page),
      new Promise((_resolve, reject) => setTimeout(() => reject(new Error('never joined: read on for ever at the reader\'s cursor')), 10_000).unref())
    ])
    t.equal(second.subscriber.after, first.subscriber.after, 'at the same cursor')
    await idle()
    t.equal(reads.length, readsBefore + 1, 'one read: the shared reader\'s, which its joining woke')
    hub.unfollow(first.subscriber)
    hub.unfollow(second.subscriber)
  } finally {
    await pin.query('COMMIT')
    pin.release()
  }
  await record(2, 0)
  const third = consumer()
  await hub.follow(third.subscriber, await firstPage())
  t.equal(reads.at(-1)?.after, String(third.subscriber.after), 'the shared reader reads on from the new subscriber\'s cursor, not from where it was left')
})

t.test('nothing held back, or closed by its page, or everyone gone during a read, the hub reads no more; a wake during a read reads again once it ends; closed, the hub reads nothing', async (t) => {
  const { hub, record, firstPage, reads, idle, heldRead } = await setUp(t)
  // Joined, the shared reader reads once (its joining's wake); nothing held back, no read after it
  // until a wake (the poll is a minute away).
  const first = consumer()
  await hub.follow(first.subscriber, await firstPage())
  await idle()
  let readsBefore = reads.length
  await sleep(150)
  t.equal(reads.length, readsBefore, 'nothing held back: no read again until a wake')
  hub.unfollow(first.subscriber)

  // Closed by its first live write, of a full page (nothing recorded before it joined): the next
  // page is not read for nobody.
  const cut = consumer({ closeAfterWrites: 1 })
  await hub.follow(cut.subscriber, await firstPage())
  await idle()
  await record(3 * PAGE_SIZE, 0)
  readsBefore = reads.length
  hub.wake()
  await until('its write', () => cut.writes.length === 1)
  t.ok(cut.writes[0].live)
  await idle()
  await sleep(50)
  t.equal(reads.length, readsBefore + 1, 'one read')

  const c = consumer()
  await hub.follow(c.subscriber, await firstPage())
  await idle()
  const releaseFirst = await heldRead()
  const [x] = await record(1, 0)
  hub.wake()
  releaseFirst()
  await until('x given, with no poll (60 s) or notification', () => c.given.includes(x), 10_000)
  await idle()
  readsBefore = reads.length
  const releaseSecond = await heldRead()
  hub.unfollow(c.subscriber)
  releaseSecond()
  await idle()
  await sleep(50)
  t.equal(reads.length, readsBefore + 1, 'nobody left after the read: none after it')

  const last = consumer()
  await hub.follow(last.subscriber, await firstPage())
  await idle()
  hub.close()
  readsBefore = reads.length
  await record(1, 0)
  hub.wake()
  await sleep(50)
  t.equal(reads.length, readsBefore, 'closed: no read, whoever was live')
})

t.test('a subscriber whose cursor names a change not yet committed is not given that change once it commits; one behind it is', async (t) => {
  const { pool, hub, record, firstPage, idle } = await setUp(t)
  const first = consumer()
  await hub.follow(first.subscriber, await firstPage())
  await idle()
  const held = await pool.connect()
  try {
    await held.query('BEGIN')
    const { rows: [{ id }] } = await held.query<{ id: string }>(`INSERT INTO permission_changes (resource_id, client_id, action, permission_ids, request_id)
      VALUES ('orders-api', 'app-a', 'granted', ARRAY['p_read_orders'], 'held') RETURNING id`)
    // A consumer may name any cursor (after=): this one names the change not readable yet, and
    // joins ahead of the shared reader.
    const second = consumer()
    second.subscriber.after = BigInt(id)
    await hub.follow(second.subscriber, await readFeed(pool, { after: id, limit: PAGE_SIZE }, { prepared: false }))
    t.equal(second.subscriber.after, BigInt(id), 'its cursor where it named it')
    await held.query('COMMIT')
    const [next] = await record(1, 0)
    hub.wake()
    await until('both given the next change', () => first.given.includes(next) && second.given.includes(next))
    t.same(first.given, [id, next])
    t.same(second.given, [next], 'not the change its cursor names')
  } finally {
    held.release()
  }
})

/**
 * A first subscriber live, given x, and idle; and a page read before x was recorded (not full), which
 * ends below it: a later subscriber's start from behind the shared reader.
 */
async function readerPastStalePage (t: Test) {
  const setup = await setUp(t)
  const first = consumer()
  await setup.hub.follow(first.subscriber, await setup.firstPage())
  await setup.idle()
  const stale = await setup.firstPage()
  const [x] = await setup.record(1, 0)
  setup.hub.wake()
  await until('x given to the first, live', () => first.given.includes(x))
  await setup.idle()
  return { ...setup, first, stale, x }
}

t.test('a subscriber whose page ends behind the shared reader catches up with a read of its own before it joins: nothing between is skipped', async (t) => {
  const { hub, stale, x } = await readerPastStalePage(t)
  const second = consumer()
  await hub.follow(second.subscriber, stale)
  t.same(second.given, [x], 'x, read for it before it joined the reader already past x')
  t.same(second.writes.map(({ live }) => live), [false], 'by its own read')
})

t.test('everyone gone while the shared reader reads, and one joining from further back: the reader reads again from that one\'s cursor, not on from the page it had', async (t) => {
  const { hub, heldRead, first, stale, x } = await readerPastStalePage(t)
  // The reader's next read (from past x) under way; the first leaves, and one whose page ends below x joins.
  const release = await heldRead()
  hub.unfollow(first.subscriber)
  const second = consumer()
  await hub.follow(second.subscriber, stale)
  t.same(second.given, [], 'joined at once (nobody live): nothing given yet')
  release()
  await until('x given to the one that joined from behind it, with no poll (60 s) or notification', () => second.given.includes(x), 10_000)
  t.same(second.given, [x])
})
