// The problem types are written twice, in the spec's table (what callers read) and in
// src/problems.ts (what the service sends): this keeps the two in step, and the spec's examples
// with the code's titles.
import { readFile } from 'node:fs/promises'
import t from 'tap'
import { parse } from 'yaml'
import { specPath } from '../src/project-root.js'
import { Problem, problems } from '../src/problems.js'

type Node = Record<string, unknown>
const spec = parse(await readFile(specPath, 'utf8')) as Node
const problemSchema = ((spec.components as Node).schemas as Node).Problem as { description: string }

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

const documented = new Map<string, number>()
for (const [, type, status] of problemSchema.description.matchAll(/^\| `(\/problems\/[a-z-]+)` \| (\d{3}) \|/gm)) {
  documented.set(type, Number(status))
}

t.test('the spec documents exactly the problem types the code sends, each with the same status', async (t) => {
  t.ok(documented.size >= 14, `${documented.size} documented types`)
  t.same([...documented.keys()].sort(), [...sent.keys()].sort())
  for (const [type, { status }] of sent) t.equal(documented.get(type), status, type)
})

t.test("every example of a problem in the spec carries the code's title for its type", async (t) => {
  let checked = 0
  const visit = (node: unknown): void => {
    if (Array.isArray(node)) return node.forEach(visit)
    if (typeof node !== 'object' || node === null) return
    const value = node as Node
    if (typeof value.type === 'string' && value.type.startsWith('/problems/') && typeof value.title === 'string') {
      t.equal(value.title, sent.get(value.type)?.title, `${value.type}: title`)
      t.equal(value.status, sent.get(value.type)?.status, `${value.type}: status`)
      checked++
    }
    Object.values(value).forEach(visit)
  }
  visit(spec.paths)
  visit(spec.components)
  t.ok(checked >= sent.size, `${checked} examples checked`)
})
