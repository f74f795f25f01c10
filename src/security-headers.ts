// Headers every answer carries, whichever route, error or 404 made it (OWASP REST Security cheat
// sheet, "Security headers"): X-Content-Type-Options: nosniff, so a browser never reads a JSON
// body or a problem as HTML or script; and, on an answer that brings no policy of its own (only
// Swagger UI's pages and the problem types' pages do), a Content-Security-Policy that lets it
// load, run and be framed by nothing. No X-Frame-Options: every browser Swagger UI runs in honours
// frame-ancestors, which replaces it.
import type { FastifyReply } from 'fastify'

export const NOSNIFF = { name: 'X-Content-Type-Options', value: 'nosniff' } as const
export const NOTHING_POLICY = "default-src 'none'; frame-ancestors 'none'"

/** Sets the headers on `reply`: before its route runs, so that a route with a policy of its own replaces this one. */
export function setSecurityHeaders (reply: FastifyReply): void {
  reply.header(NOSNIFF.name, NOSNIFF.value)
  reply.header('content-security-policy', NOTHING_POLICY)
}
