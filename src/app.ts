// The application as a plugin: cross-cutting plugins first, then routes, then error handling.
// Only src/serve.ts listens (started by src/server.ts); tests register this same plugin (test/support/harness.ts).
import { type IncomingMessage, METHODS, type Server, ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import type { FastifyHttpOptions, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import auth, { publicRoute } from '../plugins/auth/index.js'
import { authOptionsOf, jwksOverNetworkHttp } from '../plugins/auth/key.js'
import db from '../plugins/db.js'
import docs from '../plugins/docs.js'
import env from '../plugins/env.js'
import feed from '../plugins/feed.js'
import listPages from '../plugins/list-pages.js'
import lifecycle from '../plugins/lifecycle.js'
import metrics from '../plugins/metrics.js'
import pressure from '../plugins/pressure.js'
import tracingPlugin, { IncomingLineAfterSpan } from '../plugins/tracing.js'
import { type Config, isProduction } from './config.js'
import { operations } from './generated/operations.js'
import { headerLines } from './header-lines.js'
import { registerJsonBodyParser } from './json-body.js'
import { clientErrorHandler, errorHandler, frameworkErrors, notFoundBeforeBody, notFoundHandler } from './error-handler.js'
import { problems } from './problems.js'
import { REQUEST_ID_HEADER, requestIdOf } from './request-id.js'
import { loggableUrl, RequestLines } from './request-lines.js'
import { setSecurityHeaders } from './security-headers.js'
import changeFeed from './routes/feed/index.js'
import healthRoutes from './routes/health.js'
import permissionRoutes from './routes/permissions/index.js'
import problemPages from './routes/problems.js'
import type { Tracing } from './tracing.js'
import { validatorCompiler } from './validation.js'

export interface AppOptions {
  config: Config
  /** Started by src/server.ts when the OTEL_* variables ask for traces (src/tracing.ts). */
  tracing?: Tracing
}

export interface ServerOutput {
  /** Whether the process's stdout is a terminal (process.stdout.isTTY): a person reads the logs. */
  stdoutIsTerminal?: boolean
  /** Whether requests are traced: plugins/tracing.ts then writes the "incoming request" line, trace and all. */
  traced?: boolean
}

/**
 * Options for the Fastify instance that runs the app: limits and logging the contract relies on.
 * Logs are JSON lines, except in development with a terminal on stdout: pino-pretty's lines then,
 * written by pino's transport after the same redaction and serializers.
 */
export function serverOptions (config: Config, { stdoutIsTerminal = false, traced = false }: ServerOutput = {}): FastifyHttpOptions<Server> {
  return {
    logger: {
      level: config.LOG_LEVEL,
      redact: { paths: ['req.headers.authorization', 'req.headers.cookie'], censor: '[redacted]' },
      serializers: { req: serializeRequest, res: serializeReply },
      ...(stdoutIsTerminal && !isProduction(config) ? { transport: prettyLogs } : {})
    },
    logController: traced ? new IncomingLineAfterSpan() : new RequestLines(),
    requestIdHeader: false,
    genReqId: requestIdOf,
    // DELETE bodies above this are refused with 413.
    bodyLimit: 256 * 1024,
    // A request, headers and body, must arrive within REQUEST_TIMEOUT_MS, or it is answered 408
    // and its connection closed (clientErrorHandler): a body sent a byte at a time holds no
    // connection for ever. Node's default is no bound on the body and 60 s on the headers.
    requestTimeout: config.REQUEST_TIMEOUT_MS,
    http: {
      // Room for a large (or hostile, 100 KB) token to reach authentication and get a proper 401;
      // Node's default of 16 KiB would answer 431 first.
      maxHeaderSize: 128 * 1024,
      // A missing Host is answered by the app, as a problem (hostAsRequired).
      requireHostHeader: false,
      headersTimeout: Math.min(60_000, config.REQUEST_TIMEOUT_MS),
      // How often Node looks for requests past their time: every second, not every 30 s (its
      // default), so a request is timed out within a second of its bound.
      connectionsCheckingInterval: 1000
    },
    // The router's default of 100 would answer a long id before auth and validation (414 now, an
    // undeclared status); any id that fits in a request line (within maxHeaderSize) reaches the
    // schema's maxLength instead.
    routerOptions: { maxParamLength: 128 * 1024 },
    trustProxy: trustProxyOf(config.TRUST_PROXY),
    clientErrorHandler,
    frameworkErrors,
    // While closing, requests already on a connection are served (and told Connection: close)
    // instead of Fastify's plain-JSON 503: nothing in flight fails during a rolling deploy.
    return503OnClosing: false
  }
}

// https://github.com/pinojs/pino-pretty: the time of day, the level and the message first; pid and
// hostname say nothing on a laptop.
const prettyLogs = { target: 'pino-pretty', options: { translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname' } }

// What a log line says of a request: the route it matched, and the URL without secrets a client
// may have put in it (loggableUrl).
function serializeRequest (request: FastifyRequest) {
  return {
    method: request.method,
    url: loggableUrl(request.url),
    route: request.routeOptions?.url,
    remoteAddress: request.ip
  }
}

// The completion line: status and route again, so one line answers "which route, how, how fast".
function serializeReply (reply: Partial<FastifyReply> & Pick<FastifyReply, 'statusCode'>) {
  return { statusCode: reply.statusCode, route: reply.request?.routeOptions?.url }
}

/**
 * RFC 9112 §3.2: exactly one Host line, or none in HTTP/1.0. Node keeps only the first of several
 * (and answers a missing one itself, with no problem body, unless requireHostHeader is off).
 */
function hostAsRequired (request: IncomingMessage): boolean {
  const lines = headerLines(request, 'host').length
  return lines === 1 || (lines === 0 && request.httpVersion === '1.0')
}

/**
 * Whether the query string, if any, is percent-encoded UTF-8, as the router requires of the path
 * (a broken path is FST_ERR_BAD_URL, 400). The query parser keeps a sequence it cannot decode as
 * literal text instead: `?resource_id=%ED%A0%80` (an unpaired surrogate) would filter on nine
 * characters no one sent. It starts where the router's does, at the first `?` or `#`.
 */
function queryDecodable (url: string): boolean {
  const start = url.search(/[?#]/)
  if (start === -1 || !url.includes('%', start)) return true
  try {
    decodeURIComponent(url.slice(start + 1))
    return true
  } catch {
    return false
  }
}

// "true", "false", or a comma-separated list of proxy addresses (Fastify's trustProxy).
function trustProxyOf (setting: string): boolean | string {
  return setting === 'true' || setting === 'false' ? setting === 'true' : setting
}

async function app (fastify: FastifyInstance, { config, tracing }: AppOptions) {
  // First: its onRequest hook opens the request's span, which every later hook runs in.
  if (tracing) await fastify.register(tracingPlugin, { tracing })
  const authOptions = authOptionsOf(config)
  if (jwksOverNetworkHttp(config)) {
    fastify.log.warn({ url: config.JWKS_URL }, 'JWKS_URL is plain http: anyone on the path to the key set can make tokens this service accepts')
  }

  fastify.addHook('onRequest', async (request, reply) => {
    reply.header(REQUEST_ID_HEADER, request.id)
    // Set first, so that every answer carries them, the docs', the 404s' and the errors' included
    // (src/security-headers.ts); a route with a policy of its own replaces this one. Not in an
    // onSend hook: one more hook on every answer.
    setSecurityHeaders(reply)
    if (!hostAsRequired(request.raw)) throw problems.hostRequired()
    if (!queryDecodable(request.url)) throw problems.brokenUrl()
  })
  // An expectation other than 100-continue, which Node would answer 417 itself, with no problem
  // body and a status no operation declares: RFC 9110 §10.1.1 lets a server ignore it.
  fastify.server.on('checkExpectation', (request, response) => { fastify.server.emit('request', request, response) })
  // CONNECT, which Node hands to 'connect' listeners only, and with none drops the connection
  // unanswered: answered by the app like the other methods it does not route (404 problem).
  fastify.server.on('connect', (request: IncomingMessage, socket: Socket) => {
    const response = new ServerResponse(request)
    response.shouldKeepAlive = false
    response.assignSocket(socket)
    response.on('finish', () => socket.destroySoon())
    fastify.server.emit('request', request, response)
  })
  fastify.setValidatorCompiler(validatorCompiler)
  // Only JSON bodies: Fastify would also parse text/plain (defeating the 415) and other charsets.
  registerJsonBodyParser(fastify)
  fastify.setErrorHandler(errorHandler)
  // An unknown URL is answered 404 before its body is read: Fastify runs the JSON parser for the
  // not-found route too, so a body sent there was answered 400 malformed-body (naming permission
  // ids), 413 or 415 instead. A preParsing hook of the not-found route alone: after the onRequest
  // hooks (shedding and tracing see it as before), and none on the spec's routes, where a hook costs
  // every request. Fastify adds each lifecycle hook given here to that route (lib/four-oh-four.js),
  // though its types name only preValidation and preHandler; test/http/problems checks it.
  fastify.setNotFoundHandler({ preParsing: notFoundBeforeBody } as object, notFoundHandler)

  await fastify.register(env, { config })
  await fastify.register(lifecycle)
  await fastify.register(db)
  await fastify.register(feed)
  await fastify.register(listPages)
  await fastify.register(docs)
  await fastify.register(pressure)
  await fastify.register(metrics)
  // After shedding and the metrics timer: an overloaded replica answers 503 before verifying a
  // signature, and 401s are measured. Its hook covers every route all the same.
  await fastify.register(auth, authOptions)

  await fastify.register(healthRoutes)
  await fastify.register(permissionRoutes)
  await fastify.register(changeFeed)
  await fastify.register(problemPages)
  registerMethodNotAllowed(fastify)
}

// Not encapsulated: the error handlers and decorators belong to the server that registers it.
export default fp(app, { name: 'app' })

// A known path with a method the spec does not define answers 405 with Allow, not 404.
function registerMethodNotAllowed (fastify: FastifyInstance) {
  // Every method Node parses (PROPFIND, SEARCH, M-SEARCH…), routed too: Fastify routes nine of
  // them by itself, and answered the others 404, as if the path did not exist. CONNECT names a
  // host, never a path (RFC 9110 §9.3.6): it is handed over as a request above, and answered 404.
  for (const method of METHODS) {
    if (method !== 'CONNECT' && !fastify.supportedMethods.includes(method)) fastify.addHttpMethod(method, { hasBody: true })
  }
  const methodsByUrl = new Map<string, string[]>()
  for (const { url, method } of Object.values(operations)) {
    methodsByUrl.set(url, [...(methodsByUrl.get(url) ?? []), method])
  }
  for (const [url, defined] of methodsByUrl) {
    const allowed = defined.includes('GET') ? [...defined, 'HEAD'] : defined
    // Every method routed (TRACE and QUERY too), less those the path has.
    const others = fastify.supportedMethods.filter((method) => !allowed.includes(method))
    fastify.route({
      method: others,
      url,
      schema: { hide: true },
      // The methods a path allows are published in the spec: no token needed to be told them.
      config: publicRoute,
      // Before the body is read, so the answer is 405 whatever the body.
      onRequest: async (request) => { throw problems.methodNotAllowed(request.method, allowed) },
      handler: async () => {}
    })
  }
}
