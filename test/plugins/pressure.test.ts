// A real event-loop stall in the service's process (the app runs in this test's process).
import t from 'tap'
import { ordersFixture, ordersPath } from '../support/fixtures.js'
import { build } from '../support/harness.js'
import { readToken } from '../support/tokens.js'

// The lag is sampled every 300 ms (1 s by default): a stall of 700 ms is seen by the next sample,
// and the requests that follow it within the interval are shed.
const SAMPLE_INTERVAL_MS = 300
const STALL_MS = 700
const harness = await build(t, { MAX_EVENT_LOOP_DELAY_MS: '50', EVENT_LOOP_SAMPLE_INTERVAL_MS: String(SAMPLE_INTERVAL_MS) })
await harness.seed(ordersFixture())
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

// The loop is blocked as by a long synchronous task, but asleep: a spin would take a core from the
// test files running beside this one.
const blocked = new Int32Array(new SharedArrayBuffer(4))
function stallEventLoop (ms: number) {
  Atomics.wait(blocked, 0, 0, ms)
}

/** The status of an API call made once a sample found the loop calm: the app's own start, or a loaded machine, lags it too. */
async function statusOnceCalm (): Promise<number> {
  let res
  for (let attempt = 0; attempt < 50 && res?.status !== 200; attempt++) {
    if (attempt > 0) await sleep(SAMPLE_INTERVAL_MS)
    res = await harness.request(ordersPath(), { token: readToken() })
  }
  return res!.status
}

/**
 * An API call made right after a stall (and `before`, in the same window), until one is shed: under-pressure
 * samples the lag once an interval, and on a loaded machine the next sample, calm again, may come first.
 */
async function shedAfterStall (before = async () => {}) {
  let answer
  for (let attempt = 0; attempt < 5 && answer?.status !== 503; attempt++) {
    stallEventLoop(STALL_MS)
    await before()
    answer = await harness.request(ordersPath(), { token: readToken() })
  }
  return answer!
}

t.test('while the event loop lags: API calls → 503 overloaded with Retry-After; probes still answer', async (t) => {
  t.equal(await statusOnceCalm(), 200, 'before')
  const shed = await shedAfterStall()
  t.equal(shed.status, 503)
  t.equal(shed!.headers.get('retry-after'), '5')
  t.match(shed!.body, { type: '/problems/overloaded', status: 503 })
  stallEventLoop(STALL_MS)
  const metrics = await fetch(`${harness.baseUrl}/metrics`)
  t.equal(metrics.status, 200, 'the scrape is exempt too')
  t.match(await metrics.text(), /requests_shed_total\{reason="event_loop"\} [1-9]/, 'counted as shed, by its reason')
  const probes: number[] = []
  t.equal((await shedAfterStall(async () => { probes.push((await harness.request('/healthz')).status) })).status, 503, 'while the API is shed')
  t.same(new Set(probes), new Set([200]), 'liveness is exempt')
})

t.test('once the loop is calm again, API calls are served', async (t) => {
  t.equal(await statusOnceCalm(), 200)
})
