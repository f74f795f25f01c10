// src/server.ts as operators run it: a real process, configured by its environment.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process'
import { once } from 'node:events'
import { readFileSync } from 'node:fs'
import { createServer, type Server } from 'node:net'
import t, { type Test } from 'tap'
import { serverOptions } from '../../src/app.js'
import { loadConfig } from '../../src/config.js'
import { endsWithTest } from '../support/at-exit.js'
import { createTestDatabase } from '../support/database.js'
import { serverProcess } from '../support/server-process.js'
import { PRODUCTION_AUDIENCE, PRODUCTION_ISSUER, productionClaims, TEST_SECRET, token } from '../support/tokens.js'

interface StartOptions {
  /** Run in a user namespace of its own: root there, without root's privileges on this machine's network. */
  unprivileged?: boolean
  /** Give the server a terminal for stdout and stderr (util-linux `script`), as a person at a shell does. */
  terminal?: boolean
}

interface Started { child: ChildProcess, output: () => string, stderr: () => string }

function startServer (env: Record<string, string>, { unprivileged = false, terminal = false }: StartOptions = {}): Started {
  const quote = (word: string) => `'${word.replaceAll("'", "'\\''")}'`
  const [command, args] = terminal
    // The server is script's child (exec: not a shell's); -e: script exits with its code.
    ? ['script', ['-qefc', ['exec', ...[serverProcess.command, ...serverProcess.args].map(quote)].join(' '), '/dev/null']]
    : unprivileged
      ? ['unshare', ['--user', '--map-root-user', serverProcess.command, ...serverProcess.args]]
      : [serverProcess.command, serverProcess.args]
  // Only what the test names: the server must not depend on anything else in the environment.
  const child = endsWithTest(spawn(command, args, {
    env: { PATH: process.env.PATH, HOST: '127.0.0.1', PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe']
  }))
  let output = ''
  let stderr = ''
  child.stdout!.on('data', (chunk) => { output += chunk })
  child.stderr!.on('data', (chunk) => { output += chunk; stderr += chunk })
  // A terminal's line ends are CRLF.
  return { child, output: () => output.replaceAll('\r\n', '\n'), stderr: () => stderr }
}

async function exitOf (child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null) return child.exitCode
  const [code] = await once(child, 'exit')
  return code
}

const unreachable = 'postgres://u@127.0.0.1:1/db'
const production = { NODE_ENV: 'production', JWT_ISSUER: PRODUCTION_ISSUER, JWT_AUDIENCE: PRODUCTION_AUDIENCE }

t.test('a configuration it cannot start with → exit 1 and one line on stderr saying why', async (t) => {
  // Every such case, in-process: test/src/config.test.ts (loadStartupConfig). This is the wiring.
  const { child, output } = startServer({ ...production, JWT_AUDIENCE: '', JWT_SECRET: TEST_SECRET, DATABASE_URL: unreachable })
  t.equal(await exitOf(child), 1)
  t.equal(output(), 'Refusing to start: JWT_AUDIENCE is required in production (NODE_ENV=production).\n')
})

t.test('production with a database that refuses connections → exit 1 with one JSON line saying so', async (t) => {
  const { child, output } = startServer({ ...production, JWT_SECRET: TEST_SECRET, DATABASE_URL: 'postgres://u:p@127.0.0.1:1/db' })
  t.equal(await exitOf(child), 1)
  const lines = output().split('\n').filter(Boolean)
  for (const line of lines) t.doesNotThrow(() => JSON.parse(line), `JSON: ${line.slice(0, 80)}`)
  t.match(JSON.parse(lines.at(-1)!), { level: 60, msg: 'could not start: the database at DATABASE_URL cannot be reached' })
})

t.test('MIGRATIONS_DATABASE_URL refusing connections, DATABASE_URL fine → exit 1, the line names MIGRATIONS_DATABASE_URL', async (t) => {
  // It said DATABASE_URL, which answers: the operator was sent to check the setting that works.
  const { child, output } = startServer({
    ...production, JWT_SECRET: TEST_SECRET, DATABASE_URL: await createTestDatabase(t), MIGRATIONS_DATABASE_URL: unreachable
  })
  t.equal(await exitOf(child), 1)
  const last = JSON.parse(output().split('\n').filter(Boolean).at(-1)!)
  t.match(last, { level: 60, msg: 'could not start: the database at MIGRATIONS_DATABASE_URL cannot be reached' })
})

