// The problem details themselves, without a database: every problem's exact body and headers, how
// each kind of error becomes one, and what reaches the log. The texts are part of the contract that
// clients show to people, so a changed word should be a decision, not an accident.
import { once } from 'node:events'
import { createServer, connect, type Socket } from 'node:net'
import { Writable } from 'node:stream'
import fc from 'fast-check'
import Fastify, { type FastifyError, type FastifyRequest } from 'fastify'
import t, { type Test } from 'tap'
import { ConnectionWaitTimeout, DatabaseUnreachable } from '../../db/errors.js'
import { clientErrorHandler, errorHandler, frameworkErrors, notFoundHandler, parameterHint, toProblem } from '../../src/error-handler.js'
import { Problem, problemNameOf, problems } from '../../src/problems.js'

const fastifyError = (init: Partial<FastifyError> & { message?: string }): FastifyError =>
  Object.assign(new Error(init.message ?? 'boom'), init) as FastifyError

t.test('each problem of the spec, word for word, with its headers', async (t) => {
  const cases: Array<[Problem, Record<string, unknown>, Record<string, string>]> = [
    [problems.invalidRequest([
      { location: 'query', pointer: '/limit', message: 'must be <= 500' },
      { location: 'body', pointer: '/0', message: 'must be string' }
    ]), {
      type: '/problems/invalid-request',
      title: 'Invalid request',
      status: 400,
      detail: 'query/limit must be <= 500; body/0 must be string',
      errors: [
        { location: 'query', pointer: '/limit', message: 'must be <= 500' },
        { location: 'body', pointer: '/0', message: 'must be string' }
      ]
    }, {}],
    [problems.malformedBody('The body is not valid JSON.'),
      { type: '/problems/malformed-body', title: 'Malformed body', status: 400, detail: 'The body is not valid JSON.' }, {}],
    [problems.missingCredentials(), {
      type: '/problems/missing-credentials',
      title: 'Missing credentials',
      status: 401,
      detail: 'This operation needs a Bearer token in the Authorization header.'
    }, { 'www-authenticate': 'Bearer' }],
    [problems.invalidToken('The access token expired'), {
      type: '/problems/invalid-token', title: 'Invalid token', status: 401, detail: 'The access token expired'
    }, { 'www-authenticate': 'Bearer error="invalid_token", error_description="The access token expired"' }],
    [problems.insufficientScope(['read:resource', 'audit']), {
      type: '/problems/insufficient-scope',
      title: 'Insufficient scope',
      status: 403,
      detail: 'This operation needs the scope read:resource audit.',
      required_scope: 'read:resource audit'
    }, { 'www-authenticate': 'Bearer error="insufficient_scope", scope="read:resource audit"' }],
    [problems.resourceNotFound('orders-api'), {
      type: '/problems/resource-not-found', title: 'Resource not found', status: 404, detail: 'There is no resource with id "orders-api".'
    }, {}],
    [problems.clientNotFound('app-a'), {
      type: '/problems/client-not-found', title: 'Client not found', status: 404, detail: 'There is no client with id "app-a".'
    }, {}],
    [problems.clientNotAuthorized('orders-api', 'app-a'), {
      type: '/problems/client-not-authorized',
      title: 'Client not authorized on resource',
      status: 404,
      detail: 'The client "app-a" is not authorized on the resource "orders-api".'
    }, {}],
    [problems.preconditionFailed(), {
      type: '/problems/precondition-failed',
      title: 'Precondition failed',
      status: 412,
      detail: 'If-Match names no current ETag of the client\'s grants on the resource: they changed since, or the tag is weak (W/), which If-Match never matches; nothing was changed. GET them again for the current ETag.'
    }, {}],
    [problems.unknownPermissions('orders-api', ['nope']), {
      type: '/problems/unknown-permissions',
      title: 'Unknown permissions',
      status: 422,
      detail: 'One id is not a permission of the resource "orders-api"; nothing was removed.',
      unknown_permission_ids: ['nope']
    }, {}],
    [problems.unknownPermissions('orders-api', ['x', 'y']), {
      type: '/problems/unknown-permissions',
      title: 'Unknown permissions',
      status: 422,
      detail: '2 ids are not permissions of the resource "orders-api"; nothing was removed.',
      unknown_permission_ids: ['x', 'y']
    }, {}],
    [problems.routeNotFound(), { type: 'about:blank', title: 'Not Found', status: 404, detail: 'There is nothing at this URL.' }, {}],
    [problems.methodNotAllowed('PUT', ['GET', 'DELETE']), {
      type: 'about:blank', title: 'Method Not Allowed', status: 405, detail: 'PUT is not supported here; use GET or DELETE.'
    }, { allow: 'GET, DELETE' }],
    [problems.databaseUnavailable(), {
      type: '/problems/database-unavailable',
      title: 'Database unavailable',
      status: 503,
      detail: 'The database cannot be reached. Retry in 5 seconds.'
    }, { 'retry-after': '5' }],
    [problems.keysUnavailable(), {
      type: '/problems/keys-unavailable',
      title: 'Signing keys unavailable',
      status: 503,
      detail: "The identity provider's keys cannot be fetched, so the token cannot be checked. Retry in 5 seconds."
    }, { 'retry-after': '5' }],
    [problems.overloaded(), {
      type: '/problems/overloaded', title: 'Overloaded', status: 503, detail: 'The service is overloaded. Retry in 5 seconds.'
    }, { 'retry-after': '5' }],
    [problems.shuttingDown(), {
      type: '/problems/shutting-down',
      title: 'Shutting down',
      status: 503,
      detail: 'This replica is shutting down; send new requests to another one.'
    }, { 'retry-after': '1' }],
    [problems.starting(), {
      type: '/problems/starting',
      title: 'Starting',
      status: 503,
      detail: 'This replica has started, but its event loop has not been calm yet; send requests to another one.'
    }, { 'retry-after': '1' }],
    [problems.changesPruned('12', '40'), {
      type: '/problems/changes-pruned',
      title: 'Changes pruned',
      status: 410,
      detail: 'Changes after 12 have been pruned (through 40): they can no longer be read. Start again without after, from the oldest change kept.',
      pruned_through: '40'
    }, {}],
    [problems.tooManyStreams(100), {
      type: '/problems/overloaded',
      title: 'Overloaded',
      status: 503,
      detail: 'This replica already streams the change feed to 100 consumers. Retry in 5 seconds, or poll.'
    }, { 'retry-after': '5' }],
    [problems.internal(), {
      type: 'about:blank', title: 'Internal Server Error', status: 500, detail: 'An unexpected error occurred. It has been logged.'
    }, {}]
  ]
  for (const [problem, body, headers] of cases) {
    t.same(problem.toJSON(), body, String(body.type))
    t.same(problem.headers, headers, `${body.type} headers`)
  }
  // Counted apart from the service's overload in requests_shed_total.
  t.equal(problems.tooManyStreams(100).shedReason, 'feed_streams')
  t.equal(problems.overloaded().shedReason, undefined)
})

