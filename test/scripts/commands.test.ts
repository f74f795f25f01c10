// Every command package.json runs with tsx, as its own process: --help and -h print the usage line
// first, then the options, and start nothing; an unknown option is one line on stderr and exit 2.
// Every database a command could reach (DATABASE_URL, TEST_DATABASE_URL) is a port where nothing
// listens, so a command that went on to work would fail, not print its help.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import module from 'node:module'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import t from 'tap'
import { freePort } from '../../db/embedded-postgres.js'
import { projectRoot } from '../../src/project-root.js'
import { nodeArgsOf } from '../support/node-args.js'

const literally = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')

interface Run { code: number | null, stdout: string, stderr: string }

/**
 * Runs the script in a process group of its own: when a command starts work after all (a
 * benchmark, a cluster), the timeout stops all of it.
 */
async function run (script: string, args: string[], env: NodeJS.ProcessEnv): Promise<Run> {
  const child = spawn(process.execPath, [...nodeArgsOf(script), ...args], { cwd: projectRoot, env, detached: true })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (chunk: Buffer) => { stdout += chunk.toString() })
  child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  const timer = setTimeout(() => process.kill(-child.pid!, 'SIGKILL'), 60_000)
  const [code] = await once(child, 'close') as [number | null]
  clearTimeout(timer)
  return { code, stdout, stderr }
}

const { scripts } = JSON.parse(await readFile(join(projectRoot, 'package.json'), 'utf8')) as { scripts: Record<string, string> }
const commands = [
  // npm start builds, then runs the build of src/server.ts; its source reads its arguments the same way.
  { name: 'start', script: 'src/server.ts', usage: 'npm start' },
  ...Object.entries(scripts).flatMap(([name, line]) => {
    const script = /^tsx (scripts\/\S+\.ts)$/.exec(line)?.[1]
    return script ? [{ name, script, usage: name === 'test' ? 'npm test' : `npm run -s ${name}` }] : []
  })
]

t.test('the commands read from package.json include the ones the README names', async (t) => {
  const found = commands.map(({ name }) => name)
  t.match(scripts.start, /node dist\/src\/server\.js$/, 'npm start runs the build of src/server.ts')
  for (const name of ['test', 'db:migrate', 'db:seed', 'db:prune-changes', 'db:explain', 'token', 'mutation', 'bench', 'bench:levers']) {
    t.ok(found.includes(name), name)
  }
})

t.test('npm test runs this file without tap\'s process recording (test/support/without-process-info)', async (t) => {
  t.equal(process.env.__TAPJS_PROCESSINFO_TESTING_NO_REGISTER__, String(process.pid), 'processinfo told to skip its hooks here')
  t.equal((globalThis as Record<symbol, unknown>)[Symbol.for('@tapjs/processinfo.registerRequire')], undefined, 'no require hook registered')
  t.equal(module.register.name, 'registerUnlessProcessInfo', 'its loader thread declined')
})

const deadPort = await freePort()
const nowhere = `postgres://postgres@127.0.0.1:${deadPort}/nothing`
// Only what a command needs to start; no secret, so `token` could not sign even if it tried.
const env = { PATH: process.env.PATH, DATABASE_URL: nowhere, TEST_DATABASE_URL: nowhere, JWKS_URL: 'https://idp.invalid/jwks.json' }

// --help and -h are one option to parseArgs (src/command-line.ts): both spellings once, then -h, so
// the suite starts one process less per command.
for (const [index, { script, usage }] of commands.entries()) {
  t.test(`${usage} -- ${index === 0 ? '--help and -h' : '-h'}: the usage, then the options; nothing started`, async (t) => {
    for (const flag of index === 0 ? ['--help', '-h'] : ['-h']) {
      const { code, stdout, stderr } = await run(script, [flag], env)
      t.equal(code, 0, `${flag}: ${stderr}`)
      t.equal(stderr, '', flag)
      t.match(stdout, new RegExp(`^usage: ${literally(usage)}( .*)?\n\\S`), `${flag}: the usage line first, then what the command does`)
      t.match(stdout, /\nOptions:\n(.*\n)* {2}-h, --help +print this help and exit\n$/, `${flag}: the options last`)
    }
  })
  t.test(`${usage} -- --no-such-option → one line on stderr, exit 2`, async (t) => {
    const { code, stdout, stderr } = await run(script, ['--no-such-option'], env)
    t.equal(code, 2, stderr)
    t.equal(stdout, '')
    t.match(stderr, new RegExp(`^Unknown option '--no-such-option' \\(usage: ${literally(usage)}( [^\n]*)?\\)\n$`))
  })
}
