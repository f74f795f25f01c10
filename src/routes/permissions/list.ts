// GET: one page of the permissions granted to a client on a resource.
import type { FastifyInstance } from 'fastify'
import { orderOf } from '../../../db/queries/list.js'
import { parseSortBy } from '../../../db/queries/sort.js'
import type { operations as Operations } from '../../generated/openapi.js'
import { operations } from '../../generated/operations.js'
import { problems } from '../../problems.js'
import { collectionUrl, pageLinks } from '../links.js'
import { consistencyTokenOf, sendConsistencyToken } from '../consistency.js'
import { noneMatchNames } from '../../entity-tags.js'
import { etagOf, ifMatchVersions, newestOf, versionsNamed } from './preconditions.js'
import { assertClientAuthorized } from './target.js'

type List = Operations['listClientPermissions']
const { url, schema, config } = operations.listClientPermissions

export default async function listPermissions (fastify: FastifyInstance) {
  const pages = fastify.listPages

  // HEAD by this handler too, not Fastify's own HEAD route: that one gives a 304 Content-Length: 0,
  // which RFC 9110 §8.6 forbids (the length would have to be the 200's).
  fastify.route<{
    Params: List['parameters']['path']
    Querystring: Required<NonNullable<List['parameters']['query']>>
    // The 200's page is JSON made by PostgreSQL (db/queries/list.ts), in the spec's shape.
    Reply: { 200: string | Buffer, 304: undefined }
  }>({
    method: ['GET', 'HEAD'],
    url,
    schema,
    config,
    handler: async (request, reply) => {
      const { resource_id: resourceId, client_id: clientId } = request.params
      const { limit, offset: page, sort_by: sortBy } = request.query
      const noneMatch = request.headers['if-none-match']
      const named = versionsNamed(noneMatch)
      const ifMatch = ifMatchVersions(request.headers['if-match'])
      // Both conditions are decided on a state at least as new as the newest version they name.
      const newest = newestOf(ifMatch === undefined ? named : [...named, ...ifMatch])
      const sort = parseSortBy(sortBy)
      // By the order read, not its spelling: every sort_by of one order shares the page.
      const key = pages && JSON.stringify([resourceId, clientId, orderOf(sort), limit, page])
      const kept = key === undefined ? undefined : pages!.candidate(key)
      // The database builds the page only when the authorization is at none of these versions.
      const knownVersions = kept === undefined ? named : [...named, kept.version]
      const result = await fastify.queries.listGrantedPermissions({ resourceId, clientId, limit, page, sort, knownVersions }, {
        after: consistencyTokenOf(request),
        // Decided against a state at least as new as the version the caller names (a replica behind
        // it would answer 412 for a tag the caller holds, or 200 for one it already has).
        satisfied: newest === undefined ? undefined : ({ version }) => version !== undefined && BigInt(version) >= newest
      })
      sendConsistencyToken(reply, result.position)
      assertClientAuthorized(result, resourceId, clientId)
      const version = result.version!
      // If-Match first (RFC 9110 §13.2.2): a caller walking the pages of one version gets none of another.
      if (ifMatch !== undefined && !ifMatch.includes(version)) throw problems.pageVersionChanged()
      reply.header('etag', etagOf(version))
      if (noneMatchNames(noneMatch, version)) return reply.code(304).send()
      reply.header('x-total-count', result.total)
      reply.header('link', pageLinks(collectionUrl(request, resourceId, clientId), { limit, page, sortBy, total: result.total }))
      reply.type('application/json; charset=utf-8')
      if (result.permissionsJson === undefined) {
      // Not built: the authorization is at the kept page's version (one the caller named is a 304).
      // Stryker disable next-line all: a guard on the statement's contract, which no request reaches
        if (kept?.version !== version) throw new Error(`the list built no page for version ${version}`)
        pages!.served(key!, kept)
        return reply.code(200).send(kept.body)
      }
      // The page as PostgreSQL wrote it, in the spec's shape (the contract tests check every answer),
      // taken out of the result so that the settled promises holding it do not keep it alive (takeRows).
      const permissions = result.permissionsJson
      // Stryker disable next-line all: memory only, nothing reads the field again (BENCH_ONLY=overload: RSS)
      result.permissionsJson = undefined
      if (key === undefined) return reply.code(200).send(permissions)
      // Kept as bytes, so that a hit sends them without encoding the text again.
      const body = Buffer.from(permissions)
      pages!.built(key, { version, body })
      return reply.code(200).send(body)
    }
  })
}
