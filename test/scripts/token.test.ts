// `npm run -s token` as people use it: TOKEN=$(npm run -s token) must capture a token and nothing else.
// Each case runs the real script in a process. Its -h and an unknown option, as every command's:
// commands.test.ts.
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { createVerifier } from 'fast-jwt'
import t from 'tap'
import { projectRoot } from '../../src/project-root.js'
import { specAsWritten } from '../../src/spec.js'
import { ordersFixture, ordersPath } from '../support/fixtures.js'
import { build } from '../support/harness.js'
import { nodeArgsOf } from '../support/node-args.js'
import { TEST_SECRET } from '../support/tokens.js'

const run = promisify(execFile)

/**
 * scripts/token.ts in a process of its own, with JWT_SECRET unless `env` says otherwise; run by node
 * as the system tests start the server (support/node-args.ts): one process, where tsx's CLI is two.
 */
async function token (args: string[], env: Record<string, string> = {}) {
  try {
    const { stdout, stderr } = await run(process.execPath, [...nodeArgsOf('scripts/token.ts'), ...args], {
      cwd: projectRoot,
      env: { PATH: process.env.PATH, JWT_SECRET: TEST_SECRET, ...env }
    })
    return { code: 0, stdout, stderr }
  } catch (error) {
    const { code, stdout, stderr } = error as { code: number, stdout: string, stderr: string }
    return { code, stdout, stderr }
  }
}

t.test('prints only a token: one line, verifiable, with the scope and lifetime asked for', async (t) => {
  const { code, stdout, stderr } = await token(['--scope', 'read:resource', '--expires-in', '120'], { JWT_ISSUER: 'https://idp/', JWT_AUDIENCE: 'api, other' })
  t.equal(code, 0)
  t.equal(stderr, '')
  t.match(stdout, /^[\w-]+\.[\w-]+\.[\w-]+\n$/)
  const claims = createVerifier({ key: TEST_SECRET, allowedIss: 'https://idp/', allowedAud: 'api' })(stdout.trim())
  t.match(claims, { scope: 'read:resource', iss: 'https://idp/', aud: 'api' })
  t.equal(claims.exp - claims.iat, 120)
})

t.test('without --scope the token carries every scope the spec\'s operations ask for', async (t) => {
  const spec = await specAsWritten() as { paths: Record<string, Record<string, { security?: Array<Record<string, string[]>> }>> }
  const specScopes = new Set(Object.values(spec.paths).flatMap((item) => Object.values(item))
    .flatMap(({ security }) => security ?? []).flatMap((requirement) => Object.values(requirement).flat()))
  t.ok(specScopes.has('create:resource') && specScopes.has('delete:resource') && specScopes.has('read:resource'), [...specScopes].join(' '))
  const { code, stdout } = await token([])
  t.equal(code, 0)
  const claims = createVerifier({ key: TEST_SECRET })(stdout.trim())
  t.same(new Set(claims.scope.split(' ')), specScopes)
  t.equal(claims.scope.split(' ').length, specScopes.size, 'each scope once')
})

t.test('--help prints the usage and the options with their defaults, and signs nothing', async (t) => {
  // No secret at all: signing would have to make one, or fail.
  const { code, stdout, stderr } = await token(['--help'], { JWT_SECRET: '', JWKS_URL: 'https://idp.example/jwks.json' })
  t.equal(code, 0)
  t.equal(stderr, '')
  t.match(stdout, /^usage: npm run -s token -- \[--scope SCOPES\] \[--expires-in SECONDS\]\n/)
  t.match(stdout, /\n {2}--scope SCOPES +the scopes it carries, space-separated \(default: [^)]*create:resource[^)]*\)\n/)
  t.match(stdout, /\n {2}--expires-in SECONDS +how long it is valid, at most 100 years \(default: 3600, or JWT_MAX_LIFETIME_S if shorter\)\n/)
  t.match(stdout, /\n {2}-h, --help +print this help and exit\n$/)
  t.notMatch(stdout, /[\w-]+\.[\w-]+\.[\w-]+\n/, 'no token')
})

