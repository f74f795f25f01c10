// What the DELETE and the POST share: the change a request asks for, and its answer.
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { ChangeInput, ChangeResult } from '../../../db/queries/change.js'
import { actorOf } from './actor.js'
import { etagOf, ifMatchVersions, ifNoneMatchVersions } from './preconditions.js'

type ChangeRequest = FastifyRequest<{ Params: { resource_id: string, client_id: string }, Body: string[] }>

/** The ids of the body, on the path's target, under the request's If-Match and If-None-Match, by the token's actor. */
export function changeOf (request: ChangeRequest): ChangeInput {
  return {
    resourceId: request.params.resource_id,
    clientId: request.params.client_id,
    permissionIds: request.body,
    ifMatch: ifMatchVersions(request.headers['if-match']),
    ifNoneMatch: ifNoneMatchVersions(request.headers['if-none-match']),
    actor: actorOf(request),
    requestId: request.id
  }
}

/** A change's 204, with the authorization's new ETag (its Consistency-Token is sent before the checks). */
export function sendChanged (reply: FastifyReply, result: ChangeResult): FastifyReply {
  // Stryker disable next-line ConditionalExpression: a change that applies locked its authorization, whose version it read (db/queries/change.ts): only narrows the type
  if (result.version !== undefined) reply.header('etag', etagOf(result.version))
  return reply.code(204).send()
}
