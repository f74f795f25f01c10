// The operations on a client's permissions on a resource: list, unauthorize, grant, and their history.
import type { FastifyInstance } from 'fastify'
import permissionChanges from './changes.js'
import grant from './grant.js'
import listPermissions from './list.js'
import unauthorize from './unauthorize.js'

export default async function permissionRoutes (fastify: FastifyInstance) {
  await fastify.register(listPermissions)
  await fastify.register(unauthorize)
  await fastify.register(grant)
  await fastify.register(permissionChanges)
}
