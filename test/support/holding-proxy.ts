// A loopback TCP proxy to a PostgreSQL server whose answers can be held back: while held, the
// connections stay up and what the server sends waits in the proxy, in order, until released. To
// the client it is a server that accepted the connection and answers nothing (stopped with
// SIGSTOP, or behind a network that drops the packets, or a proxy holding the bytes).
import { EventEmitter, once } from 'node:events'
import { type AddressInfo, connect, createServer, type Socket } from 'node:net'
import type { Test } from 'tap'

export interface HoldingProxy {
  /** The server's URL, through the proxy. */
  url: string
  /** Holds every answer from now on. */
  hold: () => void
  /** Holds every answer from the moment a client first sends something containing `text` (a statement). */
  holdFrom: (text: string) => void
  /** Lets what was held through, and what comes after. */
  release: () => void
  /** Resolves when a client next sends the server something (a query). */
  nextSend: () => Promise<unknown>
  /**
   * Blocks this process's event loop for `ms` right after passing on the server's next answer (or,
   * while answers are held, right after release() passes them on): the answer, given in time,
   * waits in the client's socket while the loop is busy (a process that lags, its database answering).
   */
  stallAfterNextAnswer: (ms: number) => void
  /** Sends new connections to the server at `url` from now on, and ends those made so far. */
  switchTo: (url: string) => void
}

// The loop is blocked as by a long synchronous task, but asleep: a spin would take a core from the
// test files running beside this one.
const blocked = new Int32Array(new SharedArrayBuffer(4))

/** A proxy to the server at `url`, closed with its connections when `t` ends. */
export async function holdingProxy (t: Test, url: string): Promise<HoldingProxy> {
  let target = new URL(url)
  const sends = new EventEmitter()
  const sockets = new Set<Socket>()
  let held: Array<() => void> | undefined
  let holdAt: string | undefined
  let stallMs = 0
  // An answer passed on (at once, or held and released): the stall asked for comes right after it.
  const stallIfAsked = () => {
    if (stallMs === 0) return
    const ms = stallMs
    stallMs = 0
    Atomics.wait(blocked, 0, 0, ms)
  }
  const server = createServer((client) => {
    const upstream = connect(Number(target.port), target.hostname)
    for (const socket of [client, upstream]) {
      sockets.add(socket)
      socket.on('error', () => {})
      socket.on('close', () => { client.destroy(); upstream.destroy(); sockets.delete(socket) })
    }
    client.on('data', (chunk: Buffer) => {
      if (holdAt !== undefined && chunk.includes(holdAt)) {
        holdAt = undefined
        held ??= []
      }
      upstream.write(chunk)
      sends.emit('send')
    })
    upstream.on('data', (chunk) => {
      if (held) held.push(() => client.write(chunk))
      else {
        client.write(chunk)
        stallIfAsked()
      }
    })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => {
    for (const socket of sockets) socket.destroy()
    server.close()
  })
  const proxied = new URL(url)
  proxied.port = String((server.address() as AddressInfo).port)
  return {
    url: proxied.href,
    hold: () => { held ??= [] },
    holdFrom: (text) => { holdAt = text },
    release: () => {
      const waiting = held ?? []
      held = undefined
      holdAt = undefined
      const pass = () => {
        for (const write of waiting) write()
        if (waiting.length > 0) stallIfAsked()
      }
      // With a stall, from the loop's check phase (setImmediate), as a stall in an I/O callback
      // would come: the timers then run before the sockets are read. A caller here may run within
      // a timer (a test's sleep), after which the loop reads the sockets first.
      if (stallMs > 0) setImmediate(pass)
      else pass()
    },
    nextSend: () => once(sends, 'send'),
    stallAfterNextAnswer: (ms) => { stallMs = ms },
    switchTo: (next) => {
      target = new URL(next)
      for (const socket of sockets) socket.destroy()
    }
  }
}
