// DELETE: remove permissions from a client on a resource, all of them or none.
import type { FastifyInstance } from 'fastify'
import type { operations as Operations } from '../../generated/openapi.js'
import { operations } from '../../generated/operations.js'
import { changeOf, sendChanged } from './change.js'
import { sendConsistencyToken } from '../consistency.js'
import { assertChangeApplies } from './target.js'

type Unauthorize = Operations['unauthorizeClientPermissions']
const { url, schema, config } = operations.unauthorizeClientPermissions

export default async function unauthorize (fastify: FastifyInstance) {
  fastify.delete<{
    Params: Unauthorize['parameters']['path']
    Body: Unauthorize['requestBody']['content']['application/json']
  }>(url, { schema, config }, async (request, reply) => {
    const change = changeOf(request)
    const result = await fastify.queries.unauthorizePermissions(change)
    const { resourceId, clientId } = change
    // Refused or not, the answer says where the primary was: a caller told 412 reads the current
    // ETag next, and with this token never from a replica older than the refusal.
    sendConsistencyToken(reply, result.position)
    assertChangeApplies(result, resourceId, clientId, 'nothing was removed')
    request.log.info({ resourceId, clientId, removed: result.changed, changeId: result.changeId }, 'permissions unauthorized')
    return sendChanged(reply, result)
  })
}
