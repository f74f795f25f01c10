// src/validation.ts speaks JSON Schema 2020-12, the dialect of OpenAPI 3.1 and of the tests' contract
// checks (test/support/contract.ts), so a keyword means the same thing in the spec, the service and the tests.
import t from 'tap'
import { Ajv2020 } from 'ajv/dist/2020.js'
import { operations } from '../../src/generated/operations.js'
import { validatorCompiler } from '../../src/validation.js'

const compile = (schema: Record<string, unknown>, httpPart: string) =>
  validatorCompiler({ schema, httpPart, method: 'POST', url: '/' }) as (data: unknown) => boolean

t.test('2020-12 keywords are understood, for bodies and for URL text alike', async (t) => {
  const pair = { type: 'array', prefixItems: [{ type: 'string' }, { type: 'integer' }], minItems: 2, items: false }
  const body = compile(pair, 'body')
  t.ok(body(['a', 1]))
  t.notOk(body(['a', 1, 'extra']), 'items: false after prefixItems closes the tuple (2020-12), not a draft-07 tuple')
  const query = compile({ type: 'object', properties: { a: { type: 'string' }, b: { type: 'string' } }, dependentRequired: { a: ['b'] } }, 'querystring')
  t.ok(query({ a: 'x', b: 'y' }))
  t.notOk(query({ a: 'x' }), 'dependentRequired (2020-12) is enforced')
})

t.test('a keyword of no dialect is refused at compile time (strict), not ignored', async (t) => {
  t.throws(() => compile({ type: 'string', minimumLength: 1 }, 'body'), /unknown keyword/)
})

t.test('x-pattern-hint, the spec\'s words for a pattern, is known to both and must be text', async (t) => {
  for (const part of ['body', 'querystring']) {
    const schema = { type: 'object', properties: { id: { type: 'string', pattern: '^p_', 'x-pattern-hint': 'an id starting with p_' } } }
    t.ok(compile(schema, part)({ id: 'p_1' }), `${part}: accepted, checks nothing itself`)
    t.throws(() => compile({ type: 'string', 'x-pattern-hint': 5 }, part), /x-pattern-hint value must be \["string"\]/, `${part}: a hint that is not text is refused`)
  }
})

t.test('every schema the routes validate with is valid JSON Schema 2020-12 (the service does not check at start)', async (t) => {
  const metaChecked = new Ajv2020({ strict: true })
  metaChecked.addKeyword({ keyword: 'x-pattern-hint', schemaType: 'string' })
  let checked = 0
  for (const { operationId, schema } of Object.values(operations)) {
    for (const part of ['params', 'querystring', 'headers', 'body'] as const) {
      const partSchema = (schema as Partial<Record<typeof part, object>>)[part]
      if (partSchema === undefined) continue
      checked++
      t.ok(metaChecked.validateSchema(partSchema), `${operationId} ${part}: ${metaChecked.errorsText(metaChecked.errors)}`)
    }
  }
  t.ok(checked >= 10, `${checked} schemas checked`)
  t.notOk(metaChecked.validateSchema({ type: 'string', minLength: -1 }), 'a schema the meta-schema refuses is refused here')
})