t.test('about:blank titles are RFC 9110 status phrases, in their current spelling', async (t) => {
  t.equal(new Problem({ status: 413, detail: '' }).title, 'Content Too Large')
  t.equal(new Problem({ status: 422, detail: '' }).title, 'Unprocessable Content')
  t.equal(new Problem({ status: 431, detail: '' }).title, 'Request Header Fields Too Large')
  t.equal(new Problem({ status: 599, detail: '' }).title, 'Error')
})

t.test('a 4xx problem captures no stack frames, a 5xx keeps them; the stack trace limit is left as it was', async (t) => {
  const limit = Error.stackTraceLimit
  const frames = (error: Error) => (error.stack ?? '').split('\n').filter((line) => line.trimStart().startsWith('at ')).length
  t.equal(frames(problems.missingCredentials()), 0, '401: none')
  t.equal(frames(new Problem({ status: 499, detail: 'x' })), 0, '499: none')
  t.match(problems.missingCredentials().stack, /^Error: This operation needs a Bearer token/, 'its message is still there')
  t.ok(frames(new Problem({ status: 500, detail: 'x' })) > 0, '500: its frames')
  t.ok(frames(problems.overloaded()) > 0, '503: its frames')
  t.equal(Error.stackTraceLimit, limit, 'unchanged after either')
  t.ok(frames(new Error('x')) > 0, 'other errors keep theirs')
})

