// Writes src/generated/ from openapi/openapi.yaml: TypeScript types (openapi-typescript) and, per
// operation, the JSON schemas Fastify validates and serializes with plus the scopes the auth hook
// enforces. `--check` writes nothing and exits 1 when the committed files differ from the spec.
import { readFile, writeFile } from 'node:fs/promises'
import { join, relative } from 'node:path'
import openapiTS, { astToString } from 'openapi-typescript'
import { parse } from 'yaml'
import { projectRoot, specPath } from '../src/project-root.js'

type Json = null | boolean | number | string | Json[] | { [key: string]: Json }
type JsonObject = { [key: string]: Json }

const METHODS = ['get', 'put', 'post', 'delete', 'patch', 'options', 'head'] as const
const generatedDir = join(projectRoot, 'src', 'generated')
const banner = (what: string) =>
  `// DO NOT EDIT. ${what}, generated from openapi/openapi.yaml by \`npm run generate\`.\n`

function isObject (value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

// Inlines local `#/...` references so every schema handed to Fastify stands alone, and drops
// OpenAPI-only keywords that JSON Schema validators do not know.
function dereference (value: Json, spec: JsonObject, seen: string[] = []): Json {
  if (Array.isArray(value)) return value.map((item) => dereference(item, spec, seen))
  if (!isObject(value)) return value
  const ref = value.$ref
  if (typeof ref === 'string') {
    if (!ref.startsWith('#/')) throw new Error(`only local references are supported: ${ref}`)
    if (seen.includes(ref)) throw new Error(`recursive reference: ${[...seen, ref].join(' -> ')}`)
    const target = ref.slice(2).split('/').reduce<Json>((node, key) => {
      const next = isObject(node) ? node[key.replaceAll('~1', '/').replaceAll('~0', '~')] : undefined
      if (next === undefined) throw new Error(`unresolved reference: ${ref}`)
      return next
    }, spec)
    return dereference(target, spec, [...seen, ref])
  }
  const result: JsonObject = {}
  for (const [key, child] of Object.entries(value)) {
    if (key === 'example') continue
    result[key] = dereference(child, spec, seen)
  }
  return result
}

function parametersSchema (parameters: JsonObject[], location: string): JsonObject | undefined {
  const matching = parameters.filter((parameter) => parameter.in === location)
  if (matching.length === 0) return undefined
  const properties: JsonObject = {}
  const required: string[] = []
  for (const parameter of matching) {
    const name = parameter.name as string
    properties[name] = parameter.schema as JsonObject
    if (parameter.required === true) required.push(name)
  }
  return { type: 'object', properties, ...(required.length > 0 ? { required } : {}) }
}

function scopesOf (operationId: string, security: Json | undefined, spec: JsonObject): string[] {
  const requirements = (security ?? spec.security ?? []) as JsonObject[]
  if (requirements.length === 0) return []
  if (requirements.length > 1 || Object.keys(requirements[0]).length !== 1) {
    throw new Error(`${operationId}: only one security scheme per operation is supported`)
  }
  return Object.values(requirements[0])[0] as string[]
}

function buildOperations (spec: JsonObject): JsonObject {
  const operations: JsonObject = {}
  for (const [path, rawPathItem] of Object.entries(spec.paths as JsonObject)) {
    const pathItem = dereference(rawPathItem, spec) as JsonObject
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
      if (params) schema.params = params
      if (querystring) schema.querystring = querystring
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
        scopes: scopesOf(operationId, operation.security, spec),
        statuses: Object.keys(operation.responses as JsonObject).map(Number),
        schema
      }
    }
  }
  return operations
}

async function render (): Promise<Map<string, string>> {
  const source = await readFile(specPath, 'utf8')
  const spec = parse(source) as JsonObject
  const types = astToString(await openapiTS(spec as never, { alphabetize: true }))
  const operations = buildOperations(spec)
  const operationsModule = banner('Per-operation JSON schemas and scopes') +
    `export const operations = ${JSON.stringify(operations, null, 2)} as const\n\n` +
    'export type OperationId = keyof typeof operations\n'
  return new Map([
    [join(generatedDir, 'openapi.ts'), banner('TypeScript types of the API') + types],
    [join(generatedDir, 'operations.ts'), operationsModule]
  ])
}

const check = process.argv.includes('--check')
const stale: string[] = []
for (const [file, content] of await render()) {
  const current = await readFile(file, 'utf8').catch(() => undefined)
  if (current === content) continue
  if (check) stale.push(relative(projectRoot, file))
  else await writeFile(file, content)
}
if (stale.length > 0) {
  console.error(`Generated files are out of date with openapi/openapi.yaml: ${stale.join(', ')}.\nRun \`npm run generate\` and commit the result.`)
  process.exit(1)
}
console.log(check ? 'Generated files match openapi/openapi.yaml.' : 'src/generated/ is up to date.')
