// The one body parser: application/json in UTF-8 (RFC 8259 §8.1), unencoded. Fastify's own parser
// would read a body declared UTF-16 or gzip-encoded as if it were plain UTF-8, and turn invalid
// bytes into U+FFFD; this one refuses them, then hands the text to Fastify's JSON parser (which
// also refuses __proto__ and constructor poisoning).
import type { FastifyInstance } from 'fastify'
import { parse as parseContentType } from 'fast-content-type-parse'
import { headerLines } from './header-lines.js'
import { Problem, problems } from './problems.js'

// ignoreBOM: a leading byte order mark stays in the text, for Fastify's parser to skip (RFC 8259
// §8.1 lets a parser ignore one); stripped here too, a body with two passed as JSON.
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true })

/**
 * The charset a Content-Type declares, lower-cased, or undefined for none; null when its parameters
 * are not RFC 9110 §8.3's syntax (a parameter without a value, an unclosed quote). Parsed, not
 * searched: `charset=` inside another parameter's quoted value is no charset.
 */
function charsetOf (contentType: string): string | undefined | null {
  try {
    return parseContentType(contentType).parameters.charset?.toLowerCase()
  } catch {
    return null
  }
}

const notJson = () => new Problem({ status: 415, detail: 'The body must be application/json.' })

export function registerJsonBodyParser (fastify: FastifyInstance): void {
  // Stryker disable next-line StringLiteral: secure-json-parse reads an empty action as its default, 'error'
  const parseJson = fastify.getDefaultJsonParser('error', 'error')
  fastify.removeAllContentTypeParsers()
  fastify.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    // Node's parser takes any transfer codings before a final chunked, and undoes chunked alone:
    // a gzip one would be read as if there were none (RFC 9112 §6.1: refuse what is not understood).
    // The mark on a line of its own: on the comparison's, it would hide toUpperCase() for
    // toLowerCase() too, which refuses every chunked body.
    // Stryker disable next-line MethodExpression: Node's parser strips the whitespace around a header's value already
    const transfer = request.headers['transfer-encoding']?.trim()
    if (transfer !== undefined && transfer.toLowerCase() !== 'chunked') {
      return done(problems.malformedBody('The body must not be sent with a transfer coding other than chunked.'), undefined)
    }
    const coding = request.headers['content-encoding']
    if (coding && coding.toLowerCase() !== 'identity') {
      // RFC 9110 §15.5.16: a 415 for a content coding says which codings are accepted.
      return done(new Problem({ status: 415, detail: 'The body must not be content-encoded.', headers: { 'accept-encoding': 'identity' } }), undefined)
    }
    // Node keeps the first of several Content-Type lines; RFC 9110 §5.3 reads them as one list
    // ("application/json, text/plain"), which is no media type of ours.
    if (headerLines(request.raw, 'content-type').length > 1) return done(notJson(), undefined)
    // Stryker disable next-line StringLiteral: this parser runs only for a Content-Type of application/json, so the header is there
    const charset = charsetOf(request.headers['content-type'] ?? '')
    if (charset === null) {
      return done(problems.invalidRequest([{ location: 'header', pointer: '/content-type', message: 'must be a media type with parameters of the form name=value, such as application/json; charset=utf-8' }]), undefined)
    }
    if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8') {
      return done(new Problem({ status: 415, detail: 'The body must be application/json in UTF-8.' }), undefined)
    }
    let text: string
    try {
      text = utf8.decode(body as Buffer)
    } catch {
      return done(problems.malformedBody('The body is not valid UTF-8.'), undefined)
    }
    parseJson(request, text, done)
  })
}
