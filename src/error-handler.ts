// The one error handler: every error (ours, Fastify's validation, body and routing errors, the
// database's, Node's HTTP parser's) answered as application/problem+json, without leaking internals.
import { type IncomingMessage, type ServerResponse, STATUS_CODES } from 'node:http'
import type { Socket } from 'node:net'
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify'
import { isDatabaseUnavailable, overloadReasonOf } from '../db/errors.js'
import { REQUEST_ID_HEADER, requestIdGiven } from './request-id.js'
import { NOSNIFF, NOTHING_POLICY, setSecurityHeaders } from './security-headers.js'
import { requestSpan } from './tracing.js'
import { type FieldError, OVERLOADED, Problem, PROBLEM_CONTENT_TYPE, problems, SHUTTING_DOWN, STARTING, statusPhrase } from './problems.js'

export function sendProblem (reply: FastifyReply, problem: Problem): FastifyReply {
  // Answered before its body arrived (401, 403, 405, 413, 415...): the connection is closed rather
  // than kept reading a body nobody will use, which a slow sender could stretch for ever.
  if (!reply.request.raw.complete) reply.header('connection', 'close')
  // Stryker disable next-line all: traced only in test/system/tracing.test.ts, whose service runs as a process of its own
  requestSpan(reply.request)?.setAttribute('problem.type', problem.type)
  return reply.code(problem.status).headers(problem.headers).type(PROBLEM_CONTENT_TYPE)
    .send({ ...problem.toJSON(), request_id: reply.request.id })
}

// Keyed by Fastify's validationContext; any other error, or one without a context, is the body's.
const validationLocations: ReadonlyMap<unknown, FieldError['location']> = new Map([
  ['params', 'path'], ['querystring', 'query'], ['headers', 'header']
])

interface ValidationIssue {
  instancePath: string
  keyword?: string
  message?: string
  params: Record<string, unknown>
  parentSchema?: { 'x-pattern-hint'?: string }
}

// Said the same way however the body is wrong, so a newcomer learns what to send.
const EXPECTED_BODY = 'a JSON array of 1 to 500 permission ids, such as ["perm_read_orders"]'

function messageOf (issue: ValidationIssue, location: FieldError['location']): string {
  // A pattern is explained in the spec's words, not shown as a regular expression.
  const hint = issue.parentSchema?.['x-pattern-hint']
  if (issue.keyword === 'pattern' && hint) return `must be ${hint}`
  if (location === 'body' && issue.instancePath === '' && issue.keyword === 'type') return `must be ${EXPECTED_BODY}`
  return issue.message ?? 'is invalid'
}

// The names callers guess for a parameter, from other APIs, and what to tell them: each hint is
// given only when the operation has the parameter it names (cursor is after on the feed, before
// on a history; since on a history, which has no after, gets none).
const GUESSED_NAMES: ReadonlyArray<{ names: readonly string[], parameter: string, hint: string }> = [
  { names: ['page', 'pagenumber', 'pageno', 'pagenum', 'pageindex'], parameter: 'offset', hint: 'offset is the page number' },
  { names: ['perpage', 'pagesize', 'size', 'max', 'top', 'take'], parameter: 'limit', hint: 'limit is the page size' },
  { names: ['sort', 'order', 'orderby', 'ordering', 'sortorder'], parameter: 'sort_by', hint: 'did you mean sort_by?' },
  { names: ['cursor', 'since', 'from', 'startafter', 'lastid', 'lasteventid'], parameter: 'after', hint: 'after is the cursor: the id of the last change seen' },
  { names: ['cursor', 'until', 'startbefore', 'lastid'], parameter: 'before', hint: 'before is the cursor: the id of the last change seen' }
]
const squashed = (name: string) => name.toLowerCase().replace(/[-_. ]/g, '')

