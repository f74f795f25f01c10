// The identity provider's JSON Web Key Set (JWKS_URL): keys cached, chosen by the token's kid and
// alg (jose's local key set). Only JWKS_URL is ever fetched: jku, x5u and jwk headers are never
// followed. A set older than its max age still verifies at once while it is fetched again in the
// background; when the provider cannot be reached, the keys it published last keep verifying, up
// to STALE_KEYS_FACTOR times the max age; failed fetches are not retried more than once per
// cooldown, and each is logged with its reason.
import { KeyObject } from 'node:crypto'
import type { createLocalJWKSet, JSONWebKeySet, JWSHeaderParameters } from 'jose'
import { deadline } from '../../db/after-io.js'

export interface KeySetOptions {
  /**
   * How long fetched keys are fresh: the first token after it is verified with them still, while
   * the set is fetched again; STALE_KEYS_FACTOR times it, they are no longer trusted.
   */
  cacheMaxAgeMs: number
  /**
   * A kid the cache does not know triggers a refetch at most once per cooldown, so a newly published
   * key is accepted within it and made-up kids cannot hammer the provider; failed fetches likewise.
   */
  cooldownMs: number
  fetchTimeoutMs: number
}

/** Where a failed fetch is reported: the service's logger (pino) fits. */
export interface KeySetLog {
  warn: (details: Record<string, unknown>, message: string) => void
}

/** RS256 needs 2048 bits or more (RFC 7518 §3.3). */
export const MIN_RSA_BITS = 2048

/**
 * Keys fetched this many times the cache's max age ago (an hour by default) are no longer trusted,
 * whether or not the provider can be reached: past it, tokens wait for a fetch as if none had been
 * made, and get 503 keys-unavailable when it fails. Long enough to ride out an outage of the
 * provider (tokens are rarely issued for longer, and it issues none while down).
 */
export const STALE_KEYS_FACTOR = 6

/** The provider could not be reached and no key set is held (none fetched yet, or the last past its bound): not the token's fault. */
export class KeySetUnavailable extends Error {}

/**
 * The most of a key set read: real ones are a few KiB (a dozen keys with their certificates), and
 * jose would read any response whole, a gzip bomb inflated, for as long as the fetch's timeout.
 */
export const MAX_KEY_SET_BYTES = 1024 * 1024

/** The response's body as text, refused once it is longer than MAX_KEY_SET_BYTES (decoded). */
async function boundedText (response: Response, Refusal: new (message: string) => Error): Promise<string> {
  const tooLarge = () => new Refusal(`The JSON Web Key Set HTTP response is larger than ${MAX_KEY_SET_BYTES} bytes`)
  // A 200 answer to a GET always has a body, empty or not (fetch has none for 204, 205 and 304).
  const body = response.body!
  if (Number(response.headers.get('content-length')) > MAX_KEY_SET_BYTES) {
    await body.cancel()
    throw tooLarge()
  }
  const chunks: Uint8Array[] = []
  let length = 0
  const reader = body.getReader()
  for (;;) {
    const { done, value } = await reader.read()
    if (done) return Buffer.concat(chunks).toString('utf8')
    length += value.byteLength
    if (length > MAX_KEY_SET_BYTES) {
      // Ends the connection: the rest is neither read nor waited for.
      await reader.cancel()
      throw tooLarge()
    }
    chunks.push(value)
  }
}

/** A fetched key set's shape, as jose's createLocalJWKSet requires it: an object whose keys are objects. */
function isKeySet (value: unknown): boolean {
  const isObject = (item: unknown) => typeof item === 'object' && item !== null && !Array.isArray(item)
  return isObject(value) && Array.isArray((value as { keys?: unknown }).keys) && (value as { keys: unknown[] }).keys.every(isObject)
}

/**
 * Why a fetch failed, for a log line: the messages down the error's causes (fetch says only "fetch
 * failed"; its cause names the address and the reason) and the first code among them.
 */