t.test('Fastify validation errors → invalid-request with a JSON pointer per issue', async (t) => {
  const problem = toProblem(fastifyError({
    validationContext: 'querystring',
    validation: [
      { instancePath: '/limit', message: 'must be integer', params: {} },
      { instancePath: '', message: "must have required property 'x'", params: { missingProperty: 'x' } },
      { instancePath: '/page', params: { missingProperty: 7 } }
    ]
  } as unknown as FastifyError))
  t.same(problem.extensions.errors, [
    { location: 'query', pointer: '/limit', message: 'must be integer' },
    { location: 'query', pointer: '/x', message: "must have required property 'x'" },
    { location: 'query', pointer: '/page', message: 'is invalid' }
  ])
  const where = (validationContext?: string) => (toProblem(fastifyError({
    validationContext, validation: [{ instancePath: '', message: 'm', params: {} }]
  } as unknown as FastifyError)).extensions.errors as Array<{ location: string }>)[0].location
  t.equal(where('params'), 'path')
  t.equal(where('headers'), 'header')
  t.equal(where('body'), 'body')
  t.equal(where(undefined), 'body')
  t.equal(where('cookies'), 'body')
  // Only the query's additional properties are parameters the operation does not have; elsewhere an
  // additional property is an ordinary field error.
  const additional = (validationContext: string) => toProblem(fastifyError({
    validationContext,
    validation: [{ instancePath: '', keyword: 'additionalProperties', message: 'must NOT have additional properties', params: { additionalProperty: 'x' } }]
  } as unknown as FastifyError)).extensions.errors
  t.same(additional('body'), [{ location: 'body', pointer: '/x', message: 'must NOT have additional properties' }])
  t.same(additional('params'), [{ location: 'path', pointer: '/x', message: 'must NOT have additional properties' }])
  t.same(additional('querystring'), [{ location: 'query', pointer: '/x', message: 'is not a parameter of this operation' }])
})

t.test('field error messages: a pattern in the spec\'s words, a body that is not an array as what to send, the rest as Ajv says', async (t) => {
  const messageOf = (validationContext: string, issue: Record<string, unknown>) => (toProblem(fastifyError({
    validationContext, validation: [{ params: {}, ...issue }]
  } as unknown as FastifyError)).extensions.errors as Array<{ message: string }>)[0].message
  const sentence = 'must be a JSON array of 1 to 500 permission ids, such as ["perm_read_orders"]'
  t.equal(messageOf('querystring', { instancePath: '/sort_by', keyword: 'pattern', message: 'must match pattern "^x$"', parentSchema: { 'x-pattern-hint': 'id or name' } }),
    'must be id or name', 'a pattern with a hint')
  t.equal(messageOf('querystring', { instancePath: '/sort_by', keyword: 'pattern', message: 'must match pattern "^x$"', parentSchema: {} }),
    'must match pattern "^x$"', 'a pattern without one')
  t.equal(messageOf('querystring', { instancePath: '/limit', keyword: 'maximum', message: 'must be <= 500', parentSchema: { 'x-pattern-hint': 'id or name' } }),
    'must be <= 500', 'a hint explains patterns only')
  t.equal(messageOf('body', { instancePath: '', keyword: 'type', message: 'must be array' }), sentence, 'the body is not an array')
  t.equal(messageOf('body', { instancePath: '/0', keyword: 'type', message: 'must be string' }), 'must be string', 'an item of the body')
  t.equal(messageOf('body', { instancePath: '', keyword: 'minItems', message: 'must NOT have fewer than 1 items' }), 'must NOT have fewer than 1 items', 'an empty array')
  t.equal(messageOf('querystring', { instancePath: '', keyword: 'type', message: 'must be object' }), 'must be object', 'not the body')
})