// Optimal string alignment distance (edits, and swaps of two neighbours), given up on past `most`.
function editDistance (a: string, b: string, most: number): number {
  // Stryker disable next-line ConditionalExpression: only saves the work; the table gives the same answer
  if (Math.abs(a.length - b.length) > most) return most + 1
  // Stryker disable next-line ArrayDeclaration: read only from the second row on, once it holds the first
  let before: number[] = []
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j)
  for (let i = 1; i <= a.length; i++) {
    const current = [i]
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1))
      // A swap of two neighbours. On the first row or column a[-1] or b[-1] is undefined, equal to
      // no letter, so the comparison itself keeps the indexes in range.
      if (a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) current[j] = Math.min(current[j], before[j - 2] + 1)
    }
    [before, previous] = [previous, current]
  }
  return previous[b.length]
}

/**
 * What to tell a caller who sent the query parameter `name`, which the operation (whose parameters
 * are `parameters`) does not have: the one other APIs call that (`page`, `per_page`, `cursor`), or
 * the parameter it spells differently (`sortBy`, `LIMIT`: no edit apart once squashed) or a typo
 * away (`limt`); else nothing.
 */
export function parameterHint (name: string, parameters: readonly string[]): string | undefined {
  const guess = squashed(name)
  const known = GUESSED_NAMES.find(({ names, parameter }) => names.includes(guess) && parameters.includes(parameter))
  if (known) return known.hint
  // One edit for short names, two for longer ones: `lim` is no typo of `limit`, `resource` is of `resource_id`.
  let nearest: { parameter: string, distance: number } | undefined
  for (const parameter of parameters) {
    const most = Math.min(guess.length, parameter.length) <= 4 ? 1 : 2
    const distance = editDistance(guess, squashed(parameter), most)
    if (distance <= most && (!nearest || distance < nearest.distance)) nearest = { parameter, distance }
  }
  return nearest && `did you mean ${nearest.parameter}?`
}

const NOT_A_PARAMETER = 'is not a parameter of this operation'

// A name as one token of a JSON Pointer (RFC 6901 §3): `~` and `/` escaped.
const pointerTo = (name: string) => `/${name.replaceAll('~', '~0').replaceAll('/', '~1')}`

// Every query parameter the operation does not have, each named, with a hint when one is close:
// Ajv stops at the first, and a caller who guessed one name may have guessed several.
function unknownParameterErrors (issue: ValidationIssue, request?: FastifyRequest): FieldError[] {
  const schema = request?.routeOptions.schema?.querystring as { properties?: Record<string, unknown> } | undefined
  const parameters = Object.keys(schema?.properties ?? {})
  const sent = Object.keys(request?.query ?? {})
  const unknown = sent.filter((name) => !parameters.includes(name))
  const named = issue.params.additionalProperty
  // Stryker disable next-line ConditionalExpression: Ajv's additionalProperties error always names a string
  if (unknown.length === 0 && typeof named === 'string') unknown.push(named)
  return unknown.map((name) => {
    const hint = parameterHint(name, parameters)
    return { location: 'query', pointer: pointerTo(name), message: hint ? `${NOT_A_PARAMETER} (${hint})` : NOT_A_PARAMETER }
  })
}

// A query parameter given more than once (?limit=5&limit=10) reaches validation as an array of its
// values: its type error would say each value is of the wrong type, when the values may be fine.
const REPEATED = 'is given more than once; send it once'
function repeatedParameter (issue: ValidationIssue, request?: FastifyRequest): boolean {
  // Stryker disable next-line OptionalChaining: a query's validation error always comes with its request
  const query = request?.query as Record<string, unknown> | undefined
  // The parameters of the spec are plain names: the pointer is / and the name.
  // (Its `issue.keyword === 'type'` as true survives mutation: every query parameter has a type,
  // and Ajv checks no other keyword of it on an array. Not marked: a mark would also hide the
  // line's mutants that tests kill.)
  return issue.keyword === 'type' && Array.isArray(query?.[issue.instancePath.slice(1)])
}

function fieldErrors (error: FastifyError, request?: FastifyRequest): FieldError[] {
  const location = validationLocations.get(error.validationContext) ?? 'body'
  return (error.validation as ValidationIssue[]).flatMap((issue) => {
    if (location === 'query' && issue.keyword === 'additionalProperties') return unknownParameterErrors(issue, request)
    const named = issue.params.missingProperty ?? issue.params.additionalProperty
    return [{
      location,
      pointer: issue.instancePath + (typeof named === 'string' ? pointerTo(named) : ''),
      message: location === 'query' && repeatedParameter(issue, request) ? REPEATED : messageOf(issue, location)
    }]
  })
}

