// Traced requests (when src/tracing.ts started tracing): @fastify/otel's request span, opened by
// the first onRequest hook and named after the route; the handler run in the span's context, so
// that its statements' spans go below it; and the trace in every log line of the request. Fastify
// writes its "incoming request" line before any hook, when no span exists yet: with tracing on,
// that line is written here instead, once the span is open (serverOptions gives Fastify
// IncomingLineAfterSpan).
import { context } from '@opentelemetry/api'
import { LogController, type RouteHandlerMethod } from 'fastify'
import fp from 'fastify-plugin'
import type { Logger } from 'pino'
import { requestContext, requestSpan, type Tracing } from '../src/tracing.js'

/**
 * Fastify's request lines, but "incoming request" is the tracing plugin's, after the span opens. A
 * request Fastify answers without running hooks (a URL it cannot decode) is not traced and gets no
 * such line: its one line, src/error-handler.ts frameworkErrors, names the request itself.
 */
export class IncomingLineAfterSpan extends LogController {
  override incomingRequest (): void {}
}

export interface TracingOptions { tracing: Tracing }

export default fp<TracingOptions>(async function tracing (fastify, { tracing }) {
  await fastify.register(tracing.fastifyPlugin)
  // Each handler runs in its request's context, up to its first await: the context is kept for
  // synchronous calls only (src/tracing.ts). A handler's first await is its statement, which takes
  // a pooled client there, and the client carries the context on (db/pool.ts).
  fastify.addHook('onRoute', (route) => {
    const handler = route.handler
    route.handler = function inRequestContext (request, reply) {
      const traced = requestContext(request)
      return traced ? context.with(traced, handler, this, request, reply) : handler.call(this, request, reply)
    } as RouteHandlerMethod
  })
  fastify.addHook('onRequest', async function correlateLogs (request) {
    const span = requestSpan(request)
    if (span) {
      // As HTTP's conventions name a server span: the method and the route, never the raw URL.
      span.updateName(`${request.method} ${request.routeOptions.url ?? ''}`.trim())
      // The path alone, as the conventions define url.path: @fastify/otel gives it the query too,
      // where a client may have put a token (?access_token=…), which the logs redact.
      span.setAttribute('url.path', request.url.split('?')[0])
      const { traceId, spanId } = span.spanContext()
      // Fastify's logger of this request (reply.log is the same one): bound, not wrapped in another child.
      const log = request.log as typeof request.log & Pick<Logger, 'setBindings'>
      log.setBindings({ trace_id: traceId, span_id: spanId })
    }
    request.log.info({ req: request }, 'incoming request')
  })
}, { name: 'tracing' })