export function fetchFailureOf (error: unknown): { reason: string, code?: string } {
  const messages: string[] = []
  let code: string | undefined
  let cause = error
  // fetch and jose nest two deep; a cause chain is data, and may loop.
  for (let level = 0; level < 3 && cause instanceof Object; level++) {
    const { message, code: causeCode, cause: next } = cause as { message?: unknown, code?: unknown, cause?: unknown }
    if (typeof message === 'string' && message !== '') messages.push(message)
    if (typeof causeCode === 'string') code ??= causeCode
    cause = next
  }
  // pino leaves an undefined code out of the line.
  return { reason: messages.join(': ') || String(error), code }
}

/**
 * Whether the key set may be fetched at `now` (ms): a cooldown has passed since `since` (the last
 * failed fetch; for an unknown kid, the last fetch too), to the millisecond.
 */
export function mayFetch (now: number, since: number, cooldownMs: number): boolean {
  return now - since >= cooldownMs
}

/** Resolves a token header's kid and alg to the PEM of the provider's matching public key. */
export function keySetResolver (url: string, { cacheMaxAgeMs, cooldownMs, fetchTimeoutMs }: KeySetOptions, log: KeySetLog) {
  // jose is loaded here, where a key set is configured, not by every start of the service (about
  // 50 ms of CPU), and before the first token needs it. Only its local key set is used: its remote
  // one awaits the refetch of a set that aged out before answering, so a provider that hangs would
  // hold every request for the fetch's timeout, again once per cooldown.
  const jose = import('jose')

  /** The set fetched last, and when (ms): one set for every request, so each key is imported once. */
  let held: { keys: ReturnType<typeof createLocalJWKSet>, fetchedAt: number } | undefined
  let fetching: Promise<typeof held> | undefined
  let failedAt = -Infinity

  // The response is checked here, with jose's messages, so that anything thrown while fetching is
  // the provider's fault, and anything thrown by the set the token's or its key's (a published key
  // that cannot be imported, a private one, a point off its curve): only the former may hold off
  // fetches for a cooldown, else a token naming such a key, sent once a cooldown, would keep a
  // withdrawn key verifying for good.
  async function fetchKeySet (): Promise<JSONWebKeySet> {
    const { errors: { JOSEError, JWKSTimeout } } = await jose
    try {
      // As jose's remote set fetches: a redirect is not followed (a 3xx is not 200); the timeout
      // covers the body too, and decides once what has arrived is read (deadline): past a stall
      // of the event loop, a key set sent in time would be taken for none.
      const response = await fetch(url, { signal: deadline(fetchTimeoutMs), redirect: 'manual', headers: { accept: 'application/json, application/jwk-set+json' } })
      if (response.status !== 200) {
        await response.body?.cancel()
        throw new JOSEError(`Expected 200 OK from the JSON Web Key Set HTTP response, got ${response.status}`)
      }
      const body = await boundedText(response, JOSEError)
      let json: unknown
      try {
        json = JSON.parse(body)
      } catch (cause) {
        throw new JOSEError('Failed to parse the JSON Web Key Set HTTP response as JSON', { cause })
      }
      if (!isKeySet(json)) throw new JOSEError('The JSON Web Key Set HTTP response is not a key set ({"keys": [...]})')
      return json as JSONWebKeySet
    } catch (error) {
      throw (error as { name?: unknown }).name === 'TimeoutError' ? new JWKSTimeout(undefined, { cause: error }) : error
    }
  }

  /**
   * Fetches the set, one fetch at a time (callers share it); resolves with the set then held, the
   * new one or, when the fetch failed (logged, one line a fetch), the last one.
   */
  function refetch (): Promise<typeof held> {
    fetching ??= fetchAndHold().finally(() => { fetching = undefined })
    return fetching
  }

  async function fetchAndHold (): Promise<typeof held> {
    try {
      const keys = (await jose).createLocalJWKSet(await fetchKeySet())
      held = { keys, fetchedAt: Date.now() }
    } catch (error) {
      failedAt = Date.now()
      // Only the URL and why: no token ever reaches a fetch.
      log.warn({ url, ...fetchFailureOf(error) }, 'the key set could not be fetched')
    }
    return held
  }

  async function select (header: JWSHeaderParameters) {
    const { errors: { JWKSNoMatchingKey } } = await jose
    const now = Date.now()
    // Keys are not trusted for ever while the provider cannot be reached: one it withdrew (leaked,
    // say) must stop verifying even if its fetches are made to fail or hang.
    // Stryker disable next-line EqualityOperator: differs only in the bound's own millisecond
    if (held && now - held.fetchedAt >= STALE_KEYS_FACTOR * cacheMaxAgeMs) held = undefined
    // Stryker disable next-line StringLiteral: never shown; the auth plugin answers keys-unavailable for the class
    const unavailable = () => new KeySetUnavailable(`the key set at ${url} cannot be fetched`)
    if (!held) {
      // Nothing to verify with: the request waits for a fetch, bounded by its timeout, or answers
      // at once within a failed fetch's cooldown.
      if (!fetching && !mayFetch(now, failedAt, cooldownMs)) throw unavailable()
      const fetched = await refetch()
      if (!fetched) throw unavailable()
      return await fetched.keys(header)
    }
    // Aged out: fetched again in the background, and the held keys answer meanwhile (stale while
    // revalidate); a provider that hangs delays no request that names a key it published. Not
    // awaited: refetch() never rejects (a failure is logged).
    // Stryker disable next-line EqualityOperator: differs only in the max age's own millisecond (the refetch starts a request later)
    if (now - held.fetchedAt >= cacheMaxAgeMs && mayFetch(now, failedAt, cooldownMs)) refetch()
    try {
      return await held.keys(header)
    } catch (error) {
      // Only a kid the set lacks may be a key published since: the request waits for a fetch (the
      // one under way, or one at most once per cooldown, so made-up kids cannot hammer the
      // provider). Several keys for the kid, an alg no set holds, a key that cannot be imported:
      // the token's fault, or its key's.
      if (!(error instanceof JWKSNoMatchingKey)) throw error
      if (!fetching && !(mayFetch(now, held.fetchedAt, cooldownMs) && mayFetch(now, failedAt, cooldownMs))) throw error
      const fetched = await refetch()
      // Stryker disable next-line ConditionalExpression: only when the set aged past its bound during the fetch
      if (!fetched) throw unavailable()
      return await fetched.keys(header)
    }
  }

  const pems = new WeakMap<object, string>()
  return async function publicKeyOf (header: { alg?: string, kid?: string }): Promise<string> {
    // Only the fields key selection needs: nothing else of an attacker's header reaches jose.
    const key = await select({ alg: header.alg, kid: header.kid } as JWSHeaderParameters)
    let pem = pems.get(key)
    // Stryker disable next-line ConditionalExpression: a cache; exporting again gives the same PEM
    if (!pem) {
      const keyObject = KeyObject.from(key as CryptoKey)
      // RFC 7518 §3.3, as for JWT_PUBLIC_KEY: jose selects a smaller RSA key without a word (it
      // checks the size only in a verify of its own, which this service does not use).
      // Stryker disable next-line OptionalChaining: Node describes every asymmetric key it loads (jose hands out only those)
      const bits = keyObject.asymmetricKeyDetails?.modulusLength
      if (keyObject.asymmetricKeyType === 'rsa' && (bits ?? 0) < MIN_RSA_BITS) {
        // Stryker disable next-line StringLiteral: never shown; the auth plugin answers invalid-token for any error of the key's
        throw new Error(`the key set's key ${String(header.kid)} is an RSA key of ${bits} bits`)
      }
      pem = keyObject.export({ type: 'spki', format: 'pem' }) as string
      pems.set(key, pem)
    }
    return pem
  }
}
