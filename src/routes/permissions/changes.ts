// GET .../permission_changes: who changed a client's grants on a resource, newest first, from the
// history DELETE and POST write in their own transaction. Paged by a cursor (`before`, the id of the
// last change seen) rather than an offset, so a page never shifts while changes are being added.
import type { FastifyInstance } from 'fastify'
import type { operations as Operations } from '../../generated/openapi.js'
import { operations } from '../../generated/operations.js'
import { problems } from '../../problems.js'
import { consistencyTokenOf, sendConsistencyToken } from '../consistency.js'
import { collectionUrl } from '../links.js'

type History = Operations['listPermissionChanges']
const { url, schema, config } = operations.listPermissionChanges

export default async function permissionChanges (fastify: FastifyInstance) {
  fastify.get<{
    Params: History['parameters']['path']
    Querystring: NonNullable<History['parameters']['query']> & { limit: number }
    Reply: History['responses'][200]['content']['application/json']
  }>(url, { schema, config }, async (request, reply) => {
    const { resource_id: resourceId, client_id: clientId } = request.params
    const { limit, before } = request.query
    // The next page (its `before`, from the last page's Link) only from a state that has the change
    // it names: a replica further behind than the page before would skip the changes between.
    const page = await fastify.queries.listPermissionChanges({ resourceId, clientId, limit, ...(before ? { before } : {}) },
      { after: consistencyTokenOf(request), satisfied: ({ cursorSeen }) => cursorSeen !== false })
    sendConsistencyToken(reply, page.position)
    // The history outlives what it describes: with changes recorded, it is shown even when the
    // authorization, the client or the resource is gone; without, the list's 404s, in its order.
    if (!page.hasHistory) {
      if (!page.resourceExists) throw problems.resourceNotFound(resourceId)
      if (!page.clientExists) throw problems.clientNotFound(clientId)
      if (!page.authorized) throw problems.clientNotAuthorized(resourceId, clientId)
    }
    const last = page.changes.at(-1)
    if (page.more && last) {
      reply.header('link', `<${collectionUrl(request, resourceId, clientId, 'permission_changes')}?limit=${limit}&before=${last.id}>; rel="next"`)
    }
    const changes = page.changes.map((change) => ({
      id: change.id,
      at: change.at.toISOString(),
      action: change.action,
      permission_ids: change.permissionIds,
      // A claim the token did not carry is undefined here, and the serializer leaves it out.
      actor: { sub: change.actor.sub, client_id: change.actor.clientId },
      request_id: change.requestId
    }))
    // Sent, not returned, and taken out of the page: the handler's promise and the page's outlive the
    // answer in V8's old generation when the request queued for a connection (takeRows).
    // Stryker disable next-line ArrayDeclaration: memory only, nothing reads the changes again
    page.changes = []
    return reply.send(changes)
  })
}
