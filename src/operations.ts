// What Fastify needs of each operation of the spec: its method and URL, the JSON schemas it
// validates and serializes with, the route config the auth hook enforces (scopes, or public), and
// the statuses it may answer. Pure, so a test can feed it any (dereferenced) document. Run by
// `npm run generate`, which writes the result to src/generated/operations.ts; the service reads
// that file, never this one.
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json }
export type JsonObject = { [key: string]: Json }

const METHODS = ['get', 'put', 'post', 'delete', 'patch', 'options', 'head'] as const

function isObject (value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

// Drops OpenAPI-only keywords that JSON Schema validators do not know, so every schema handed to
// Fastify is plain JSON Schema. The document comes dereferenced (src/spec.ts).
function withoutExamples (value: Json): Json {
  if (Array.isArray(value)) return value.map(withoutExamples)
  if (!isObject(value)) return value
  const result: JsonObject = {}
  for (const [key, child] of Object.entries(value)) {
    if (key === 'example') continue
    if (key === '$ref') throw new Error(`unresolved reference: ${String(child)} (pass a dereferenced document)`)
    result[key] = withoutExamples(child)
  }
  return result
}

function parametersSchema (parameters: JsonObject[], location: string): JsonObject | undefined {
  const matching = parameters.filter((parameter) => parameter.in === location)
  // An operation without query parameters still gets a query schema: one that refuses any.
  if (matching.length === 0 && location !== 'query') return undefined
  const properties: JsonObject = {}
  const required: string[] = []
  for (const parameter of matching) {
    // Node gives header names in lower case, and Fastify validates them so.
    const name = location === 'header' ? (parameter.name as string).toLowerCase() : parameter.name as string
    properties[name] = parameter.schema as JsonObject
    if (parameter.required === true) required.push(name)
  }
  // A query parameter the operation does not declare is refused (400), not ignored: a caller who
  // guessed a name (page for offset, say) would otherwise get an answer to another question.
  // Headers stay open: clients and proxies send many.
  return { type: 'object', properties, ...(required.length > 0 ? { required } : {}), ...(location === 'query' ? { additionalProperties: false } : {}) }
}

// The route config of an operation's security: the scopes a token needs, or, for `security: []`
// on purpose, a public route. An operation with no requirement of its own and no document-level
// default is an error: left alone it would be public by accident.
function accessOf (operationId: string, security: Json | undefined, spec: JsonObject): JsonObject {
  const requirements = security ?? spec.security
  if (!Array.isArray(requirements)) {
    throw new Error(`${operationId}: no security requirement (the operation's or the document's); ` +
      'declare `security: []` to make it public on purpose')
  }
  if (requirements.length === 0) return { public: true }
  if (requirements.length > 1 || !isObject(requirements[0]) || Object.keys(requirements[0]).length !== 1) {
    throw new Error(`${operationId}: only one security scheme per operation is supported`)
  }
  return { scopes: Object.values(requirements[0])[0] as string[] }
}

export function buildOperations (spec: JsonObject): JsonObject {
  const operations: JsonObject = {}
  for (const [path, rawPathItem] of Object.entries(spec.paths as JsonObject)) {
    const pathItem = withoutExamples(rawPathItem) as JsonObject
    for (const method of METHODS) {
      const operation = pathItem[method]
      if (!isObject(operation)) continue
      const operationId = operation.operationId as string
      const parameters = new Map<string, JsonObject>()
      for (const parameter of [...(pathItem.parameters ?? []) as JsonObject[], ...(operation.parameters ?? []) as JsonObject[]]) {
        parameters.set(`${parameter.in}:${parameter.name}`, parameter)
      }
      const schema: JsonObject = {}
      const params = parametersSchema([...parameters.values()], 'path')
      const querystring = parametersSchema([...parameters.values()], 'query')
      const headers = parametersSchema([...parameters.values()], 'header')
      if (params) schema.params = params
      if (querystring) schema.querystring = querystring
      if (headers) schema.headers = headers
      const body = ((operation.requestBody as JsonObject | undefined)?.content as JsonObject | undefined)?.['application/json']
      if (isObject(body)) schema.body = body.schema
      // Success bodies are serialized by fast-json-stringify, which also drops undeclared fields;
      // problem bodies come from the error handler.
      const response: JsonObject = {}
      for (const [status, answer] of Object.entries(operation.responses as JsonObject)) {
        const json = ((answer as JsonObject).content as JsonObject | undefined)?.['application/json']
        if (status.startsWith('2') && isObject(json)) response[status] = json.schema
      }
      if (Object.keys(response).length > 0) schema.response = response
      operations[operationId] = {
        operationId,
        method: method.toUpperCase(),
        path,
        url: path.replace(/\{([^}]+)\}/g, ':$1'),
        config: accessOf(operationId, operation.security, spec),
        statuses: Object.keys(operation.responses as JsonObject).map(Number),
        schema
      }
    }
  }
  return operations
}
