// Serves the contract itself (openapi/openapi.yaml, as the JSON `npm run generate` writes) at
// GET /openapi.json, and Swagger UI at /docs (no token needed to read; "Authorize" takes a pasted
// Bearer token); GET / redirects there.
// https://github.com/fastify/fastify-swagger, https://github.com/fastify/fastify-swagger-ui
import { readFile } from 'node:fs/promises'
import fastifySwagger from '@fastify/swagger'
import fastifySwaggerUi from '@fastify/swagger-ui'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { specJsonPath } from '../src/project-root.js'

// Swagger UI's pages and files are served under this policy: everything from this origin only, no
// inline script (the UI has none), and no page may frame the docs (frame-ancestors 'none': a framed
// Authorize dialog is a clickjacking target for a pasted token). Inline styles are allowed: the UI
// injects a <style> element of its own, and a style cannot run code. Not swagger-ui's staticCSP:
// it allows framing by the same origin and upgrades requests to https, breaking plain http.
const DOCS_CSP = {
  'default-src': "'self'",
  'base-uri': "'self'",
  'connect-src': "'self'",
  'font-src': "'self' data:",
  'form-action': "'self'",
  'frame-ancestors': "'none'",
  'img-src': "'self' data:",
  'object-src': "'none'",
  'script-src': "'self'",
  'script-src-attr': "'none'",
  'style-src': "'self' 'unsafe-inline'"
}

// Encapsulated: the routes of this context, and only they, are declared public (the auth hook denies
// every other route without a token), whatever swagger-ui registers now or in a later version.
async function publicDocs (fastify: FastifyInstance) {
  fastify.addHook('onRoute', (route) => { route.config = { ...route.config, public: true } })
  // Stryker disable next-line StringLiteral: without an encoding readFile gives a Buffer, which JSON.parse reads as UTF-8 text
  const document = JSON.parse(await readFile(specJsonPath, 'utf8'))
  await fastify.register(fastifySwagger, { mode: 'static', specification: { document } })
  await fastify.register(fastifySwaggerUi, {
    routePrefix: '/docs',
    staticCSP: DOCS_CSP,
    // No validator badge: it is an image from validator.swagger.io, about the spec served here.
    uiConfig: { url: '/openapi.json', persistAuthorization: true, displayOperationId: true, validatorUrl: null }
  })
  // No `hide` on these routes: in static mode @fastify/swagger serves the document as it is and
  // never reads the routes' schemas.
  fastify.get('/openapi.json', async () => fastify.swagger())
  // Someone who opens the service's root in a browser is looking for the docs.
  fastify.get('/', async (_request, reply) => reply.redirect('/docs', 302))
}

export default fp(async function docs (fastify) {
  await fastify.register(publicDocs)
}, { name: 'docs' })
