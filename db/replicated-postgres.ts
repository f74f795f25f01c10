// Real PostgreSQL streaming replication, for tests (test/support/replication.ts wraps it for tap) and for
// `npm run bench`: Debian's PostgreSQL server (CI installs it, .ci/run) runs a primary and a hot
// standby made from it with `pg_basebackup -R`, each on a free loopback port, in a temporary folder.
// Replay on the standby can be paused, so a replica's lag is exact rather than a matter of timing.
import { execFile } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { appendFile, chown, mkdir, readFile, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import { endLeftovers, ownedFolder, postmasterPid, quit } from './cluster-folders.js'
import { freePort } from './embedded-postgres.js'

const DEBIAN_ROOT = '/usr/lib/postgresql'
const PROGRAMS = ['initdb', 'pg_ctl', 'postgres', 'pg_basebackup']
const SUPERUSER = 'postgres'
/** Each pair's temporary folder starts with this; it holds `primary/` and `replica/` (and names its owner: cluster-folders.ts). */
const FOLDER_PREFIX = 'client-permissions-replication-'
/** How long a start, a stop or a wait for the replica may take before the caller is told why. */
const BOUND_MS = 30_000

/** Why there is no replicated PostgreSQL here, for a skip message. */
export const NO_POSTGRES_SERVER = `Debian's PostgreSQL server is not installed (no ${DEBIAN_ROOT}/*/bin/postgres; apt-get install postgresql)`

/** The bin folder of the newest Debian PostgreSQL server installed (/usr/lib/postgresql/N/bin), if any. */
export function postgresServerBin (): string | undefined {
  const versions = existsSync(DEBIAN_ROOT) ? readdirSync(DEBIAN_ROOT).filter((name) => /^\d+(\.\d+)?$/.test(name)) : []
  return versions
    .sort((a, b) => Number(b) - Number(a))
    .map((version) => join(DEBIAN_ROOT, version, 'bin'))
    .find((bin) => PROGRAMS.every((program) => existsSync(join(bin, program))))
}

export interface Replicated {
  /** The primary, as its superuser: writes, CREATE DATABASE, pg_current_wal_lsn(). */
  primaryUrl: string
  /** The hot standby, read-only, with the same credentials (its users and databases are the primary's). */
  replicaUrl: string
  /** The server's major version (Debian's folder name: "15"). */
  version: string
  /** Pauses WAL replay on the replica and waits until it is paused: the replica then serves what it had. */
  pauseReplay: () => Promise<void>
  resumeReplay: () => Promise<void>
  /**
   * Resolves once the replica has replayed the primary's WAL up to where it was at the call
   * (everything committed before it is visible on the replica), throws after `timeoutMs` (30 s)
   * saying how far it got. While replay is paused it waits: for a resumeReplay() meanwhile.
   */
  waitForReplay: (timeoutMs?: number) => Promise<void>
  /**
   * Resolves once the replica has received (not necessarily replayed) the primary's WAL up to where
   * it was at the call: with replay paused, the replica then holds a write it does not show.
   * Throws after `timeoutMs` (30 s).
   */
  waitForReceive: (timeoutMs?: number) => Promise<void>
  /** `pg_ctl stop -m fast`: the replica stays up, readable, and reconnects once the primary is back. */
  stopPrimary: () => Promise<void>
  /** `pg_ctl stop -m immediate`, as a crash: started again, the primary first recovers from its WAL. */
  crashPrimary: () => Promise<void>
  /** Starts the primary again, resolving once it accepts connections. */
  startPrimary: () => Promise<void>
  /** `pg_ctl stop -m fast`. A replica started again replays anew: a pause does not survive a restart. */
  stopReplica: () => Promise<void>
  /** Starts the replica again, resolving once it accepts (read-only) connections. */
  startReplica: () => Promise<void>
  /** Each running server's postmaster PID (its backends are its children): for CPU accounting. */
  postmasterPids: () => number[]
}

/** The two ways to be rid of the servers and their folder, whatever state the start got to. */
export interface Ending {
  /** Immediate shutdown of both servers, then their folder removed. Safe to call twice. */
  stop: () => Promise<void>
  /** The same, synchronously (SIGQUIT to each postmaster), for a process's 'exit' hook. */
  quit: () => void
}

export interface ReplicatedOptions {
  /**
   * Called once the temporary folder exists, before any server is made in it, with the ways to end
   * them: register them (a teardown, an exit hook) here, so a start that fails halfway leaves
   * nothing behind either.
   */
  onCreated: (ending: Ending) => void
  /** postgresql.conf settings for both servers, over the defaults below. */
  settings?: Record<string, string | number>
}

interface Node {
  name: 'primary' | 'replica'
  dataDir: string
  log: string
  url: string
}

/**
 * Starts a primary and a streaming replica of it. Throws when Debian's server is missing
 * (postgresServerBin() says whether it is).
 */
export async function startReplicatedPostgres ({ onCreated, settings: given = {} }: ReplicatedOptions): Promise<Replicated> {
  const bin = postgresServerBin()
  if (!bin) throw new Error(NO_POSTGRES_SERVER)
  const owner = serverUser()
  // The pairs of a test process killed with SIGKILL: pg_ctl's postmasters outlive it.
  await endLeftovers(FOLDER_PREFIX, ['primary', 'replica'])
  const dir = await ownedFolder(FOLDER_PREFIX, { inMemory: true })
  const password = randomBytes(18).toString('base64url')
  const node = (name: Node['name'], port: number): Node => ({
    name,
    dataDir: join(dir, name),
    log: join(dir, `${name}.log`),
    url: `postgres://${SUPERUSER}:${password}@127.0.0.1:${port}/postgres`
  })
  const primary = node('primary', await freePort())
  const replica = node('replica', await freePort())

  onCreated({
    stop: async () => {
      for (const each of [replica, primary]) await stop(each, 'immediate').catch(() => quit(each.dataDir))
      await rm(dir, { recursive: true, force: true })
    },
    quit: () => {
      try {
        for (const each of [replica, primary]) quit(each.dataDir)
      } finally {
        rmSync(dir, { recursive: true, force: true })
      }
    }
  })

  // The server runs as an unprivileged user when this process is root (PostgreSQL refuses root),
  // in folders that user owns.
  if (owner) await chown(dir, owner.uid, owner.gid)
  const env = { PATH: process.env.PATH ?? '/usr/bin:/bin', LC_ALL: 'C', PGPASSWORD: password }

  async function run (program: string, args: string[]): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      execFile(join(bin!, program), args, { env, timeout: BOUND_MS, ...owner }, (error, stdout, stderr) => {
        if (error) reject(new Error(`${program} ${args.join(' ')} failed: ${error.message}\n${stdout}${stderr}`))
        else resolve()
      })
    })
  }

  async function start (each: Node): Promise<void> {
    try {
      await run('pg_ctl', ['start', '--silent', '--wait', `--timeout=${BOUND_MS / 1000}`, '-D', each.dataDir, '-l', each.log])
      await untilConnects(each.url)
    } catch (error) {
      throw new Error(`the ${each.name} did not start: ${(error as Error).message}\n${await logTail(each)}`)
    }
  }

  async function stop (each: Node, mode: 'fast' | 'immediate'): Promise<void> {
    if (!existsSync(join(each.dataDir, 'postmaster.pid'))) return
    await run('pg_ctl', ['stop', '--silent', '--wait', `--timeout=${BOUND_MS / 1000}`, '-m', mode, '-D', each.dataDir])
  }

  // The primary: a fresh cluster with password authentication on loopback only, its Unix socket off
  // (its default folder belongs to the system's cluster), and durability dropped for speed.
  await mkdir(primary.dataDir, { mode: 0o700 })
  if (owner) await chown(primary.dataDir, owner.uid, owner.gid)
  const passwordFile = join(dir, 'password')
  await writeFile(passwordFile, password + '\n', { mode: 0o600 })
  if (owner) await chown(passwordFile, owner.uid, owner.gid)
  await run('initdb', ['--no-sync', '--no-instructions', '-D', primary.dataDir, '-U', SUPERUSER, `--pwfile=${passwordFile}`,
    '--auth=scram-sha-256', '--encoding=UTF8', '--locale=C'])
  await rm(passwordFile)
  await writeFile(join(primary.dataDir, 'pg_hba.conf'), [
    'host all all 127.0.0.1/32 scram-sha-256',
    'host replication all 127.0.0.1/32 scram-sha-256',
    ''
  ].join('\n'))
  // pg_basebackup copies this file: the replica starts with the same settings, its port appended.
  await appendFile(join(primary.dataDir, 'postgresql.conf'), settings({
    listen_addresses: '127.0.0.1',
    port: new URL(primary.url).port,
    unix_socket_directories: '',
    wal_level: 'replica',
    max_wal_senders: 4,
    max_replication_slots: 4,
    hot_standby: 'on',
    // A replica whose primary comes back reconnects within this, not the default 5 s.
    wal_retrieve_retry_interval: '200ms',
    // Commits stay synchronous (cheap without fsync): pg_current_wal_lsn() after a commit then
    // covers it, which waitForReplay() relies on.
    fsync: 'off',
    full_page_writes: 'off',
    shared_buffers: '16MB',
    max_connections: 50,
    ...given
  }))
  await start(primary)

  // The replica: a base backup with its WAL streamed (-X stream) through a replication slot (-C -S),
  // so the primary keeps the WAL a stopped replica has yet to receive; -R writes primary_conninfo
  // and standby.signal.
  await run('pg_basebackup', ['--no-sync', '-D', replica.dataDir, '-R', '-X', 'stream', '-c', 'fast', '-C', '-S', 'replica',
    '-h', '127.0.0.1', '-p', new URL(primary.url).port, '-U', SUPERUSER])
  await appendFile(join(replica.dataDir, 'postgresql.conf'), settings({ port: new URL(replica.url).port }))
  await start(replica)

  async function onReplica<T> (work: (client: pg.Client) => Promise<T>): Promise<T> {
    const client = new pg.Client({ connectionString: replica.url })
    await client.connect()
    try {
      return await work(client)
    } finally {
      await client.end()
    }
  }

  async function primaryLsn (): Promise<string> {
    const client = new pg.Client({ connectionString: primary.url })
    await client.connect()
    try {
      return (await client.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn')).rows[0].lsn
    } finally {
      await client.end()
    }
  }

  /** Waits until the replica's `position` (a function of it returning pg_lsn) reaches the primary's current LSN. */
  async function waitFor (position: 'pg_last_wal_replay_lsn()' | 'pg_last_wal_receive_lsn()', timeoutMs: number): Promise<void> {
    const target = await primaryLsn()
    await onReplica(async (client) => {
      for (const deadline = Date.now() + timeoutMs; ; await sleep(20)) {
        const { rows: [state] } = await client.query<{ reached: boolean, at: string | null, pause: string }>(
          `SELECT ${position} >= $1::pg_lsn AS reached, ${position}::text AS at, pg_get_wal_replay_pause_state() AS pause`, [target])
        if (state.reached) return
        if (Date.now() > deadline) {
          throw new Error(`the replica's ${position} is ${state.at} after ${timeoutMs} ms, short of the primary's ${target} ` +
            `(replay is ${state.pause})\n${await logTail(replica)}`)
        }
      }
    })
  }

  return {
    primaryUrl: primary.url,
    replicaUrl: replica.url,
    version: bin.split('/').at(-2)!,
    pauseReplay: () => onReplica(async (client) => {
      await client.query('SELECT pg_wal_replay_pause()')
      // The startup process pauses at its next check, between two records or while it waits for WAL.
      for (const deadline = Date.now() + BOUND_MS; ; await sleep(20)) {
        const { rows: [{ pause }] } = await client.query<{ pause: string }>('SELECT pg_get_wal_replay_pause_state() AS pause')
        if (pause === 'paused') return
        if (Date.now() > deadline) throw new Error(`replay on the replica is still "${pause}" after ${BOUND_MS} ms`)
      }
    }),
    resumeReplay: () => onReplica(async (client) => { await client.query('SELECT pg_wal_replay_resume()') }),
    waitForReplay: (timeoutMs = BOUND_MS) => waitFor('pg_last_wal_replay_lsn()', timeoutMs),
    waitForReceive: (timeoutMs = BOUND_MS) => waitFor('pg_last_wal_receive_lsn()', timeoutMs),
    stopPrimary: () => stop(primary, 'fast'),
    crashPrimary: () => stop(primary, 'immediate'),
    startPrimary: () => start(primary),
    stopReplica: () => stop(replica, 'fast'),
    startReplica: () => start(replica),
    postmasterPids: () => [primary, replica].flatMap((each) => postmasterPid(each.dataDir) ?? [])
  }
}

