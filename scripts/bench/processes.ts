// The processes the bench starts with node: the service's build, the HTTP ceiling, the ladder's
// steps, the OTLP sink. A run keeps them in one Processes (trackProcesses, made by the bench's main
// and handed to each scenario that starts one), whose stopAll the clean-up calls, whatever happened.
import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { freePort } from '../../db/embedded-postgres.js'
import { projectRoot } from '../../src/project-root.js'

/** SIGTERM, then the exit (a profiled service writes its profile on the way out). */
export async function stopProcess (child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = once(child, 'exit')
  child.kill('SIGTERM')
  await Promise.race([exited, sleep(15_000)])
}

/** How the container image runs node: its NODE_OPTIONS, and the flags its command gives node before the service. */
export interface ImageNode {
  options?: string
  flags: string[]
}

/**
 * How the container image runs the service (the Dockerfile under `root`, its runtime stage): the
 * NODE_OPTIONS of its ENV, and the flags of its `CMD ["node", …, "dist/src/server.js"]` (V8 flags
 * that NODE_OPTIONS refuses go there), so that the bench measures the service as it ships.
 */
export async function imageNode (root = projectRoot): Promise<ImageNode> {
  const dockerfile = await readFile(join(root, 'Dockerfile'), 'utf8').catch(() => '')
  const runtimeStart = dockerfile.search(/^FROM \S+ AS runtime$/m)
  if (runtimeStart === -1) return { flags: [] }
  const runtime = dockerfile.slice(runtimeStart)
  const options = /^\s*(?:ENV\s+)?NODE_OPTIONS=("[^"]*"|\S+)/m.exec(runtime)?.[1].replace(/^"(.*)"$/, '$1')
  // The stage's last CMD at the start of a line (a HEALTHCHECK's CMD is on a line of its own, indented).
  const command = [...runtime.matchAll(/^CMD\s+(\[.*\])\s*$/gm)].at(-1)?.[1]
  const args = command ? JSON.parse(command) as string[] : []
  const entry = args.indexOf('dist/src/server.js')
  return { options, flags: args[0] === 'node' && entry > 0 ? args.slice(1, entry) : [] }
}

/** The image's settings of node as a command line shows them: its flags, then NODE_OPTIONS. */
export const describeImageNode = ({ options, flags }: ImageNode): string =>
  [...flags, ...options ? [`NODE_OPTIONS=${options}`] : []].join(' ') || 'none'

const environmentOf = (env: Record<string, string | undefined>) =>
  Object.fromEntries(Object.entries({ ...process.env, ...env }).filter(([, value]) => value !== undefined))

/** The processes of one run: each started through it is remembered until stopAll. */
export interface Processes {
  /** Starts `args` with node (from `cwd`) and resolves once `ready` answers 2xx. An undefined in `env` unsets. */
  start: (args: string[], env: Record<string, string | undefined>, ready: () => Promise<boolean>, cwd?: string) => Promise<ChildProcess>
  /**
   * The service's build (dist/src/server.js under `root`, default this project) on a free port of
   * 127.0.0.1, with `env` (an undefined unsets) and node's `nodeArgs`, after the node flags of
   * `root`'s image and with its NODE_OPTIONS unless `env` names its own; resolves once /readyz answers 2xx.
   */
  startService: (env: Record<string, string | undefined>, options?: { nodeArgs?: string[], root?: string }) => Promise<{ url: string, child: ChildProcess }>
  /**
   * Starts `args` with node from the project and resolves with the first line it prints, which says
   * it is ready (a port, a URL); what it prints later is read and dropped, so it never blocks on a full pipe.
   */
  startAnnouncing: (args: string[], env?: Record<string, string | undefined>, timeoutMs?: number) => Promise<{ child: ChildProcess, line: string }>
  /** The HTTP ceiling (scripts/bench/http-ceiling.ts) answering the pages of `pagesFile`; resolves once it listens. */
  startHttpCeiling: (pagesFile: string) => Promise<{ url: string, child: ChildProcess }>
  /** Stops every process started, running or not. */
  stopAll: () => Promise<void>
}

