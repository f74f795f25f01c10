// The change feed's promise (docs/change-feed.md), tried with real processes: two instances of
// src/server.ts on one database; changes through both, many at once on one authorization flipping
// the same grants; a writer of its own straight into permission_changes whose transactions commit
// out of id order; and one transaction held open for seconds. Meanwhile a poller, streams (one
// filtered by resource, one opened late from the start) and streams that keep dropping and
// resuming with Last-Event-ID on either instance. Each follower must end with every change exactly
// once, in increasing id order, nothing past the held change before it committed; and each
// authorization's changes, replayed in feed order, must give its grants, in the order of the
// versions (ETags) the changes answered.
import { spawn } from 'node:child_process'
import { Agent, type ClientRequest, type IncomingHttpHeaders, request } from 'node:http'
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import t from 'tap'
import { freePort } from '../../db/embedded-postgres.js'
import { seedDatabase } from '../../db/seed.js'
import { endsWithTest } from '../support/at-exit.js'
import { createTestDatabase } from '../support/database.js'
import { serverProcess } from '../support/server-process.js'
import { TEST_SECRET, token } from '../support/tokens.js'

// How long the writers write; the held transaction starts HOLD_AFTER_MS in and stays open 0.6–1.8 s,
// so the writers go on for over a second after it commits.
// On cores shared with other test files they may get few requests through in that time: they go on,
// up to four times as long, until the hammered authorization has HAMMERED_CHANGES changes.
const WRITE_MS = 3_500
const HAMMERED_CHANGES = 20
const HOLD_AFTER_MS = 400
// How long the followers get to catch up once the writers are done: a deadline, not a measurement
// (a transaction open anywhere on the shared PostgreSQL server holds the feed back).
const CATCH_UP_MS = 30_000

const readWrite = token({ scope: 'read:resource delete:resource create:resource' }, { expiresIn: 600 })

interface Instance { name: string, port: number, agent: Agent, output: () => string }
interface Answer { status: number, headers: IncomingHttpHeaders, text: string }

/** src/server.ts as a process of its own on `databaseUrl`, once /readyz answers 200. */
async function startInstance (name: string, databaseUrl: string): Promise<Instance> {
  const port = await freePort()
  const child = endsWithTest(spawn(serverProcess.command, serverProcess.args, {
    env: {
      PATH: process.env.PATH,
      NODE_ENV: 'test',
      HOST: '127.0.0.1',
      PORT: String(port),
      DATABASE_URL: databaseUrl,
      JWT_SECRET: TEST_SECRET,
      // Thousands of requests: only what goes wrong is worth keeping.
      LOG_LEVEL: 'warn',
      // Other test files share the cores: lag here is theirs (shedding: test/plugins/pressure.test.ts).
      MAX_EVENT_LOOP_DELAY_MS: '0'
    },
    stdio: ['ignore', 'pipe', 'pipe']
  }))
  let output = ''
  child.stdout!.on('data', (chunk) => { output += chunk })
  child.stderr!.on('data', (chunk) => { output += chunk })
  t.teardown(() => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL') })
  const agent = new Agent({ keepAlive: true })
  t.teardown(() => agent.destroy())
  const instance = { name, port, agent, output: () => output }
  const ready = await until(async () => {
    if (child.exitCode !== null) throw new Error(`instance ${name} exited:\n${output}`)
    return (await call(instance, 'GET', '/readyz').catch(() => undefined))?.status === 200
  }, 60_000)
  if (!ready) throw new Error(`instance ${name} not ready within 60 s:\n${output}`)
  return instance
}

/** Whether `check` came true within the time; never throws for the time alone. */
async function until (check: () => boolean | Promise<boolean>, timeoutMs: number): Promise<boolean> {
  for (const started = Date.now(); Date.now() - started < timeoutMs; await sleep(50)) {
    if (await check()) return true
  }
  return check()
}

function call (instance: Instance, method: string, path: string, headers: Record<string, string> = {}, body?: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const sent = { authorization: `Bearer ${readWrite}`, ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) }) }
    const req = request({ host: '127.0.0.1', port: instance.port, method, path, headers: sent, agent: instance.agent }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => { text += chunk })
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, text }))
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end(body)
  })
}

