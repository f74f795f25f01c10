// The change feed's LISTEN connection (db/change-listener.ts) against the real test server: one
// connection however often it is started, a notification on its channel told, a connection lost
// told once and made again, a server it cannot reach tried again, and nothing left once closed.
import { once } from 'node:events'
import net from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import t, { type Test } from 'tap'
import { CHANGES_CHANNEL, ChangeListener } from '../../db/change-listener.js'
import { freePort } from '../../db/embedded-postgres.js'
import { newDatabase } from '../support/database.js'
import { holdingProxy } from '../support/holding-proxy.js'
import { until } from '../support/waiting.js'

async function setUp (t: Test) {
  const { url, drop } = await newDatabase()
  const admin = new pg.Pool({ connectionString: url, max: 1 })
  admin.on('error', () => {})
  t.teardown(async () => {
    await admin.end()
    await drop()
  })
  /** The backends of this database that are listening (their last statement was the LISTEN). */
  const listeners = async () => (await admin.query<{ pid: number }>(
    'SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query = $1', [`LISTEN ${CHANGES_CHANNEL}`])).rows.map(({ pid }) => pid)
  return { url, admin, listeners }
}

/** A listener whose events are counted. */
function counted (listener: ChangeListener) {
  const events = { change: 0, listening: 0, lost: 0 }
  listener.on('change', () => { events.change++ })
  listener.on('listening', () => { events.listening++ })
  listener.on('lost', () => { events.lost++ })
  return events
}

t.test('started twice at once: one connection, listening; a notification on its channel is told, one on another is not', async (t) => {
  const { url, admin, listeners } = await setUp(t)
  const listener = new ChangeListener({ connectionString: url })
  t.teardown(() => listener.close())
  const events = counted(listener)
  t.equal(listener.listening, false, 'not before its start')
  listener.start()
  listener.start()
  await once(listener, 'listening')
  t.equal(listener.listening, true)
  listener.start()
  t.equal((await listeners()).length, 1, 'one connection')
  // One transaction: both arrive together, the other channel's first.
  await admin.query(`BEGIN; NOTIFY other_channel; NOTIFY ${CHANGES_CHANNEL}; COMMIT`)
  await until('the change told', () => events.change >= 1)
  t.same(events, { change: 1, listening: 1, lost: 0 })
})

t.test('its connection terminated: lost told once, not listening meanwhile (started again or not), then listening again on one new connection', async (t) => {
  const { url, admin, listeners } = await setUp(t)
  const listener = new ChangeListener({ connectionString: url, retryMs: 300 })
  t.teardown(() => listener.close())
  const events = counted(listener)
  listener.start()
  await once(listener, 'listening')
  const [pid] = await listeners()
  const lost = once(listener, 'lost')
  await admin.query('SELECT pg_terminate_backend($1)', [pid])
  await lost
  // As a stream admitted meanwhile does: the retry stays the one attempt, at its time.
  listener.start()
  t.equal(listener.listening, false, 'not listening until it connects again')
  await once(listener, 'listening')
  await sleep(400)
  t.equal(events.lost, 1, 'the error and the end of the connection: one loss')
  t.equal(events.listening, 2)
  const again = await listeners()
  t.equal(again.length, 1)
  t.not(again[0], pid, 'a new connection')
  await admin.query(`NOTIFY ${CHANGES_CHANNEL}`)
  await until('a change told on the new connection', () => events.change === 1)
})

