// A stream of the feed read on a thread of its own (test/support/sse.ts, in a worker): its consumer
// goes on reading while this thread's event loop, the server's, is blocked, as a consumer in
// another process does. Closed, with its thread, when the test ends.
import { once } from 'node:events'
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads'
import type { Test } from 'tap'
import { openStream, type OpenOptions } from './sse.js'

interface Start { streamInWorker: true, url: string, options: OpenOptions }
export interface WorkerStreamState { events: number, ids: string[], outcome: 'end' | 'cut' | undefined }

export interface WorkerStream {
  status: number
  /** Starts reading (it opens paused when asked to); resolves once it has (on the worker's answer, an I/O callback here). */
  resume: () => Promise<void>
  /** What it has received so far: the count of events, their ids, how the response finished. */
  state: () => Promise<WorkerStreamState>
}

if (!isMainThread && (workerData as Partial<Start> | undefined)?.streamInWorker === true) {
  const { url, options } = workerData as Start
  const port = parentPort!
  const stream = await openStream(url, options)
  port.on('message', (message: string) => {
    if (message === 'resume') {
      stream.resume()
      port.postMessage('resumed')
    } else if (message === 'state') {
      port.postMessage({ events: stream.events.length, ids: stream.events.map(({ id }) => id), outcome: stream.outcome })
    } else if (message === 'close') {
      stream.close()
      port.close()
    }
  })
  port.postMessage({ status: stream.status })
}

/** Opens the stream at `url` on a worker thread; resolves once its response head has arrived. */
export async function streamInWorker (t: Test, url: string, options: OpenOptions = {}): Promise<WorkerStream> {
  const worker = new Worker(new URL(import.meta.url), { workerData: { streamInWorker: true, url, options } satisfies Start })
  t.teardown(async () => {
    worker.postMessage('close')
    await worker.terminate()
  })
  const [{ status }] = await once(worker, 'message') as [{ status: number }]
  return {
    status,
    resume: async () => {
      worker.postMessage('resume')
      await once(worker, 'message')
    },
    state: async () => {
      worker.postMessage('state')
      const [state] = await once(worker, 'message') as [WorkerStreamState]
      return state
    }
  }
}
