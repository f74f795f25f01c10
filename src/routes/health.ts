// Probes for the orchestrator: liveness never touches the database; readiness asks it on a
// connection of its own (never behind API traffic, so a saturated replica stays ready), and fails
// until the event loop has been found calm once since start, when the database cannot be reached,
// and from the moment the service starts shutting down.
import type { FastifyInstance } from 'fastify'
import { databaseErrorSummary } from '../../db/errors.js'
import { operations } from '../generated/operations.js'
import { problems } from '../problems.js'

const { getLiveness, getReadiness } = operations

export default async function healthRoutes (fastify: FastifyInstance) {
  fastify.get(getLiveness.url, { schema: getLiveness.schema, config: { ...getLiveness.config, pressureExempt: true } }, async () => ({ status: 'ok' as const }))

  fastify.get(getReadiness.url, { schema: getReadiness.schema, config: { ...getReadiness.config, pressureExempt: true } }, async (request) => {
    if (fastify.draining) throw problems.shuttingDown()
    if (!fastify.calmSinceStart()) throw problems.starting()
    try {
      await fastify.checkDatabase()
    } catch (error) {
      request.log.warn(databaseErrorSummary(error as Error), 'readiness check failed')
      throw problems.databaseUnavailable()
    }
    return { status: 'ok' as const }
  })
}
