// The benchmark's HTTP ceiling: bare Fastify routes at the service's URLs, with the same route
// schemas (so the same fast-json-stringify serializer and body validation), answering from memory:
// no auth, no database. Run as its own process, like the service; prints its port when listening.
// (Importing it starts nothing: the bench and the ladder import its CeilingPages type.)
//   node --import tsx scripts/bench/http-ceiling.ts PAGES.json
import { readFileSync } from 'node:fs'
import Fastify from 'fastify'
import { operations } from '../../src/generated/operations.js'
import { validatorCompiler } from '../../src/validation.js'
import { isEntryPoint } from '../../src/command-line.js'

/** What the ceiling answers: the page for each query string the benchmark sends. */
export interface CeilingPages { [search: string]: { body: unknown[], total: number, link: string } }

/** Serves the pages of `pagesFile` on a free port of 127.0.0.1 until SIGTERM, and prints the port. */
async function serve (pagesFile: string): Promise<void> {
  const pages = JSON.parse(readFileSync(pagesFile, 'utf8')) as CeilingPages
  const { listClientPermissions: list, unauthorizeClientPermissions: unauthorize } = operations

  const app = Fastify({ logger: false })
  app.setValidatorCompiler(validatorCompiler)
  app.get(list.url, { schema: list.schema }, async (request, reply) => {
    const search = request.url.slice(request.url.indexOf('?'))
    const page = pages[search] ?? { body: [], total: 0, link: '' }
    reply.header('x-total-count', page.total)
    reply.header('link', page.link)
    return page.body
  })
  app.delete(unauthorize.url, { schema: unauthorize.schema }, async (_request, reply) => reply.code(204).send())
  // The rejections' ceiling: a problem+json answer of the same size, with no token to check.
  app.get('/unauthorized', async (_request, reply) => reply.code(401).header('www-authenticate', 'Bearer')
    .type('application/problem+json')
    .send({ type: '/problems/missing-credentials', title: 'Missing credentials', status: 401, detail: 'This operation needs a Bearer token in the Authorization header.' }))

  const address = await app.listen({ host: '127.0.0.1', port: 0 })
  console.log(new URL(address).port)
  process.on('SIGTERM', () => { app.close().then(() => process.exit(0)) })
}

if (isEntryPoint(import.meta.url)) await serve(process.argv[2])
