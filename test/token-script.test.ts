// `npm run -s token` as people use it: TOKEN=$(npm run -s token) must capture a token and nothing else.
// The first case runs the real script in a process; the others run its command in-process.
import { execFile } from 'node:child_process'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { createVerifier } from 'fast-jwt'
import t from 'tap'
import { capturedOutput } from '../scripts/command.js'
import { tokenCommand } from '../scripts/token-command.js'
import { projectRoot } from '../src/project-root.js'
import { TEST_SECRET } from './tokens.js'

const run = promisify(execFile)
const tsx = join(projectRoot, 'node_modules', '.bin', 'tsx')

async function tokenProcess (args: string[], env: Record<string, string> = {}) {
  try {
    const { stdout, stderr } = await run(tsx, [join(projectRoot, 'scripts', 'token.ts'), ...args], {
      env: { PATH: process.env.PATH, JWT_SECRET: TEST_SECRET, ...env }
    })
    return { code: 0, stdout, stderr }
  } catch (error) {
    const { code, stdout, stderr } = error as { code: number, stdout: string, stderr: string }
    return { code, stdout, stderr }
  }
}

async function token (args: string[], env: Record<string, string> = {}) {
  const output = capturedOutput()
  const code = await tokenCommand(args, { JWT_SECRET: TEST_SECRET, ...env }, output)
  return { code, stdout: output.stdout(), stderr: output.stderr() }
}

t.test('prints only a token: one line, verifiable, with the scope and lifetime asked for', async (t) => {
  const { code, stdout, stderr } = await tokenProcess(['--scope', 'read:resource', '--expires-in', '120'], { JWT_ISSUER: 'https://idp/', JWT_AUDIENCE: 'api, other' })
  t.equal(code, 0)
  t.equal(stderr, '')
  t.match(stdout, /^[\w-]+\.[\w-]+\.[\w-]+\n$/)
  const claims = createVerifier({ key: TEST_SECRET, allowedIss: 'https://idp/', allowedAud: 'api' })(stdout.trim())
  t.match(claims, { scope: 'read:resource', iss: 'https://idp/', aud: 'api' })
  t.equal(claims.exp - claims.iat, 120)
})

t.test('--help prints the usage; bad arguments get one line on stderr and exit 2', async (t) => {
  const help = await token(['--help'])
  t.equal(help.code, 0)
  t.match(help.stdout, /^usage: npm run -s token -- \[--scope "read:resource delete:resource"\] \[--expires-in SECONDS\]\n$/)
  for (const [args, message] of [
    [['--bogus'], /^Unknown option '--bogus' \(usage: npm run -s token/],
    [['--scope'], /^Option '--scope <value>' argument missing \(usage:/],
    [['--expires-in', 'abc'], /^--expires-in must be a positive whole number of seconds$/],
    [['--expires-in=-5'], /^--expires-in must be a positive whole number of seconds$/],
    [['--expires-in', '0'], /^--expires-in must be a positive whole number of seconds$/],
    [['--scope', ' '], /^--scope must name at least one scope$/]
  ] as Array<[string[], RegExp]>) {
    const { code, stdout, stderr } = await token(args)
    t.equal(code, 2, args.join(' '))
    t.equal(stdout, '', args.join(' '))
    t.match(stderr.trim(), message, args.join(' '))
    t.equal(stderr.trim().split('\n').length, 1, `${args.join(' ')}: one line`)
  }
})

t.test('with only a public key there is nothing to sign with: one line, exit 1', async (t) => {
  const { code, stderr } = await token([], { JWT_SECRET: '', JWKS_URL: 'https://idp.example/jwks.json' })
  t.equal(code, 1)
  t.match(stderr, /^npm run token signs with JWT_SECRET \(HS256\)/)
})
