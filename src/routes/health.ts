// Probes for the orchestrator: liveness never touches the database; readiness asks it on a
// connection of its own (never behind API traffic, so a saturated replica stays ready), and fails
// until the event loop has been found calm once since start, when the database cannot be reached,
// and from the moment the service starts shutting down. Neither writes Fastify's request lines
// (src/request-lines.ts): asked every half second, they would say nothing; a failure says why.
import type { FastifyInstance, FastifyReply } from 'fastify'
import { databaseErrorSummary } from '../../db/errors.js'
import { operations } from '../generated/operations.js'
import { problems } from '../problems.js'

const { getLiveness, getReadiness } = operations

// A probe's answer, ready or not, is about this moment: a cache on the way (Varnish keeps a 200
// without Cache-Control for 2 minutes) would keep a replica "ready" after its database went away,
// or out of the pool after it came back. Set before the checks: a problem keeps it.
const uncached = (reply: FastifyReply) => {
  reply.header('cache-control', 'no-store')
}
const ok = { status: 'ok' as const }

export default async function healthRoutes (fastify: FastifyInstance) {
  fastify.get(getLiveness.url, { schema: getLiveness.schema, config: { ...getLiveness.config, pressureExempt: true, requestLines: false } }, async (_request, reply) => {
    uncached(reply)
    return ok
  })

  fastify.get(getReadiness.url, { schema: getReadiness.schema, config: { ...getReadiness.config, pressureExempt: true, requestLines: false } }, async (request, reply) => {
    uncached(reply)
    if (fastify.draining) throw problems.shuttingDown()
    if (!fastify.calmSinceStart()) throw problems.starting()
    try {
      await fastify.checkDatabase()
    } catch (error) {
      request.log.warn(databaseErrorSummary(error as Error), 'readiness check failed')
      throw problems.databaseUnavailable()
    }
    return ok
  })
}
