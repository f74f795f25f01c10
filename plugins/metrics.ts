// Prometheus metrics at GET /metrics (fastify-metrics on prom-client): request duration histograms
// by route, method and status (change feed streams left out), process metrics, the pg pool's connections, database errors,
// requests shed under overload, and the list's page cache.
// METRICS_ENABLED=false turns it off. Meant for the internal scraper, not the gateway's clients:
// with METRICS_PORT the scrape is served on a listener of its own, and the API port has no /metrics.
// https://github.com/SkeLLLa/fastify-metrics
import type { AddressInfo } from 'node:net'
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify'
import fastifyMetricsModule from 'fastify-metrics'
import fp from 'fastify-plugin'
import pg from 'pg'
import { isDatabaseUnavailable, overloadReasonOf } from '../db/errors.js'
import { clientErrorHandler, errorHandler, frameworkErrors, isClientError, notFoundBeforeBody, notFoundHandler } from '../src/error-handler.js'
import { OVERLOADED, Problem } from '../src/problems.js'
import { REQUEST_ID_HEADER, requestIdOf } from '../src/request-id.js'
import { setSecurityHeaders } from '../src/security-headers.js'
import { publicRoute } from './auth/index.js'

// pino's levels above warn: the metrics listener logs from warn up, or from the app's level if one of these.
const QUIETER_THAN_WARN = ['error', 'fatal', 'silent']

// A CommonJS module whose plugin is its `default` export.
const fastifyMetrics = fastifyMetricsModule.default

declare module 'fastify' {
  interface FastifyInstance {
    /** Where the metrics listener is bound, when METRICS_PORT is set and the app is ready. */
    readonly metricsAddress: AddressInfo | undefined
    /**
     * Leaves `request` out of http_request_duration_seconds: a change feed stream, whose time is
     * how long its consumer stayed (its token's lifetime, hours), not how long it took to answer.
     */
    unmeasured: (request: FastifyRequest) => void
  }
}

