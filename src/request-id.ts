// Request ids: the gateway's X-Request-Id when it is sane, else a new UUID. Echoed on every
// response, carried by every log line (pino's reqId) and by every problem body (request_id).
import { randomUUID } from 'node:crypto'
import type { IncomingMessage } from 'node:http'

export const REQUEST_ID_HEADER = 'x-request-id'

// Short and plain, so a client cannot inject log lines, header breaks or huge values.
const saneRequestId = /^[A-Za-z0-9._:@-]{1,128}$/

export function requestIdOf (request: IncomingMessage): string {
  const given = request.headers[REQUEST_ID_HEADER]
  return typeof given === 'string' && saneRequestId.test(given) ? given : randomUUID()
}
