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