/** Waits for the listening line; the address, or undefined when the process ended first. */
async function listeningAddress (child: ChildProcess, output: () => string): Promise<string | undefined> {
  for (let waited = 0; waited < 30_000 && child.exitCode === null; waited += 100) {
    const address = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(output())?.[1]
    if (address) return address
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

t.test('with DATABASE_URL and a key: migrates, serves, logs JSON, and exits 0 on SIGTERM', async (t) => {
  const databaseUrl = await createTestDatabase(t)
  // Event-loop shedding off: the other test files share the cores, and their lag is not this
  // server's (shedding: test/plugins/pressure.test.ts).
  const { child, output } = startServer({ ...production, DATABASE_URL: databaseUrl, JWT_SECRET: TEST_SECRET, MAX_EVENT_LOOP_DELAY_MS: '0' })
  t.teardown(() => { child.kill('SIGKILL') })
  const address = await listeningAddress(child, output)
  t.ok(address, 'listening')
  const ready = await fetch(`${address}/readyz`)
  t.equal(ready.status, 200)
  const res = await fetch(`${address}/resources/r/authorized_clients/c/permissions`, { headers: { authorization: `Bearer ${token({ scope: 'read:resource', ...productionClaims })}` } })
  t.equal(res.status, 404, `the migrated, empty database answers: ${await res.clone().text()}`)
  const otherApi = token({ scope: 'read:resource', ...productionClaims, aud: 'another-api' })
  const refused = await fetch(`${address}/resources/r/authorized_clients/c/permissions`, { headers: { authorization: `Bearer ${otherApi}` } })
  t.equal(refused.status, 401, `a token the same issuer made for another API is refused: ${await refused.clone().text()}`)
  for (const line of output().split('\n').filter(Boolean)) {
    t.doesNotThrow(() => JSON.parse(line), `every line of output is a JSON log line: ${line.slice(0, 80)}`)
  }
  t.notMatch(output(), /eyJ/, 'no token is printed or logged in production')
  child.kill('SIGTERM')
  t.equal(await exitOf(child), 0)
})

/** A port held by this test for as long as it runs: what another program on the machine would do. */
async function heldPort (t: Test): Promise<number> {
  const holder: Server = createServer()
  holder.listen(0, '127.0.0.1')
  await once(holder, 'listening')
  t.teardown(() => { holder.close() })
  return (holder.address() as { port: number }).port
}

const stackTrace = /\bat .+:\d+:\d+\)?$|"stack"/m

// What a start needs to get as far as listening: a database (migrated by the first start) and a key.
const listenEnv = async (t: Test) => ({ ...production, JWT_SECRET: TEST_SECRET, DATABASE_URL: await createTestDatabase(t), MAX_EVENT_LOOP_DELAY_MS: '0' })

t.test('PORT in use → exit 1, and stderr is one sentence naming PORT; no stack trace. The same for a HOST not of this machine', async (t) => {
  const env = await listenEnv(t)
  const port = await heldPort(t)
  const { child, output, stderr } = startServer({ ...env, PORT: String(port) })
  t.equal(await exitOf(child), 1)
  t.equal(stderr(), `Port ${port} on 127.0.0.1 is in use: set PORT to a free port (or stop what holds it).\n`)
  t.notMatch(output(), stackTrace)
  t.notMatch(output(), /EADDRINUSE|could not listen/)

  // 192.0.2.1: TEST-NET-1 (RFC 5737), an address no machine here has.
  const elsewhere = startServer({ ...env, HOST: '192.0.2.1' })
  t.equal(await exitOf(elsewhere.child), 1)
  t.equal(elsewhere.stderr(), '192.0.2.1 is not an address of this machine: set HOST to one of its addresses (0.0.0.0 for all of them).\n')
  t.notMatch(elsewhere.output(), stackTrace)
})

t.test('METRICS_PORT in use → exit 1 and one sentence naming METRICS_PORT; the same port for both → a sentence naming both', async (t) => {
  const env = await listenEnv(t)
  const port = await heldPort(t)
  const busy = startServer({ ...env, METRICS_PORT: String(port) })
  t.equal(await exitOf(busy.child), 1)
  t.equal(busy.stderr(), `Port ${port} on 127.0.0.1 is in use: set METRICS_PORT to a free port (or stop what holds it).\n`)
  t.notMatch(busy.output(), stackTrace)

  // A port free a moment ago: the metrics listener binds it first, then the API cannot.
  const probe = createServer().listen(0, '127.0.0.1')
  await once(probe, 'listening')
  const free = (probe.address() as { port: number }).port
  await new Promise((resolve) => probe.close(resolve))
  const same = startServer({ ...env, PORT: String(free), METRICS_PORT: String(free) })
  t.equal(await exitOf(same.child), 1)
  t.equal(same.stderr(), `PORT and METRICS_PORT are both ${free}: set METRICS_PORT to another port (or unset it to serve /metrics on PORT).\n`)
  t.notMatch(same.output(), stackTrace)
})

t.test('a port below 1024 without the privilege to bind it → exit 1, and stderr is one sentence naming PORT', async (t) => {
  const unprivilegedFrom = Number(readFileSync('/proc/sys/net/ipv4/ip_unprivileged_port_start', 'utf8'))
  if (unprivilegedFrom <= 80) {
    t.comment(`skipped: any process may bind port 80 here (net.ipv4.ip_unprivileged_port_start=${unprivilegedFrom})`)
    return
  }
  // Root may bind any port: as root, the server runs in a user namespace of its own.
  const root = process.getuid?.() === 0
  if (root && spawnSync('unshare', ['--user', '--map-root-user', 'true']).status !== 0) {
    t.comment('skipped: running as root, and no user namespace can be made here to drop the privilege')
    return
  }
  const { child, output, stderr } = startServer({ ...await listenEnv(t), PORT: '80' }, { unprivileged: root })
  t.equal(await exitOf(child), 1)
  t.equal(stderr(), 'Port 80 on 127.0.0.1 needs privileges this process does not have: set PORT above 1023 (or grant the process the right to bind it).\n')
  t.notMatch(output(), stackTrace)
})

t.test('logs: JSON lines, except in development with a terminal on stdout; the same redaction and serializers either way', async (t) => {
  const options = (env: Record<string, string>, stdoutIsTerminal?: boolean) =>
    serverOptions(loadConfig(env), { stdoutIsTerminal }).logger as Record<string, unknown>
  t.match(options({}, true), { transport: { target: 'pino-pretty' } }, 'development at a terminal: pino-pretty')
  t.match(options({ NODE_ENV: 'test' }, true), { transport: { target: 'pino-pretty' } })
  for (const [env, terminal] of [[{}, false], [{}, undefined], [{ NODE_ENV: 'production' }, true], [{ NODE_ENV: 'staging' }, true]] as const) {
    t.equal(options(env, terminal).transport, undefined, `JSON: ${JSON.stringify(env)}, terminal ${terminal}`)
  }
  const json = options({})
  const pretty = options({}, true)
  t.same(pretty.redact, json.redact)
  t.same(pretty.serializers, json.serializers)
})

t.test('in development at a terminal the server logs human-readable lines, a token in a request never among them', async (t) => {
  const { child, output } = startServer({
    NODE_ENV: 'development', DATABASE_URL: await createTestDatabase(t), JWT_SECRET: TEST_SECRET, MAX_EVENT_LOOP_DELAY_MS: '0'
  }, { terminal: true })
  t.teardown(() => { child.kill('SIGKILL') })
  const address = await listeningAddress(child, output)
  t.ok(address, 'listening')
  const secret = token({ scope: 'read:resource' })
  const res = await fetch(`${address}/resources/r/authorized_clients/c/permissions`, { headers: { authorization: `Bearer ${secret}` } })
  t.equal(res.status, 404)
  // The server is script's child: SIGTERM to it, as an orchestrator would send.
  const [server] = readFileSync(`/proc/${child.pid}/task/${child.pid}/children`, 'utf8').trim().split(' ').map(Number)
  process.kill(server, 'SIGTERM')
  t.equal(await exitOf(child), 0)
  // eslint-disable-next-line no-control-regex
  const text = output().replace(/\u001b\[[0-9;]*m/g, '')
  t.match(text, /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: Server listening at http:\/\/127\.0\.0\.1:\d+$/m, 'time of day, level, message')
  t.match(text, /INFO: request completed/)
  t.same(text.split('\n').filter((line) => line.startsWith('{')), [], 'no JSON line')
  t.notMatch(text, secret.split('.')[2], 'the token is not logged')
})
