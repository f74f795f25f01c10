// The spec's examples are what Swagger UI shows and pre-fills: each must validate against its own
// schema, each error example must carry the status it is listed under, and the ids people try
// first must be in the demo data `npm start` loads.
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import t from 'tap'
import type { SeedData } from '../db/seed.js'
import { projectRoot } from '../src/project-root.js'
import { dereferencedSpecOfRun } from '../src/spec.js'
import { pointerEscape, schemaErrors } from './support/contract.js'

type Node = Record<string, unknown>
// Every $ref resolved: an example is checked against the schema at its own place in the document.
const spec = await dereferencedSpecOfRun() as Node
const demo = JSON.parse(await readFile(join(projectRoot, 'db', 'demo-data.json'), 'utf8')) as Required<SeedData>
const isNode = (value: unknown): value is Node => typeof value === 'object' && value !== null && !Array.isArray(value)

/** Every example in the spec with the pointer of the schema it must satisfy. */
function examplesIn (node: unknown, pointer: string, found: Array<{ at: string, schema: string, value: unknown }> = []) {
  if (Array.isArray(node)) node.forEach((item, index) => examplesIn(item, `${pointer}/${index}`, found))
  if (!isNode(node)) return found
  const hasSchema = isNode(node.schema)
  // Media types and parameters: `example`, or `examples` as a map of { value }.
  if (hasSchema && 'example' in node) found.push({ at: `${pointer}/example`, schema: `${pointer}/schema`, value: node.example })
  if (hasSchema && isNode(node.examples)) {
    for (const [name, example] of Object.entries(node.examples)) {
      found.push({ at: `${pointer}/examples/${name}`, schema: `${pointer}/schema`, value: (example as Node).value })
    }
  }
  // Schemas: `examples` as an array (JSON Schema 2020-12).
  if (!hasSchema && Array.isArray(node.examples) && ('type' in node || '$ref' in node || 'pattern' in node)) {
    node.examples.forEach((value, index) => found.push({ at: `${pointer}/examples/${index}`, schema: pointer, value }))
  }
  for (const [key, child] of Object.entries(node)) {
    if (key !== 'examples' && key !== 'example') examplesIn(child, `${pointer}/${pointerEscape(key)}`, found)
  }
  return found
}

t.test('every example validates against its schema', async (t) => {
  const examples = examplesIn(spec, '')
  t.ok(examples.length >= 25, `${examples.length} examples found`)
  for (const { at, schema, value } of examples) t.equal(schemaErrors(schema, value), undefined, at)
})

t.test('every error response has examples, each with its own type and title and the status it is listed under', async (t) => {
  for (const [path, item] of Object.entries(spec.paths as Node)) {
    for (const [method, operation] of Object.entries(item as Node)) {
      if (!isNode(operation) || !isNode(operation.responses)) continue
      for (const [code, declared] of Object.entries(operation.responses)) {
        if (Number(code) < 400) continue
        const label = `${method.toUpperCase()} ${path} ${code}`
        const media = ((declared as Node).content as Node)['application/problem+json'] as Node
        const values = isNode(media.examples) ? Object.values(media.examples).map((example) => (example as Node).value as Node) : []
        t.ok(values.length > 0, `${label}: has examples`)
        for (const value of values) t.equal(value.status, Number(code), `${label}: ${value.type}`)
        t.equal(new Set(values.map((value) => value.type)).size, values.length, `${label}: one example per problem type`)
      }
    }
  }
})

t.test('the ids Swagger UI pre-fills are in the demo data, and the DELETE example removes what it grants', async (t) => {
  const parameters = spec.components as { parameters: Record<string, { example: string }> }
  const resourceId = parameters.parameters.ResourceId.example
  const clientId = parameters.parameters.ClientId.example
  const authorization = demo.authorizations.find((grant) => grant.resource_id === resourceId && grant.client_id === clientId)
  t.ok(authorization, `${clientId} is authorized on ${resourceId} in the demo data`)
  const operation = (spec.paths as Node)['/resources/{resource_id}/authorized_clients/{client_id}/permissions'] as Node
  // DELETE and POST share the body and its example: it removes two grants, and POST gives them back.
  const body = ((operation.delete as Node).requestBody as Node).content as Node
  t.same((operation.post as Node).requestBody as Node, (operation.delete as Node).requestBody as Node)
  for (const example of Object.values((body['application/json'] as Node).examples as Node)) {
    const ids = (example as Node).value as string[]
    t.ok(ids.every((id) => authorization?.permission_ids?.includes(id)), `${ids.join(', ')} are granted`)
  }
  const listed = ((((operation.get as Node).responses as Node)['200'] as Node).content as Node)['application/json'] as Node
  for (const permission of listed.example as Array<{ id: string, name: string }>) {
    const known = demo.permissions.find((candidate) => candidate.id === permission.id)
    t.same(permission, { id: known?.id, name: known?.name, description: known?.description }, `${permission.id} as the demo data has it`)
    t.ok(authorization?.permission_ids?.includes(permission.id), `${permission.id} is granted`)
  }
})

t.test('a cursor page\'s Link example names the id of its body example\'s last change, as the server does', async (t) => {
  let checked = 0
  for (const [path, item] of Object.entries(spec.paths as Node)) {
    const ok = (((item as Node).get as Node | undefined)?.responses as Node | undefined)?.['200'] as Node | undefined
    const link = ((ok?.headers as Node | undefined)?.Link as Node | undefined)?.example
    const cursor = typeof link === 'string' ? /[?&](before|after)=([0-9]+)/.exec(link) : null
    if (!cursor) continue
    const page = ((ok!.content as Node)['application/json'] as Node).example as Array<{ id: string }>
    t.equal(cursor[2], page.at(-1)?.id, `GET ${path}: ${cursor[1]} is the last change's id`)
    checked++
  }
  t.equal(checked, 2, 'the history and the feed')
})
