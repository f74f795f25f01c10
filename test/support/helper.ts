// Builds the real app for a test file: its own database in the test PostgreSQL (TEST_DATABASE_URL,
// set by `npm test`), migrated by the app itself, served over real HTTP on a loopback port.
// Every response is checked against the OpenAPI contract (test/support/contract.ts).
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { readFileSync, rmSync } from 'node:fs'
import { rm } from 'node:fs/promises'
import { Agent, request as httpRequest } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import Fastify, { type FastifyInstance } from 'fastify'
import pg from 'pg'
import type { Test } from 'tap'
import { freePort, startEmbeddedPostgres, temporaryFolder } from '../../db/embedded-postgres.js'
import { parseLsn } from '../../db/lsn.js'
import { seedDatabase, type SeedData } from '../../db/seed.js'
import { databaseUrlOf, onServer } from '../../scripts/test-database.js'
import app, { serverOptions } from '../../src/app.js'
import { loadConfig } from '../../src/config.js'
import { projectRoot } from '../../src/project-root.js'
import { atExit } from './at-exit.js'
import { checkContract, type ObservedResponse } from './contract.js'
import { TEST_SECRET } from './tokens.js'

/**
 * The real server as `node --import tsx src/server.ts`, so that a signal reaches the server itself:
 * tsx's CLI relays signals through a parent that SIGKILLs a child which has not acknowledged one
 * within 30 ms, and a loaded machine is slower than that (a SIGTERM test then sees a kill, not a
 * drain).
 */
export const serverProcess = { command: process.execPath, args: ['--import', 'tsx', join(projectRoot, 'src', 'server.ts')] }

export function testDatabaseUrl (): string {
  const url = process.env.TEST_DATABASE_URL
  if (!url) throw new Error('TEST_DATABASE_URL is not set: run the tests with `npm test`')
  return url
}

// The databases this process made and no teardown has dropped yet, dropped at exit if any are
// left (test/support/at-exit.ts), by a process of their own that this one does not wait for: a connection
// this one left halfway through its start-up holds DROP DATABASE until this process is gone.
const undropped = new Set<string>()
atExit(() => {
  if (undropped.size === 0) return
  const drop = `import pg from 'pg'
    const client = new pg.Client({ connectionString: process.env.TEST_DATABASE_URL })
    await client.connect()
    for (const name of JSON.parse(process.env.UNDROPPED)) await client.query(\`DROP DATABASE IF EXISTS \${name} WITH (FORCE)\`)
    await client.end()`
  spawn(process.execPath, ['--input-type=module', '--eval', drop], {
    cwd: projectRoot,
    env: { PATH: process.env.PATH, TEST_DATABASE_URL: testDatabaseUrl(), UNDROPPED: JSON.stringify([...undropped]) },
    stdio: 'ignore',
    detached: true
  }).unref()
})

/**
 * A new database on the test server, and the function that drops it: empty, or a copy of the run's
 * migrated template (TEST_TEMPLATE_DATABASE, made by `npm test`), which the app then finds up to date.
 */