t.test('a server it cannot reach: each attempt lost, tried again after a pause that doubles up to its bound; closed, it tries no more', async (t) => {
  const url = `postgres://nobody@127.0.0.1:${await freePort()}/none`
  const listener = new ChangeListener({ connectionString: url, retryMs: 20, maxRetryMs: 40 })
  const events = counted(listener)
  const lostAt: number[] = []
  listener.on('lost', () => { lostAt.push(performance.now()) })
  listener.start()
  await until('tried ten times', () => events.lost >= 10)
  const pauses = lostAt.slice(1).map((at, index) => at - lostAt[index])
  // 20 ms, then 40 ms each: never shorter (a timer never fires early), and not growing once at the
  // bound: doubling without it, the last three would be 1.3, 2.6 and 5.1 s. A stall of this
  // process (six test files on two cores) lengthens the pause it falls in, so the shortest of the
  // three is what is bounded: one stall cannot lengthen all three.
  t.ok(pauses[0] >= 19, `the first pause: ${pauses[0]} ms`)
  t.ok(pauses.slice(1).every((pause) => pause >= 39), `then at least the bound: ${pauses.map(Math.round).join(', ')} ms`)
  t.ok(Math.min(...pauses.slice(-3)) < 1000, `and no longer: ${pauses.map(Math.round).join(', ')} ms`)
  await listener.close()
  const after = events.lost
  await new Promise((resolve) => setTimeout(resolve, 150))
  t.equal(events.lost, after, 'no attempt after close')
  t.equal(events.listening, 0)
})

t.test('its LISTEN unanswered (a server stopped, a network that drops the packets): lost told, the connect unanswered too, then listening once answers come again', async (t) => {
  const { url, admin } = await setUp(t)
  const proxy = await holdingProxy(t, url)
  proxy.holdFrom(`LISTEN ${CHANGES_CHANNEL}`)
  const listener = new ChangeListener({ connectionString: proxy.url, retryMs: 50, maxRetryMs: 100, timeoutMs: 300 })
  t.teardown(() => listener.close())
  const events = counted(listener)
  const errors: Error[] = []
  listener.on('lost', (error) => { errors.push(error) })
  listener.start()
  await until('the unanswered LISTEN told as lost', () => errors.length >= 1, 10_000)
  t.match(errors[0].message, /timeout/i, `told as a timeout: ${errors[0].message}`)
  t.equal(listener.listening, false)
  // Still held: the next connection's startup goes unanswered, and is given up as well.
  await until('an unanswered connect told as lost', () => errors.length >= 2, 10_000)
  t.match(errors[1].message, /timeout/i, `told as a timeout: ${errors[1].message}`)
  t.equal(events.listening, 0)
  proxy.release()
  await until('listening once answers come again', () => listener.listening, 10_000)
  await admin.query(`NOTIFY ${CHANGES_CHANNEL}`)
  await until('a change told', () => events.change >= 1, 10_000)
})

t.test('listening, then its server answers nothing more: noticed by the check of its connection, lost told, listening again once answers come', async (t) => {
  const { url, admin } = await setUp(t)
  const proxy = await holdingProxy(t, url)
  const listener = new ChangeListener({ connectionString: proxy.url, retryMs: 50, maxRetryMs: 100, timeoutMs: 300, checkMs: 200 })
  t.teardown(() => listener.close())
  const events = counted(listener)
  listener.start()
  await until('listening', () => listener.listening, 10_000)
  proxy.hold()
  await until('the silence told as lost', () => events.lost >= 1, 10_000)
  t.equal(listener.listening, false)
  t.equal(events.listening, 1)
  proxy.release()
  await until('listening again', () => listener.listening, 10_000)
  t.equal(events.listening, 2)
  await admin.query(`NOTIFY ${CHANGES_CHANNEL}`)
  await until('a change told', () => events.change >= 1, 10_000)
})

t.test('closed while it connects, or once listening: its connection ends, and nothing is told after', async (t) => {
  const { url, listeners } = await setUp(t)
  const early = new ChangeListener({ connectionString: url })
  const earlyEvents = counted(early)
  early.start()
  await early.close()
  const late = new ChangeListener({ connectionString: url })
  late.start()
  await once(late, 'listening')
  await late.close()
  t.equal(late.listening, false)
  await until('no listening connection left', async () => (await listeners()).length === 0)
  t.same(earlyEvents, { change: 0, listening: 0, lost: 0 }, 'closed while connecting: never listening')
  t.equal(early.listening, false)
})

