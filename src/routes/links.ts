// RFC 8288 Link headers: the pages of a list (absolute URLs that keep limit and sort_by), the
// feed's next poll.
import type { FastifyRequest } from 'fastify'

export interface PageRequest { limit: number, page: number, sortBy: string, total: number }

// A Host header is the client's to choose: only a plain host[:port] goes into a link, a name of
// letters, digits, - and _ in dot-separated labels (a trailing dot allowed), or a bracketed IPv6
// address. RFC 3986 lets a host hold more (sub-delims such as , and ;, percent-encoding), but a
// comma or semicolon inside <...> breaks a Link header for a reader that splits on them, and a
// percent-encoded name is another name once decoded. It must also be one a URL parser takes
// (WHATWG URL, as browsers and fetch read a link): the pattern alone lets through brackets around
// no IPv6 address, IPv4 parts past 255 and ports past 65535. Anything else gets path-only links.
const plainHost = /^(?:[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*\.?|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?$/
// A DNS name has at most 255 octets (RFC 1035 §2.3.4), so a longer Host names nothing a link
// could reach; without the bound a client's 100 KB Host would be copied into every Link URL.
const MAX_NAME_LENGTH = 255
function nameFits (host: string): boolean {
  // Stryker disable next-line ConditionalExpression,EqualityOperator: a shortcut; the line below answers the same
  if (host.length <= MAX_NAME_LENGTH) return true
  // Stryker disable next-line Regex: only a port ends a plain host in digits after a colon (an IPv6 address is far shorter)
  return host.replace(/:\d+$/, '').length <= MAX_NAME_LENGTH
}
const linkableHost = (host: string) => plainHost.test(host) && nameFits(host) && URL.canParse(`http://${host}/`)

// Behind a trusted proxy the scheme is the last X-Forwarded-Proto entry, as the client sent it when
// the gateway appends rather than replaces: only http and https are schemes of this service.
const webScheme = /^https?$/i

// An absolute-form request target (RFC 9112 §3.2.2): its authority, not the Host header, names the
// host. The router takes such a target only when a URL parser reads it (else 400).
// Stryker disable next-line Regex: without ^, a target holding http:// further on would match, but the routes that send links refuse every such target (400)
const absoluteForm = /^https?:\/\/([^/?#]*)/i

/**
 * The host the request was sent to: a trusted proxy's X-Forwarded-Host (Fastify's request.host
 * then), else the authority of an absolute-form target, else the Host header.
 */
function hostOf (request: FastifyRequest): string {
  const { host } = request
  const forwarded = host !== (request.headers.host ?? '')
  // Stryker disable next-line StringLiteral: a request's url is always set by Node's parser
  const target = forwarded ? null : absoluteForm.exec(request.raw.url ?? '')
  return target ? target[1] : host
}

/** A path of this service, absolute when the request's scheme and host are sane. */
export function siteUrl (request: FastifyRequest, path: string): string {
  const { protocol } = request
  const host = hostOf(request)
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
  // sort_by passed validation, so it holds only letters, dots and commas. Its commas are
  // percent-encoded (%2C, which the service decodes back to the same order): a comma inside <...>
  // breaks the header for a reader that splits on commas, as a Host's would (linkableHost).
  const order = sortBy.replaceAll(',', '%2C')
  const link = (target: number, rel: string) => `<${url}?limit=${limit}&offset=${target}&sort_by=${order}>; rel="${rel}"`
  const links = [link(0, 'first')]
  if (page > 0) links.push(link(Math.min(page - 1, last), 'prev'))
  if (page < last) links.push(link(page + 1, 'next'))
  links.push(link(last, 'last'))
  return links.join(', ')
}
