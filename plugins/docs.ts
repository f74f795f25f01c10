// Serves the contract itself (openapi/openapi.yaml, as the JSON `npm run generate` writes) at
// GET /openapi.json (and at /docs/json and /docs/yaml, where Swagger UI reads it), and Swagger UI at
// /docs (no token needed to read; "Authorize" takes a pasted Bearer token); GET / redirects there.
// https://github.com/fastify/fastify-swagger, https://github.com/fastify/fastify-swagger-ui
import { createHash } from 'node:crypto'
import { readFile } from 'node:fs/promises'
import fastifySwagger from '@fastify/swagger'
import fastifySwaggerUi from '@fastify/swagger-ui'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { noneMatchNames } from '../src/entity-tags.js'
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

// Swagger UI's options that @fastify/swagger-ui's types do not list (queryConfigEnabled) pass
// through to the UI as they are: a constant, not an object literal the types would refuse.
const UI_CONFIG = { persistAuthorization: true, displayOperationId: true, validatorUrl: null, queryConfigEnabled: false }

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
    // No document or configuration named in the page's URL (?url=, ?configUrl=; off by default since
    // Swagger UI 4.1.3, said here so no upgrade turns it on): a link to the docs could show another
    // API, whose Authorize would collect pasted tokens. The UI reads the document from /docs/json
    // (the plugin's route, the same document as /openapi.json): a url here would be overridden.
    uiConfig: UI_CONFIG,
    // The page without its query: the initializer makes the document's URL by appending "/./json"
    // to the page's whole URL, so /docs/?x=1 read /docs/?x=1/./json (the page itself) and showed no
    // API. Swagger UI keeps its state in the fragment, which a redirect keeps. So is the page's
    // other name, /docs/static/index.html, which @fastify/swagger-ui redirects to /docs/ only
    // without a query: with one, it redirected to itself, a loop.
    uiHooks: {
      onRequest: async (request, reply) => {
        const query = request.url.indexOf('?')
        if (query !== -1 && (request.routeOptions.url === '/docs' ||
          // Stryker disable next-line ConditionalExpression,EqualityOperator,StringLiteral: equivalent under Fastify 5, which gives both routes of the prefix's '/' (/docs and /docs/) the url '/docs' (one options object for the two): kept for a version that tells them apart, which test/plugins/docs.test.ts's /docs/?url= would show
          request.routeOptions.url === '/docs/' ||
          request.routeOptions.url === '/docs/static/index.html')) {
          // The path alone, as the client spelled it (with or without its slash), never a host: a
          // request line in absolute form (http://host/docs?x, as to a proxy) names one.
          return reply.redirect(request.url.slice(0, query).endsWith('/docs') ? '/docs' : '/docs/', 302)
        }
      }
    }
  })
  // No `hide` on these routes: in static mode @fastify/swagger serves the document as it is and
  // never reads the routes' schemas.
  // The document is the same for the process's life: written once, sent with a strong ETag, and a
  // client that holds it (If-None-Match, weak comparison) gets 304 instead of its ~60 KB again.
  const documentText = JSON.stringify(fastify.swagger())
  const documentHash = createHash('sha256').update(documentText).digest('base64url')
  fastify.get('/openapi.json', async (request, reply) => {
    reply.header('etag', `"${documentHash}"`).header('cache-control', 'no-cache')
    if (noneMatchNames(request.headers['if-none-match'], documentHash)) return reply.code(304).send()
    return reply.type('application/json; charset=utf-8').send(documentText)
  })
  // Someone who opens the service's root in a browser is looking for the docs.
  fastify.get('/', async (_request, reply) => reply.redirect('/docs', 302))
}

export default fp(async function docs (fastify) {
  await fastify.register(publicDocs)
}, { name: 'docs' })