const random = (below: number) => Math.floor(Math.random() * below)

/** One to three distinct ids of `ids`, in a random order. */
function sample (ids: readonly string[]): string[] {
  const shuffled = [...ids].sort(() => Math.random() - 0.5)
  return shuffled.slice(0, 1 + random(Math.min(3, ids.length)))
}

interface FeedEntry { id: string, resource_id: string, client_id: string, action: 'granted' | 'unauthorized', permission_ids: string[], request_id: string }
interface Received { id: bigint, at: number, entry: FeedEntry }

/**
 * A 503 overloaded problem with Retry-After: the service shedding load (no database connection in
 * time, on cores shared with other test files), which a follower meets by trying again.
 */
function shedding (status: number, headers: IncomingHttpHeaders, text: string): boolean {
  if (status !== 503 || headers['retry-after'] === undefined || !/^application\/problem\+json/.test(headers['content-type'] ?? '')) return false
  try {
    return (JSON.parse(text) as { type?: string }).type === '/problems/overloaded'
  } catch {
    return false
  }
}

/** What a follower was given, in order, each with when it arrived (performance.now()). */
class Follower {
  readonly received: Received[] = []
  /** Anything a follower met that the feed does not promise: a refused request, a malformed event. */
  readonly problems: string[] = []
  /** Requests the service shed (503 overloaded), tried again. */
  shed = 0
  constructor (readonly name: string) {}

  record (entry: FeedEntry, at: number): void {
    this.received.push({ id: BigInt(entry.id), at, entry })
  }

  get lastId (): bigint | undefined {
    return this.received.at(-1)?.id
  }
}

/** Polls one instance, following Link: rel="next", polling the same link again after an empty page. */
class Poller extends Follower {
  polls = 0

  async run (instance: Instance, following: () => boolean): Promise<void> {
    let path = '/permission_changes?limit=37'
    while (following()) {
      const answer = await call(instance, 'GET', path, { accept: 'application/json' })
      this.polls++
      if (answer.status !== 200) {
        if (shedding(answer.status, answer.headers, answer.text)) this.shed++
        else this.problems.push(`GET ${path} → ${answer.status} ${answer.text.slice(0, 200)}`)
        await sleep(100)
        continue
      }
      const at = performance.now()
      const page = JSON.parse(answer.text) as FeedEntry[]
      for (const entry of page) this.record(entry, at)
      const next = /<([^>]+)>;\s*rel="next"/.exec(String(answer.headers.link))?.[1]
      if (next === undefined) {
        this.problems.push(`GET ${path}: no Link rel="next" (${String(answer.headers.link)})`)
        return
      }
      path = new URL(next).pathname + new URL(next).search
      if (page.length === 0) await sleep(25)
    }
  }
}

/** A minimal Server-Sent Events parser: calls `onEvent` for each event that has data. */
function eventParser (onEvent: (id: string | undefined, data: string) => void): (chunk: string) => void {
  let buffer = ''
  return (chunk) => {
    buffer += chunk.replace(/\r\n?/g, '\n')
    for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
      const block = buffer.slice(0, end)
      buffer = buffer.slice(end + 2)
      let id: string | undefined
      const data: string[] = []
      for (const line of block.split('\n')) {
        if (line === '' || line.startsWith(':')) continue
        const colon = line.indexOf(':')
        const field = colon < 0 ? line : line.slice(0, colon)
        const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '')
        if (field === 'id') id = value
        else if (field === 'data') data.push(value)
      }
      if (data.length > 0) onEvent(id, data.join('\n'))
    }
  }
}