export default fp(async function metrics (fastify) {
  const { METRICS_ENABLED, METRICS_PORT, HOST } = fastify.config
  let metricsServer: FastifyInstance | undefined
  fastify.decorate('metricsAddress', { getter: () => metricsServer?.addresses()[0] as AddressInfo | undefined })
  let unmeasured = (_request: FastifyRequest) => {}
  fastify.decorate('unmeasured', (request: FastifyRequest) => { unmeasured(request) })
  if (!METRICS_ENABLED) return
  const ownPort = METRICS_PORT !== undefined
  await fastify.register(fastifyMetrics, {
    endpoint: ownPort
      ? null
      : {
          url: '/metrics',
          // Stryker disable next-line StringLiteral: equivalent: fastify-metrics sets its endpoint's method to GET whatever it is given (the route's type needs one)
          method: 'GET',
          config: { pressureExempt: true, ...publicRoute },
          logLevel: 'warn',
          handler: async () => {}
        },
    // One app per process in production; tests build several, each starting from a clean registry.
    clearRegisterOnInit: true,
    defaultMetrics: { enabled: true },
    routeMetrics: {
      enabled: { histogram: true, summary: false },
      registeredRoutesOnly: true,
      routeBlacklist: ['/metrics']
    }
  })
  // fastify-metrics starts a request's timer in onRequest and observes it in onResponse if the
  // timer is still there; it has no option to leave out some requests of a route (a stream and a
  // polled page share GET /permission_changes), so a stream's timer is dropped from its store.
  // test/plugins/metrics.test.ts fails if a new version keeps its timers elsewhere.
  const timers = (fastify.metrics as unknown as { metricStorage?: unknown }).metricStorage
  // Stryker disable next-line ConditionalExpression: made true, equivalent with the fastify-metrics installed, whose metricStorage is a WeakMap; made false, a stream's timer stays, which the stream test in test/plugins/metrics.test.ts fails on (as on a version that keeps its timers elsewhere)
  if (timers instanceof WeakMap) unmeasured = (request) => { timers.delete(request) }
  const { client } = fastify.metrics
  const pool = fastify.db
  new client.Gauge({ // eslint-disable-line no-new
    name: 'db_pool_connections',
    help: 'Connections of the pg pool, by state',
    labelNames: ['state'],
    collect () {
      this.set({ state: 'total' }, pool.totalCount)
      this.set({ state: 'idle' }, pool.idleCount)
      this.set({ state: 'waiting' }, pool.waitingCount)
    }
  })
  const databaseErrors = new client.Counter({
    name: 'db_errors_total',
    help: 'Database errors: unavailable (cannot connect or connection lost), query, idle_connection',
    labelNames: ['kind']
  })
  for (const kind of ['unavailable', 'query', 'idle_connection']) databaseErrors.inc({ kind }, 0)
  const shed = new client.Counter({
    name: 'requests_shed_total',
    help: 'Requests answered 503 overloaded, by reason: event_loop (lag), connection_wait (no pooled ' +
      'connection free in time), statement_timeout (the database cancelled a statement), feed_streams ' +
      '(FEED_MAX_STREAMS change feed streams open already)',
    labelNames: ['reason']
  })
  for (const reason of ['event_loop', 'connection_wait', 'statement_timeout', 'feed_streams']) shed.inc({ reason }, 0)
  fastify.addHook('onError', async (_request, _reply, error) => {
    const overload = overloadReasonOf(error)
    if (overload) shed.inc({ reason: overload })
    // under-pressure throws the problem itself when the event loop lags.
    else if (error instanceof Problem && error.type === OVERLOADED) shed.inc({ reason: error.shedReason ?? 'event_loop' })
    // A 4xx is the request's own doing (a body whose client hung up: ECONNRESET), never the database's.
    else if (isDatabaseUnavailable(error) && !isClientError(error)) databaseErrors.inc({ kind: 'unavailable' })
    else if (error instanceof pg.DatabaseError) databaseErrors.inc({ kind: 'query' })
  })
  pool.on('error', () => databaseErrors.inc({ kind: 'idle_connection' }))
  const { feed } = fastify
  new client.Gauge({ // eslint-disable-line no-new
    name: 'feed_streams',
    help: 'Change feed streams (GET /permission_changes, text/event-stream) open on this instance',
    collect () { this.set(feed.streams) }
  })
  new client.Gauge({ // eslint-disable-line no-new
    name: 'feed_listening',
    help: 'Whether the change feed\'s LISTEN connection (opened with the first stream) is listening: 1, else 0 (with feed_streams above 0, streams get changes by the 1 s poll only)',
    collect () { this.set(feed.listening ? 1 : 0) }
  })
  const cutHelp = 'Change feed streams cut since the start because their consumer read too slowly (FEED_STREAM_BUFFER_BYTES) or stopped reading (FEED_STALL_TIMEOUT_MS)'
  new client.Counter({ // eslint-disable-line no-new
    name: 'feed_streams_cut_total',
    help: cutHelp,
    collect () {
      this.reset()
      this.inc(feed.cut)
    }
  })
  // The same count under its first name, a gauge, kept for the dashboards that read it: Prometheus
  // names a count that only goes up *_total, and rate() needs a counter.
  new client.Gauge({ // eslint-disable-line no-new
    name: 'feed_streams_cut',
    help: `${cutHelp} (deprecated: feed_streams_cut_total)`,
    collect () { this.set(feed.cut) }
  })
  const { listPages } = fastify
  if (listPages) {
    new client.Counter({ // eslint-disable-line no-new
      name: 'list_page_cache_reads_total',
      help: 'Pages of the list sent (a HEAD counts as its GET; a 304 or 412 sends none and is not counted), by outcome: hit (kept, the database sent only its version), miss (built by the database)',
      labelNames: ['outcome'],
      collect () {
        this.reset()
        this.inc({ outcome: 'hit' }, listPages.hits)
        this.inc({ outcome: 'miss' }, listPages.misses)
      }
    })
    new client.Gauge({ // eslint-disable-line no-new
      name: 'list_page_cache_bytes',
      help: 'Bytes of list pages kept (LIST_PAGE_CACHE_BYTES at most)',
      collect () { this.set(listPages.bytes) }
    })
  }

  const { replicas } = fastify
  if (replicas) {
    const reads = new client.Counter({ name: 'db_reads_total', help: 'Reads by where they were answered: primary, replica-1...', labelNames: ['target'] })
    for (const target of ['primary', ...replicas.replicas.map(({ name }) => name)]) reads.inc({ target }, 0)
    replicas.on('read', (target: string) => reads.inc({ target }))
    const fallbacks = new client.Counter({
      name: 'db_read_fallbacks_total',
      help: 'Reads sent to the primary instead of a replica, by reason: none_up, lagging (past ' +
        'DATABASE_REPLICA_MAX_LAG_MS), behind_token (Consistency-Token not replayed), behind_version ' +
        '(If-None-Match names a newer version), replica_failed (the read failed on the replica), ' +
        'recovery_conflict (the replica cancelled it in a conflict with its replay), schema_behind (the replica lacks ' +
        'a table, column, function or type the read names)',
      labelNames: ['reason']
    })
    for (const reason of ['none_up', 'lagging', 'behind_token', 'behind_version', 'replica_failed', 'recovery_conflict', 'schema_behind']) fallbacks.inc({ reason }, 0)
    replicas.on('fallback', (reason: string) => fallbacks.inc({ reason }))
    new client.Gauge({ // eslint-disable-line no-new
      name: 'db_replica_lag_seconds',
      help: 'How long ago the primary was at a position the replica has not replayed, at most about DATABASE_REPLICA_MAX_LAG_MS plus ' +
        'four to six probe intervals (a replica further behind takes no reads); NaN while the primary cannot be asked',
      labelNames: ['replica'],
      collect () {
        for (const replica of replicas.replicas) this.set({ replica: replica.name }, (replicas.lagMs(replica) ?? NaN) / 1000)
      }
    })
    new client.Gauge({ // eslint-disable-line no-new
      name: 'db_replica_up',
      help: '1 while the replica answers its probe and takes reads, 0 while it is marked down',
      labelNames: ['replica'],
      collect () {
        for (const replica of replicas.replicas) this.set({ replica: replica.name }, replica.up ? 1 : 0)
      }
    })
  }

  if (!ownPort) return
  // Bound when the app is ready, so a port in use fails the start with its error; closed with it.
  fastify.addHook('onReady', async () => {
    // Its answers carry the API port's request id and security headers, and those other than a
    // scrape are problems, as the API port's are (src/app.ts): a URL the router refuses and a
    // request Node's parser refuses too. The app's logger, from warn up (or the app's level, if
    // higher): a scrape leaves no line (Fastify's request lines are info), nor does the start
    // (Fastify's "Server listening at", the API port's); a failed scrape leaves its error (its 500
    // says it has been logged).
    const { level } = fastify.log
    metricsServer = Fastify({
      loggerInstance: fastify.log.child({}, { level: QUIETER_THAN_WARN.includes(level) ? level : 'warn' }),
      requestIdHeader: false,
      genReqId: requestIdOf,
      clientErrorHandler,
      frameworkErrors
    })
    metricsServer.addHook('onRequest', async (request, reply) => {
      reply.header(REQUEST_ID_HEADER, request.id)
      setSecurityHeaders(reply)
    })
    metricsServer.setErrorHandler(errorHandler)
    metricsServer.setNotFoundHandler({ preParsing: notFoundBeforeBody } as object, notFoundHandler)
    metricsServer.get('/metrics', async (_request, reply) => {
      const { register } = client
      return reply.type(register.contentType).send(await register.metrics())
    })
    await metricsServer.listen({ host: HOST, port: METRICS_PORT })
    fastify.log.info({ address: metricsServer.addresses()[0] }, 'metrics listening')
  })
  fastify.addHook('onClose', async () => { await metricsServer?.close() })
}, { name: 'metrics', dependencies: ['env', 'db', 'feed', 'list-pages'] })
