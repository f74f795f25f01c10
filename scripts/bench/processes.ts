// The processes the bench starts with node: the service's build, the HTTP ceiling, the ladder's
// steps. Each is remembered in `children`, which the bench's clean-up stops, whatever happened.
import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { setTimeout as sleep } from 'node:timers/promises'
import { freePort } from '../../db/embedded-postgres.js'
import { projectRoot } from '../../src/project-root.js'

/** Every process started, running or not. */
export const children: ChildProcess[] = []

/** SIGTERM, then the exit (a profiled service writes its profile on the way out). */
export async function stopProcess (child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = once(child, 'exit')
  child.kill('SIGTERM')
  await Promise.race([exited, sleep(15_000)])
}

const environmentOf = (env: Record<string, string | undefined>) =>
  Object.fromEntries(Object.entries({ ...process.env, ...env }).filter(([, value]) => value !== undefined))

/** Starts `args` with node (from `cwd`) and resolves once `ready` answers 2xx. An undefined in `env` unsets. */
export async function startProcess (args: string[], env: Record<string, string | undefined>, ready: () => Promise<boolean>, cwd = projectRoot): Promise<ChildProcess> {
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

/**
 * The service's build (dist/src/server.js under `root`, default this project) on a free port of
 * 127.0.0.1, with `env` (an undefined unsets) and node's `nodeArgs`; resolves once /readyz answers 2xx.
 */
export async function startService (env: Record<string, string | undefined>, { nodeArgs = [], root = projectRoot }: { nodeArgs?: string[], root?: string } = {}): Promise<{ url: string, child: ChildProcess }> {
  const port = await freePort()
  const url = `http://127.0.0.1:${port}`
  const child = await startProcess([...nodeArgs, 'dist/src/server.js'], { ...env, PORT: String(port) }, async () => (await fetch(`${url}/readyz`)).ok, root)
  return { url, child }
}

/**
 * Starts `args` with node from the project and resolves with the first line it prints, which says
 * it is ready (a port, a URL); what it prints later is read and dropped, so it never blocks on a full pipe.
 */
export async function startAnnouncing (args: string[], env: Record<string, string | undefined> = {}, timeoutMs = 30_000): Promise<{ child: ChildProcess, line: string }> {
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

/** The HTTP ceiling (scripts/bench/http-ceiling.ts) answering the pages of `pagesFile`; resolves once it listens. */
export async function startHttpCeiling (pagesFile: string): Promise<{ url: string, child: ChildProcess }> {
  const { child, line: port } = await startAnnouncing(['--import', 'tsx', 'scripts/bench/http-ceiling.ts', pagesFile])
  return { url: `http://127.0.0.1:${port}`, child }
}
