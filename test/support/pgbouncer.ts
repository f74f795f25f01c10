// Debian's PgBouncer in transaction-pooling mode in front of a test PostgreSQL, as behind a managed
// pooler; stopped, and its folder removed, when the test ends.
import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import { existsSync, rmSync } from 'node:fs'
import { rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import type { Test } from 'tap'
import { temporaryFolder } from '../../db/cluster-folders.js'
import { freePort } from '../../db/embedded-postgres.js'
import { atExit, endsWithTest } from './at-exit.js'

/** The pgbouncer binary, when installed (CI installs Debian's package). */
export const pgbouncerBinary = ['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer'].find((path) => existsSync(path))

export interface PgBouncerOptions {
  /** default_pool_size: the server connections PgBouncer opens to the database. */
  serverConnections: number
  /** max_client_conn: the client connections it takes at once (200 unless given). */
  clientConnections?: number
  /** More lines of its [pgbouncer] section (`name = value`). */
  settings?: string[]
}

/**
 * PgBouncer in front of the database at `directUrl` (listed under its own name), and its URL: the
 * same as `directUrl` but for the port. `stats_users` is that URL's user, who may SHOW on its console.
 */
export async function startPgBouncer (t: Test, binary: string, directUrl: URL, { serverConnections, clientConnections = 200, settings = [] }: PgBouncerOptions): Promise<URL> {
  const dir = await temporaryFolder('client-permissions-pgbouncer-')
  const cancelRemoval = atExit(() => rmSync(dir, { recursive: true, force: true }))
  const port = await freePort()
  const database = directUrl.pathname.slice(1)
  const user = decodeURIComponent(directUrl.username)
  await writeFile(join(dir, 'pgbouncer.ini'), [
    '[databases]',
    `${database} = host=${directUrl.hostname} port=${directUrl.port} dbname=${database} user=${user}` +
      // A server that asks none (TEST_DATABASE_URL without one): an empty `password=` is a syntax error.
      (directUrl.password ? ` password=${decodeURIComponent(directUrl.password)}` : ''),
    '[pgbouncer]',
    'listen_addr = 127.0.0.1',
    `listen_port = ${port}`,
    'unix_socket_dir =',
    'auth_type = any',
    'pool_mode = transaction',
    `default_pool_size = ${serverConnections}`,
    `max_client_conn = ${clientConnections}`,
    'server_reset_query =',
    `stats_users = ${user}`,
    ...settings,
    ''
  ].join('\n'), { mode: 0o644 })
  // PgBouncer refuses to run as root: it then switches to the embedded PostgreSQL's user itself.
  const asUser = process.getuid?.() === 0 ? ['-u', 'postgres'] : []
  const bouncer: ChildProcess = endsWithTest(spawn(binary, [...asUser, join(dir, 'pgbouncer.ini')], { stdio: ['ignore', 'ignore', 'pipe'] }))
  let bouncerLog = ''
  bouncer.stderr!.on('data', (chunk) => { bouncerLog += chunk })
  t.teardown(async () => {
    bouncer.kill('SIGINT')
    if (bouncer.exitCode === null) await once(bouncer, 'exit')
    await rm(dir, { recursive: true, force: true })
    cancelRemoval()
  })

  const bouncerUrl = new URL(directUrl)
  bouncerUrl.port = String(port)
  for (let attempt = 0; ; attempt++) {
    // Its console, not the database: PgBouncer is up whether or not the database is.
    const probe = new pg.Client({ connectionString: consoleUrl(bouncerUrl).toString() })
    try {
      await probe.connect()
      await probe.end()
      break
    } catch (error) {
      if (attempt > 50) throw new Error(`pgbouncer did not start: ${(error as Error).message}\n${bouncerLog}`)
      await sleep(100)
    }
  }
  return bouncerUrl
}

/** The URL of PgBouncer's console (its database `pgbouncer`), for SHOW POOLS and the like. */
export function consoleUrl (bouncerUrl: URL): URL {
  const url = new URL(bouncerUrl)
  url.pathname = '/pgbouncer'
  return url
}
