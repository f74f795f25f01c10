// RFC 9457 problem details: the problem types openapi/openapi.yaml documents (its table in the
// Problem schema; test/problem-catalogue.test.ts keeps the two in step). src/error-handler.ts turns
// every error into one of them.
import { STATUS_CODES } from 'node:http'

export const PROBLEM_CONTENT_TYPE = 'application/problem+json'
const RETRY_AFTER_SECONDS = 5
export const OVERLOADED = '/problems/overloaded'
// Readiness's answers while a replica is not (or no longer) to take traffic: its lifecycle, not a fault.
export const STARTING = '/problems/starting'
export const SHUTTING_DOWN = '/problems/shutting-down'

// RFC 9110 renamed two phrases that Node still spells the old way.
const currentPhrases: Record<number, string> = { 413: 'Content Too Large', 422: 'Unprocessable Content' }
export const statusPhrase = (status: number) => currentPhrases[status] ?? STATUS_CODES[status] ?? 'Error'

export class Problem extends Error {
  readonly status: number
  readonly type: string
  readonly title: string
  readonly extensions: Record<string, unknown>
  readonly headers: Record<string, string>
  /** Why a 503 overloaded was answered, for the metrics (requests_shed_total); never sent. */
  readonly shedReason?: string

  constructor (init: {
    status: number
    type?: string
    title?: string
    detail: string
    extensions?: Record<string, unknown>
    headers?: Record<string, string>
    shedReason?: string
  }) {
    super(init.detail)
    this.status = init.status
    // about:blank means "just the HTTP status"; its title is then the status phrase (RFC 9457 §4.2.1).
    this.type = init.type ?? 'about:blank'
    this.title = init.title ?? statusPhrase(init.status)
    this.extensions = init.extensions ?? {}
    this.headers = init.headers ?? {}
    this.shedReason = init.shedReason
  }

  toJSON (): Record<string, unknown> {
    return { type: this.type, title: this.title, status: this.status, detail: this.message, ...this.extensions }
  }
}

export interface FieldError { location: 'path' | 'query' | 'header' | 'body', pointer: string, message: string }

export const problems = {
  invalidRequest: (errors: FieldError[]) => new Problem({
    status: 400,
    type: '/problems/invalid-request',
    title: 'Invalid request',
    detail: errors.map(({ location, pointer, message }) => `${location}${pointer} ${message}`).join('; '),
    extensions: { errors }
  }),
  malformedBody: (detail: string) => new Problem({
    status: 400, type: '/problems/malformed-body', title: 'Malformed body', detail
  }),
  missingCredentials: () => new Problem({
    status: 401,
    type: '/problems/missing-credentials',
    title: 'Missing credentials',
    detail: 'This operation needs a Bearer token in the Authorization header.',
    headers: { 'www-authenticate': 'Bearer' }
  }),
  invalidToken: (description: string) => new Problem({
    status: 401,
    type: '/problems/invalid-token',
    title: 'Invalid token',
    detail: description,
    headers: { 'www-authenticate': `Bearer error="invalid_token", error_description="${description}"` }
  }),
  insufficientScope: (scopes: readonly string[]) => new Problem({
    status: 403,
    type: '/problems/insufficient-scope',
    title: 'Insufficient scope',
    detail: `This operation needs the scope ${scopes.join(' ')}.`,
    extensions: { required_scope: scopes.join(' ') },
    headers: { 'www-authenticate': `Bearer error="insufficient_scope", scope="${scopes.join(' ')}"` }
  }),
  resourceNotFound: (resourceId: string) => new Problem({
    status: 404,
    type: '/problems/resource-not-found',
    title: 'Resource not found',
    detail: `There is no resource with id "${resourceId}".`
  }),
  clientNotFound: (clientId: string) => new Problem({
    status: 404,
    type: '/problems/client-not-found',
    title: 'Client not found',
    detail: `There is no client with id "${clientId}".`
  }),
  clientNotAuthorized: (resourceId: string, clientId: string) => new Problem({
    status: 404,
    type: '/problems/client-not-authorized',
    title: 'Client not authorized on resource',
    detail: `The client "${clientId}" is not authorized on the resource "${resourceId}".`
  }),
  unknownPermissions: (resourceId: string, ids: string[], unchanged = 'nothing was removed') => new Problem({
    status: 422,
    type: '/problems/unknown-permissions',
    title: 'Unknown permissions',
    detail: `${ids.length === 1 ? 'One id is not a permission' : `${ids.length} ids are not permissions`} of the resource "${resourceId}"; ${unchanged}.`,
    extensions: { unknown_permission_ids: ids }
  }),
  preconditionFailed: () => new Problem({
    status: 412,
    type: '/problems/precondition-failed',
    title: 'Precondition failed',
    detail: 'The client\'s grants on the resource changed since the ETag given in If-Match; nothing was changed. GET them again for the current ETag.'
  }),
  changesPruned: (after: string, prunedThrough: string) => new Problem({
    status: 410,
    type: '/problems/changes-pruned',
    title: 'Changes pruned',
    detail: `Changes after ${after} have been pruned (through ${prunedThrough}): they can no longer be read. Start again without after, from the oldest change kept.`,
    extensions: { pruned_through: prunedThrough }
  }),
  tooManyStreams: (max: number) => new Problem({
    status: 503,
    type: OVERLOADED,
    title: 'Overloaded',
    detail: `This replica already streams the change feed to ${max} consumers. Retry in ${RETRY_AFTER_SECONDS} seconds, or poll.`,
    headers: { 'retry-after': String(RETRY_AFTER_SECONDS) },
    shedReason: 'feed_streams'
  }),
  routeNotFound: () => new Problem({ status: 404, detail: 'There is nothing at this URL.' }),
  methodNotAllowed: (method: string, allowed: string[]) => new Problem({
    status: 405,
    detail: `${method} is not supported here; use ${allowed.join(' or ')}.`,
    headers: { allow: allowed.join(', ') }
  }),
  databaseUnavailable: () => new Problem({
    status: 503,
    type: '/problems/database-unavailable',
    title: 'Database unavailable',
    detail: `The database cannot be reached. Retry in ${RETRY_AFTER_SECONDS} seconds.`,
    headers: { 'retry-after': String(RETRY_AFTER_SECONDS) }
  }),
  keysUnavailable: () => new Problem({
    status: 503,
    type: '/problems/keys-unavailable',
    title: 'Signing keys unavailable',
    detail: `The identity provider's keys cannot be fetched, so the token cannot be checked. Retry in ${RETRY_AFTER_SECONDS} seconds.`,
    headers: { 'retry-after': String(RETRY_AFTER_SECONDS) }
  }),
  overloaded: () => new Problem({
    status: 503,
    type: OVERLOADED,
    title: 'Overloaded',
    detail: `The service is overloaded. Retry in ${RETRY_AFTER_SECONDS} seconds.`,
    headers: { 'retry-after': String(RETRY_AFTER_SECONDS) }
  }),
  starting: () => new Problem({
    status: 503,
    type: STARTING,
    title: 'Starting',
    detail: 'This replica has started, but its event loop has not been calm yet; send requests to another one.',
    headers: { 'retry-after': '1' }
  }),
  shuttingDown: () => new Problem({
    status: 503,
    type: SHUTTING_DOWN,
    title: 'Shutting down',
    detail: 'This replica is shutting down; send new requests to another one.',
    headers: { 'retry-after': '1' }
  }),
  internal: () => new Problem({ status: 500, detail: 'An unexpected error occurred. It has been logged.' })
}
