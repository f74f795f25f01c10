// DELETE: remove permissions from a client on a resource, all of them or none.
import type { FastifyInstance } from 'fastify'
import { unauthorizePermissions } from '../../../db/queries/change.js'
import { actorOf } from '../../../plugins/auth.js'
import type { operations as Operations } from '../../generated/openapi.js'
import { operations } from '../../generated/operations.js'
import { assertChangeApplies } from './target.js'
import { ifMatchVersions } from './preconditions.js'

type Unauthorize = Operations['unauthorizeClientPermissions']
const { url, schema, config } = operations.unauthorizeClientPermissions

export default async function unauthorize (fastify: FastifyInstance) {
  fastify.delete<{
    Params: Unauthorize['parameters']['path']
    Body: Unauthorize['requestBody']['content']['application/json']
  }>(url, { schema, config }, async (request, reply) => {
    const { resource_id: resourceId, client_id: clientId } = request.params
    const result = await unauthorizePermissions(fastify.db, {
      resourceId,
      clientId,
      permissionIds: request.body,
      ifMatch: ifMatchVersions(request.headers['if-match']),
      actor: actorOf(request),
      requestId: request.id
    }, { prepared: fastify.config.DATABASE_PREPARED_STATEMENTS, statementTimeoutMs: fastify.config.DATABASE_STATEMENT_TIMEOUT_MS })
    assertChangeApplies(result, resourceId, clientId, 'nothing was removed')
    request.log.info({ resourceId, clientId, removed: result.changed, changeId: result.changeId }, 'permissions unauthorized')
    return reply.code(204).send()
  })
}