async function newDatabase ({ migrated = false } = {}): Promise<{ url: string, drop: () => Promise<void> }> {
  const name = `test_${randomBytes(6).toString('hex')}`
  const template = migrated ? process.env.TEST_TEMPLATE_DATABASE : undefined
  // FILE_COPY copies the template's files; the default (WAL_LOG) writes every page of it to the WAL,
  // which for a small template costs the server about twice the CPU, and a test run makes about eighty.
  await onServer(testDatabaseUrl(), `CREATE DATABASE ${name}${template ? ` TEMPLATE ${template}` : ''} STRATEGY FILE_COPY`)
  undropped.add(name)
  return {
    url: databaseUrlOf(testDatabaseUrl(), name),
    drop: async () => {
      await onServer(testDatabaseUrl(), `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
      undropped.delete(name)
    }
  }
}

/** A new, empty database on the test server, dropped when the test ends. */
export async function createTestDatabase (t: Test): Promise<string> {
  const { url, drop } = await newDatabase()
  t.teardown(drop)
  return url
}

export interface OwnPostgres {
  url: string
  dataDir: string
  stop: () => Promise<void>
  start: () => Promise<void>
}

/** A PostgreSQL server of the test's own, to stop and start again; removed when the test ends. */
export async function ownPostgres (t: Test): Promise<OwnPostgres> {
  const dir = await temporaryFolder('client-permissions-own-pg-')
  const options = { dataDir: join(dir, 'pg'), port: await freePort() }
  // At an exit without teardown (test/support/at-exit.ts): PostgreSQL's immediate shutdown, which writes
  // nothing more (SIGQUIT to the postmaster, whose PID heads postmaster.pid while it runs; a test may
  // have stopped it), then the folder removed. embedded-postgres's own exit hook only sends SIGINT.
  const cancel = atExit(() => {
    try {
      process.kill(Number(readFileSync(join(options.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]), 'SIGQUIT')
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
  let server = await startEmbeddedPostgres(options)
  t.teardown(async () => {
    await server.stop()
    await rm(dir, { recursive: true, force: true })
    cancel()
  })
  return {
    url: server.url,
    dataDir: options.dataDir,
    stop: () => server.stop(),
    start: async () => { server = await startEmbeddedPostgres(options) }
  }
}

export interface RequestOptions {
  method?: string
  token?: string
  headers?: Record<string, string>
  /** Sent as JSON with Content-Type application/json. */
  json?: unknown
  /** Sent as is. */
  body?: string | Blob
}

export interface Harness {
  app: FastifyInstance
  /** A pool on the test file's database, to arrange data and check what changed. */
  db: pg.Pool
  baseUrl: string
  request: (path: string, options?: RequestOptions) => Promise<ObservedResponse>
  seed: (data: SeedData) => Promise<void>
}

export interface BuildOptions {
  /** Receives the service's log lines (set LOG_LEVEL in env to see them). */
  logs?: Writable
  /** Registered after the app, before it listens: routes a test adds beside the spec's. */
  extend?: (fastify: FastifyInstance) => Promise<void>
  /** A database of the test's own (a replicated cluster's), migrated by the app, instead of a copy of the template. */
  database?: { url: string, drop: () => Promise<void> }
  /** Each request sends the Consistency-Token of the last answer that carried one, as a careful caller does. */
  passConsistencyTokens?: boolean
}

export async function build (t: Test, env: Record<string, string> = {}, { logs, extend, database, passConsistencyTokens = false }: BuildOptions = {}): Promise<Harness> {
  const { url: databaseUrl, drop } = database ?? await newDatabase({ migrated: true })
  // Several test files run at once on few cores: event-loop lag there is the machine's, not the
  // app's (the first sample after a start under load has reached seconds), so lag shedding is off
  // unless a test sets it (test/plugins/pressure.test.ts tests it).
  const config = loadConfig({ DATABASE_URL: databaseUrl, JWT_SECRET: TEST_SECRET, LOG_LEVEL: 'silent', MAX_EVENT_LOOP_DELAY_MS: '0', ...env })
  const options = serverOptions(config)
  if (logs) options.logger = { ...options.logger as object, stream: logs }
  const fastify = Fastify(options)
  try {
    await fastify.register(app, { config })
    if (extend) await fastify.register(extend)
    await fastify.listen({ host: '127.0.0.1', port: 0 })
  } catch (error) {
    // A start that fails still opened a pool: close it, or its idle connections hold the process.
    await fastify.close().catch(() => {})
    await drop()
    throw error
  }
  const db = new pg.Pool({ connectionString: databaseUrl, max: 4 })
  // Tests stop database servers on purpose; a lost idle connection must not end the test run.
  db.on('error', () => {})
  // In this order: connections closed before their database is dropped.
  t.teardown(async () => {
    await fastify.close()
    await db.end()
    await drop()
  })
  const { port } = fastify.server.address() as AddressInfo
  const baseUrl = `http://127.0.0.1:${port}`

  // One keep-alive agent per harness: node:http costs a fraction of fetch's CPU per request, and
  // the fuzzing sends thousands.
  const agent = new Agent({ keepAlive: true })
  t.teardown(() => agent.destroy())

  let lastConsistencyToken: string | undefined
  async function request (path: string, options: RequestOptions = {}): Promise<ObservedResponse> {
    const method = options.method ?? 'GET'
    const headers: Record<string, string> = { ...options.headers }
    if (options.token) headers.authorization = `Bearer ${options.token}`
    if (passConsistencyTokens && lastConsistencyToken !== undefined) headers['consistency-token'] ??= lastConsistencyToken
    let body: string | Buffer | undefined = options.body instanceof Blob ? Buffer.from(await options.body.arrayBuffer()) : options.body
    if (options.json !== undefined) {
      headers['content-type'] ??= 'application/json'
      body = JSON.stringify(options.json)
    }
    // As fetch would send it: the URL normalized (dot segments, percent-encoding), a length for
    // every body, and an empty one for a POST without.
    if (body !== undefined) headers['content-length'] = String(Buffer.byteLength(body))
    else if (method === 'POST' || method === 'PUT' || method === 'PATCH') headers['content-length'] = '0'
    const url = new URL(path, baseUrl)
    const response = await new Promise<{ status: number, headers: Headers, text: string }>((resolve, reject) => {
      const req = httpRequest({ host: '127.0.0.1', port, method, path: url.pathname + url.search, headers, agent }, (res) => {
        const chunks: Buffer[] = []
        res.on('data', (chunk: Buffer) => chunks.push(chunk))
        res.on('end', () => {
          const received = new Headers()
          for (let i = 0; i < res.rawHeaders.length; i += 2) received.append(res.rawHeaders[i], res.rawHeaders[i + 1])
          resolve({ status: res.statusCode!, headers: received, text: Buffer.concat(chunks).toString('utf8') })
        })
        res.on('error', reject)
      })
      req.on('error', reject)
      req.end(body)
    })
    const { text } = response
    // The newest seen: answers to concurrent requests may arrive in any order.
    const received = response.headers.get('consistency-token')
    if (received !== null && (lastConsistencyToken === undefined || parseLsn(received)! > parseLsn(lastConsistencyToken)!)) lastConsistencyToken = received
    let parsed: unknown = text
    if (/json/.test(response.headers.get('content-type') ?? '') && text !== '') parsed = JSON.parse(text)
    const observed = { status: response.status, headers: response.headers, body: parsed, text }
    checkContract(method, path, observed)
    return observed
  }

  return { app: fastify, db, baseUrl, request, seed: async (data) => { await seedDatabase(db, data) } }
}

export type LogLine = Record<string, unknown>

export interface CapturedLogs {
  /** Hand to build() as `logs`. */
  stream: Writable
  lines: LogLine[]
  /** The first line that matches, waiting for it to be written if need be (up to 10 s). */
  waitFor: (matches: (line: LogLine) => boolean, what: string) => Promise<LogLine>
}

/** The service's JSON log lines as they are written, to wait on rather than sleep for. */
export function captureLogs (): CapturedLogs {
  const lines: LogLine[] = []
  const waiting = new Set<() => void>()
  const stream = new Writable({
    write (chunk, _encoding, done) {
      for (const text of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(text))
      for (const check of waiting) check()
      done()
    }
  })
  function waitFor (matches: (line: LogLine) => boolean, what: string): Promise<LogLine> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => { waiting.delete(check); reject(new Error(`no log line: ${what}`)) }, 10_000)
      function check () {
        const line = lines.find(matches)
        if (!line) return
        clearTimeout(timer)
        waiting.delete(check)
        resolve(line)
      }
      waiting.add(check)
      check()
    })
  }
  return { stream, lines, waitFor }
}
