// Request ids: the gateway's X-Request-Id when it is sane, else a new UUID. Echoed on every
// response, carried by every log line (pino's reqId) and by every problem body (request_id).
import { randomUUID } from 'node:crypto'
import type { IncomingMessage } from 'node:http'

export const REQUEST_ID_HEADER = 'x-request-id'

// Short and plain, so a client cannot inject log lines, header breaks or huge values.
const saneRequestId = /^[A-Za-z0-9._:@-]{1,128}$/

// Each request's id on its Node request: a request timed out while its body arrives is answered
// on the socket (src/error-handler.ts clientErrorHandler), where only Node's request is at hand.
// A property of its own rather than a WeakMap: every request would add an entry that each young
// garbage collection has to weigh (ephemerons), on the path the bench measures.
const kRequestId = Symbol('requestId')
type Identified = IncomingMessage & { [kRequestId]?: string }

export function requestIdOf (request: IncomingMessage): string {
  const given = request.headers[REQUEST_ID_HEADER]
  const id = typeof given === 'string' && saneRequestId.test(given) ? given : randomUUID()
  ;(request as Identified)[kRequestId] = id
  return id
}

/** The id requestIdOf gave `request`, if it has been given one. */
export function requestIdGiven (request: IncomingMessage): string | undefined {
  return (request as Identified)[kRequestId]
}
