// Request ids: the gateway's X-Request-Id when it is sane, else a new UUID. Echoed on every
// response, carried by every log line (pino's reqId) and by every problem body (request_id).
import { randomUUID } from 'node:crypto'
import type { IncomingMessage } from 'node:http'

export const REQUEST_ID_HEADER = 'x-request-id'

// Short and plain, so a client cannot inject log lines, header breaks or huge values.
const saneRequestId = /^[A-Za-z0-9._:@-]{1,128}$/

// Each request's id by its Node request: a request timed out while its body arrives is answered
// on the socket (src/error-handler.ts clientErrorHandler), where only Node's request is at hand.
const ids = new WeakMap<IncomingMessage, string>()

export function requestIdOf (request: IncomingMessage): string {
  const given = request.headers[REQUEST_ID_HEADER]
  const id = typeof given === 'string' && saneRequestId.test(given) ? given : randomUUID()
  ids.set(request, id)
  return id
}

/** The id requestIdOf gave `request`, if it has been given one. */
export function requestIdGiven (request: IncomingMessage): string | undefined {
  return ids.get(request)
}
