// The operations on /resources/{resource_id}/authorized_clients/{client_id}/permissions.
import type { FastifyInstance } from 'fastify'
import grant from './grant.js'
import listPermissions from './list.js'
import unauthorize from './unauthorize.js'

export default async function permissionRoutes (fastify: FastifyInstance) {
  await fastify.register(listPermissions)
  await fastify.register(unauthorize)
  await fastify.register(grant)
}
