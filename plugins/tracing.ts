// Traced requests (when src/tracing.ts started tracing): @fastify/otel's request span, opened by
// the first onRequest hook and named after the route; the handler run in the span's context, so
// that its statements' spans go below it; and the trace in every log line of the request. Fastify
// writes its "incoming request" line before any hook, when no span exists yet: with tracing on,
// that line is written here instead, once the span is open (serverOptions gives Fastify
// IncomingLineAfterSpan).
import { context, SpanStatusCode, trace } from '@opentelemetry/api'
import type { FastifyInstance, FastifyReply, FastifyRequest, RouteHandlerMethod } from 'fastify'
import fp from 'fastify-plugin'
import type { Logger } from 'pino'
import { hasRequestLines, loggablePath, RequestLines } from '../src/request-lines.js'
import { requestContext, requestSpan, type Tracing } from '../src/tracing.js'

/**
 * Fastify's request lines, but "incoming request" is the tracing plugin's, after the span opens. A
 * request Fastify answers without running hooks (a URL it cannot decode) is not traced and gets no
 * such line: its one line, src/error-handler.ts frameworkErrors, names the request itself.
 */
export class IncomingLineAfterSpan extends RequestLines {
  override incomingRequest (): void {}
}

export interface TracingOptions { tracing: Tracing }

type ErrorHook = (request: FastifyRequest, reply: FastifyReply, error: Error, done: () => void) => void
type SendHook = (request: FastifyRequest, reply: FastifyReply, payload: unknown, done: (error: null, payload: unknown) => void) => void
// The error a request failed with, kept from its onError hooks until its status is known.
const kFailedWith = Symbol('tracing: the request failed with')
type Failed = FastifyRequest & { [kFailedWith]: Error | null }

/**
 * @fastify/otel marks the request span as an error from its onError hook (the route's last), for
 * any error thrown: a refused token, a 404, a 412 too. Fastify runs onError hooks before the error
 * handler has chosen the status, and a status once ERROR cannot be unset. HTTP's conventions for a
 * server span: a 4xx leaves the status unset (the client's doing), a 5xx is an error. So its hook
 * only keeps the error, and it is recorded (status, message, exception) just before the span ends
 * (its onSend hook, the route's last), and only when the answer is a 5xx.
 */
function errorOnlyWhenServerError (route: { onError?: unknown, onSend?: unknown }): void {
  const onError = [route.onError ?? []].flat() as ErrorHook[]
  const onSend = [route.onSend ?? []].flat() as SendHook[]
  const recordError = onError.at(-1)
  const endSpan = onSend.at(-1)
  // A route @fastify/otel does not trace (a probe) has neither.
  if (recordError?.name !== 'recordErrorInSpanHook' || endSpan?.name !== 'finalizeResponseSpanHook') return
  route.onError = [...onError.slice(0, -1), function keepError (request, _reply, error, done) {
    (request as Failed)[kFailedWith] = error
    done()
  } satisfies ErrorHook]
  route.onSend = [...onSend.slice(0, -1), function recordServerError (request, reply, payload, done) {
    const error = (request as Failed)[kFailedWith]
    if (error !== null && reply.statusCode >= 500) recordError(request, reply, error, () => {})
    done(null, payload)
  } satisfies SendHook, endSpan]
}

/**
 * A request no route matched (a 404 for an unknown URL, or one shed before routing by the pressure
 * hook, 503 overloaded) has none of the route hooks above: @fastify/otel ends its span in an
 * onResponse hook with the status code alone, so a 5xx left it unset. The same rule as a routed
 * request's, then: its error kept, and recorded just before the answer is sent when it is a 5xx.
 */
function unroutedServerError (fastify: FastifyInstance): void {
  fastify.addHook('onError', function keepUnroutedError (request, _reply, error, done) {
    if (request.is404) (request as Failed)[kFailedWith] = error
    done()
  })
  fastify.addHook('onSend', function recordUnroutedServerError (request, reply, payload, done) {
    const traced = request.is404 && reply.statusCode >= 500 ? requestContext(request) : undefined
    const span = traced && trace.getSpan(traced)
    if (span) {
      const error = (request as Failed)[kFailedWith]
      span.setStatus({ code: SpanStatusCode.ERROR, ...(error ? { message: error.message } : {}) })
      if (error) span.recordException(error)
    }
    done(null, payload)
  })
}

export default fp<TracingOptions>(async function tracing (fastify, { tracing }) {
  await fastify.register(tracing.fastifyPlugin)
  fastify.decorateRequest(kFailedWith, null)
  // Each handler runs in its request's context, up to its first await: the context is kept for
  // synchronous calls only (src/tracing.ts). A handler's first await is its statement, which takes
  // a pooled client there, and the client carries the context on (db/pool.ts).
  fastify.addHook('onRoute', (route) => {
    const handler = route.handler
    route.handler = function inRequestContext (request, reply) {
      const traced = requestContext(request)
      return traced ? context.with(traced, handler, this, request, reply) : handler.call(this, request, reply)
    } as RouteHandlerMethod
    errorOnlyWhenServerError(route)
  })
  unroutedServerError(fastify)
  fastify.addHook('onRequest', async function correlateLogs (request) {
    const span = requestSpan(request)
    if (span) {
      // As HTTP's conventions name a server span: the method and the route, never the raw URL.
      span.updateName(`${request.method} ${request.routeOptions.url ?? ''}`.trim())
      // The path alone, as the conventions define url.path: @fastify/otel gives it the query and
      // fragment too, where a client may have put a token (?access_token=…, #access_token=…), and
      // a JWT-shaped segment is redacted: as the logs show the URL.
      span.setAttribute('url.path', loggablePath(request.url))
      const { traceId, spanId } = span.spanContext()
      // Fastify's logger of this request (reply.log is the same one): bound, not wrapped in another child.
      const log = request.log as typeof request.log & Pick<Logger, 'setBindings'>
      log.setBindings({ trace_id: traceId, span_id: spanId })
    }
    if (hasRequestLines(request)) request.log.info({ req: request }, 'incoming request')
  })
}, { name: 'tracing' })
