// Checks every response the tests receive against openapi/openapi.yaml: the status is declared for
// the operation, the media type and body match the declared schema, required headers are present,
// every header sent matches its declared schema, a header the spec declares anywhere is sent only
// where it is declared, and every error is a problem whose status repeats the HTTP status.
import { Ajv2020 } from 'ajv/dist/2020.js'
import addFormats from 'ajv-formats'
import { dereferencedSpecOfRun } from '../../src/spec.js'

type Schema = Record<string, unknown>
interface MediaType { schema?: Schema }
interface Header { required?: boolean, schema?: Schema }
interface Response { content?: Record<string, MediaType>, headers?: Record<string, Header> }
interface Operation { responses: Record<string, Response> }

// Every $ref resolved: a declared response, header or schema is found where the operation names it.
const spec = await dereferencedSpecOfRun()
// The spec is added as one schema to point into, not to be checked as one: an OpenAPI document is
// not a JSON Schema (npm run lint:spec checks it), and Ajv's meta-schema pass over its 800 kB cost
// every test file's process about 60 ms of CPU.
const ajv = new Ajv2020({ strict: false, allErrors: true, validateSchema: false })
addFormats.default(ajv)
ajv.addSchema(spec, 'spec')

const routes = Object.entries(spec.paths as unknown as Record<string, Record<string, Operation>>).map(([path, item]) => ({
  pattern: new RegExp('^' + path.replace(/\{[^}]+\}/g, '[^/]+') + '$'),
  item,
  path
}))

// The headers the contract speaks of (ETag, Consistency-Token, Vary…), lower-cased: one of them on
// an answer that does not declare it is a header a client cannot learn of from the spec. Others
// (Content-Type, Date, X-Request-Id…) are HTTP's or every answer's, and not checked here.
const contractHeaders = new Set(routes.flatMap(({ item }) => Object.values(item).flatMap((operation) =>
  Object.values((operation as Partial<Operation>).responses ?? {}).flatMap((response) => Object.keys(response.headers ?? {}).map((name) => name.toLowerCase())))))

const validators = new Map<string, ReturnType<typeof ajv.compile>>()
function validatorFor (pointer: string) {
  let validate = validators.get(pointer)
  if (!validate) {
    validate = ajv.getSchema(`spec#${pointer}`)
    if (!validate) throw new Error(`no schema at ${pointer}`)
    validators.set(pointer, validate)
  }
  return validate
}

const headerValidators = new WeakMap<Schema, ReturnType<typeof ajv.compile>>()
function headerValidator (schema: Schema) {
  let validate = headerValidators.get(schema)
  if (!validate) {
    validate = ajv.compile(schema)
    headerValidators.set(schema, validate)
  }
  return validate
}

/** The schema at `pointer` in the spec checks `value`: the errors, or undefined when it is valid. */
export function schemaErrors (pointer: string, value: unknown): string | undefined {
  const validate = validatorFor(pointer)
  return validate(value) ? undefined : ajv.errorsText(validate.errors)
}

export function pointerEscape (segment: string): string {
  return segment.replaceAll('~', '~0').replaceAll('/', '~1')
}

export interface ObservedResponse { status: number, headers: Headers, body: unknown, text: string }

export class ContractViolation extends Error {}

export function checkContract (method: string, url: string, response: ObservedResponse): void {
  const fail = (message: string) => {
    throw new ContractViolation(`${method} ${url} → ${response.status}: ${message}\n${response.text.slice(0, 500)}`)
  }
  const contentType = response.headers.get('content-type')?.split(';')[0].trim()
  const isHead = method.toUpperCase() === 'HEAD'
  if (response.status >= 400 && !isHead) {
    if (contentType !== 'application/problem+json') fail(`errors must be application/problem+json, got ${contentType}`)
    const problem = response.body as Record<string, unknown>
    if (problem?.status !== response.status) fail('problem.status differs from the HTTP status')
    const validate = validatorFor('/components/schemas/Problem')
    if (!validate(problem)) fail(`not a problem: ${ajv.errorsText(validate.errors)}`)
  }
  const path = new URL(url, 'http://x').pathname
  const route = routes.find(({ pattern }) => pattern.test(path))
  const lowerMethod = method.toLowerCase() === 'head' ? 'get' : method.toLowerCase()
  const operation = route?.item[lowerMethod]
  if (!route || !operation) {
    // Not an operation of the spec: an unknown route, a wrong method, or the docs.
    if (route && response.status !== 405) fail('an undeclared method on a spec path must answer 405')
    return
  }
  const declared = operation.responses[String(response.status)]
  if (!declared) fail(`status ${response.status} is not declared for ${method} ${route.path}`)
  const declaredHeaders = Object.entries(declared.headers ?? {})
  for (const [name, header] of declaredHeaders) {
    const value = response.headers.get(name)
    if (value === null) {
      if (header.required) fail(`missing header ${name}`)
      continue
    }
    const schema = header.schema ?? {}
    const typed = schema.type === 'integer' && /^\d+$/.test(value) ? Number(value) : value
    const validate = headerValidator(schema)
    if (!validate(typed)) fail(`header ${name}: ${JSON.stringify(value)} ${ajv.errorsText(validate.errors)}`)
  }
  const names = new Set(declaredHeaders.map(([name]) => name.toLowerCase()))
  for (const name of response.headers.keys()) {
    if (contractHeaders.has(name) && !names.has(name)) fail(`header ${name} is not declared for ${response.status}`)
  }
  if (isHead) return
  if (!declared.content) {
    if (response.text !== '') fail('a response without declared content must have an empty body')
    return
  }
  if (!contentType || !declared.content[contentType]) fail(`media type ${contentType} is not declared`)
  const responseKey = `/paths/${pointerEscape(route.path)}/${lowerMethod}/responses/${response.status}`
  const validate = validatorFor(`${responseKey}/content/${pointerEscape(contentType!)}/schema`)
  if (!validate(response.body)) fail(`body does not match the schema: ${ajv.errorsText(validate.errors)}`)
}
