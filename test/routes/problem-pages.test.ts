// GET /problems/{name}: a problem's `type` opens a page on it, from the catalogue of src/problems.ts,
// as HTML by default and JSON when asked; no token, never shed. The harness checks every answer
// against the spec (text/html and application/json alike).
import { createHash } from 'node:crypto'
import t from 'tap'
import { problemTypes } from '../../src/problems.js'
import { ordersFixture, ordersPath } from '../support/fixtures.js'
import { build } from '../support/harness.js'
import { readToken } from '../support/tokens.js'

const harness = await build(t)
await harness.seed(ordersFixture())
const entries = Object.entries(problemTypes)

// HTML's void elements: the only ones that are not closed.
const VOID = new Set(['meta', 'br', 'hr', 'img', 'link', 'input'])

/** The text of the paragraph after the page's heading `h2`, its <code> as backticks again and its characters unescaped. */
function paragraphAfter (html: string, h2: string): string | undefined {
  const paragraph = new RegExp(`<h2>${h2}</h2>\n<p>(.*)</p>`).exec(html)?.[1]
  return paragraph?.replace(/<\/?code>/g, '`').replace(/&#(\d+);/g, (_, code: string) => String.fromCharCode(Number(code)))
}

/** What is wrong with the page's markup, if anything: every element closed, in order. */
function markupErrors (html: string): string[] {
  const errors: string[] = []
  const open: string[] = []
  for (const [, closing, name] of html.matchAll(/<(\/?)([a-zA-Z][a-zA-Z0-9]*)[^>]*>/g)) {
    const element = name.toLowerCase()
    if (VOID.has(element)) continue
    if (!closing) open.push(element)
    else if (open.pop() !== element) errors.push(`</${element}> closes nothing open`)
  }
  if (open.length > 0) errors.push(`left open: ${open.join(', ')}`)
  return errors
}

t.test('every type of the catalogue opens, without a token: 200, a small self-contained HTML page with its title, status, when and what to do', async (t) => {
  t.ok(entries.length >= 16)
  for (const [name, { title, status, when, whatToDo }] of entries) {
    const res = await harness.request(`/problems/${name}`)
    t.equal(res.status, 200, name)
    t.equal(res.headers.get('content-type'), 'text/html; charset=utf-8', name)
    t.equal(res.headers.get('vary'), 'Accept', name)
    t.equal(res.headers.get('cache-control'), 'public, max-age=3600', `${name}: cached for an hour, by anyone`)
    const html = res.text
    t.match(html, /^<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">/, `${name}: doctype, language and charset first`)
    t.same(markupErrors(html), [], `${name}: well-formed`)
    t.equal(html.match(/<title>/g)?.length, 1, `${name}: one title`)
    t.match(html, `<title>${title} (${status}) - Client Permissions Service</title>`, `${name}: the title names the problem and the service`)
    t.match(html, `<h1>${title}</h1>`, name)
    t.match(html, new RegExp(`HTTP ${status} [A-Z]`), name)
    t.match(html, `<code>/problems/${name}</code>`, name)
    // The catalogue's texts, the first as a sentence: capitalised, with its full stop.
    t.equal(paragraphAfter(html, 'When it happens'), `${when[0].toUpperCase()}${when.slice(1)}.`, `${name}: when it happens`)
    t.equal(paragraphAfter(html, 'What to do'), whatToDo, `${name}: what to do`)
    // Nothing to fetch and nothing to run: no script, no external style, image or font, no URL with a host.
    t.notMatch(html, /<script|<link|<img|<iframe|src=|url\(|@import|\/\/[a-z]/i, `${name}: self-contained`)
    t.ok(Buffer.byteLength(html) < 8 * 1024, `${name}: small (${Buffer.byteLength(html)} bytes)`)
  }
})

t.test('the page\'s policy lets its own style apply and nothing else: the style\'s hash, no default source, no framing', async (t) => {
  const res = await harness.request('/problems/overloaded')
  const policy = res.headers.get('content-security-policy') ?? ''
  const style = /<style>([^<]*)<\/style>/.exec(res.text)![1]
  // A readable column of text, and code set apart from it.
  t.match(style, /(^|\})body\{[^}]*max-width:[^}]+\}/)
  t.match(style, /(^|\})code\{[^}]*monospace[^}]*\}/)
  t.match(policy, `style-src 'sha256-${createHash('sha256').update(style).digest('base64')}'`)
  t.match(policy, /(^|; )default-src 'none'(;|$)/)
  t.match(policy, /(^|; )frame-ancestors 'none'(;|$)/)
  t.equal(res.headers.get('x-content-type-options'), 'nosniff')
})

