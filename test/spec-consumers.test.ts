// The spec as its consumers read it: a client generator (openapi-typescript, openapi-generator,
// orval, Kiota), an API gateway importing it, a reader in Swagger UI. Each rule here is one a
// generator or gateway relies on and no linter rule of `npm run lint:spec` checks.
import t from 'tap'
import { dereferencedSpecOfRun, specAsWritten } from '../src/spec.js'

type Node = Record<string, unknown>
const isNode = (value: unknown): value is Node => typeof value === 'object' && value !== null && !Array.isArray(value)
const spec = await dereferencedSpecOfRun() as Node
const written = await specAsWritten() as Node
const methods = new Set(['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'])

const operations = Object.entries(spec.paths as Node).flatMap(([path, item]) =>
  Object.entries(item as Node).filter(([method]) => methods.has(method)).map(([method, operation]) =>
    ({ label: `${method.toUpperCase()} ${path}`, operation: operation as Node })))

/** Every node of the document with its JSON pointer. */
function * walk (node: unknown, pointer = ''): Generator<{ node: Node, pointer: string }> {
  if (Array.isArray(node)) for (const [index, item] of node.entries()) yield * walk(item, `${pointer}/${index}`)
  if (!isNode(node)) return
  yield { node, pointer }
  for (const [key, child] of Object.entries(node)) yield * walk(child, `${pointer}/${key}`)
}

t.test('every operation has a unique camelCase operationId and a declared tag', async (t) => {
  const ids = operations.map(({ operation }) => operation.operationId)
  t.equal(new Set(ids).size, ids.length, 'operationIds are unique')
  const declared = new Set((spec.tags as Array<{ name: string }>).map(({ name }) => name))
  const used = new Set<string>()
  for (const { label, operation } of operations) {
    t.match(operation.operationId, /^[a-z][A-Za-z]*$/, `${label}: operationId`)
    const tags = operation.tags as string[] | undefined
    t.equal(tags?.length, 1, `${label}: one tag`)
    for (const tag of tags ?? []) {
      t.ok(declared.has(tag), `${label}: tag ${tag} is declared`)
      used.add(tag)
    }
  }
  t.same([...declared].sort(), [...used].sort(), 'every declared tag has operations')
})

t.test('every operation says its security; the public ones are the probes and the problem pages', async (t) => {
  t.notOk('security' in spec, 'no document-level default: an operation that forgets it fails generation')
  for (const { label, operation } of operations) {
    const security = operation.security as Array<Record<string, string[]>> | undefined
    t.ok(Array.isArray(security), `${label}: security`)
    const isPublic = security?.length === 0
    t.equal(isPublic, ['health', 'problems'].includes((operation.tags as string[])[0]), `${label}: public ${isPublic}`)
    if (!isPublic) {
      t.equal(Object.keys(security?.[0] ?? {}).join(), 'bearerAuth', `${label}: bearerAuth`)
      t.ok('401' in (operation.responses as Node) && '403' in (operation.responses as Node), `${label}: declares 401 and 403`)
    } else {
      t.notOk('401' in (operation.responses as Node) || '403' in (operation.responses as Node), `${label}: no 401 or 403`)
    }
  }
})

t.test('every 4xx and 5xx response is application/problem+json, and only that', async (t) => {
  for (const { label, operation } of operations) {
    for (const [code, response] of Object.entries(operation.responses as Node)) {
      if (Number(code) < 400) continue
      t.same(Object.keys(((response as Node).content ?? {}) as Node), ['application/problem+json'], `${label} ${code}`)
    }
  }
})

t.test('no parameter is a header OpenAPI ignores (Accept, Content-Type, Authorization)', async (t) => {
  for (const { node, pointer } of walk(written)) {
    if (node.in === 'header') t.notOk(/^(accept|content-type|authorization)$/i.test(String(node.name)), `${pointer}: ${String(node.name)}`)
  }
})

t.test('every required property is one the schema has', async (t) => {
  for (const { node, pointer } of walk(written)) {
    if (!Array.isArray(node.required) || !isNode(node.properties)) continue
    for (const name of node.required as string[]) t.ok(name in node.properties, `${pointer}: ${name}`)
  }
})

// The service's Ajv reads a pattern with the `u` flag (Unicode code points); many generated
// validators use `new RegExp(pattern)` (UTF-16 code units). A pattern must mean the same to both,
// or a generated client refuses (or sends) what the service accepts (or refuses).
t.test('every pattern gives the same verdict with and without the u flag', async (t) => {
  const samples = ['orders-api', 'orders-📦', '📦', 'клиент-😀', 'read:📦', 'a\uD800', '\uDC00b', '\uD83D', 'a\u0000',
    'name.asc', '"1042"', 'W/"📦"', '42', '0/3000148', 'resource-not-found', '.', '..', '.📦']
  let patterns = 0
  for (const { node, pointer } of walk(written)) {
    if (typeof node.pattern !== 'string') continue
    patterns++
    const unicode = new RegExp(node.pattern, 'u')
    const codeUnits = new RegExp(node.pattern)
    for (const sample of samples) t.equal(codeUnits.test(sample), unicode.test(sample), `${pointer}: ${JSON.stringify(sample)}`)
  }
  t.ok(patterns >= 10, `${patterns} patterns checked`)
})
