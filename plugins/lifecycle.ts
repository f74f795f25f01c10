// The shutdown sequence's first step: draining. From the moment it starts (a signal, or Fastify's
// close) readiness fails so the gateway stops sending traffic, while requests are still served.
import fp from 'fastify-plugin'

declare module 'fastify' {
  interface FastifyInstance {
    /** True once the service has begun shutting down. */
    readonly draining: boolean
    /** Marks the service as draining: /readyz answers 503 from now on. */
    startDraining: () => void
  }
}

export default fp(async function lifecycle (fastify) {
  let draining = false
  fastify.decorate('draining', { getter: () => draining })
  fastify.decorate('startDraining', () => { draining = true })
  fastify.addHook('preClose', async () => { draining = true })
}, { name: 'lifecycle' })