t.test('a query parameter the operation does not have: each one sent is named, with a hint from the operation\'s own parameters', async (t) => {
  const unknown = fastifyError({
    validationContext: 'querystring',
    validation: [{ instancePath: '', schemaPath: '#/additionalProperties', keyword: 'additionalProperties', message: 'must NOT have additional properties', params: { additionalProperty: 'page' } }]
  })
  const request = (query: Record<string, string>, properties: Record<string, unknown>) =>
    ({ query, routeOptions: { schema: { querystring: { properties } } } }) as unknown as FastifyRequest
  const listParameters = { limit: {}, offset: {}, sort_by: {} }
  t.same(toProblem(unknown, request({ page: '2', limit: '5', srot_by: 'x' }, listParameters)).extensions.errors, [
    { location: 'query', pointer: '/page', message: 'is not a parameter of this operation (offset is the page number)' },
    { location: 'query', pointer: '/srot_by', message: 'is not a parameter of this operation (did you mean sort_by?)' }
  ], 'Ajv named the first; the query holds both')
  t.same(toProblem(unknown, request({ page: '2' }, { after: {}, limit: {} })).extensions.errors, [
    { location: 'query', pointer: '/page', message: 'is not a parameter of this operation' }
  ], 'no offset here: no hint naming it')
  t.same(toProblem(unknown).extensions.errors, [
    { location: 'query', pointer: '/page', message: 'is not a parameter of this operation' }
  ], 'without the request, the one Ajv named')
})

t.test('parameterHint: the same name spelled otherwise, a name other APIs use, or a typo away; else nothing', async (t) => {
  const list = ['limit', 'offset', 'sort_by']
  const feed = ['after', 'limit', 'resource_id']
  const history = ['limit', 'before']
  const cases: Array<[string, string[], string | undefined]> = [
    ['page', list, 'offset is the page number'],
    ['page_number', list, 'offset is the page number'],
    ['sort', list, 'did you mean sort_by?'],
    ['order', list, 'did you mean sort_by?'],
    ['orderBy', list, 'did you mean sort_by?'],
    ['per_page', list, 'limit is the page size'],
    ['pageSize', list, 'limit is the page size'],
    ['size', list, 'limit is the page size'],
    ['Sort-By', list, 'did you mean sort_by?'],
    ['limt', list, 'did you mean limit?'],
    ['lmiit', list, 'did you mean limit?'],
    ['offest', list, 'did you mean offset?'],
    ['lim', list, undefined],
    ['access_token', list, undefined],
    ['cursor', feed, 'after is the cursor: the id of the last change seen'],
    ['since', feed, 'after is the cursor: the id of the last change seen'],
    ['before', feed, undefined],
    ['page', feed, undefined],
    ['resource', feed, 'did you mean resource_id?'],
    ['cursor', history, 'before is the cursor: the id of the last change seen'],
    ['since', history, undefined],
    ['page', [], undefined],
    // Two neighbours swapped twice: two edits as swaps, four as single letters.
    ['ilmti', list, 'did you mean limit?'],
    // Four letters allow one edit: aftx is two from after.
    ['aftx', feed, undefined],
    ['aftr', feed, 'did you mean after?'],
    // The nearest wins, and the first of those as near.
    ['limits', ['limit', 'lxmxts'], 'did you mean limit?'],
    ['limits', ['lxmxts', 'limit'], 'did you mean limit?'],
    // Typos at either end, doubled or dropped letters, a swap: each one edit away.
    ['offst', list, 'did you mean offset?'],
    ['flimit', list, 'did you mean limit?'],
    ['imit', list, 'did you mean limit?'],
    ['limmit', list, 'did you mean limit?'],
    ['limi', list, 'did you mean limit?'],
    ['litit', list, 'did you mean limit?'],
    // Three edits or more away, though a looser rule for swaps would take them for typos.
    ['resoufrcbd', feed, undefined],
    ['xotnby', list, undefined],
    ['rtemsurceid', feed, undefined],
    ['limitx', ['limitz', 'limity'], 'did you mean limitz?']
  ]
  // Every name other APIs use, as the hint table lists them, spelled as callers do.
  const guessed: Array<[string[], string[], string]> = [
    [['page', 'pageNumber', 'page_no', 'pagenum', 'pageIndex'], list, 'offset is the page number'],
    [['per-page', 'pageSize', 'size', 'max', 'top', 'take'], list, 'limit is the page size'],
    [['sort', 'order', 'orderBy', 'ordering', 'sortOrder', 'sort_key'], list, 'did you mean sort_by?'],
    [['cursor', 'since', 'from', 'startAfter', 'last_id', 'Last-Event-ID'], feed, 'after is the cursor: the id of the last change seen'],
    [['cursor', 'until', 'start_before', 'lastId'], history, 'before is the cursor: the id of the last change seen']
  ]
  for (const [names, parameters, hint] of guessed) for (const name of names) cases.push([name, parameters, hint])
  for (const [name, parameters, hint] of cases) t.equal(parameterHint(name, parameters), hint, `${name} among ${parameters.join(', ')}`)
})

