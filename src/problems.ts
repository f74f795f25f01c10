// RFC 9457 problem details: the catalogue of the problem types this service sends (each one's title,
// status, when it happens and what to do: the spec's table in the Problem schema says the same,
// test/src/problem-catalogue.test.ts keeps the two in step, and GET /problems/{name} serves each entry),
// and the Problem errors made of them. src/error-handler.ts turns every error into one.
import { STATUS_CODES } from 'node:http'

export const PROBLEM_CONTENT_TYPE = 'application/problem+json'
const RETRY_AFTER_SECONDS = 5

export interface ProblemType {
  /** The `title` every problem of this type carries. */
  readonly title: string
  readonly status: number
  /** When it happens, in the spec's words (CommonMark: names in backticks). */
  readonly when: string
  /** What the caller can do about it (CommonMark). */
  readonly whatToDo: string
}

/** Every problem type, by name: its `type` is `/problems/<name>`. */
export const problemTypes = {
  'invalid-request': {
    title: 'Invalid request',
    status: 400,
    when: 'a parameter or the body broke the contract: a value out of range or of the wrong form, a header that is not the syntax it takes, or a query parameter the operation does not have; `errors[]` says where (`location`, `pointer`) and why',
    whatToDo: 'Correct what each entry of `errors[]` names and send the request again. The operations, their parameters and the forms they take are in the API documentation (`/docs`); a query parameter the operation does not have is refused rather than ignored, with a hint when its name is close to one it has (`page`: `offset` is the page number).'
  },
  'malformed-body': {
    title: 'Malformed body',
    status: 400,
    when: 'the body is missing, empty, not UTF-8 or not parseable JSON, its `Content-Length` does not match it, or it was sent with a transfer coding other than `chunked`; `detail` says what to send',
    whatToDo: 'Send a JSON array of 1 to 500 permission ids, such as `["perm_read_orders"]`, with `Content-Type: application/json`.'
  },
  'missing-credentials': {
    title: 'Missing credentials',
    status: 401,
    when: 'no Bearer token was sent',
    whatToDo: 'Send the header `Authorization: Bearer <token>` with an access token carrying the operation\'s scope. Locally, `npm start` prints a demo token and `npm run -s token` signs one; elsewhere, ask the identity provider the service trusts.'
  },
  'invalid-token': {
    title: 'Invalid token',
    status: 401,
    when: 'the token is malformed, expired, not yet valid or not signed by a trusted key (or its issuer, audience or type is not the one the service is configured with); `detail` and `WWW-Authenticate` say which',
    whatToDo: 'Get a new token and send the request again. A fresh token that is still refused was issued for another service, or signed by a key this one does not trust.'
  },
  'insufficient-scope': {
    title: 'Insufficient scope',
    status: 403,
    when: 'the token lacks the operation\'s scope',
    whatToDo: 'Send a token carrying the scope that `required_scope` (and `WWW-Authenticate`) names: `read:resource` to read the permissions, the history and the feed, `delete:resource` to unauthorize, `create:resource` to grant.'
  },
  'resource-not-found': {
    title: 'Resource not found',
    status: 404,
    when: 'no resource has that id',
    whatToDo: 'Check the resource id in the path: ids are compared exactly, case included.'
  },
  'client-not-found': {
    title: 'Client not found',
    status: 404,
    when: 'no client has that id',
    whatToDo: 'Check the client id in the path: ids are compared exactly, case included.'
  },
  'client-not-authorized': {
    title: 'Client not authorized on resource',
    status: 404,
    when: 'the client exists but is not authorized on the resource',
    whatToDo: 'Check that the resource and the client are the ones meant. Permissions are granted only within an existing authorization; authorizing a client on a resource is not an operation of this service.'
  },
  'changes-pruned': {
    title: 'Changes pruned',
    status: 410,
    when: 'the feed\'s `after` (or `Last-Event-ID`) is older than the newest change the prune command deleted: changes after it are gone',
    whatToDo: 'Rebuild what you derived from the feed, then read it again without `after`, from the oldest change kept; `pruned_through` names the newest change deleted.'
  },
  'precondition-failed': {
    title: 'Precondition failed',
    status: 412,
    when: 'the `If-Match` names no current `ETag`: the grants changed since; or (on a change) the `If-None-Match` names the current one, or is `*`; nothing was changed, and the list served no page',
    whatToDo: 'GET the list again for its current `ETag`, check that the change still makes sense, and send it again with that `ETag` in `If-Match`. After an `If-None-Match`: the grants are at a version it names, as the caller meant to avoid. On the list: read it again from its first page, whose `ETag` names the version to walk.'
  },
  'unknown-permissions': {
    title: 'Unknown permissions',
    status: 422,
    when: 'some ids are not permissions of the resource; `unknown_permission_ids` lists them; nothing was changed',
    whatToDo: 'Correct or drop the ids that `unknown_permission_ids` lists, and send the whole request again.'
  },
  'grant-too-large': {
    title: 'Grant too large',
    status: 422,
    when: 'a grant is too large for the database to store: a grant holds the resource id, the client id and the permission\'s id, name and description, which must fit in about 2,700 bytes of UTF-8 together (only ids of multi-byte characters near their 255-character bound come close); nothing was granted',
    whatToDo: 'Nothing a retry can change: the ids, or the permission\'s name and description, must be shorter. Rename them (new ids, or new names and descriptions) and grant again.'
  },
  'database-unavailable': {
    title: 'Database unavailable',
    status: 503,
    when: 'the database cannot be reached (connection refused or timed out, connection lost, server shutting down, no answer to a query)',
    whatToDo: 'Retry after `Retry-After` seconds. A DELETE or POST may have been applied all the same (its `COMMIT` can reach the database unanswered): without `If-Match` sending it again is safe, as it is idempotent; with `If-Match`, GET the list first, as its `ETag` has moved on if the change was made. If it lasts, the service\'s database is down or out of reach (its `/readyz` says so too).'
  },
  'keys-unavailable': {
    title: 'Signing keys unavailable',
    status: 503,
    when: 'the identity provider\'s key set (`JWKS_URL`) cannot be fetched now, and none fetched within 6 × `JWKS_CACHE_MAX_AGE_MS` (an hour by default) is held',
    whatToDo: 'Retry after `Retry-After` seconds. The token is not at fault: if it lasts, the identity provider or the service\'s `JWKS_URL` is.'
  },
  overloaded: {
    title: 'Overloaded',
    status: 503,
    when: 'more requests than this replica can serve now, answered at once instead of queued: no database connection became free within `DATABASE_CONNECTION_WAIT_MS` (1 s) or the database refused one more, the database cancelled a statement past `DATABASE_STATEMENT_TIMEOUT_MS` (5 s; a change\'s wait for its locks past half of it), or the event loop lags, or (a change feed stream) `FEED_MAX_STREAMS` streams are open already; nothing was changed',
    whatToDo: 'Retry after `Retry-After` seconds, and spread retries out rather than sending them all at once. A change feed consumer refused a stream can poll instead.'
  },
  starting: {
    title: 'Starting',
    status: 503,
    when: '(readiness only) this replica has started, but no sample has found its event loop calm yet',
    whatToDo: 'Nothing, or send the request to another replica: this one is sent traffic once a sample finds its event loop calm and `/readyz` answers 200.'
  },
  'shutting-down': {
    title: 'Shutting down',
    status: 503,
    when: '(readiness, and a change feed stream asked for while closing) this replica is shutting down',
    whatToDo: 'Send the request to another replica: the gateway stops sending traffic here. A change feed consumer reconnects with `Last-Event-ID` and resumes where it was.'
  }
} as const satisfies Record<string, ProblemType>

