// GET: one page of the permissions granted to a client on a resource.
import type { FastifyInstance } from 'fastify'
import { parseSortBy } from '../../../db/queries/sort.js'
import type { operations as Operations } from '../../generated/openapi.js'
import { operations } from '../../generated/operations.js'
import { collectionUrl, pageLinks } from '../links.js'
import { consistencyTokenOf, sendConsistencyToken } from '../consistency.js'
import { etagOf, newestVersionNamed, noneMatchFails } from './preconditions.js'
import { assertClientAuthorized } from './target.js'

type List = Operations['listClientPermissions']
const { url, schema, config } = operations.listClientPermissions

export default async function listPermissions (fastify: FastifyInstance) {
  fastify.get<{
    Params: List['parameters']['path']
    Querystring: Required<NonNullable<List['parameters']['query']>>
    // The 200's page is JSON text made by PostgreSQL (db/queries/list.ts), in the spec's shape.
    Reply: { 200: string, 304: undefined }
  }>(url, { schema, config }, async (request, reply) => {
    const { resource_id: resourceId, client_id: clientId } = request.params
    const { limit, offset: page, sort_by: sortBy } = request.query
    const newest = newestVersionNamed(request.headers['if-none-match'])
    const result = await fastify.queries.listGrantedPermissions({ resourceId, clientId, limit, page, sort: parseSortBy(sortBy) }, {
      after: consistencyTokenOf(request),
      // Decided against a state at least as new as the version the caller names.
      satisfied: newest === undefined ? undefined : ({ version }) => version !== undefined && BigInt(version) >= newest
    })
    sendConsistencyToken(reply, result.position)
    assertClientAuthorized(result, resourceId, clientId)
    const etag = etagOf(result.version!)
    reply.header('etag', etag)
    if (noneMatchFails(request.headers['if-none-match'], result.version!)) return reply.code(304).send()
    reply.header('x-total-count', result.total)
    reply.header('link', pageLinks(collectionUrl(request, resourceId, clientId), { limit, page, sortBy, total: result.total }))
    // The page as PostgreSQL wrote it, in the spec's shape (the contract tests check every answer),
    // taken out of the result so that the settled promises holding it do not keep it alive (takeRows).
    const permissions = result.permissionsJson
    // Stryker disable next-line StringLiteral: memory only, nothing reads the field again (BENCH_ONLY=overload: RSS)
    result.permissionsJson = ''
    reply.type('application/json; charset=utf-8')
    return reply.code(200).send(permissions)
  })
}
