// Where the service's CPU went: a V8 .cpuprofile (node --cpu-prof) summed by self time, per package
// (node_modules), per file of our own, per Node internal module, and per function.
import { readFile } from 'node:fs/promises'

interface ProfileNode {
  id: number
  callFrame: { functionName: string, url: string, lineNumber: number }
  children?: number[]
}
interface CpuProfile { nodes: ProfileNode[], samples: number[], timeDeltas: number[] }

/** What a frame belongs to: `fastify`, `@fastify/jwt`, `service dist/src/app.js`, `node:internal/…`, `(gc)`. */
function ownerOf ({ url, functionName }: ProfileNode['callFrame']): string {
  if (!url) return functionName || '(anonymous native)'
  const path = url.replace(/^file:\/\//, '')
  const modules = path.lastIndexOf('/node_modules/')
  if (modules !== -1) {
    const [scope, name] = path.slice(modules + '/node_modules/'.length).split('/')
    return scope.startsWith('@') ? `${scope}/${name}` : scope
  }
  if (path.startsWith('node:')) return path.split('/').slice(0, 2).join('/')
  const ours = path.indexOf('/dist/')
  return ours === -1 ? path : `service ${path.slice(ours + 1)}`
}

function table (title: string, totals: Map<string, number>, all: number, top: number): string {
  const rows = [...totals].sort((a, b) => b[1] - a[1]).slice(0, top)
  return [`${title}:`, ...rows.map(([name, micros]) =>
    `  ${(100 * micros / all).toFixed(1).padStart(5)} %  ${(micros / 1000).toFixed(0).padStart(6)} ms  ${name}`)].join('\n')
}

/** A text summary of the profile in `file`: the top owners and functions by self time. */
export async function summarizeProfile (file: string, top = 25): Promise<string> {
  const profile = JSON.parse(await readFile(file, 'utf8')) as CpuProfile
  const parents = new Map<number, number>()
  for (const node of profile.nodes) for (const child of node.children ?? []) parents.set(child, node.id)
  const nodes = new Map(profile.nodes.map((node) => [node.id, node]))
  // A native function (a system call such as writev) is named after the package that called it
  // through Node's streams: "writev ← pg" is the driver writing to PostgreSQL.
  const caller = (id: number): string => {
    for (let at = parents.get(id); at !== undefined; at = parents.get(at)) {
      const owner = ownerOf(nodes.get(at)!.callFrame)
      if (!owner.startsWith('node:') && nodes.get(at)!.callFrame.url) return owner
    }
    return '?'
  }
  const frames = new Map(profile.nodes.map((node) => [node.id, !node.callFrame.url && !node.callFrame.functionName.startsWith('(')
    ? { ...node.callFrame, functionName: `${node.callFrame.functionName} ← ${caller(node.id)}` }
    : node.callFrame]))
  const byOwner = new Map<string, number>()
  const byFunction = new Map<string, number>()
  let all = 0
  profile.samples.forEach((id, i) => {
    const frame = frames.get(id)!
    const micros = profile.timeDeltas[i]
    if (frame.functionName === '(idle)') return
    all += micros
    const owner = ownerOf(frame)
    byOwner.set(owner, (byOwner.get(owner) ?? 0) + micros)
    const name = frame.url ? `${frame.functionName || '(anonymous)'} ${owner}:${frame.lineNumber + 1}` : owner
    byFunction.set(name, (byFunction.get(name) ?? 0) + micros)
  })
  return [
    `busy (not idle) CPU: ${(all / 1000).toFixed(0)} ms`,
    table('self time by owner', byOwner, all, top),
    table('self time by function', byFunction, all, top)
  ].join('\n\n')
}