t.test('bad arguments get one line on stderr, ending with the usage, and exit 2', async (t) => {
  const usage = ' (usage: npm run -s token -- [--scope SCOPES] [--expires-in SECONDS])'
  const cases = [
    [['read:resource'], "Unexpected argument 'read:resource'"],
    [['--expires-in', 'abc'], '--expires-in must be a positive whole number of seconds, at most 3153600000 (100 years)'],
    [['--expires-in', '0'], '--expires-in must be a positive whole number of seconds, at most 3153600000 (100 years)'],
    // Past a number's range: signed without exp (fast-jwt drops a lifetime that is not finite),
    // which the service refuses (401), exit 0. A century is the bound, as db:prune-changes's.
    [['--expires-in', '9'.repeat(400)], '--expires-in must be a positive whole number of seconds, at most 3153600000 (100 years)'],
    [['--expires-in', '3153600001'], '--expires-in must be a positive whole number of seconds, at most 3153600000 (100 years)'],
    [['--scope', ' '], '--scope must name at least one scope']
  ] as Array<[string[], string]>
  // One process each, all at once.
  const runs = await Promise.all(cases.map(([args]) => token(args)))
  for (const [index, [args, problem]] of cases.entries()) {
    const { code, stdout, stderr } = runs[index]
    t.equal(code, 2, args.join(' '))
    t.equal(stdout, '', args.join(' '))
    t.ok(stderr.startsWith(problem), `${args.join(' ')}: ${stderr}`)
    t.ok(stderr.endsWith(`${usage}\n`), `${args.join(' ')}: ends with the usage`)
    t.equal(stderr.trimEnd().split('\n').length, 1, `${args.join(' ')}: one line`)
  }
})

t.test('with only a public key there is nothing to sign with: one line, exit 1', async (t) => {
  const { code, stderr } = await token([], { JWT_SECRET: '', JWKS_URL: 'https://idp.example/jwks.json' })
  t.equal(code, 1)
  t.match(stderr, /^npm run token signs with JWT_SECRET \(HS256\)/)
})

t.test('the token is one the service accepts under each token setting that concerns it (JWT_TYPE, JWT_SCOPE_CLAIMS, JWT_MAX_LIFETIME_S)', async (t) => {
  const cases: Array<{ env: Record<string, string>, args: string[] }> = [
    { env: {}, args: [] },
    // The service then asks for typ at+jwt (RFC 9068): a token typed JWT was refused, 401.
    { env: { JWT_TYPE: 'application/at+jwt' }, args: [] },
    // The service then reads only these claims: a token carrying `scope` got 403.
    { env: { JWT_SCOPE_CLAIMS: 'permissions' }, args: [] },
    { env: { JWT_SCOPE_CLAIMS: 'scp' }, args: ['--scope', 'read:resource'] },
    // Without --expires-in the default lifetime (an hour) was over the bound, 401.
    { env: { JWT_MAX_LIFETIME_S: '600' }, args: [] }
  ]
  for (const { env, args } of cases) {
    const name = JSON.stringify(env)
    const printed = await token(args, env)
    t.equal(printed.code, 0, `${name}: ${printed.stderr}`)
    const service = await build(t, env)
    await service.seed(ordersFixture())
    const res = await service.request(ordersPath(), { token: printed.stdout.trim() })
    t.equal(res.status, 200, `${name}: ${JSON.stringify(res.body)}`)
  }
})

t.test('--expires-in at its bound, a century, signs a token the service accepts', async (t) => {
  const printed = await token(['--expires-in', '3153600000'])
  t.equal(printed.code, 0, printed.stderr)
  t.equal(printed.stderr, '')
  const claims = createVerifier({ key: TEST_SECRET })(printed.stdout.trim())
  t.equal(claims.exp - claims.iat, 3153600000)
})

t.test('--expires-in over JWT_MAX_LIFETIME_S is refused, as the service would refuse the token', async (t) => {
  const { code, stdout, stderr } = await token(['--expires-in', '601'], { JWT_MAX_LIFETIME_S: '600' })
  t.equal(code, 2)
  t.equal(stdout, '')
  t.match(stderr, /^--expires-in must be at most 600 seconds \(JWT_MAX_LIFETIME_S\)/)
})