t.test('parameterHint never names a parameter the operation does not have, and answers for a very long name', async (t) => {
  const all = ['limit', 'offset', 'sort_by', 'after', 'before', 'resource_id']
  const named = (hint: string) => all.filter((parameter) => new RegExp(`(^|[ ])${parameter}[ ?:]`).test(hint))
  await fc.assert(fc.property(
    fc.oneof(fc.constantFrom('page', 'sort', 'order', 'cursor', 'since', 'size', 'per_page', 'limt', 'ofset', 'afterr', 'befor', 'resource'), fc.string({ maxLength: 12 })),
    fc.subarray(all),
    (name, parameters) => {
      const hint = parameterHint(name, parameters)
      if (hint === undefined) return
      const mentioned = named(hint)
      if (mentioned.length !== 1 || !parameters.includes(mentioned[0])) throw new Error(`${name} among [${parameters}]: ${hint}`)
    }
  ), { numRuns: 5000 })
  t.equal(parameterHint('x'.repeat(100_000), all), undefined, 'a name far longer than any parameter: no hint')
})

t.test('Fastify body errors, by code, as the problems the spec declares', async (t) => {
  const cases: Array<[string, number, string, string]> = [
    ['FST_ERR_CTP_INVALID_MEDIA_TYPE', 415, 'about:blank', 'The body must be application/json.'],
    ['FST_ERR_CTP_BODY_TOO_LARGE', 413, 'about:blank', 'The body is larger than 256 KiB.'],
    ['FST_ERR_CTP_EMPTY_JSON_BODY', 400, '/problems/malformed-body', 'The body is empty; send a JSON array of 1 to 500 permission ids, such as ["perm_read_orders"].'],
    ['FST_ERR_CTP_INVALID_JSON_BODY', 400, '/problems/malformed-body', 'The body is not valid JSON; send a JSON array of 1 to 500 permission ids, such as ["perm_read_orders"].'],
    ['FST_ERR_CTP_INVALID_CONTENT_LENGTH', 400, '/problems/malformed-body', 'Content-Length does not match the body.']
  ]
  for (const [code, status, type, detail] of cases) {
    t.match(toProblem(fastifyError({ code, statusCode: 500 })).toJSON(), { status, type, detail }, code)
  }
})

