// Load shedding with @fastify/under-pressure: while the event loop lags past MAX_EVENT_LOOP_DELAY_MS,
// API calls get 503 + Retry-After at once instead of queueing without bound. Probes are exempt:
// an overloaded replica is still alive. https://github.com/fastify/under-pressure
import underPressure from '@fastify/under-pressure'
import fp from 'fastify-plugin'
import { problems } from '../src/problems.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** under-pressure's per-route override; probes use one that lets the request through. */
    pressureHandler?: () => void
  }
}

/** Route config for routes that must answer even under pressure. */
export const exemptFromPressure = { pressureHandler: () => {} }

export default fp(async function pressure (fastify) {
  const { MAX_EVENT_LOOP_DELAY_MS, EVENT_LOOP_SAMPLE_INTERVAL_MS } = fastify.config
  if (MAX_EVENT_LOOP_DELAY_MS === 0) return
  await fastify.register(underPressure, {
    maxEventLoopDelay: MAX_EVENT_LOOP_DELAY_MS,
    sampleInterval: EVENT_LOOP_SAMPLE_INTERVAL_MS,
    pressureHandler: async () => { throw problems.overloaded() }
  })
}, { name: 'pressure', dependencies: ['env'] })
