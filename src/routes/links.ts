// RFC 8288 Link headers: the pages of a list (absolute URLs that keep limit and sort_by), the
// feed's next poll.
import type { FastifyRequest } from 'fastify'

export interface PageRequest { limit: number, page: number, sortBy: string, total: number }

// A Host header is the client's to choose: only an RFC 3986 host[:port] goes into a link (none of
// its characters can end a link's <...>) and only one a URL parser takes (WHATWG URL, as browsers
// and fetch read a link): the pattern alone lets through a bare %, brackets around no IPv6
// address and ports past 65535, which make a link no client can follow. Anything else gets
// path-only links.
const plainHost = /^(?:[A-Za-z0-9\-._~!$&'()*+,;=%]+|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?$/
const linkableHost = (host: string) => plainHost.test(host) && URL.canParse(`http://${host}/`)

// Behind a trusted proxy the scheme is the last X-Forwarded-Proto entry, as the client sent it when
// the gateway appends rather than replaces: only http and https are schemes of this service.
const webScheme = /^https?$/i

/** A path of this service, absolute when the request's scheme and host are sane. */
export function siteUrl (request: FastifyRequest, path: string): string {
  const { protocol, host } = request
  return webScheme.test(protocol) && linkableHost(host) ? `${protocol.toLowerCase()}://${host}${path}` : path
}

/**
 * The URL of the collection: the path rebuilt from the decoded ids (so nothing from the raw request
 * line is copied into the header), absolute when the scheme and the host are sane.
 */
export function collectionUrl (request: FastifyRequest, resourceId: string, clientId: string, collection = 'permissions'): string {
  return siteUrl(request, `/resources/${encodeURIComponent(resourceId)}/authorized_clients/${encodeURIComponent(clientId)}/${collection}`)
}

/**
 * first and last always; prev unless on page 0 (clamped to the last page when past the end);
 * next while a later page has items.
 */
export function pageLinks (url: string, { limit, page, sortBy, total }: PageRequest): string {
  const last = Math.max(0, Math.ceil(total / limit) - 1)
  // sort_by passed validation, so it holds only letters, dots and commas: safe in a URL as is.
  const link = (target: number, rel: string) => `<${url}?limit=${limit}&offset=${target}&sort_by=${sortBy}>; rel="${rel}"`
  const links = [link(0, 'first')]
  if (page > 0) links.push(link(Math.min(page - 1, last), 'prev'))
  if (page < last) links.push(link(page + 1, 'next'))
  links.push(link(last, 'last'))
  return links.join(', ')
}
