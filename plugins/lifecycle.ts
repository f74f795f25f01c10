// The shutdown sequence's first step: draining. From the moment it starts (a signal, or Fastify's
// close) readiness fails so the gateway stops sending traffic, while requests are still served.
import type { Socket } from 'node:net'
import fp from 'fastify-plugin'

declare module 'fastify' {
  interface FastifyInstance {
    /** True once the service has begun shutting down. */
    readonly draining: boolean
    /** Marks the service as draining: /readyz answers 503 from now on. */
    startDraining: () => void
  }
}

export default fp(async function lifecycle (fastify) {
  let draining = false
  fastify.decorate('draining', { getter: () => draining })
  fastify.decorate('startDraining', () => { draining = true })

  // Connections that have sent nothing yet are ended with the listener. server.close() closes the
  // idle ones, but Node counts a connection waiting for its first request as busy: one a client
  // opened and never used (a browser's or undici's spare connection, a TCP check) held the close
  // until SHUTDOWN_TIMEOUT_MS, and the process exited 1. Nothing was sent on it, so nothing is lost.
  const connections = new Set<Socket>()
  fastify.server.on('connection', (socket: Socket) => {
    connections.add(socket)
    socket.once('close', () => connections.delete(socket))
  })
  fastify.addHook('preClose', async () => {
    draining = true
    for (const socket of connections) {
      if (socket.bytesRead === 0) socket.destroy()
    }
  })
}, { name: 'lifecycle' })