export type ProblemName = keyof typeof problemTypes

/** The `type` of the problems named `name`: a relative URI that opens its page (GET /problems/{name}). */
export const problemTypeUri = (name: ProblemName) => `/problems/${name}`
/** The name in a problem type URI of ours (/problems/{name}); about:blank stays as it is. */
export const problemNameOf = (type: string) => type.startsWith('/problems/') ? type.slice('/problems/'.length) : type

/** The catalogue entry of a name, if it is one (own keys only: `constructor` is no problem type). */
export function problemTypeOf (name: string): ProblemType | undefined {
  return Object.hasOwn(problemTypes, name) ? problemTypes[name as ProblemName] : undefined
}

export const OVERLOADED = problemTypeUri('overloaded')
// Readiness's answers while a replica is not (or no longer) to take traffic: its lifecycle, not a fault.
export const STARTING = problemTypeUri('starting')
export const SHUTTING_DOWN = problemTypeUri('shutting-down')

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
    // A 4xx is an answer, not a fault: no one reads its stack, and capturing one (ten frames) took
    // about 5 µs of every refused request. A 5xx keeps its stack for the logs.
    const stackTraceLimit = Error.stackTraceLimit
    if (init.status < 500) Error.stackTraceLimit = 0
    super(init.detail)
    Error.stackTraceLimit = stackTraceLimit
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

type ProblemInit = ConstructorParameters<typeof Problem>[0]

/** A problem of a type of the catalogue: its type, status and title come from there. */
function ofType (name: ProblemName, init: Omit<ProblemInit, 'status' | 'type' | 'title'>): Problem {
  const { status, title } = problemTypes[name]
  return new Problem({ ...init, status, type: problemTypeUri(name), title })
}

