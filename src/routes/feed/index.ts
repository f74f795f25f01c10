// GET /permission_changes: the change feed, every recorded change across resources, oldest first,
// in an order no reader can miss (db/queries/feed.ts). Polled (a page, JSON) or streamed
// (Server-Sent Events, ./stream.ts), chosen by Accept.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import Negotiator from 'negotiator'
import { feedPage } from '../../feed-events.js'
import type { operations as Operations } from '../../generated/openapi.js'
import { operations } from '../../generated/operations.js'
import { consistencyTokenOf, sendConsistencyToken } from '../consistency.js'
import { siteUrl } from '../links.js'
import { assertNotPruned } from './pruned.js'
import { streamFeed } from './stream.js'

type Feed = Operations['listAllPermissionChanges']
type Query = NonNullable<Feed['parameters']['query']> & { limit: number }
const { url, schema, config } = operations.listAllPermissionChanges

// Offered as they are sent, with their charset: a media range with parameters matches only a type
// that has them (RFC 9110 §12.5.1), so `text/event-stream; charset=utf-8` asks for the stream,
// and `application/json; charset=utf-8, text/event-stream;q=0.5` prefers the page. Offered bare,
// neither range matched its type: the first got a page, the second a stream.
const EVENT_STREAM = 'text/event-stream; charset=utf-8'
const mediaTypes = ['application/json; charset=utf-8', EVENT_STREAM]

const wantsStream = (request: FastifyRequest) =>
  request.method === 'GET' && new Negotiator(request).mediaType(mediaTypes) === EVENT_STREAM

// Accept chooses between a page and a stream, and a stream starts at Last-Event-ID: the answers a
// cache may keep (200, and 410, cacheable by default: RFC 9110 §15.1) name them (§12.5.5), so that
// one is never served for the other.
async function varyByNegotiation (request: FastifyRequest, reply: FastifyReply, payload: unknown) {
  if (reply.statusCode === 200 || reply.statusCode === 410) reply.header('vary', wantsStream(request) ? 'Accept, Last-Event-ID' : 'Accept')
  return payload
}

export default async function changeFeed (fastify: FastifyInstance) {
  fastify.get<{ Querystring: Query, Headers: Feed['parameters']['header'] }>(url, { schema, config, onSend: varyByNegotiation }, async (request, reply) => {
    const { after: afterParameter, limit, resource_id: resourceId } = request.query
    if (wantsStream(request)) {
      const after = request.headers['last-event-id'] ?? afterParameter
      return streamFeed(fastify, request, reply, { after, resourceId })
    }
    const page = await fastify.queries.readFeed({ after: afterParameter, limit, resourceId }, { after: consistencyTokenOf(request) })
    sendConsistencyToken(reply, page.position)
    assertNotPruned(afterParameter, page)
    // Always a next link: an empty page is polled again from the same place. Without a cursor, that
    // place is just below the horizon (every change below it is final, and none is kept): from no
    // cursor, a reader coming back after a prune of changes recorded since would start again past
    // them without a 410. A page of one resource that is not full has every change of it below the
    // horizon: its link goes on from there (never back: a cursor past a replica's horizon stays),
    // not from its last change, so that a prune of other resources' changes after that one, which
    // the mark cannot tell apart, answers a reader that has missed nothing 410.
    const below = String(BigInt(page.horizon) - 1n)
    const next = resourceId !== undefined && page.changes.length < limit
      ? (afterParameter !== undefined && BigInt(afterParameter) > BigInt(below) ? afterParameter : below)
      : page.changes.at(-1)?.id ?? afterParameter ?? below
    const query = new URLSearchParams({ after: next, limit: String(limit), ...(resourceId === undefined ? {} : { resource_id: resourceId }) })
    reply.header('link', `<${siteUrl(request, '/permission_changes')}?${query.toString()}>; rel="next"`)
    // Entries as PostgreSQL wrote them, in the spec's shape (the contract tests check every answer),
    // taken out of the page so that the settled promises holding it do not keep them alive (takeRows).
    const entries = feedPage(page.changes)
    // Stryker disable next-line ArrayDeclaration: memory only, nothing reads the changes again (BENCH_ONLY="feed polling": RSS)
    page.changes = []
    return reply.type('application/json; charset=utf-8').send(entries)
  })
}
