// Probes for the orchestrator: liveness never touches the database, readiness does.
import type { FastifyInstance } from 'fastify'
import { ping } from '../../db/queries.js'
import { operations } from '../generated/operations.js'
import { problems } from '../problems.js'

const { getLiveness, getReadiness } = operations

export default async function healthRoutes (fastify: FastifyInstance) {
  fastify.get(getLiveness.url, { schema: getLiveness.schema }, async () => ({ status: 'ok' as const }))

  fastify.get(getReadiness.url, { schema: getReadiness.schema }, async () => {
    try {
      await ping(fastify.db)
    } catch (error) {
      fastify.log.warn({ err: error }, 'readiness check failed')
      throw problems.databaseUnavailable()
    }
    return { status: 'ok' as const }
  })
}
