// Fastify's request lines ("incoming request", "request completed") for every route but those
// whose config says `requestLines: false`: the probes, which the gateway asks every half second
// and an orchestrator every few, four lines a second per replica that say nothing. A probe that
// fails still says why in lines of its own (the readiness check's warning, the error handler's
// line for a 503 while starting or shutting down).
import { type FastifyRequest, LogController } from 'fastify'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** false: Fastify's incoming and completion lines are left out for this route. */
    requestLines?: boolean
  }
}

/** Whether the request gets Fastify's request lines (a request refused before routing has no route options). */
export const hasRequestLines = (request: FastifyRequest) => request.routeOptions?.config?.requestLines !== false

export class RequestLines extends LogController {
  override isLogDisabled (request: FastifyRequest): boolean {
    return !hasRequestLines(request)
  }
}

// A JWT (its header always opens with `{"`, eyJ in base64url), wherever it is in a URL.
const JWT_SHAPED = /eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*/g
// Query parameters named as credentials (access_token, token, Authorization, API-Key, password…),
// however their names are spelt, cased or percent-encoded.
const CREDENTIAL_NAME = /token|auth|bearer|jwt|secret|passw|pwd|key|session|cookie|credential|signature/i

function decodedName (name: string): string {
  try {
    return decodeURIComponent(name.replaceAll('+', ' '))
  } catch {
    return name
  }
}

/**
 * The URL as a log line may show it: a client may put a token in the query string under any name
 * (RFC 6750 §2.3's access_token, or another a library picked), or none. Each parameter named as a
 * credential has its value redacted, and so has anything shaped like a JWT; the rest is as sent.
 */
export function loggableUrl (url: string): string {
  const start = url.search(/[?#]/)
  if (start === -1 && !url.includes('eyJ')) return url
  const path = start === -1 ? url : url.slice(0, start)
  const query = start === -1
    ? ''
    : url.slice(start).replace(/([?#&;])([^?#&;=]*)=([^?#&;]*)/g, (parameter, separator: string, name: string) =>
      CREDENTIAL_NAME.test(decodedName(name)) ? `${separator}${name}=[redacted]` : parameter)
  return (path + query).replace(JWT_SHAPED, '[redacted]')
}

/**
 * The path of `url` as a span may show it (url.path): up to its query or fragment (the router
 * ends the path at either), where a client may have put a token, and anything shaped like a JWT
 * redacted, as in the logs (loggableUrl).
 */
export function loggablePath (url: string): string {
  const end = url.search(/[?#]/)
  return loggableUrl(end === -1 ? url : url.slice(0, end))
}
