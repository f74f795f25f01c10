// POST: grant permissions to a client already authorized on a resource, all of them or none; the
// inverse of DELETE, with the same body and the same answers.
import type { FastifyInstance } from 'fastify'
import type { operations as Operations } from '../../generated/openapi.js'
import { operations } from '../../generated/operations.js'
import { isOverDatabaseLimit } from '../../../db/errors.js'
import { raisedByChangeStatement } from '../../../db/queries/change.js'
import { problems } from '../../problems.js'
import { inRequestContext } from '../../tracing.js'
import { changeOf, sendChanged } from './change.js'
import { sendConsistencyToken } from '../consistency.js'
import { assertChangeApplies } from './target.js'

type Grant = Operations['grantClientPermissions']
const { url, schema, config } = operations.grantClientPermissions

export default async function grant (fastify: FastifyInstance) {
  fastify.post<{
    Params: Grant['parameters']['path']
    Body: Grant['requestBody']['content']['application/json']
  }>(url, { schema, config }, async (request, reply) => {
    const change = changeOf(request)
    const { resourceId, clientId } = change
    const result = await fastify.queries.grantPermissions(change).catch(async (error: unknown) => {
      // Ids within the contract's bounds can still be too long together for the grant's index
      // entry: the caller's to shorten, not a fault of the service (the transaction rolled back).
      // Only when the grant statement refused its row: a COMMIT refused with the same SQLSTATE
      // (a full NOTIFY queue) is no fault of the ids, a 500 as for DELETE.
      if (!isOverDatabaseLimit(error) || !raisedByChangeStatement(error)) throw error
      request.log.info({ resourceId, clientId, reason: (error as Error).message }, 'grant too large to store')
      // A refusal like the 412 and the other 422 (below), so with a token too (docs/scaling.md);
      // without one if the primary cannot say where it is: the 422 is still the answer. Asked
      // after an await, in the request's trace context again (src/tracing.ts).
      sendConsistencyToken(reply, await inRequestContext(request, fastify.queries.primaryPosition).catch(() => undefined))
      throw problems.grantTooLarge(resourceId, clientId)
    })
    // Refused or not, the answer says where the primary was: a caller told 412 reads the current
    // ETag next, and with this token never from a replica older than the refusal.
    sendConsistencyToken(reply, result.position)
    assertChangeApplies(result, resourceId, clientId, 'nothing was granted')
    request.log.info({ resourceId, clientId, granted: result.changed, changeId: result.changeId }, 'permissions granted')
    return sendChanged(reply, result)
  })
}
