// src/operations.ts (what `npm run generate` writes to src/generated/) reads `security`: a route is
// public only when the spec says so.
import t from 'tap'
import { operations } from '../../src/generated/operations.js'
import { buildOperations, type Json, type JsonObject } from '../../src/operations.js'
import { dereferencedSpecOfRun } from '../../src/spec.js'

const answer = { responses: { 200: { description: 'ok' } } }
const documentWith = (operation: JsonObject, document: JsonObject = {}): JsonObject =>
  ({ openapi: '3.1.0', paths: { '/things': { get: { operationId: 'getThings', ...answer, ...operation } } }, ...document })

t.test('an operation without security and no document-level default → the generator fails, naming it', async (t) => {
  t.throws(() => buildOperations(documentWith({})), /getThings: no security requirement .*declare `security: \[\]` to make it public on purpose/)
})

t.test('a document-level security requirement counts; the operation\'s own wins', async (t) => {
  const document = { security: [{ bearerAuth: ['read:things'] }] }
  t.match(buildOperations(documentWith({}, document)).getThings, { config: { scopes: ['read:things'] } }, 'the default')
  t.match(buildOperations(documentWith({ security: [{ bearerAuth: ['write:things'] }] }, document)).getThings, { config: { scopes: ['write:things'] } })
  t.match(buildOperations(documentWith({ security: [] }, document)).getThings, { config: { public: true } }, 'public on purpose')
})

t.test('security: [] → public; a scheme without scopes → a valid token and no scope', async (t) => {
  t.match(buildOperations(documentWith({ security: [] })).getThings, { config: { public: true } })
  t.same((buildOperations(documentWith({ security: [{ bearerAuth: [] }] })).getThings as JsonObject).config, { scopes: [] })
})

t.test('alternatives, several schemes or an optional ({}) requirement are refused rather than guessed', async (t) => {
  const refused: Json[] = [[{ a: [] }, { b: [] }], [{ a: [], b: [] }], [{}], ['bearerAuth']]
  for (const security of refused) {
    t.throws(() => buildOperations(documentWith({ security })), /only one security scheme per operation is supported/, JSON.stringify(security))
  }
})

t.test('the committed spec: probes public, the two operations scoped as declared', async (t) => {
  const built = buildOperations(await dereferencedSpecOfRun())
  t.same(built, JSON.parse(JSON.stringify(operations)), 'src/generated matches the spec')
  t.same(operations.listClientPermissions.config, { scopes: ['read:resource'] })
  t.same(operations.unauthorizeClientPermissions.config, { scopes: ['delete:resource'] })
  t.same(operations.getLiveness.config, { public: true })
  t.same(operations.getReadiness.config, { public: true })
})

t.test('a reference left unresolved is an error, not a schema Fastify would misread', async (t) => {
  const document = documentWith({ security: [], parameters: [{ $ref: '#/components/parameters/Limit' }] })
  t.throws(() => buildOperations(document), /unresolved reference: #\/components\/parameters\/Limit/)
})
