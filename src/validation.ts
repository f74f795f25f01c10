// Request validation with Ajv, split by where the data comes from: text from the URL is coerced to
// the schema's types, JSON bodies never are (Fastify's single default Ajv coerces both). Both speak
// JSON Schema 2020-12, the dialect of OpenAPI 3.1, as the tests' contract checks do.
import type { FastifySchemaCompiler } from 'fastify'
import type { ErrorObject, Options as AjvOptions } from 'ajv'
import { Ajv2020 } from 'ajv/dist/2020.js'

// verbose: a failed pattern's error carries its schema, whose x-pattern-hint says in words what the
// pattern wants (src/problems.ts puts it in the 400's message). validateSchema: false: the schemas
// are the spec's, fixed at build time and checked against the 2020-12 meta-schema by a test
// (test/src/validation); checking them at every start compiled that meta-schema in each instance,
// about 0.15 s of CPU per process. Strict mode still refuses unknown keywords.
const commonAjvOptions: AjvOptions = {
  allErrors: false,
  useDefaults: true,
  strict: true,
  verbose: true,
  // Stryker disable next-line BooleanLiteral: equivalent for the schemas the routes have, which the meta-schema accepts (test/src/validation checks each): checking them again changes only the CPU a start takes
  validateSchema: false
}
// Bodies are JSON and must already have their types: [1, 2] is not a list of ids.
const bodyAjv = new Ajv2020({ ...commonAjvOptions, coerceTypes: false })
// Query strings and paths are text: integers are coerced, but only from plain decimal digits.
const textAjv = new Ajv2020({ ...commonAjvOptions, coerceTypes: true })
// The spec's annotation for a pattern (an OpenAPI extension): known to Ajv, checks nothing.
for (const ajv of [bodyAjv, textAjv]) ajv.addKeyword({ keyword: 'x-pattern-hint', schemaType: 'string' })
const decimalInteger = /^-?\d+$/

function textValidator (schema: Record<string, unknown>) {
  const validate = textAjv.compile(schema)
  const properties = (schema.properties ?? {}) as Record<string, { type?: string }>
  const integers = Object.keys(properties).filter((name) => properties[name].type === 'integer')
  function validateText (data: Record<string, unknown>) {
    // Ajv would also coerce "0x10", "1e3" and " 5 ", which are not integers in a URL.
    for (const name of integers) {
      const value = data[name]
      if (typeof value === 'string' && !decimalInteger.test(value)) {
        validateText.errors = [{
          instancePath: `/${name}`,
          message: 'must be integer',
          params: {},
          // Stryker disable next-line StringLiteral: Ajv's error type requires it; for a part of the URL the problem shows only the pointer and the message
          schemaPath: '',
          // Stryker disable next-line StringLiteral: as schemaPath's
          keyword: 'type'
        }]
        return false
      }
    }
    const valid = validate(data)
    validateText.errors = validate.errors
    return valid
  }
  validateText.errors = null as ErrorObject[] | null | undefined
  return validateText
}

export const validatorCompiler: FastifySchemaCompiler<Record<string, unknown>> = ({ schema, httpPart }) =>
  httpPart === 'body' ? bodyAjv.compile(schema) : textValidator(schema)
