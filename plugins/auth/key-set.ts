// The identity provider's JSON Web Key Set (JWKS_URL), through jose's remote key set: keys cached,
// chosen by the token's kid and alg. Only JWKS_URL is ever fetched: jku, x5u and jwk headers are
// never followed. When the provider cannot be reached, the keys it published last keep verifying,
// failed fetches are not retried more than once per cooldown, and each is logged with its reason.
import { KeyObject } from 'node:crypto'
import type { JWSHeaderParameters } from 'jose'

export interface KeySetOptions {
  /** How long fetched keys are trusted before the set is fetched again. */
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

/** The provider could not be reached and no key set was ever fetched: not the token's fault. */
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

/** Whether the key set may be fetched at `now` (ms): a cooldown has passed since the last failed fetch, to the millisecond. */
export function mayFetch (now: number, failedAt: number, cooldownMs: number): boolean {
  return now - failedAt >= cooldownMs
}

/** Resolves a token header's kid and alg to the PEM of the provider's matching public key. */
export function keySetResolver (url: string, { cacheMaxAgeMs, cooldownMs, fetchTimeoutMs }: KeySetOptions, log: KeySetLog) {
  // jose is loaded here, where a key set is configured, not by every start of the service (about
  // 50 ms of CPU), and before the first token needs it.
  const jose = import('jose').then(({ createLocalJWKSet, createRemoteJWKSet, customFetch, errors: { JOSEError } }) => {
    // What went wrong with a fetch, as against with the key a token names (a published key that
    // cannot be imported, a private one, a point off its curve): only the former may fall back on
    // the last set and hold off fetches for a cooldown, else a token naming such a key, sent once
    // a cooldown, would keep a withdrawn key verifying for good. Hence the response is checked
    // here, where the fetch is, with jose's messages; its timeout becomes its JWKSTimeout.
    async function fetchKeySet (input: string, init: RequestInit): Promise<Response> {
      try {
        const response = await fetch(input, init)
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
        return new Response(body)
      } catch (error) {
        // Stryker disable next-line ConditionalExpression: fetch, its body's reader and JOSEError throw only objects
        if (error instanceof Object) fetchFailures.add(error)
        throw error
      }
    }
    return {
      createLocalJWKSet,
      remote: createRemoteJWKSet(new URL(url), { cacheMaxAge: cacheMaxAgeMs, cooldownDuration: cooldownMs, timeoutDuration: fetchTimeoutMs, [customFetch]: fetchKeySet })
    }
  })
  const fetchFailures = new WeakSet<object>()
  const isFetchFailure = (error: unknown) => (error instanceof Object && fetchFailures.has(error)) || (error as { code?: unknown }).code === 'ERR_JWKS_TIMEOUT'
  let failedAt = -Infinity
  let lastFailure: unknown
  const pems = new WeakMap<object, string>()

  async function select (header: JWSHeaderParameters) {
    const { createLocalJWKSet, remote } = await jose
    if (mayFetch(Date.now(), failedAt, cooldownMs)) {
      try {
        return await remote(header)
      } catch (error) {
        // The token's fault (no or several keys for its kid, an alg no key set holds), or its key's.
        if (!isFetchFailure(error)) throw error
        failedAt = Date.now()
        // Requests that waited on the same fetch share its error: one line per failed fetch, so at
        // most one per cooldown. Only the header's kid and alg ever reach here, never the token.
        if (error !== lastFailure) log.warn({ url, ...fetchFailureOf(error) }, 'the key set could not be fetched')
        lastFailure = error
      }
    }
    // The last key set fetched. jose hands out a copy on each call, so each request imports its key
    // again (about 60 µs more than a fetched set's key), only while the provider cannot be reached:
    // @fastify/jwt asks for the key before fast-jwt's cache of verified tokens is consulted.
    const cached = remote.jwks()
    // Stryker disable next-line StringLiteral: never shown; the auth plugin answers keys-unavailable for the class
    if (!cached) throw new KeySetUnavailable(`the key set at ${url} cannot be fetched`)
    return createLocalJWKSet(cached)(header)
  }

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
