// Where a process's CPU time went, sampled by Linux perf (cpu-clock): unlike V8's --cpu-prof, which
// samples the thread's stack at intervals of wall time, perf samples only while the thread is on a
// CPU. On two shared cores the service's thread is often runnable but not running (PostgreSQL, woken
// by the query the thread just wrote, takes the core): --cpu-prof books that wait to the frame it
// interrupted (`writev ← pg` at 30–40 % of the profile), perf books nothing to it. The process runs
// with --perf-basic-prof so that perf can name its JIT-compiled functions.
import { execFile, spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdir } from 'node:fs/promises'
import { dirname } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { promisify } from 'node:util'

const run = promisify(execFile)

/** Samples per second: enough for a few thousand samples in a round of seconds, little overhead. */
const FREQUENCY = 999
/** The node option that makes perf's names for JIT-compiled functions (/tmp/perf-<pid>.map). */
export const PERF_NODE_ARGS = ['--perf-basic-prof']

/** Whether `perf record` works here (installed, and allowed to sample a process of this user). */
export async function perfAvailable (): Promise<boolean> {
  try {
    await run('perf', ['record', '-e', 'cpu-clock', '-o', '/dev/null', '-q', '--', 'true'])
    return true
  } catch {
    return false
  }
}

/** Samples the CPU of process `pid` (all its threads, with call stacks) for `seconds` into `file`. */
async function sampleCpu (pid: number, seconds: number, file: string): Promise<void> {
  const perf = spawn('perf', ['record', '-e', 'cpu-clock', '-F', String(FREQUENCY), '-g', '-q', '-p', String(pid), '-o', file,
    '--', 'sleep', String(seconds)], { stdio: 'ignore' })
  const [code] = await once(perf, 'exit') as [number | null]
  if (code !== 0) throw new Error(`perf record of process ${pid} exited with ${code}`)
}

/** What perf samples during a measurement: process `pid`, for the measurement's `seconds`, into `file`. */
export interface Sampling { pid: number, seconds: number, file: string }

/**
 * Runs `measure` (a measurement), and when `sampling` is given (a scenario's last round, profiled)
 * has perf sample the process meanwhile, the measurement's first and last half second left out
 * (less in a short one). Returns the measurement and, if sampled, the file and the answers given
 * while perf sampled, estimated from its rate.
 */
export async function measureSampled<T extends { reqPerSec: number }> (measure: () => Promise<T>,
  sampling?: Sampling): Promise<{ run: T, sample?: { file: string, answers: number } }> {
  if (!sampling) return { run: await measure() }
  const { pid, seconds, file } = sampling
  await mkdir(dirname(file), { recursive: true })
  const margin = Math.min(0.5, seconds / 4)
  const sampled = sleep(margin * 1000).then(async () => { await sampleCpu(pid, seconds - 2 * margin, file) })
  const run = await measure()
  await sampled
  return { run, sample: { file, answers: run.reqPerSec * (seconds - 2 * margin) } }
}

/** A row of the breakdown: CPU µs per answer in the kernel, in native code (V8, libuv, libc) and in JavaScript. */
export interface OwnerCpu { kernel: number, native: number, js: number }
export type CpuByOwner = Map<string, OwnerCpu>

const KERNEL_ADDRESSES = 0xffff_8000_0000_0000n
const GC_FRAME = /Scaveng|MarkCompact|Sweep|ConcurrentMarking|Heap::|GCTracer|MinorMS/

/** What a frame belongs to: a package, a file of the service's build, or a Node internal module. */
function ownerOf (symbol: string): string | undefined {
  const modules = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(symbol)
  if (modules) return modules[1]
  const ours = /\/dist\/(\S+?):\d/.exec(symbol)
  if (ours) return `service ${ours[1]}`
  return /^JS:\S*\s*\S*?(node:[a-z_/]+)/.exec(symbol)?.[1]
}

