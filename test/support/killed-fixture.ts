// A fixture file that starts something, names it on stderr in one line of JSON, and is then killed
// with SIGKILL, as a test runner's timeout kills a test file: none of its teardowns or exit hooks runs.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { projectRoot } from '../../src/project-root.js'
import { nodeArgsOf } from './node-args.js'

/** Runs `fixture` (a path from the project's root), reads its report, kills it; `killed`: it lived until the SIGKILL ended it. */
export async function reportThenSigkill<Report> (fixture: string): Promise<{ report: Report, killed: boolean }> {
  const child = spawn(process.execPath, nodeArgsOf(fixture), { cwd: projectRoot, stdio: ['ignore', 'ignore', 'pipe'] })
  let stderr = ''
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
  const exited = once(child, 'exit')
  while (!stderr.includes('\n')) {
    if (await Promise.race([exited.then(() => true), once(child.stderr, 'data').then(() => false)])) throw new Error(`${fixture} ended early:\n${stderr}`)
  }
  const alive = child.exitCode === null
  let report: Report
  try {
    report = JSON.parse(stderr.split('\n')[0]) as Report
  } catch {
    // Not its report: the start of an error (a stack trace's first line). The rest says which.
    await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 5_000))])
    child.kill('SIGKILL')
    throw new Error(`${fixture} failed before its report:\n${stderr}`)
  }
  child.kill('SIGKILL')
  const [, signal] = await exited
  return { report, killed: alive && signal === 'SIGKILL' }
}
