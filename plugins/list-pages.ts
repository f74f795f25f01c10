// The list's page cache (`fastify.listPages`, src/page-cache.ts), one per instance, sized by
// LIST_PAGE_CACHE_BYTES; undefined when it is 0. A plugin of its own so that the route serves from
// it and plugins/metrics.ts counts it.
import fp from 'fastify-plugin'
import { PageCache } from '../src/page-cache.js'

declare module 'fastify' {
  interface FastifyInstance {
    readonly listPages: PageCache | undefined
  }
}

export default fp(async function listPages (fastify) {
  const { LIST_PAGE_CACHE_BYTES: bytes } = fastify.config
  fastify.decorate('listPages', bytes > 0 ? new PageCache(bytes) : undefined)
}, { name: 'list-pages', dependencies: ['env'] })
