// What `npm start` gives a laptop beyond the configuration (src/local-dev.ts): here, the demo
// token's scopes. Its printing is run by .ci/smoke-start, which uses the token for a DELETE and the
// POST that undoes it.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { parse } from 'yaml'
import { everyScope } from '../../src/local-dev.js'
import { projectRoot } from '../../src/project-root.js'

t.test('the demo token carries every scope an operation of the spec asks for, each once, and nothing else', async (t) => {
  type Security = Array<Record<string, string[]>>
  const spec = parse(readFileSync(join(projectRoot, 'openapi', 'openapi.yaml'), 'utf8')) as { security?: Security, paths: Record<string, Record<string, { security?: Security }>> }
  const asked = new Set<string>()
  for (const path of Object.values(spec.paths)) {
    for (const operation of Object.values(path)) {
      for (const requirement of operation.security ?? spec.security ?? []) for (const scope of Object.values(requirement).flat()) asked.add(scope)
    }
  }
  t.same([...everyScope].sort(), [...asked].sort())
  t.same([...everyScope].sort(), ['create:resource', 'delete:resource', 'read:resource'], 'list, unauthorize, grant')
  t.equal(new Set(everyScope).size, everyScope.length, 'each once')
})