t.test('other errors: bad JSON is malformed-body, outages 503, other 4xx keep their status, the rest is 500', async (t) => {
  const syntax = Object.assign(new SyntaxError('Unexpected token'), { statusCode: 400 }) as unknown as FastifyError
  t.match(toProblem(syntax).toJSON(), { status: 400, type: '/problems/malformed-body', detail: 'The body is not valid JSON; send a JSON array of 1 to 500 permission ids, such as ["perm_read_orders"].' })
  // A SyntaxError thrown by our own code is a bug, not the client's bad JSON.
  t.match(toProblem(new SyntaxError('oops') as FastifyError).toJSON(), { status: 500, type: 'about:blank' })
  t.match(toProblem(fastifyError({ code: 'ECONNREFUSED' })).toJSON(), { status: 503, type: '/problems/database-unavailable' })
  t.match(toProblem(new DatabaseUnreachable('no connection') as unknown as FastifyError).toJSON(), { status: 503, type: '/problems/database-unavailable' })
  // Overload: no pooled connection in time, or a statement the server cancelled at its timeout.
  t.match(toProblem(new ConnectionWaitTimeout('busy') as unknown as FastifyError).toJSON(), { status: 503, type: '/problems/overloaded' })
  t.match(toProblem(fastifyError({ code: '57014' })).toJSON(), { status: 503, type: '/problems/overloaded' })
  // too_many_connections: the server is there, refusing one more connection under load.
  t.match(toProblem(fastifyError({ code: '53300' })).toJSON(), { status: 503, type: '/problems/overloaded' })
  t.same(toProblem(fastifyError({ statusCode: 429 })).toJSON(),
    { type: 'about:blank', title: 'Too Many Requests', status: 429, detail: 'Too Many Requests' })
  t.same(toProblem(fastifyError({ statusCode: 400 })).toJSON(),
    { type: 'about:blank', title: 'Bad Request', status: 400, detail: 'Bad Request' })
  t.same(toProblem(fastifyError({ statusCode: 499 })).toJSON(),
    { type: 'about:blank', title: 'Error', status: 499, detail: 'Bad request' })
  for (const statusCode of [undefined, 399, 500, 502]) {
    t.same(toProblem(fastifyError({ statusCode, message: 'secret internals' })).toJSON(),
      problems.internal().toJSON(), `statusCode ${statusCode}`)
  }
  const own = problems.clientNotFound('c')
  t.equal(toProblem(own as unknown as FastifyError), own, 'a Problem passes through as it is')
})

interface LogLine { level: number, msg: string, err?: { message: string }, status?: number, type?: string, code?: string, reason?: string, detail?: string }

async function appWithLogs (t: Test) {
  const lines: LogLine[] = []
  const stream = new Writable({
    write (chunk, _encoding, callback) {
      const line = JSON.parse(chunk.toString())
      // Fastify's own request/response lines are not the error handler's.
      if (line.msg !== 'incoming request' && line.msg !== 'request completed') lines.push(line)
      callback()
    }
  })
  const app = Fastify({ logger: { level: 'info', stream }, frameworkErrors })
  app.setErrorHandler(errorHandler)
  app.setNotFoundHandler(notFoundHandler)
  app.get('/fails/:status', async (request) => {
    const status = Number((request.params as { status: string }).status)
    if (status === 503) throw new ConnectionWaitTimeout('no connection within 50 ms')
    throw status === 500 ? new Error('the database said no') : problems.clientNotFound('c')
  })
  // What shedding on event-loop lag throws: the problem itself, no database error behind it.
  app.get('/shed', async () => { throw problems.overloaded() })
  // What readiness answers while a replica starts or drains.
  app.get('/starting', async () => { throw problems.starting() })
  app.get('/shutting-down', async () => { throw problems.shuttingDown() })
  t.teardown(() => app.close())
  await app.ready()
  return { app, lines }
}

