// Builds the real app for a test file: its own database in the test PostgreSQL (a copy of the run's
// migrated template, ./database.ts), served over real HTTP on a loopback port, and a client for it.
// Every response is checked against the OpenAPI contract (test/support/contract.ts).
import { Agent, request as httpRequest } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Writable } from 'node:stream'
import Fastify, { type FastifyInstance } from 'fastify'
import pg from 'pg'
import type { Test } from 'tap'
import { parseLsn } from '../../db/lsn.js'
import { seedDatabase, type SeedData } from '../../db/seed.js'
import app, { serverOptions } from '../../src/app.js'
import { loadConfig } from '../../src/config.js'
import { checkContract, type ObservedResponse } from './contract.js'
import { newDatabase } from './database.js'
import { TEST_SECRET } from './tokens.js'

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