// Fastify's own request errors, by code, as the problems the spec declares for them.
const fastifyProblems: Record<string, (error: FastifyError) => Problem> = {
  FST_ERR_CTP_INVALID_MEDIA_TYPE: () => new Problem({ status: 415, detail: 'The body must be application/json.' }),
  FST_ERR_CTP_BODY_TOO_LARGE: () => new Problem({ status: 413, detail: 'The body is larger than 256 KiB.' }),
  FST_ERR_CTP_EMPTY_JSON_BODY: () => problems.malformedBody(`The body is empty; send ${EXPECTED_BODY}.`),
  FST_ERR_CTP_INVALID_JSON_BODY: () => problems.malformedBody(`The body is not valid JSON; send ${EXPECTED_BODY}.`),
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: () => problems.malformedBody('Content-Length does not match the body.')
}

/**
 * Whether Fastify marked the error as the request's own (4xx), such as a body whose connection was
 * closed (ECONNRESET) or that took too long: the client's doing, never taken for the database's.
 */
export function isClientError (error: FastifyError): boolean {
  const status = error.statusCode ?? 500
  return status >= 400 && status < 500
}

export function toProblem (error: FastifyError, request?: FastifyRequest): Problem {
  if (error instanceof Problem) return error
  // No body at all (and so no content type): the same answer as an empty JSON body.
  if (error.validation && error.validationContext === 'body' && request && request.body === undefined) {
    return problems.malformedBody(`The body is empty; send ${EXPECTED_BODY}.`)
  }
  if (error.validation) return problems.invalidRequest(fieldErrors(error, request))
  const known = error.code ? fastifyProblems[error.code] : undefined
  if (known) return known(error)
  // JSON.parse and secure-json-parse reject bad JSON and __proto__ keys with a 400 SyntaxError.
  if (error instanceof SyntaxError && error.statusCode === 400) return problems.malformedBody(`The body is not valid JSON; send ${EXPECTED_BODY}.`)
  if (isClientError(error)) return new Problem({ status: error.statusCode!, detail: STATUS_CODES[error.statusCode!] ?? 'Bad request' })
  if (isDatabaseUnavailable(error)) return problems.databaseUnavailable()
  if (overloadReasonOf(error)) return problems.overloaded()
  return problems.internal()
}

export function errorHandler (error: FastifyError, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  // Timed out while its body arrived: answered 408 on the socket, and its body's read then fails
  // (400 aborted). Logged as what the client was told.
  const problem = timedOut.has(request.raw) ? requestTimedOut() : toProblem(error, request)
  // Shedding load is the service working as designed: worth a warning, not an error with a stack;
  // a replica starting or draining is its lifecycle, worth a line at info.
  if (problem.type === OVERLOADED) request.log.warn({ reason: overloadReasonOf(error) ?? problem.shedReason ?? 'event_loop', detail: error.message }, 'request shed')
  else if (problem.type === STARTING || problem.type === SHUTTING_DOWN) request.log.info({ status: problem.status, type: problem.type }, problem.title)
  else if (problem.status >= 500) request.log.error({ err: error }, 'request failed')
  else request.log.info({ status: problem.status, type: problem.type }, problem.title)
  return sendProblem(reply, problem)
}

// Node's HTTP server keeps the response it is writing on the socket as _httpMessage.
type HttpSocket = Socket & { _httpMessage?: (Pick<ServerResponse, 'headersSent' | 'writableFinished' | 'once'> & { req?: IncomingMessage }) | null }
// Connections whose refused request waits for the answers to the requests before it.
const waitingForEarlierAnswers = new WeakSet<Socket>()
// Requests answered 408 by clientErrorHandler while their body was still arriving.
const timedOut = new WeakSet<IncomingMessage>()
const requestTimedOut = () => new Problem({ status: 408, detail: 'The request took too long to arrive.' })

/**
 * Requests Node's HTTP parser rejects never reach Fastify's routing: answer them as problems too,
 * straight on the socket (headers over the limit → 431, anything else malformed → 400).
 */
