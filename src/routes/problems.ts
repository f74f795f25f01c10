// GET /problems/{name}: every problem's `type` can be opened, and answers what the type means and
// what to do about it, from the catalogue in src/problems.ts. An HTML page by default (a `type`
// followed in a browser), JSON when the client asks for it. Public and never shed, like the probes:
// it is how a caller refused under load finds out why.
import { createHash } from 'node:crypto'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import Negotiator from 'negotiator'
import type { components } from '../generated/openapi.js'
import { operations } from '../generated/operations.js'
import { type ProblemType, problemTypeOf, problems, statusPhrase } from '../problems.js'

const { url, schema, config } = operations.getProblemType
type ProblemTypeBody = components['schemas']['ProblemType']

// Offered as they are sent, with their charset: a media range with parameters matches only a type
// that has them (RFC 9110 §12.5.1), so `application/json; charset=utf-8` asks for the JSON.
const HTML = 'text/html; charset=utf-8'
const JSON_TYPE = 'application/json; charset=utf-8'
// Listed first, so HTML is the answer to no Accept, to */* and to any type offered by neither.
const mediaTypes = [HTML, JSON_TYPE]

const escapeHtml = (text: string) => text.replace(/[&<>"']/g, (character) => `&#${character.charCodeAt(0)};`)
// The catalogue's texts are CommonMark with names in backticks: escaped first, then the backticks
// become <code>, so nothing in a text can make markup of its own.
const inlineHtml = (text: string) => escapeHtml(text).replace(/`([^`]+)`/g, '<code>$1</code>')

const STYLE = 'body{font:16px/1.5 system-ui,sans-serif;max-width:42rem;margin:2rem auto;padding:0 1rem;color:#1a1a1a}' +
  'code{font:.9em ui-monospace,monospace;background:#f2f2f2;padding:0 .2em}h1{margin-bottom:0}.status{color:#555;margin-top:.25rem}'
// The page loads nothing and runs nothing: its one inline style is allowed by its hash.
const CONTENT_SECURITY_POLICY = "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; " +
  `style-src 'sha256-${createHash('sha256').update(STYLE).digest('base64')}'`

function page (type: string, { title, status, when, whatToDo }: ProblemType): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(`${title} (${status}) - Client Permissions Service`)}</title>
<style>${STYLE}</style>
</head>
<body>
<main>
<p><code>${escapeHtml(type)}</code></p>
<h1>${escapeHtml(title)}</h1>
<p class="status">HTTP ${status} ${escapeHtml(statusPhrase(status))}</p>
<h2>When it happens</h2>
<p>${inlineHtml(when[0].toUpperCase() + when.slice(1))}.</p>
<h2>What to do</h2>
<p>${inlineHtml(whatToDo)}</p>
<p>The problem's <code>detail</code> says what went wrong with the request itself. The API is described at <a href="/docs">/docs</a>.</p>
</main>
</body>
</html>
`
}

const wantsJson = (request: FastifyRequest) => new Negotiator(request).mediaType(mediaTypes) === JSON_TYPE

export default async function problemPages (fastify: FastifyInstance) {
  fastify.get<{ Params: { name: string } }>(url, { schema, config: { ...config, pressureExempt: true } }, async (request, reply) => {
    const { name } = request.params
    const problemType = problemTypeOf(name)
    if (!problemType) throw problems.problemTypeNotFound(name)
    const type = `/problems/${name}`
    reply.header('vary', 'Accept').header('cache-control', 'public, max-age=3600')
    if (wantsJson(request)) {
      const { title, status, when, whatToDo } = problemType
      const body: ProblemTypeBody = { type, title, status, when, what_to_do: whatToDo }
      // An object: Fastify sends it as application/json; charset=utf-8.
      return reply.send(body)
    }
    // Its own policy, kept by the one every other answer gets (src/security-headers.ts, with nosniff).
    return reply.type(HTML).header('content-security-policy', CONTENT_SECURITY_POLICY)
      .send(page(type, problemType))
  })
}
