// Consistency-Token: the WAL position of the state a response shows (db/lsn.ts), opaque to
// clients. Sent back, it asks for a state at least as new: a replica that has replayed it, or the
// primary. Only with replicas (DATABASE_REPLICA_URLS): without, there is one state to read.
import type { FastifyReply, FastifyRequest } from 'fastify'
import { parseLsn } from '../../db/lsn.js'

export const CONSISTENCY_TOKEN = 'consistency-token'

/** The position the request's token names; the spec's pattern has refused a malformed one (400). */
export function consistencyTokenOf (request: FastifyRequest): bigint | undefined {
  const token = request.headers[CONSISTENCY_TOKEN]
  // Stryker disable next-line ConditionalExpression: equivalent: Node gives this header as a string or not at all, and parseLsn finds no position in undefined
  return typeof token === 'string' ? parseLsn(token) : undefined
}

/** Sends the position a response shows, when the statement was asked for one. */
export function sendConsistencyToken (reply: FastifyReply, position: string | undefined): void {
  if (position !== undefined) reply.header(CONSISTENCY_TOKEN, position)
}
