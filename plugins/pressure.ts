// Load shedding with @fastify/under-pressure: while the event loop lags past MAX_EVENT_LOOP_DELAY_MS,
// API calls get 503 + Retry-After at once instead of queueing without bound. Probes are exempt:
// an overloaded replica is still alive. A replica is ready only once a sample found its loop calm. https://github.com/fastify/under-pressure
import underPressure from '@fastify/under-pressure'
import type { FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { problems } from '../src/problems.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Answered even under pressure: probes, problem pages, metrics. */
    pressureExempt?: boolean
  }
  interface FastifyInstance {
    /**
     * Whether a sample of the event loop has found it calm since the service started (always true
     * with shedding off). Until then a replica is not ready: the lag of its own start (loading,
     * compiling, migrating) is in its first sample, and traffic sent then would be shed.
     */
    calmSinceStart: () => boolean
  }
}

export default fp(async function pressure (fastify) {
  const { MAX_EVENT_LOOP_DELAY_MS, EVENT_LOOP_SAMPLE_INTERVAL_MS } = fastify.config
  if (MAX_EVENT_LOOP_DELAY_MS === 0) {
    fastify.decorate('calmSinceStart', () => true)
    return
  }
  await fastify.register(underPressure, {
    maxEventLoopDelay: MAX_EVENT_LOOP_DELAY_MS,
    sampleInterval: EVENT_LOOP_SAMPLE_INTERVAL_MS,
    // Returning lets the request through: what a route whose config says pressureExempt gets.
    pressureHandler: async (request: FastifyRequest) => {
      if (request.routeOptions.config.pressureExempt !== true) throw problems.overloaded()
    }
  })
  let calm = false
  fastify.decorate('calmSinceStart', () => {
    if (!calm) {
      // memoryUsage() holds the last sample's figures, all 0 until the first sample is taken
      // (the resident set is never 0 after one).
      const { rssBytes, eventLoopDelay } = fastify.memoryUsage()
      // Stryker disable next-line EqualityOperator: a sampled delay exactly at the bound (a float of nanoseconds in ms) is no case a test can make
      calm = rssBytes > 0 && eventLoopDelay <= MAX_EVENT_LOOP_DELAY_MS
    }
    return calm
  })
}, { name: 'pressure', dependencies: ['env'] })