/** The user the server runs as when this process is root: Debian's `postgres`, else `nobody`. */
function serverUser (): { uid: number, gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined
  const users = readFileSync('/etc/passwd', 'utf8').split('\n').map((line) => line.split(':'))
  const user = users.find(([name]) => name === 'postgres') ?? users.find(([name]) => name === 'nobody')
  if (!user) throw new Error('Running as root, PostgreSQL needs an unprivileged user to run as: there is neither "postgres" nor "nobody"')
  return { uid: Number(user[2]), gid: Number(user[3]) }
}

function settings (values: Record<string, string | number>): string {
  return '\n# db/replicated-postgres.ts\n' + Object.entries(values).map(([name, value]) => `${name} = '${value}'\n`).join('')
}

/** The last lines of a server's log, for an error that says why. */
async function logTail (each: Node): Promise<string> {
  const log = await readFile(each.log, 'utf8').catch(() => '')
  return `${each.name}'s log (last lines):\n${log.split('\n').slice(-15).join('\n')}`
}

async function untilConnects (url: string): Promise<void> {
  for (const deadline = Date.now() + BOUND_MS; ; await sleep(50)) {
    const client = new pg.Client({ connectionString: url })
    try {
      await client.connect()
      await client.query('SELECT 1')
      return
    } catch (error) {
      if (Date.now() > deadline) throw error
    } finally {
      await client.end().catch(() => {})
    }
  }
}
