// Probes for the orchestrator: liveness never touches the database, readiness does, and fails
// from the moment the service starts shutting down.
import type { FastifyInstance } from 'fastify'
import { ping } from '../../db/queries.js'
import { exemptFromPressure } from '../../plugins/pressure.js'
import { operations } from '../generated/operations.js'
import { problems } from '../problems.js'

const { getLiveness, getReadiness } = operations

export default async function healthRoutes (fastify: FastifyInstance) {
  const config = exemptFromPressure

  fastify.get(getLiveness.url, { schema: getLiveness.schema, config }, async () => ({ status: 'ok' as const }))

  fastify.get(getReadiness.url, { schema: getReadiness.schema, config }, async (request) => {
    if (fastify.draining) throw problems.shuttingDown()
    try {
      await ping(fastify.db)
    } catch (error) {
      request.log.warn({ err: error }, 'readiness check failed')
      throw problems.databaseUnavailable()
    }
    return { status: 'ok' as const }
  })
}