t.test('everything from the catalogue is escaped; only its backticks become <code>', async (t) => {
  // "Authorization: Bearer <token>" and "operation's": markup characters in a text.
  const res = await harness.request('/problems/missing-credentials')
  t.match(res.text, '<code>Authorization: Bearer &#60;token&#62;</code>')
  t.match(res.text, 'operation&#39;s scope')
  t.notMatch(res.text, '<token>')
  t.notMatch(res.text, /`/, 'no backtick left')
})

t.test('with Accept: application/json → the catalogue entry as JSON; an Accept that prefers HTML or names neither → the page', async (t) => {
  for (const [name, { title, status, when, whatToDo }] of entries) {
    const res = await harness.request(`/problems/${name}`, { headers: { accept: 'application/json' } })
    t.equal(res.status, 200, name)
    t.equal(res.headers.get('content-type'), 'application/json; charset=utf-8', name)
    t.equal(res.headers.get('vary'), 'Accept', name)
    t.same(res.body, { type: `/problems/${name}`, title, status, when, what_to_do: whatToDo }, name)
  }
  const cases: Array<[string, string]> = [
    ['text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8', 'text/html'],
    ['*/*', 'text/html'],
    ['image/png', 'text/html'],
    ['application/json;q=0.5, text/html', 'text/html'],
    ['text/html;q=0.1, application/json', 'application/json'],
    ['application/*', 'application/json'],
    // A range with parameters matches only a type that has them (RFC 9110 §12.5.1): both are sent
    // with charset=utf-8, so these name them; another charset names neither.
    ['application/json; charset=utf-8', 'application/json'],
    ['text/html; charset=utf-8;q=0.5, application/json; charset=utf-8', 'application/json'],
    ['application/json; charset=utf-8;q=0.5, text/html; charset=utf-8', 'text/html'],
    ['application/json; charset=iso-8859-1', 'text/html']
  ]
  for (const [accept, expected] of cases) {
    const res = await harness.request('/problems/invalid-token', { headers: { accept } })
    t.equal(res.headers.get('content-type')?.split(';')[0], expected, accept)
  }
})

t.test('the type of a problem the API answers opens its page, with the same title and status', async (t) => {
  const answers = [
    await harness.request(ordersPath('app-a', 'missing-api'), { token: readToken() }),
    await harness.request(ordersPath()),
    await harness.request(`${ordersPath()}?limit=0`, { token: readToken() })
  ]
  for (const answer of answers) {
    const { type, title, status } = answer.body as { type: string, title: string, status: number }
    const page = await harness.request(type, { headers: { accept: 'application/json' } })
    t.equal(page.status, 200, type)
    t.match(page.body, { type, title, status }, type)
  }
})

t.test('a name no type has → 404 problem; a name not of the form → 400 naming /name; both without a token', async (t) => {
  for (const name of ['resource-missing', 'constructor', 'to-string', 'hasownproperty']) {
    const res = await harness.request(`/problems/${name}`)
    t.equal(res.status, 404, name)
    t.same(res.body, { type: 'about:blank', title: 'Not Found', status: 404, detail: `There is no problem type named "${name}".`, request_id: res.headers.get('x-request-id') }, name)
  }
  for (const name of ['Resource-Not-Found', '__proto__', 'resource_not_found', 'a--b', '-a', 'x'.repeat(65), '%3Cscript%3E']) {
    const res = await harness.request(`/problems/${name}`)
    t.equal(res.status, 400, name)
    t.match(res.body, { type: '/problems/invalid-request', errors: [{ location: 'path', pointer: '/name' }] }, name)
  }
})

t.test('HEAD answers as GET, without the body; other methods → 405 with Allow', async (t) => {
  const get = await harness.request('/problems/changes-pruned')
  const head = await harness.request('/problems/changes-pruned', { method: 'HEAD' })
  t.equal(head.status, 200)
  t.equal(head.text, '')
  for (const name of ['content-type', 'content-length', 'vary', 'cache-control', 'content-security-policy']) {
    t.equal(head.headers.get(name), get.headers.get(name), name)
  }
  const headJson = await harness.request('/problems/changes-pruned', { method: 'HEAD', headers: { accept: 'application/json' } })
  t.equal(headJson.headers.get('content-type'), 'application/json; charset=utf-8')
  t.equal((await harness.request('/problems/missing', { method: 'HEAD' })).status, 404)
  const post = await harness.request('/problems/changes-pruned', { method: 'POST' })
  t.equal(post.status, 405)
  t.equal(post.headers.get('allow'), 'GET, HEAD')
})

t.test('a token is not needed, and a bad one is not looked at', async (t) => {
  const res = await harness.request('/problems/invalid-token', { headers: { authorization: 'Bearer not-a-jwt' } })
  t.equal(res.status, 200)
})

t.test('never shed: while the API answers 503 overloaded, its page answers 200', async (t) => {
  // A blocked loop, as by a long synchronous task, but asleep (a spin would take a core from the
  // test files running beside this one); the sample after it sheds the requests that follow.
  const blocked = new Int32Array(new SharedArrayBuffer(4))
  const shedding = await build(t, { MAX_EVENT_LOOP_DELAY_MS: '100', EVENT_LOOP_SAMPLE_INTERVAL_MS: '1000' })
  let answers
  for (let attempt = 0; attempt < 5 && answers?.[0].status !== 503; attempt++) {
    Atomics.wait(blocked, 0, 0, 1200)
    answers = await Promise.all([
      shedding.request(ordersPath(), { token: readToken() }),
      shedding.request('/problems/overloaded')
    ])
  }
  t.equal(answers![0].status, 503, 'the API is shed')
  t.match(answers![0].body, { type: '/problems/overloaded' })
  t.equal(answers![1].status, 200, 'the page of that very problem is not')
})
