// Who made a change, as the history records it (db/queries/change.ts): read from the token the
// auth plugin verified (plugins/auth/).
import type { FastifyRequest } from 'fastify'

/**
 * Who made a request, from its verified token (RFC 9068 §2.2): `sub`, and `client_id` or else
 * `azp`. Only text of a sane length is kept, and none with a NUL, which PostgreSQL text cannot
 * hold (the change's statement would fail: a 500 for a signed token).
 */
export function actorOf (request: FastifyRequest): { sub?: string, clientId?: string } {
  const claims = (request.user ?? {}) as Record<string, unknown>
  const text = (value: unknown) => typeof value === 'string' && value.length > 0 && value.length <= 1024 && !value.includes('\u0000') ? value : undefined
  const sub = text(claims.sub)
  const clientId = text(claims.client_id) ?? text(claims.azp)
  return { ...(sub ? { sub } : {}), ...(clientId ? { clientId } : {}) }
}