export const problems = {
  invalidRequest: (errors: FieldError[]) => ofType('invalid-request', {
    detail: errors.map(({ location, pointer, message }) => `${location}${pointer} ${message}`).join('; '),
    extensions: { errors }
  }),
  malformedBody: (detail: string) => ofType('malformed-body', { detail }),
  missingCredentials: () => ofType('missing-credentials', {
    detail: 'This operation needs a Bearer token in the Authorization header.',
    headers: { 'www-authenticate': 'Bearer' }
  }),
  invalidToken: (description: string) => ofType('invalid-token', {
    detail: description,
    headers: { 'www-authenticate': `Bearer error="invalid_token", error_description="${description}"` }
  }),
  insufficientScope: (scopes: readonly string[]) => ofType('insufficient-scope', {
    detail: `This operation needs the scope ${scopes.join(' ')}.`,
    extensions: { required_scope: scopes.join(' ') },
    headers: { 'www-authenticate': `Bearer error="insufficient_scope", scope="${scopes.join(' ')}"` }
  }),
  resourceNotFound: (resourceId: string) => ofType('resource-not-found', {
    detail: `There is no resource with id "${resourceId}".`
  }),
  clientNotFound: (clientId: string) => ofType('client-not-found', {
    detail: `There is no client with id "${clientId}".`
  }),
  clientNotAuthorized: (resourceId: string, clientId: string) => ofType('client-not-authorized', {
    detail: `The client "${clientId}" is not authorized on the resource "${resourceId}".`
  }),
  unknownPermissions: (resourceId: string, ids: string[], unchanged = 'nothing was removed') => ofType('unknown-permissions', {
    detail: `${ids.length === 1 ? 'One id is not a permission' : `${ids.length} ids are not permissions`} of the resource "${resourceId}"; ${unchanged}.`,
    extensions: { unknown_permission_ids: ids }
  }),
  grantTooLarge: (resourceId: string, clientId: string) => ofType('grant-too-large', {
    detail: `A grant of these permissions to the client "${clientId}" on the resource "${resourceId}" is too long together to be stored; nothing was granted.`
  }),
  preconditionFailed: () => ofType('precondition-failed', {
    detail: 'If-Match names no current ETag of the client\'s grants on the resource: they changed since, or the tag is weak (W/), which If-Match never matches; nothing was changed. GET them again for the current ETag.'
  }),
  pageVersionChanged: () => ofType('precondition-failed', {
    detail: 'If-Match names no current ETag of the client\'s grants on the resource: they changed since, or the tag is weak (W/), which If-Match never matches, and this page would show another version of them. Read the list again from its first page.'
  }),
  hostRequired: () => new Problem({ status: 400, detail: 'An HTTP/1.1 request needs exactly one Host header (RFC 9112 §3.2).' }),
  /** A URL, path or query string, whose percent-encoding is not of UTF-8 text (RFC 3986 §2.1, §2.5). */
  brokenUrl: () => new Problem({ status: 400, detail: 'The URL is not valid: its percent-encoding is broken.' }),
  noneMatchFailed: () => ofType('precondition-failed', {
    detail: 'The client\'s grants on the resource are at a version If-None-Match names (* names any); nothing was changed.'
  }),
  changesPruned: (after: string, prunedThrough: string) => ofType('changes-pruned', {
    detail: `Changes after ${after} have been pruned (through ${prunedThrough}): they can no longer be read. Start again without after, from the oldest change kept.`,
    extensions: { pruned_through: prunedThrough }
  }),
  tooManyStreams: (max: number) => ofType('overloaded', {
    detail: `This replica already streams the change feed to ${max} consumers. Retry in ${RETRY_AFTER_SECONDS} seconds, or poll.`,
    headers: { 'retry-after': String(RETRY_AFTER_SECONDS) },
    shedReason: 'feed_streams'
  }),
  routeNotFound: () => new Problem({ status: 404, detail: 'There is nothing at this URL.' }),
  problemTypeNotFound: (name: string) => new Problem({ status: 404, detail: `There is no problem type named "${name}".` }),
  methodNotAllowed: (method: string, allowed: string[]) => new Problem({
    status: 405,
    detail: `${method} is not supported here; use ${allowed.join(' or ')}.`,
    headers: { allow: allowed.join(', ') }
  }),
  databaseUnavailable: () => ofType('database-unavailable', {
    detail: `The database cannot be reached. Retry in ${RETRY_AFTER_SECONDS} seconds.`,
    headers: { 'retry-after': String(RETRY_AFTER_SECONDS) }
  }),
  keysUnavailable: () => ofType('keys-unavailable', {
    detail: `The identity provider's keys cannot be fetched, so the token cannot be checked. Retry in ${RETRY_AFTER_SECONDS} seconds.`,
    headers: { 'retry-after': String(RETRY_AFTER_SECONDS) }
  }),
  overloaded: () => ofType('overloaded', {
    detail: `The service is overloaded. Retry in ${RETRY_AFTER_SECONDS} seconds.`,
    headers: { 'retry-after': String(RETRY_AFTER_SECONDS) }
  }),
  starting: () => ofType('starting', {
    detail: 'This replica has started, but its event loop has not been calm yet; send requests to another one.',
    headers: { 'retry-after': '1' }
  }),
  shuttingDown: () => ofType('shutting-down', {
    detail: 'This replica is shutting down; send new requests to another one.',
    headers: { 'retry-after': '1' }
  }),
  internal: () => new Problem({ status: 500, detail: 'An unexpected error occurred. It has been logged.' })
}