t.test('its connection has TCP keepalives on, from 10 s of silence: a connection cut without a word (a partition) is noticed', async (t) => {
  const { url } = await setUp(t)
  // No other connection is made meanwhile (the admin pool connects on its first query).
  const calls: Array<[boolean | undefined, number | undefined]> = []
  const original = net.Socket.prototype.setKeepAlive
  net.Socket.prototype.setKeepAlive = function (this: net.Socket, enable?: boolean, initialDelay?: number) {
    calls.push([enable, initialDelay])
    return original.call(this, enable, initialDelay)
  }
  t.teardown(() => { net.Socket.prototype.setKeepAlive = original })
  const listener = new ChangeListener({ connectionString: url })
  t.teardown(() => listener.close())
  listener.start()
  await once(listener, 'listening')
  t.same(calls, [[true, 10_000]])
})

t.test('a stall of the event loop past its timeout while the server answers a check at once: not lost, still listening', async (t) => {
  // After a stall the loop runs its expired timers before it reads its sockets: the check's answer,
  // given in time, waits unread in the socket while the check's deadline runs out.
  const { url, admin } = await setUp(t)
  const proxy = await holdingProxy(t, url)
  // Checks further apart than the timeout: a bound left running once its check was answered would
  // cut the connection in the silence between two checks.
  const listener = new ChangeListener({ connectionString: proxy.url, retryMs: 50, timeoutMs: 300, checkMs: 700 })
  t.teardown(() => listener.close())
  const events = counted(listener)
  listener.start()
  await until('listening', () => listener.listening, 10_000)
  // A check sent: its answer is the next, and the loop stalls right after it has reached the socket.
  await proxy.nextSend()
  proxy.stallAfterNextAnswer(1000)
  // Past the stall, the next check (or a new connection's startup, were it lost).
  await proxy.nextSend()
  await proxy.nextSend()
  t.equal(events.lost, 0, 'not lost: the server answered the check at once')
  t.equal(listener.listening, true)
  t.equal(events.listening, 1, 'on its first connection')
  await admin.query(`NOTIFY ${CHANGES_CHANNEL}`)
  await until('a change told', () => events.change >= 1, 10_000)
})

t.test('a stall of the event loop past its timeout while the server answers its connect at once: listening, nothing lost', async (t) => {
  const { url, admin } = await setUp(t)
  const proxy = await holdingProxy(t, url)
  const listener = new ChangeListener({ connectionString: proxy.url, retryMs: 50, timeoutMs: 300 })
  t.teardown(() => listener.close())
  const events = counted(listener)
  // The server's first answer (to the startup packet) reaches the socket; the loop then stalls.
  proxy.stallAfterNextAnswer(1000)
  listener.start()
  await until('listening', () => listener.listening, 10_000)
  t.equal(events.lost, 0, 'not lost: the server answered the connect at once')
  t.equal(events.listening, 1)
  await admin.query(`NOTIFY ${CHANGES_CHANNEL}`)
  await until('a change told', () => events.change >= 1, 10_000)
})

t.test('a server that answers the connect\'s first message late, then nothing: given up once silent for timeoutMs, counted from its last word', async (t) => {
  // Not PostgreSQL: it asks for a password 150 ms after the startup message, then says no more.
  // Half the bound has passed by its word: the connect is given up about 300 ms after it.
  const server = net.createServer((socket) => {
    socket.on('error', () => {})
    socket.once('data', () => { setTimeout(() => socket.write(Buffer.from([0x52, 0, 0, 0, 8, 0, 0, 0, 3])), 150) })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => { server.close() })
  const listener = new ChangeListener({ connectionString: `postgres://x:y@127.0.0.1:${(server.address() as net.AddressInfo).port}/x`, retryMs: 60_000, timeoutMs: 300 })
  t.teardown(() => listener.close())
  const lost = once(listener, 'lost') as Promise<[Error]>
  listener.start()
  const error = await Promise.race([lost.then(([error]) => error), sleep(5_000).then(() => undefined)])
  t.equal(error?.message, 'timeout expired', 'given up, as a connect that timed out')
  t.equal(listener.listening, false)
})