/**
 * A stream of the feed, on its instances in turn (one per connection), resuming with Last-Event-ID
 * from the last event it received, as EventSource does when the other side ends it.
 */
class StreamFollower extends Follower {
  connections = 0
  /** Connections the server ended (a consumer too slow is cut off by design): resumed. */
  endedByServer = 0
  #request: ClientRequest | undefined
  #stopped = false

  constructor (name: string, private readonly instances: Instance[], private readonly query = '') {
    super(name)
  }

  /** Opens a connection; resolves once it answered (or failed, noted as a problem and retried). */
  connect (): Promise<void> {
    const instance = this.instances[this.connections++ % this.instances.length]
    const last = this.lastId
    const headers = {
      authorization: `Bearer ${readWrite}`,
      accept: 'text/event-stream',
      ...(last === undefined ? {} : { 'last-event-id': String(last) })
    }
    return new Promise((resolve) => {
      const req = request({ host: '127.0.0.1', port: instance.port, path: `/permission_changes${this.query}`, headers, agent: false }, (res) => {
        if (res.statusCode !== 200 || !/^text\/event-stream/.test(res.headers['content-type'] ?? '')) {
          let text = ''
          res.setEncoding('utf8').on('data', (chunk: string) => { text += chunk }).on('end', () => {
            if (shedding(res.statusCode!, res.headers, text)) this.shed++
            else this.problems.push(`stream on ${instance.name} → ${res.statusCode} ${res.headers['content-type']} ${text.slice(0, 200)}`)
            this.#request = undefined
            resolve(this.#retry())
          })
          return
        }
        res.setEncoding('utf8')
        res.on('data', eventParser((id, data) => {
          const entry = JSON.parse(data) as FeedEntry
          if (id !== entry.id) this.problems.push(`event id ${id} carries change ${entry.id}`)
          this.record(entry, performance.now())
        }))
        res.on('close', () => {
          if (this.#request !== req) return
          this.endedByServer++
          this.#request = undefined
          this.#retry().catch(() => {})
        })
        resolve()
      })
      req.on('error', (error) => {
        if (this.#request !== req) return
        this.problems.push(`stream on ${instance.name}: ${error.message}`)
        this.#request = undefined
        resolve(this.#retry())
      })
      this.#request = req
      req.end()
    })
  }

  /** Cuts the connection from this side, as a network failure or a restarted consumer would. */
  drop (): void {
    const req = this.#request
    this.#request = undefined
    req?.destroy()
  }

  stop (): void {
    this.#stopped = true
    this.drop()
  }

  async #retry (): Promise<void> {
    await sleep(100)
    if (!this.#stopped) await this.connect()
  }
}

interface Authorization { resource: string, client: string, seeded: string[] }

const HAMMER_IDS = ['h_0', 'h_1', 'h_2', 'h_3']
const FEED_IDS = Array.from({ length: 8 }, (_, i) => `f_${i}`)
const hammered: Authorization = { resource: 'hammer-api', client: 'hammer-app', seeded: ['h_0', 'h_1'] }
const others: Authorization[] = ['c-1', 'c-2', 'c-3'].map((client) => ({ resource: 'feed-api', client, seeded: FEED_IDS.slice(0, 4) }))
// Ids a writer supplies, which the database must overwrite (one below every id it gives, one above).
const SUPPLIED_IDS = ['1', '9000000000000000000']

const databaseUrl = await createTestDatabase(t)
// Both start at once on the empty database: one migrates it, the other waits for the migration lock.
const [a, b] = await Promise.all([startInstance('A', databaseUrl), startInstance('B', databaseUrl)])
const db = new pg.Pool({ connectionString: databaseUrl, max: 8 })
db.on('error', () => {}) // the database is dropped with FORCE at teardown
t.teardown(() => db.end())
await seedDatabase(db, {
  resources: [{ id: 'hammer-api' }, { id: 'feed-api' }],
  clients: [{ id: 'hammer-app' }, ...others.map(({ client }) => ({ id: client }))],
  permissions: [
    ...HAMMER_IDS.map((id) => ({ id, resource_id: 'hammer-api', name: `do:${id}` })),
    ...FEED_IDS.map((id) => ({ id, resource_id: 'feed-api', name: `do:${id}` }))
  ],
  authorizations: [hammered, ...others].map(({ resource, client, seeded }) => ({ resource_id: resource, client_id: client, permission_ids: seeded }))
})

// The followers, from the start of the (empty) feed.
const poller = new Poller('poller on A')
const live = new StreamFollower('stream on B', [b])
const filtered = new StreamFollower('stream on B, resource_id=hammer-api', [b], '?resource_id=hammer-api')
// Dropped often and resumed with Last-Event-ID on A and B in turn: each resumption catches up on its
// own reads while the shared reader moves on, then joins it; on A they are the only streams, so
// A's shared reader empties and starts again.
const resuming = [[a, b], [b, a], [a, b], [b, a], [a, b], [b, a]].map((instances, index) => new StreamFollower(`stream ${index + 1} dropped and resumed with Last-Event-ID, on ${instances.map(({ name }) => name).join(' and ')} in turn`, instances))
// From the start of the feed, once there are more changes than one read takes (500).
const late = new StreamFollower('stream on B opened late, from the start', [b])
const streams = [live, filtered, ...resuming, late]
await Promise.all([live, filtered, ...resuming].map((stream) => stream.connect()))
let following = true
const polling = poller.run(a, () => following)

// The writers.
const writers = { writing: true }
const writes = new Map<string, { instance: string, status: number, version?: bigint }>()
let writeSequence = 0

async function changeWorker (instance: Instance, target: () => Authorization): Promise<void> {
  while (writers.writing) {
    const { resource, client } = target()
    const ids = sample(resource === hammered.resource ? HAMMER_IDS : FEED_IDS)
    const method = Math.random() < 0.5 ? 'DELETE' : 'POST'
    const requestId = `w-${++writeSequence}`
    const answer = await call(instance, method, `/resources/${resource}/authorized_clients/${client}/permissions`, { 'x-request-id': requestId }, JSON.stringify(ids))
    const etag = /^"(\d+)"$/.exec(String(answer.headers.etag))?.[1]
    writes.set(requestId, { instance: instance.name, status: answer.status, ...(etag === undefined ? {} : { version: BigInt(etag) }) })
  }
}

// Straight into the table, as any other writer may: 1–3 rows a transaction, sleeps inside it so
// commits interleave out of id order; sometimes the transaction id taken long before its first
// row, a row taken back with a savepoint, an id supplied, or the whole transaction rolled back.
const rolledBack: string[] = []
let sqlSequence = 0
const insertChange = (client: pg.PoolClient, requestId: string, id?: string) => client.query(
  id === undefined
    ? 'INSERT INTO permission_changes (resource_id, client_id, action, permission_ids, request_id) VALUES (\'sql-api\', \'sql-writer\', \'granted\', ARRAY[\'s_0\'], $1)'
    : 'INSERT INTO permission_changes (id, resource_id, client_id, action, permission_ids, request_id) VALUES ($2, \'sql-api\', \'sql-writer\', \'granted\', ARRAY[\'s_0\'], $1)',
  id === undefined ? [requestId] : [requestId, id])

async function sqlWriter (): Promise<void> {
  while (writers.writing) {
    const client = await db.connect()
    const mine: string[] = []
    try {
      await client.query('BEGIN')
      if (Math.random() < 0.25) {
        await client.query('SELECT pg_current_xact_id()')
        await sleep(random(40))
      }
      for (let row = 0, rows = 1 + random(3); row < rows; row++) {
        await sleep(random(25))
        if (Math.random() < 0.15) {
          const undone = `sql-undone-${++sqlSequence}`
          rolledBack.push(undone)
          await client.query('SAVEPOINT undo')
          await insertChange(client, undone)
          await client.query('ROLLBACK TO SAVEPOINT undo')
        }
        const requestId = `sql-${++sqlSequence}`
        mine.push(requestId)
        await insertChange(client, requestId, Math.random() < 0.15 ? SUPPLIED_IDS[random(2)] : undefined)
      }
      await sleep(random(30))
      if (Math.random() < 0.1) {
        await client.query('ROLLBACK')
        rolledBack.push(...mine)
      } else {
        await client.query('COMMIT')
      }
    } catch (error) {
      // Not back to the pool in the middle of a transaction.
      client.release(error as Error)
      throw error
    }
    client.release()
  }
}

// One transaction opened early, that records a change and stays open 0.6–1.8 s: every change committed
// meanwhile has a larger id, and must wait for it.
const held = { id: 0n, openedAt: 0, commitAt: 0, aboveWhileOpen: 0 }
async function holdOpen (): Promise<void> {
  await sleep(HOLD_AFTER_MS)
  const client = await db.connect()
  try {
    await client.query('BEGIN')
    const { rows: [row] } = await client.query<{ id: string }>(
      'INSERT INTO permission_changes (resource_id, client_id, action, permission_ids, request_id) VALUES (\'hammer-api\', \'held-app\', \'granted\', ARRAY[\'h_0\'], \'held\') RETURNING id::text')
    held.id = BigInt(row.id)
    held.openedAt = performance.now()
    await sleep(600 + random(1_200))
    // Committed by others while it is open, above it: what a feed ordered by id alone would skip.
    const { rows: [above] } = await db.query<{ count: number }>('SELECT count(*)::int AS count FROM permission_changes WHERE id > $1', [row.id])
    held.aboveWhileOpen = above.count
    held.commitAt = performance.now()
    await client.query('COMMIT')
  } finally {
    client.release()
  }
}

// A resuming stream drops its connection every 0.1–0.4 s, and resumes 0–100 ms later.
async function dropAndResume (stream: StreamFollower): Promise<void> {
  while (writers.writing) {
    await sleep(100 + random(300))
    if (!writers.writing) return
    stream.drop()
    await sleep(random(100))
    await stream.connect()
  }
}

let lateOpenedAfter = 0
async function openLate (): Promise<void> {
  await until(async () => {
    lateOpenedAfter = (await db.query<{ count: number }>('SELECT count(*)::int AS count FROM permission_changes')).rows[0].count
    return !writers.writing || lateOpenedAfter > 500
  }, WRITE_MS)
  await late.connect()
}

const work = [
  ...[a, b].flatMap((instance) => Array.from({ length: 4 }, () => changeWorker(instance, () => hammered))),
  ...[a, b].flatMap((instance) => Array.from({ length: 2 }, () => changeWorker(instance, () => others[random(others.length)]))),
  ...Array.from({ length: 3 }, sqlWriter),
  holdOpen(),
  ...resuming.map(dropAndResume),
  openLate()
]
await sleep(WRITE_MS)
await until(async () => (await db.query<{ count: number }>(
  'SELECT count(*)::int AS count FROM permission_changes WHERE resource_id = $1 AND request_id <> \'held\'', [hammered.resource])).rows[0].count >= HAMMERED_CHANGES, 3 * WRITE_MS)
writers.writing = false
await Promise.all(work)
const writtenAt = performance.now()

// Settled: every change the table holds, and how long the followers took to be given the last one.
const { rows: table } = await db.query<{ id: string, resource_id: string, request_id: string }>(
  'SELECT id::text, resource_id, request_id FROM permission_changes c ORDER BY c.id')
const allIds = table.map(({ id }) => BigInt(id))
const expected = new Map<Follower, bigint[]>([
  [poller, allIds],
  [live, allIds],
  [filtered, table.filter(({ resource_id: resource }) => resource === 'hammer-api').map(({ id }) => BigInt(id))],
  ...resuming.map((stream) => [stream, allIds] as const),
  [late, allIds]
])
const behind = () => [...expected].filter(([follower, ids]) => follower.lastId !== ids.at(-1))
// What holds the feed back when it lags: the transactions open on the server, and where each follower is.
const lagging: string[] = []
async function describeLag (): Promise<void> {
  const { rows } = await db.query<{ pid: number, datname: string, application_name: string, backend_xid: string | null, backend_xmin: string | null, state: string, open_ms: number, query: string }>(
    `SELECT pid, datname, application_name, backend_xid::text, backend_xmin::text, state, (extract(epoch FROM now() - xact_start) * 1000)::int AS open_ms, left(query, 120) AS query
     FROM pg_stat_activity WHERE xact_start IS NOT NULL AND pid <> pg_backend_pid() ORDER BY xact_start`)
  const { rows: [snapshot] } = await db.query<{ snapshot: string }>('SELECT pg_current_snapshot()::text AS snapshot')
  lagging.push(`at +${Math.round(performance.now() - writtenAt)} ms, snapshot ${snapshot.snapshot}; behind: ${behind().map(([follower, ids]) => `${follower.name} at ${follower.lastId} of ${ids.at(-1)} (${follower.received.length}/${ids.length})`).join('; ')}`)
  for (const row of rows) lagging.push(`  ${JSON.stringify(row)}`)
}
let lastLook = performance.now()
const caughtUp = await until(async () => {
  if (behind().length === 0) return true
  if (performance.now() - lastLook > 3_000) {
    lastLook = performance.now()
    await describeLag()
  }
  return false
}, CATCH_UP_MS)
const caughtUpAt = performance.now()
for (const line of lagging) t.comment(line)
// One more of the shared readers' looks (each second) and a few polls: a late repeat would show.
await sleep(1_500)
following = false
for (const stream of streams) stream.stop()
await polling

const { rows: grantRows } = await db.query<{ resource_id: string, client_id: string, ids: string[] }>(
  'SELECT resource_id, client_id, array_agg(permission_id ORDER BY permission_id) AS ids FROM grants GROUP BY resource_id, client_id')
const grantsOf = (authorization: Authorization) =>
  grantRows.find((row) => row.resource_id === authorization.resource && row.client_id === authorization.client)?.ids ?? []

t.comment(`${writes.size} changes sent (${[...writes.values()].filter(({ status }) => status === 503).length} answered 503), ${table.length} recorded (${table.filter(({ resource_id: r }) => r === 'sql-api').length} by the SQL writer); ` +
  `held change ${held.id} open ${Math.round(held.commitAt - held.openedAt)} ms, ${held.aboveWhileOpen} larger ids committed meanwhile; ` +
  `followers caught up ${Math.round(caughtUpAt - writtenAt)} ms after the writers stopped; poller ${poller.polls} polls; ` +
  `resuming streams ${resuming.map(({ connections }) => connections).join('/')} connections; requests shed (503, tried again) ${[poller, ...streams].map(({ shed }) => shed).join('/')}; late stream opened after ${lateOpenedAfter} changes; ended by a server: ${streams.map((stream) => stream.endedByServer).join('/')}`)
for (const instance of [a, b]) {
  for (const line of instance.output().split('\n').filter(Boolean).slice(0, 20)) t.comment(`instance ${instance.name}: ${line.slice(0, 300)}`)
}

t.test('the writers raced as meant: both instances on one authorization, out-of-order commits, a change held open under later ones', async (t) => {
  const statuses = [...writes.values()].map(({ status }) => status)
  // A 503 (the machine overloaded) is no failure of the feed: nothing below relies on what a change answered.
  t.same(statuses.filter((status) => status !== 204 && status !== 503), [], 'every change answered 204 (or 503)')
  const instancesOfHammered = new Set(table.filter(({ resource_id: r, request_id: id }) => r === hammered.resource && id !== 'held').map(({ request_id: id }) => writes.get(id)?.instance))
  t.same([...instancesOfHammered].sort(), ['A', 'B'], 'the hammered authorization was changed through both instances')
  t.ok(table.filter(({ resource_id: r, request_id: id }) => r === hammered.resource && id !== 'held').length >= HAMMERED_CHANGES, `at least ${HAMMERED_CHANGES} changes of the hammered authorization recorded`)
  t.ok(table.some(({ resource_id: r }) => r === 'sql-api'), 'the SQL writer committed changes')
  t.ok(held.id > 0n, 'the held transaction recorded its change')
  t.ok(held.aboveWhileOpen > 0, `changes with larger ids committed while the held one was open (${held.aboveWhileOpen})`)
  const recordedIds = new Set(table.map(({ request_id: id }) => id))
  t.same(rolledBack.filter((id) => recordedIds.has(id)), [], 'nothing rolled back was recorded')
  t.same(allIds.filter((id) => SUPPLIED_IDS.includes(String(id))), [], 'ids the writer supplied were overwritten')
  t.ok(caughtUp, `every follower was given the last change within ${CATCH_UP_MS / 1000} s of the writers stopping`)
})

for (const [follower, ids] of expected) {
  t.test(`${follower.name}: every change once, ids increasing, the held change neither early nor skipped`, async (t) => {
    t.same(follower.problems, [], 'no refused request, no event whose id is not its change\'s')
    const received = follower.received.map(({ id }) => id)
    const disorder = received.findIndex((id, index) => index > 0 && id <= received[index - 1])
    t.equal(disorder, -1, disorder < 0 ? 'ids strictly increasing' : `id ${received[disorder]} after ${received[disorder - 1]} (at ${disorder})`)
    t.equal(new Set(received).size, received.length, 'no change twice')
    const given = new Set(received)
    const wanted = new Set(ids)
    t.same(ids.filter((id) => !given.has(id)).map(String), [], 'no change missed')
    t.same(received.filter((id) => !wanted.has(id)).map(String), [], 'nothing but the table\'s changes')
    const early = follower.received.filter(({ id, at }) => id > held.id && at < held.commitAt)
    t.same(early.map(({ id }) => String(id)), [], 'no change after the held one before it committed')
    const heldGiven = follower.received.find(({ id }) => id === held.id)
    t.ok(heldGiven !== undefined && heldGiven.at >= held.commitAt, 'the held change given, after its COMMIT was sent')
  })
}

t.test('each authorization\'s changes, replayed in feed order from its seeded grants, each change what it says, give its grants; versions increase', async (t) => {
  for (const follower of expected.keys()) {
    for (const authorization of follower === filtered ? [hammered] : [hammered, ...others]) {
      const grants = new Set(authorization.seeded)
      const ineffective: string[] = []
      const versions: bigint[] = []
      for (const { entry } of follower.received) {
        if (entry.resource_id !== authorization.resource || entry.client_id !== authorization.client) continue
        // The history records only what a change changed: a grant of a held id, or a removal of an
        // id not held, means the feed has two changes of this authorization the wrong way round.
        for (const id of entry.permission_ids) {
          if (grants.has(id) === (entry.action === 'granted')) ineffective.push(`${entry.id} ${entry.action} ${id}`)
          if (entry.action === 'granted') grants.add(id)
          else grants.delete(id)
        }
        const version = writes.get(entry.request_id)?.version
        if (version !== undefined) versions.push(version)
      }
      const where = `${follower.name}, ${authorization.resource}/${authorization.client}`
      t.same(ineffective, [], `${where}: every change changes what it says`)
      t.same([...grants].sort(), grantsOf(authorization), `${where}: replayed, the grants as they are`)
      const backwards = versions.findIndex((version, index) => index > 0 && version <= versions[index - 1])
      t.equal(backwards, -1, `${where}: the ETags the changes answered increase along the feed`)
    }
  }
})