export function clientErrorHandler (error: NodeJS.ErrnoException, socket: Socket): void {
  // A reset connection has no one left to answer; one already waiting to be answered is answered once.
  if (error.code === 'ECONNRESET' || socket.destroyed || waitingForEarlierAnswers.has(socket)) return
  const inFlight = (socket as HttpSocket)._httpMessage
  // An earlier request on this connection, received whole, is still being answered: the bytes the
  // parser refused came after it (pipelined). Its answer first, then this one: answering now would
  // end the connection before it, and a change it made would be told to no one, or told 400.
  if (inFlight?.req?.complete === true && !inFlight.writableFinished) {
    waitingForEarlierAnswers.add(socket)
    // Node's own 'finish' listener, added first, has then handed the socket to the next answer, if
    // any, or ended it (Connection: close).
    inFlight.once('finish', () => {
      waitingForEarlierAnswers.delete(socket)
      // (As true it survives mutation: a socket Node ended (Connection: close) only fails the
      // write, and its error listener drops that. Not marked: a mark would also hide `false`.)
      if (socket.writable) clientErrorHandler(error, socket)
    })
    return
  }
  // A response already under way on this connection (a request timed out after its answer began):
  // another status line would corrupt it, so the connection is only closed. One sent whole (a
  // pipelined answer, finished and not yet detached) is no longer under way.
  if (inFlight?.headersSent && !inFlight.writableFinished) {
    socket.destroy()
    return
  }
  const status = error.code === 'HPE_HEADER_OVERFLOW' ? 431 : error.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : 400
  const problem = status === 408
    ? requestTimedOut()
    : new Problem({ status, detail: status === 431 ? 'The request headers are larger than the server accepts.' : 'The request is not valid HTTP.' })
  // A request whose headers arrived, its body still arriving, has an id, logged on its lines: the
  // answer to it (a 408, or a 400 for a body malformed on the wire) carries it too. The line
  // saying 408 is errorHandler's, once the read of its body fails.
  // Stryker disable next-line OptionalChaining: Node gives every response its request
  const request = inFlight?.req?.complete === false ? inFlight.req : undefined
  const id = request && requestIdGiven(request)
  if (request && status === 408) timedOut.add(request)
  // Without an id, request_id is undefined, which JSON leaves out.
  const body = JSON.stringify({ ...problem.toJSON(), request_id: id })
  // The headers every answer carries (src/security-headers.ts), and the Date Node writes on the
  // others (RFC 9110 §6.6.1: an origin server with a clock sends it in every 4xx).
  socket.end(`HTTP/1.1 ${status} ${statusPhrase(status)}\r\nDate: ${new Date().toUTCString()}\r\n` +
    `Content-Type: ${PROBLEM_CONTENT_TYPE}\r\n${NOSNIFF.name}: ${NOSNIFF.value}\r\nContent-Security-Policy: ${NOTHING_POLICY}\r\n` +
    (id === undefined ? '' : `X-Request-Id: ${id}\r\n`) +
    `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`)
}

/** Errors of Fastify's router, before any route: a URL whose percent-encoding is broken. */
export function frameworkErrors (error: FastifyError, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const problem = error.code === 'FST_ERR_BAD_URL' ? problems.brokenUrl() : toProblem(error)
  // With the request: when tracing is on, this is the only line such a request gets (plugins/tracing.ts).
  request.log.info({ req: request, status: problem.status, code: error.code }, problem.title)
  // No hook runs before routing: the id the body carries is echoed here, as on every answer, and so
  // are the security headers.
  reply.header(REQUEST_ID_HEADER, request.id)
  setSecurityHeaders(reply)
  return sendProblem(reply, problem)
}

export function notFoundHandler (_request: FastifyRequest, reply: FastifyReply): FastifyReply {
  return sendProblem(reply, problems.routeNotFound())
}

/** The not-found route's preParsing hook: an unknown URL answered 404 before its body is read (src/app.ts). */
export function notFoundBeforeBody (request: FastifyRequest, reply: FastifyReply): void {
  notFoundHandler(request, reply)
}
