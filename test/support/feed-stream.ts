// The change feed's stream as the tests drive it (test/routes/feed-stream*.test.ts): changes made
// through the API or by SQL, the feed polled until it shows what was committed, and streams closed
// when their test ends.
import { readFileSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Test } from 'tap'
import { ordersPath } from './fixtures.js'
import type { Harness } from './harness.js'
import { openStream, type OpenOptions, type SseStream } from './sse.js'
import { readToken, token } from './tokens.js'

export interface FeedEntry { id: string, resource_id: string, client_id: string, action: string, permission_ids: string[], request_id: string }

export const writer = () => token({ scope: 'delete:resource create:resource', sub: 'alice' })

/** A change through the API: DELETE (unauthorized) or POST (granted) of ids on a client's grants. */
export async function change (harness: Harness, method: 'DELETE' | 'POST', ids: string[], path = ordersPath()): Promise<string> {
  const answer = await harness.request(path, { method, token: writer(), json: ids })
  if (answer.status !== 204) throw new Error(`${method} ${path} → ${answer.status}: ${answer.text}`)
  return answer.headers.get('x-request-id')!
}

/** Four changes on orders-api (app-a), recorded in this order. */
export async function fourChanges (harness: Harness): Promise<void> {
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
export async function poll (harness: Harness, query = '', { settled = true } = {}): Promise<FeedEntry[]> {
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
export async function stream (t: Test, harness: Harness, query = '', { headers, ...options }: OpenOptions = {}): Promise<SseStream> {
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
export function changesBeyondSocketBuffers (): number {
  const sendBufferMax = Number(readFileSync('/proc/sys/net/ipv4/tcp_wmem', 'utf8').trim().split(/\s+/)[2])
  return Math.ceil(Math.max(10 * 1024 ** 2, 2 * sendBufferMax + 4 * 1024 ** 2) / 2100)
}

/**
 * Records changesBeyondSocketBuffers() changes, by SQL, and waits until the feed shows them; how
 * many the feed then holds in all.
 */
export async function recordBeyondSocketBuffers (harness: Harness): Promise<number> {
  await harness.db.query(`INSERT INTO permission_changes (resource_id, client_id, action, permission_ids, request_id)
    SELECT 'orders-api', 'app-a', 'granted', array_fill(repeat('p', 40), ARRAY[40]), 'many-' || n
    FROM generate_series(1, $1::int) AS n`, [changesBeyondSocketBuffers()])
  await shown(harness)
  const { rows: [{ recorded }] } = await harness.db.query<{ recorded: number }>('SELECT count(*)::int AS recorded FROM permission_changes')
  return recorded
}

/**
 * Waits until the feed shows the last change committed. A transaction open elsewhere on the test
 * cluster holds changes back (the horizon): a stream opened meanwhile finds its first page short
 * and goes live at once, and when the changes come out it is given them live, where a consumer
 * that reads nothing is cut for falling behind, not made to catch up.
 */
export async function shown (harness: Harness): Promise<void> {
  const { rows: [{ last }] } = await harness.db.query<{ last: string }>('SELECT max(id)::text AS last FROM permission_changes')
  const [entry] = await poll(harness, `&after=${BigInt(last) - 1n}`)
  if (entry?.id !== last) throw new Error(`the feed did not show change ${last} within 30 s`)
}

export const ids = (events: ReadonlyArray<{ id?: string }>) => events.map(({ id }) => id)
export const increasing = (list: ReadonlyArray<string | undefined>) => list.every((id, index) => index === 0 || BigInt(id!) > BigInt(list[index - 1]!))

/**
 * Makes one more change and waits for it on the stream: whatever the stream sent before it (a
 * duplicate, a change it should not have sent) is then in `events` too. Returns the new entry.
 * Once per database: it grants app-b p_delete_refunds, which it then holds.
 */
export async function sentinel (t: Test, harness: Harness, s: SseStream): Promise<FeedEntry> {
  const from = s.events.length
  const requestId = await change(harness, 'POST', ['p_delete_refunds'], ordersPath('app-b'))
  const sent = () => s.events.slice(from).find((event) => (JSON.parse(event.data) as FeedEntry).request_id === requestId)
  await s.until('the sentinel change', () => sent() !== undefined, 30_000)
  const { id } = sent()!
  const [entry] = await poll(harness, `&after=${BigInt(id!) - 1n}`)
  t.same(entry, JSON.parse(sent()!.data), 'the sentinel sent as polled')
  return entry
}

/** A stream that gets only heartbeats (a cursor past every change): each comment on it is one tick of the feed's heartbeat. */
export async function heartbeatClock (t: Test, harness: Harness): Promise<SseStream> {
  return await stream(t, harness, '?after=999999999999999999')
}

/** The blocks of a stream's text that carry an id and no data: the cursor moved on (EventSource fires no event for them). */
export const cursorBlocks = (text: string) => text.split('\n\n').filter((block) => /^id: \d+$/.test(block)).map((block) => block.slice('id: '.length))
