import t from 'tap'
import { ordersFixture, ordersPath } from './fixtures.js'
import { build } from './helper.js'
import { readToken } from './tokens.js'

t.test('GET /metrics: Prometheus text with route histograms, pool gauges and database errors', async (t) => {
  const harness = await build(t)
  await harness.seed(ordersFixture())
  await harness.db.query('ALTER TABLE grants RENAME TO grants_moved')
  t.equal((await harness.request(ordersPath(), { token: readToken() })).status, 500)
  await harness.db.query('ALTER TABLE grants_moved RENAME TO grants')
  // pg drops a connection whose query failed; these open one again.
  await harness.request(ordersPath(), { token: readToken() })
  await harness.request(ordersPath('missing-app'), { token: readToken() })

  const res = await fetch(`${harness.baseUrl}/metrics`)
  t.equal(res.status, 200)
  t.match(res.headers.get('content-type'), /^text\/plain/)
  const text = await res.text()
  const route = '/resources/:resource_id/authorized_clients/:client_id/permissions'
  t.match(text, new RegExp(`http_request_duration_seconds_count\\{method="GET",route="${route.replace(/[/:]/g, '\\$&')}",status_code="500"\\} 1`))
  t.match(text, new RegExp(`http_request_duration_seconds_count\\{method="GET",route="${route.replace(/[/:]/g, '\\$&')}",status_code="200"\\} 1`))
  t.match(text, new RegExp(`http_request_duration_seconds_count\\{method="GET",route="${route.replace(/[/:]/g, '\\$&')}",status_code="404"\\} 1`))
  t.match(text, /db_pool_connections\{state="total"\} [1-9]/)
  t.match(text, /db_pool_connections\{state="waiting"\} 0/)
  t.match(text, /db_errors_total\{kind="query"\} 1/)
  t.match(text, /db_errors_total\{kind="unavailable"\} 0/)
  t.match(text, /process_resident_memory_bytes \d+/)
  t.notMatch(text, /route="\/metrics"/, 'the scrape itself is not measured')
})

t.test('METRICS_ENABLED=false → no /metrics', async (t) => {
  const harness = await build(t, { METRICS_ENABLED: 'false' })
  t.equal((await harness.request('/metrics')).status, 404)
})
