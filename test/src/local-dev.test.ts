// What `npm start` gives a laptop beyond the configuration (src/local-dev.ts): here, the demo
// token's scopes and lifetime. Its printing is run by .ci/smoke-start, which uses the token for a DELETE and the
// POST that undoes it.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { parse } from 'yaml'
import { loadConfig } from '../../src/config.js'
import { demoToken, everyScope, lifetimeText } from '../../src/local-dev.js'
import { projectRoot } from '../../src/project-root.js'
import { ordersFixture, ordersPath } from '../support/fixtures.js'
import { build } from '../support/harness.js'
import { TEST_SECRET } from '../support/tokens.js'

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

t.test('the demo token is accepted by the service it is printed for: 12 h, or JWT_MAX_LIFETIME_S when that is shorter', async (t) => {
  for (const [env, lifetimeS] of [[{}, 12 * 3600], [{ JWT_MAX_LIFETIME_S: '86400' }, 12 * 3600], [{ JWT_MAX_LIFETIME_S: '600' }, 600]] as const) {
    const harness = await build(t, env)
    await harness.seed(ordersFixture())
    // Signed as `npm start` signs it, with the secret the harness's service verifies with.
    const demo = demoToken(loadConfig({ JWT_SECRET: TEST_SECRET, ...env }))
    const label = JSON.stringify(env)
    t.equal(demo.lifetimeS, lifetimeS, `${label}: lifetime`)
    const { exp, iat } = JSON.parse(Buffer.from(demo.token.split('.')[1], 'base64url').toString()) as { exp: number, iat: number }
    t.equal(exp - iat, lifetimeS, `${label}: exp − iat`)
    const res = await harness.request(ordersPath(), { headers: { authorization: `Bearer ${demo.token}` } })
    t.equal(res.status, 200, `${label}: accepted`)
  }
})

t.test('lifetimeText says a lifetime as people do', async (t) => {
  t.equal(lifetimeText(12 * 3600), '12 h')
  t.equal(lifetimeText(600), '10 min')
  t.equal(lifetimeText(90), '90 s')
})
