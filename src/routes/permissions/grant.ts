// POST: grant permissions to a client already authorized on a resource, all of them or none; the
// inverse of DELETE, with the same body and the same answers.
import type { FastifyInstance } from 'fastify'
import { grantPermissions } from '../../../db/queries/change.js'
import { actorOf } from '../../../plugins/auth.js'
import type { operations as Operations } from '../../generated/openapi.js'
import { operations } from '../../generated/operations.js'
import { assertChangeApplies } from './target.js'
import { ifMatchVersions } from './preconditions.js'

type Grant = Operations['grantClientPermissions']
const { url, schema, config } = operations.grantClientPermissions

export default async function grant (fastify: FastifyInstance) {
  fastify.post<{
    Params: Grant['parameters']['path']
    Body: Grant['requestBody']['content']['application/json']
  }>(url, { schema, config }, async (request, reply) => {
    const { resource_id: resourceId, client_id: clientId } = request.params
    const result = await grantPermissions(fastify.db, {
      resourceId,
      clientId,
      permissionIds: request.body,
      ifMatch: ifMatchVersions(request.headers['if-match']),
      actor: actorOf(request),
      requestId: request.id
    }, { prepared: fastify.config.DATABASE_PREPARED_STATEMENTS, statementTimeoutMs: fastify.config.DATABASE_STATEMENT_TIMEOUT_MS })
    assertChangeApplies(result, resourceId, clientId, 'nothing was granted')
    request.log.info({ resourceId, clientId, granted: result.changed, changeId: result.changeId }, 'permissions granted')
    return reply.code(204).send()
  })
}