/**
 * The samples of `file`, in µs per answer (`answers`: the answers given while perf sampled), by
 * owner: the innermost frame of a package or of the service (so a system call made by pg is pg's),
 * else the innermost Node internal module, else `V8: garbage collection` or `native`. Threads other
 * than the main one (V8's garbage-collection helpers, libuv's pool) are counted apart.
 */
export async function cpuByOwner (file: string, answers: number): Promise<CpuByOwner> {
  const { stdout } = await run('perf', ['script', '-i', file, '-F', 'pid,tid,period,ip,sym'], { maxBuffer: 1 << 30 })
  const owners: CpuByOwner = new Map()
  for (const sample of stdout.split('\n\n')) {
    const [head, ...frames] = sample.split('\n').map((line) => line.trim()).filter(Boolean)
    if (head === undefined) continue
    // "pid/tid period"
    const [, pid, tid, period] = /^(\d+)\/(\d+)\s+(\d+)/.exec(head) ?? []
    if (period === undefined) continue
    const calls = frames.map((frame) => {
      const space = frame.indexOf(' ')
      return { address: frame.slice(0, space), symbol: frame.slice(space + 1) }
    })
    const found = calls.map(({ symbol }) => ownerOf(symbol))
    const gc = calls.slice(0, 16).some(({ symbol }) => GC_FRAME.test(symbol))
    let owner = found.find((name) => name !== undefined && !name.startsWith('node:')) ?? found.find((name) => name !== undefined) ??
      (gc ? 'V8: garbage collection' : 'native (no JavaScript frame)')
    if (tid !== pid) owner = gc ? 'other threads: garbage collection' : 'other threads'
    const leaf = calls[0]
    const kind: keyof OwnerCpu = leaf === undefined
      ? 'native'
      : BigInt(`0x${leaf.address}`) >= KERNEL_ADDRESSES ? 'kernel' : /^(JS:|Builtins_)/.test(leaf.symbol) ? 'js' : 'native'
    const row = owners.get(owner) ?? { kernel: 0, native: 0, js: 0 }
    row[kind] += Number(period) / 1000 / answers
    owners.set(owner, row)
  }
  return owners
}

const total = ({ kernel, native, js }: OwnerCpu) => kernel + native + js
const summed = (owners: CpuByOwner): OwnerCpu => [...owners.values()]
  .reduce((all, row) => ({ kernel: all.kernel + row.kernel, native: all.native + row.native, js: all.js + row.js }), { kernel: 0, native: 0, js: 0 })

/**
 * A markdown table of several breakdowns side by side (e.g. off and on), the `top` owners by their
 * largest column: µs of CPU per answer, the first column with its kernel / native / JS split.
 */
export function cpuTable (columns: Array<{ label: string, owners: CpuByOwner }>, top = 25): string {
  const largest = (name: string) => Math.max(...columns.map(({ owners }) => total(owners.get(name) ?? { kernel: 0, native: 0, js: 0 })))
  const shown = [...new Set(columns.flatMap(({ owners }) => [...owners.keys()]))].sort((a, b) => largest(b) - largest(a)).slice(0, top)
  const cell = (row: OwnerCpu | undefined, split: boolean) => row === undefined
    ? '—'
    : total(row).toFixed(1) + (split ? ` (${row.kernel.toFixed(0)} / ${row.native.toFixed(0)} / ${row.js.toFixed(0)})` : '')
  const line = (cells: string[]) => `| ${cells.join(' | ')} |`
  return [
    line(['owner', ...columns.map(({ label }, i) => i === 0 ? `${label} (kernel / native / JS)` : label)]),
    line(['---', ...columns.map(() => '---')]),
    line(['all', ...columns.map(({ owners }, i) => cell(summed(owners), i === 0))]),
    ...shown.map((name) => line([name, ...columns.map(({ owners }, i) => cell(owners.get(name), i === 0))]))
  ].join('\n')
}
