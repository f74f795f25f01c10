// The problem types are written twice: in the spec's table (what callers read, in the Problem
// schema) and in the catalogue of src/problems.ts (what the service sends, and what
// GET /problems/{name} serves). This keeps the two in step, the problems the code makes with the
// catalogue, and the spec's examples with both.
import { readFile } from 'node:fs/promises'
import t from 'tap'
import { parse } from 'yaml'
import { specPath } from '../../src/project-root.js'
import { Problem, problems, problemTypes } from '../../src/problems.js'

type Node = Record<string, unknown>
const spec = parse(await readFile(specPath, 'utf8')) as Node
const problemSchema = ((spec.components as Node).schemas as Node).Problem as { description: string }
const catalogue = new Map(Object.entries(problemTypes).map(([name, entry]) => [`/problems/${name}`, entry]))

// Each factory called with placeholder arguments (strings, unless it takes a list): the type,
// status and title do not depend on them.
const placeholders: Record<string, unknown[]> = {
  invalidRequest: [[]], insufficientScope: [['read:resource']], unknownPermissions: ['r', ['p']], methodNotAllowed: ['PUT', ['GET']]
}
const sent = new Map<string, { status: number, title: string }>()
for (const [name, make] of Object.entries(problems) as Array<[string, (...args: unknown[]) => Problem]>) {
  const problem = make(...(placeholders[name] ?? ['x', 'y']))
  if (problem.type !== 'about:blank') sent.set(problem.type, { status: problem.status, title: problem.title })
}

// The table's rows of /problems/ types, cell by cell: | `type` | title | status | when | what to do |
const documented = new Map<string, string[]>()
for (const [, type, ...cells] of problemSchema.description.matchAll(/^\| `(\/problems\/[a-z-]+)` \| (.+?) \| (\d{3}) \| (.+?) \| (.+?) \|$/gm)) {
  documented.set(type, cells)
}

t.test('the spec\'s table is the catalogue: the same types, each with the same title, status, when and what to do', async (t) => {
  t.ok(catalogue.size >= 16, `${catalogue.size} types in the catalogue`)
  t.same([...documented.keys()], [...catalogue.keys()], 'the same types, in the same order')
  for (const [type, { title, status, when, whatToDo }] of catalogue) {
    t.same(documented.get(type), [title, String(status), when, whatToDo], type)
  }
  // A | inside a text would split its cell in the rendered table.
  for (const [type, entry] of catalogue) t.notOk(Object.values(entry).some((text) => String(text).includes('|')), `${type}: no |`)
})

t.test('the catalogue holds exactly the problem types the code sends, each with its status and title', async (t) => {
  t.same([...sent.keys()].sort(), [...catalogue.keys()].sort())
  for (const [type, { status, title }] of sent) t.same({ status, title }, { status: catalogue.get(type)?.status, title: catalogue.get(type)?.title }, type)
})

t.test('every problem type can be named in GET /problems/{name}: the path parameter\'s pattern admits each name', async (t) => {
  const operation = ((spec.paths as Node)['/problems/{name}'] as Node).get as { parameters: Array<{ schema: { pattern: string, maxLength: number } }> }
  const { pattern, maxLength } = operation.parameters[0].schema
  for (const name of Object.keys(problemTypes)) {
    t.ok(new RegExp(pattern, 'u').test(name) && name.length <= maxLength, name)
  }
})

t.test('the JSON example of a problem type\'s page is its catalogue entry', async (t) => {
  const operation = ((spec.paths as Node)['/problems/{name}'] as Node).get as Node
  const example = ((((operation.responses as Node)['200'] as Node).content as Node)['application/json'] as Node).example as Node
  const entry = catalogue.get(example.type as string)
  t.ok(entry, `${String(example.type)} is in the catalogue`)
  t.same(example, { type: example.type, title: entry?.title, status: entry?.status, when: entry?.when, what_to_do: entry?.whatToDo })
})

t.test("every example of a problem in the spec carries the catalogue's title and status for its type, and every type has one", async (t) => {
  const exemplified = new Set<string>()
  const visit = (node: unknown): void => {
    if (Array.isArray(node)) return node.forEach(visit)
    if (typeof node !== 'object' || node === null) return
    const value = node as Node
    if (typeof value.type === 'string' && value.type.startsWith('/problems/') && typeof value.title === 'string') {
      t.equal(value.title, catalogue.get(value.type)?.title, `${value.type}: title`)
      t.equal(value.status, catalogue.get(value.type)?.status, `${value.type}: status`)
      exemplified.add(value.type)
    }
    Object.values(value).forEach(visit)
  }
  visit(spec.paths)
  visit(spec.components)
  t.same([...exemplified].sort(), [...catalogue.keys()].sort())
})
