// afterIo and deadline (db/after-io.ts) in a process of their own, whose event loop has nothing
// else to do but wait on a socket, as an idle service's does: what they defer must still run then.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { pathToFileURL } from 'node:url'
import t from 'tap'
import { afterIo, deadline } from '../../db/after-io.js'
import { loaderArgs, runnableOf } from '../support/node-args.js'

/** Runs `body` in a node process that listens on a socket nobody connects to; its output and exit code. */
async function idleProcess (body: string): Promise<{ code: number | null, output: string }> {
  const script = `
    const { afterIo, deadline } = await import(${JSON.stringify(pathToFileURL(runnableOf('db/after-io.ts')).href)})
    const { createServer } = await import('node:net')
    createServer().listen(0, '127.0.0.1')
    const started = performance.now()
    const done = (what) => { console.log(what, Math.round(performance.now() - started)); process.exit(0) }
    ${body}`
  const child = spawn(process.execPath, [...loaderArgs, '--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] })
  let output = ''
  child.stdout.on('data', (chunk: Buffer) => { output += chunk.toString() })
  const timer = setTimeout(() => child.kill('SIGKILL'), 5_000)
  const [code] = await once(child, 'exit') as [number | null]
  clearTimeout(timer)
  return { code, output }
}

t.test('what afterIo defers from a timer runs at once, though nothing else wakes the loop', async (t) => {
  const { code, output } = await idleProcess("setTimeout(() => afterIo(() => done('ran')), 50).unref()")
  t.equal(code, 0, 'ran before it was killed (5 s)')
  t.match(output, /^ran \d+\n$/)
  t.ok(Number(output.split(' ')[1]) < 1_000, output)
})

t.test('deadline aborts once its time has passed, with AbortSignal.timeout\'s reason, though nothing else wakes the loop', async (t) => {
  const { code, output } = await idleProcess("deadline(50).addEventListener('abort', function () { done(this.reason.name) })")
  t.equal(code, 0, 'aborted before it was killed (5 s)')
  t.match(output, /^TimeoutError \d+\n$/)
})

t.test('in this process: afterIo runs its function after the I/O waiting, once; deadline is not aborted before its time', async (t) => {
  const order: string[] = []
  await new Promise<void>((resolve) => { afterIo(() => { order.push('after'); resolve() }); order.push('now') })
  t.same(order, ['now', 'after'])
  const signal = deadline(60_000)
  await new Promise((resolve) => setTimeout(resolve, 20))
  t.equal(signal.aborted, false)
})
