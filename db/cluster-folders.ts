// The folders of the PostgreSQL clusters that tests, plans and the bench make and throw away: where
// they go (in RAM when there is room), the process that owns each, and the sweep that ends the
// clusters of an owner killed with SIGKILL (a test runner's timeout). Such an owner runs no
// teardown and no exit hook, and its postmasters outlive it, holding their RAM and ports for good.
import { existsSync, readFileSync } from 'node:fs'
import { chmod, mkdtemp, readdir, readFile, rename, rm, stat, statfs, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'

// A folder in RAM for the clusters of a test run: on disk (ext4 here) the kernel creates, writes
// and deletes the files of the ~170 databases a run copies and drops, and a run took about 40 s
// more CPU (docs/testing.md). A run's clusters peak near 350 MB there; used only with room to
// spare (Docker gives a container's /dev/shm 64 MB).
const MEMORY_FOLDER = '/dev/shm'
const TMPFS_MAGIC = 0x01021994
const MEMORY_FOLDER_ROOM = 2 * 1024 ** 3

/** Names the owner of a folder: processIdentity() of the process that made it. */
const OWNER_FILE = 'owner'
/** How long the servers of a folder whose owner is gone get to stop (immediate shutdown) before the folder goes. */
const LEFTOVER_BOUND_MS = 5_000
/**
 * A folder older than this without an owner file was left by an owner killed as it made it (the
 * file is the first thing put in it, whole, by a rename): nothing was started in it. Younger, it
 * may be a start in progress.
 */
const UNOWNED_AGE_MS = 60_000

/** /dev/shm when it is a tmpfs with 2 GiB free, else undefined. */
async function memoryFolder (): Promise<string | undefined> {
  const fs = await statfs(MEMORY_FOLDER).catch(() => undefined)
  if (fs === undefined || fs.type !== TMPFS_MAGIC || fs.bavail * fs.bsize < MEMORY_FOLDER_ROOM) return undefined
  return MEMORY_FOLDER
}

/** Every folder a temporary folder of ours may be in, whatever room each has now: for sweeps. */
export async function temporaryRoots (): Promise<string[]> {
  const memory = await stat(MEMORY_FOLDER).then((found) => found.isDirectory(), () => false)
  return [...new Set([...(memory ? [MEMORY_FOLDER] : []), tmpdir()])]
}

/**
 * A new folder that the `postgres` user can enter, run as root: under the system's temporary
 * folder, or in RAM when `inMemory` and there is room (for clusters thrown away after a test run).
 */
export async function temporaryFolder (prefix: string, { inMemory = false } = {}): Promise<string> {
  const root = (inMemory ? await memoryFolder() : undefined) ?? tmpdir()
  const dir = await mkdtemp(join(root, prefix))
  await chmod(dir, 0o755)
  return dir
}

/** A temporary folder (as temporaryFolder) that names this process as its owner, for endLeftovers(). */
export async function ownedFolder (prefix: string, options: { inMemory?: boolean } = {}): Promise<string> {
  const dir = await temporaryFolder(prefix, options)
  // Written beside, then renamed: an owner killed while writing leaves no owner file rather than
  // half of one, and such a folder is swept once old enough (endLeftovers).
  await writeFile(join(dir, `${OWNER_FILE}.new`), processIdentity(process.pid) ?? '')
  await rename(join(dir, `${OWNER_FILE}.new`), join(dir, OWNER_FILE))
  return dir
}

/**
 * Ends the clusters in the owned folders of `prefix` whose owner is gone, and removes those
 * folders; `dataDirs` names the clusters' data folders inside each. A folder without an owner file
 * is removed once older than a minute (its owner was killed making it), and left alone before: it
 * may be a start in progress. One whose owner file names no process (a system without /proc) is
 * left alone. A postmaster is signalled only while its
 * command line names its data folder, so a process that has since taken its PID is not. Best
 * effort: servers that do not stop within the bound are left with their folder, and the caller's
 * own start goes on.
 */
export async function endLeftovers (prefix: string, dataDirs: string[]): Promise<void> {
  const folders: string[] = []
  for (const root of await temporaryRoots()) {
    folders.push(...(await readdir(root)).filter((name) => name.startsWith(prefix)).map((name) => join(root, name)))
  }
  for (const dir of folders) {
    // Absent ('ENOENT'), or unreadable for another reason: then left alone, as one not whole.
    const owner = await readFile(join(dir, OWNER_FILE), 'utf8').catch((error: NodeJS.ErrnoException) => error.code === 'ENOENT' ? undefined : '')
    if (owner === undefined) {
      const made = await stat(dir).then(({ mtimeMs }) => mtimeMs, () => Date.now())
      // A server running in it all the same (a folder of a version before owner files): left.
      const serving = dataDirs.some((name) => {
        const pid = postmasterPid(join(dir, name))
        return pid !== undefined && running(pid)
      })
      if (Date.now() - made > UNOWNED_AGE_MS && !serving) await rm(dir, { recursive: true, force: true }).catch(() => {})
      continue
    }
    if (!/^\d+ \d+$/.test(owner) || processIdentity(Number(owner.split(' ')[0])) === owner) continue
    const postmasters = dataDirs.map((name) => join(dir, name)).flatMap((dataDir) => {
      const pid = postmasterPid(dataDir)
      return pid !== undefined && commandLineOf(pid).includes(dataDir) ? [{ dataDir, pid }] : []
    })
    for (const { dataDir } of postmasters) quit(dataDir)
    const deadline = Date.now() + LEFTOVER_BOUND_MS
    const stopped = () => !postmasters.some(({ pid }) => running(pid))
    while (!stopped() && Date.now() < deadline) await sleep(50)
    if (stopped()) await rm(dir, { recursive: true, force: true }).catch(() => {})
  }
}

/**
 * The postmaster as postmaster.pid names it while it runs (its PID on the first line, its port on
 * the fourth, written once it listens); undefined when there is no such file or no port yet. The
 * process may be gone since: see running().
 */
export function postmasterOf (dataDir: string): { pid: number, port: number } | undefined {
  const lines = pidFileLines(dataDir)
  const [pid, port] = [Number(lines?.[0]), Number(lines?.[3])]
  return Number.isInteger(pid) && pid > 0 && Number.isInteger(port) && port > 0 && port < 65536 ? { pid, port } : undefined
}

/** The postmaster's PID, which heads postmaster.pid while it runs; undefined when it does not. */
export function postmasterPid (dataDir: string): number | undefined {
  const pid = Number(pidFileLines(dataDir)?.[0])
  return Number.isInteger(pid) && pid > 0 ? pid : undefined
}

function pidFileLines (dataDir: string): string[] | undefined {
  try {
    return readFileSync(join(dataDir, 'postmaster.pid'), 'utf8').split('\n')
  } catch {
    return undefined
  }
}

/**
 * Immediate shutdown by signal (synchronous, for an exit hook too): SIGQUIT to the postmaster,
 * whose PID heads postmaster.pid while it runs. A server already stopped has no such file.
 */
export function quit (dataDir: string): void {
  const pid = postmasterPid(dataDir)
  if (pid === undefined) return
  try {
    process.kill(pid, 'SIGQUIT')
  } catch {
    // Gone already.
  }
}

/** Linux's /proc, which tells a process's state, parent and command line; macOS has none. */
const procFolder = existsSync('/proc/self/stat')

/**
 * Whether the process runs: it exists and is not a zombie waiting to be reaped. Without /proc,
 * whether a signal could reach it (a zombie counts then).
 */
export function running (pid: number): boolean {
  if (!procFolder) return signalReaches(pid)
  const state = statFields(pid)?.[0]
  return state !== undefined && state !== 'Z'
}

function signalReaches (pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM'
  }
}

/**
 * Whether the process is the postmaster of `dataDir`: its command line names the folder (a
 * postmaster.pid left by a crash may name a PID that another process has taken since). Without
 * /proc, assumed.
 */
export function isPostmasterOf (pid: number, dataDir: string): boolean {
  return !procFolder || commandLineOf(pid).includes(dataDir)
}

/** The PID of the process's parent (1 once init has adopted it); undefined when no such process. */
export function parentOf (pid: number): number | undefined {
  const parent = statFields(pid)?.[1]
  return parent === undefined ? undefined : Number(parent)
}

/** The fields of /proc/PID/stat after "pid (comm) " (comm may hold spaces and parentheses); undefined when no such process. */
function statFields (pid: number): string[] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  } catch {
    return undefined
  }
}

/**
 * A process as an owner file names it: its PID and its start time (clock ticks since boot), since
 * a PID is reused once its process is gone. Undefined when no such process runs.
 */
function processIdentity (pid: number): string | undefined {
  const fields = statFields(pid)
  return fields && `${pid} ${fields[19]}`
}

/** A process's command line, its arguments joined by spaces; empty when it is gone. */
function commandLineOf (pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ')
  } catch {
    return ''
  }
}
