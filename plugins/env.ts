// Exposes the configuration, validated once at boot by src/config.ts, as `fastify.config`.
import fp from 'fastify-plugin'
import type { Config } from '../src/config.js'

declare module 'fastify' {
  interface FastifyInstance {
    config: Config
  }
}

export default fp<{ config: Config }>(async function env (fastify, { config }) {
  fastify.decorate('config', config)
}, { name: 'env' })