t.test('errorHandler: 5xx are logged as errors with the cause, 4xx as info without one', async (t) => {
  const { app, lines } = await appWithLogs(t)
  const failed = await app.inject('/fails/500')
  t.equal(failed.statusCode, 500)
  t.equal(failed.headers['content-type'], 'application/problem+json; charset=utf-8')
  t.same(Object.keys(failed.json()).sort(), ['detail', 'request_id', 'status', 'title', 'type'])
  t.notMatch(failed.body, /database said no/)
  const error = lines.find((line) => line.msg === 'request failed')
  t.equal(error?.level, 50)
  t.equal(error?.err?.message, 'the database said no')

  lines.length = 0
  const missing = await app.inject('/fails/404')
  t.equal(missing.statusCode, 404)
  t.same(lines.map(({ level, msg, status, type, err }) => ({ level, msg, status, type, err })),
    [{ level: 30, msg: 'Client not found', status: 404, type: '/problems/client-not-found', err: undefined }])
})

t.test('errorHandler: a shed request is a warning with its reason, not an error', async (t) => {
  const { app, lines } = await appWithLogs(t)
  const waited = await app.inject('/fails/503')
  t.equal(waited.statusCode, 503)
  t.equal(waited.json().type, '/problems/overloaded')
  t.same(lines.map(({ level, msg, reason, detail, err }) => ({ level, msg, reason, detail, err })),
    [{ level: 40, msg: 'request shed', reason: 'connection_wait', detail: 'no connection within 50 ms', err: undefined }])

  lines.length = 0
  const shed = await app.inject('/shed')
  t.equal(shed.statusCode, 503)
  t.same(lines.map(({ level, msg, reason }) => ({ level, msg, reason })), [{ level: 40, msg: 'request shed', reason: 'event_loop' }])
})

t.test('errorHandler: a replica starting or shutting down is its lifecycle: a line at info, no error', async (t) => {
  const { app, lines } = await appWithLogs(t)
  for (const [path, title] of [['/starting', 'Starting'], ['/shutting-down', 'Shutting down']]) {
    lines.length = 0
    const res = await app.inject(path)
    t.equal(res.statusCode, 503, path)
    t.same(lines.map(({ level, msg, status, type, err }) => ({ level, msg, status, type, err })),
      [{ level: 30, msg: title, status: 503, type: `/problems${path}`, err: undefined }], path)
  }
})

t.test('frameworkErrors: a broken percent-encoding is a 400 of its own; other router errors go through toProblem', async (t) => {
  const { app, lines } = await appWithLogs(t)
  const res = await app.inject('/fails/%E0%A4%A')
  t.equal(res.statusCode, 400)
  t.match(res.json(), {
    type: 'about:blank', title: 'Bad Request', status: 400, detail: 'The URL is not valid: its percent-encoding is broken.'
  })
  // With the request, which is all such a request gets when tracing is on (plugins/tracing.ts).
  t.match(lines, [{ level: 30, msg: 'Bad Request', status: 400, code: 'FST_ERR_BAD_URL', req: { method: 'GET', url: '/fails/%E0%A4%A' } }])
  // No onRequest hook ran: the id is echoed all the same, as the body's request_id.
  t.equal(res.headers['x-request-id'], res.json().request_id)

  const other = await app.inject({ method: 'GET', url: '/nowhere' })
  t.equal(other.statusCode, 404)
  t.equal(other.json().detail, 'There is nothing at this URL.')

  lines.length = 0
  const reply = { code: () => reply, header: () => reply, headers: () => reply, type: () => reply, send: (body: unknown) => body, request: { id: 'r1', raw: { complete: true } } }
  const logged: unknown[] = []
  const request = { id: 'r1', log: { info: (...args: unknown[]) => logged.push(args) } }
  const body = frameworkErrors(fastifyError({ code: 'FST_ERR_ASYNC_CONSTRAINT', statusCode: 500 }),
    request as never, reply as never) as unknown as Record<string, unknown>
  t.same(body, { ...problems.internal().toJSON(), request_id: 'r1' })
  t.same(logged, [[{ req: request, status: 500, code: 'FST_ERR_ASYNC_CONSTRAINT' }, 'Internal Server Error']])
})