export function trackProcesses (): Processes {
  /** Every process started, running or not. */
  const children: ChildProcess[] = []

  const start: Processes['start'] = async (args, env, ready, cwd = projectRoot) => {
    // The service's log lines (a warning per shed request under overload) are dropped: in a pipe
    // nobody reads they filled its 64 KiB and the logger, blocked on it, stopped the whole service.
    const child = spawn(process.execPath, args, { cwd, env: environmentOf(env), stdio: ['ignore', 'ignore', 'inherit'] })
    children.push(child)
    for (let i = 0; i < 300; i++) {
      if (child.exitCode !== null) throw new Error(`${args.join(' ')} exited with ${child.exitCode}`)
      if (await ready().catch(() => false)) return child
      await sleep(100)
    }
    throw new Error(`${args.join(' ')} did not become ready`)
  }

  const startService: Processes['startService'] = async (env, { nodeArgs = [], root = projectRoot } = {}) => {
    const port = await freePort()
    const url = `http://127.0.0.1:${port}`
    const image = await imageNode(root)
    const asShipped = { NODE_OPTIONS: image.options, ...env, PORT: String(port) }
    const child = await start([...image.flags, ...nodeArgs, 'dist/src/server.js'], asShipped, async () => (await fetch(`${url}/readyz`)).ok, root)
    return { url, child }
  }

  const startAnnouncing: Processes['startAnnouncing'] = async (args, env = {}, timeoutMs = 30_000) => {
    const child = spawn(process.execPath, args, { cwd: projectRoot, env: environmentOf(env), stdio: ['ignore', 'pipe', 'inherit'] })
    children.push(child)
    const stdout = child.stdout!
    const line = await new Promise<string>((resolve, reject) => {
      let text = ''
      const timer = setTimeout(() => reject(new Error(`${args.join(' ')} did not start within ${timeoutMs / 1000} s`)), timeoutMs)
      const exited = (code: number | null) => { clearTimeout(timer); reject(new Error(`${args.join(' ')} exited with ${code} before it was ready`)) }
      child.once('exit', exited)
      stdout.on('data', function read (chunk: Buffer) {
        text += chunk.toString()
        const end = text.indexOf('\n')
        if (end === -1) return
        clearTimeout(timer)
        child.off('exit', exited)
        stdout.off('data', read)
        resolve(text.slice(0, end).trim())
      })
    })
    stdout.resume()
    return { child, line }
  }

  const startHttpCeiling: Processes['startHttpCeiling'] = async (pagesFile) => {
    const { child, line: port } = await startAnnouncing(['--import', 'tsx', 'scripts/bench/http-ceiling.ts', pagesFile])
    return { url: `http://127.0.0.1:${port}`, child }
  }

  return {
    start,
    startService,
    startAnnouncing,
    startHttpCeiling,
    stopAll: async () => { await Promise.all(children.map(stopProcess)) }
  }
}

/**
 * Samples the resident set of process `pid` every 100 ms until stopped: its peak, in bytes, and the
 * peak within each phase the bench names (`phase`), so that the scenario that holds it shows.
 */
export function watchRss (pid: number): { peak: () => number, phase: (name: string) => void, peaks: () => Map<string, number>, stop: () => void } {
  let peak = 0
  let current = 'start'
  const peaks = new Map<string, number>()
  const timer = setInterval(() => {
    readFile(`/proc/${pid}/status`, 'utf8').then((status) => {
      const bytes = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) * 1024
      peak = Math.max(peak, bytes)
      peaks.set(current, Math.max(peaks.get(current) ?? 0, bytes))
    }, () => {})
  }, 100)
  return { peak: () => peak, phase: (name) => { current = name }, peaks: () => peaks, stop: () => clearInterval(timer) }
}