/** The bytes a client receives after clientErrorHandler ran on the server side of its connection. */
async function answerTo (t: Test, error: NodeJS.ErrnoException, prepare: (socket: Socket) => void = () => {}): Promise<string> {
  const server = createServer((socket) => {
    prepare(socket)
    clientErrorHandler(error, socket)
    if (!socket.writableEnded) socket.end()
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => server.close())
  const { port } = server.address() as { port: number }
  const client = connect(port, '127.0.0.1')
  let data = ''
  client.on('data', (chunk) => { data += chunk })
  client.on('error', () => {})
  await once(client, 'close')
  return data
}

t.test('clientErrorHandler answers on the socket: 431, 408, 400, and nothing to a reset or gone peer', async (t) => {
  const cases: Array<[string, number, string, string]> = [
    ['HPE_HEADER_OVERFLOW', 431, 'Request Header Fields Too Large', 'The request headers are larger than the server accepts.'],
    ['ERR_HTTP_REQUEST_TIMEOUT', 408, 'Request Timeout', 'The request took too long to arrive.'],
    ['HPE_INVALID_METHOD', 400, 'Bad Request', 'The request is not valid HTTP.']
  ]
  for (const [code, status, title, detail] of cases) {
    const raw = await answerTo(t, Object.assign(new Error(code), { code }))
    const body = JSON.stringify({ type: 'about:blank', title, status, detail })
    const date = /^HTTP\/1\.1 \d+ [^\r]+\r\nDate: ([^\r]+)\r\n/.exec(raw)?.[1] ?? ''
    t.equal(new Date(date).toUTCString(), date, `${code}: Date, an IMF-fixdate`)
    t.equal(raw, `HTTP/1.1 ${status} ${title}\r\nDate: ${date}\r\nContent-Type: application/problem+json\r\nX-Content-Type-Options: nosniff\r\n` +
      'Content-Security-Policy: default-src \'none\'; frame-ancestors \'none\'\r\n' +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`, code)
  }
  t.equal(await answerTo(t, Object.assign(new Error('reset'), { code: 'ECONNRESET' })), '', 'reset')
  t.equal(await answerTo(t, Object.assign(new Error('bad'), { code: 'HPE_INVALID_METHOD' }), (socket) => socket.destroy()), '', 'destroyed')
  // Node's HTTP server keeps the response it is writing on the socket as _httpMessage.
  const underWay = (headersSent: boolean) => (socket: Socket) => Object.assign(socket, { _httpMessage: { headersSent } })
  t.equal(await answerTo(t, Object.assign(new Error('bad'), { code: 'HPE_INVALID_METHOD' }), underWay(true)), '',
    'a response under way on the connection: only closed, no second status line inside it')
  t.match(await answerTo(t, Object.assign(new Error('bad'), { code: 'HPE_INVALID_METHOD' }), underWay(false)), /^HTTP\/1\.1 400 Bad Request\r\n/,
    'one whose head is not sent yet: answered')
})

t.test('problemNameOf: the name under /problems/ (a span attribute), any other type as it is', async (t) => {
  t.equal(problemNameOf('/problems/invalid-token'), 'invalid-token')
  t.equal(problemNameOf(problems.insufficientScope(['read:resource']).type), 'insufficient-scope')
  t.equal(problemNameOf('about:blank'), 'about:blank')
  t.equal(problemNameOf('https://example.test/problems/x'), 'https://example.test/problems/x', 'only a type that starts with it')
})
