// A Server-Sent Events client over node:http for the change feed's tests: the events (id, data),
// comments and retry fields parsed as they arrive (HTML Living Standard §9.2.6), and how the
// response finished, a clean end (the last chunk) or a cut connection. Not EventSource: it never
// reconnects, and it can stop reading (pause) to play a slow consumer.
import { type ClientRequest, type IncomingHttpHeaders, type IncomingMessage, request } from 'node:http'
import { StringDecoder } from 'node:string_decoder'
import { setTimeout as sleep } from 'node:timers/promises'

export interface SseEvent { id?: string, data: string }

export interface SseStream {
  status: number
  headers: IncomingHttpHeaders
  /** Events in the order received (a block without data is none: EventSource fires nothing for it). */
  events: SseEvent[]
  /**
   * What EventSource would send as Last-Event-ID on reconnecting: the last `id:` field of a block
   * dispatched, with or without data (HTML Living Standard §9.2.6, "dispatch the event", step 1).
   */
  readonly lastEventId: string
  /** Comment lines' text (": heartbeat" → "heartbeat"), in order. */
  comments: string[]
  /** Each `retry:` field's value. */
  retries: number[]
  /** The body as received, for an answer that is not a stream (a problem). */
  text: () => string
  /** Settles once the response is over: 'end' after its last chunk, 'cut' when the connection closed before. */
  finished: Promise<'end' | 'cut'>
  /** 'end' or 'cut' once finished, else undefined. */
  readonly outcome: 'end' | 'cut' | undefined
  /** Stops reading: what the server sends waits in its buffers and the sockets'. */
  pause: () => void
  resume: () => void
  /** Closes the connection from this side. */
  close: () => void
  /** Waits until `check` holds, up to `timeoutMs` (events arrive within a second of being readable, but a transaction anywhere on the shared PostgreSQL holds the feed back). */
  until: (what: string, check: () => boolean, timeoutMs?: number) => Promise<void>
  req: ClientRequest
  res: IncomingMessage
}

export interface OpenOptions {
  headers?: Record<string, string>
  method?: string
  /** Starts paused: nothing is read after the response head until resume(). */
  paused?: boolean
}

/** Opens a stream (on a connection of its own) and resolves once the response head has arrived. */
export function openStream (url: string, { headers = {}, method = 'GET', paused = false }: OpenOptions = {}): Promise<SseStream> {
  const target = new URL(url)
  return new Promise((resolve, reject) => {
    const req = request({
      host: target.hostname,
      port: target.port,
      path: target.pathname + target.search,
      method,
      agent: false,
      headers: { accept: 'text/event-stream', ...headers }
    }, (res) => {
      const events: SseEvent[] = []
      const comments: string[] = []
      const retries: number[] = []
      const chunks: Buffer[] = []
      let outcome: 'end' | 'cut' | undefined
      const decoder = new StringDecoder('utf8')
      let pending = ''
      let id: string | undefined
      let data: string[] = []
      let lastEventId = ''
      const line = (text: string) => {
        if (text === '') {
          if (id !== undefined) lastEventId = id
          if (data.length > 0) events.push({ ...(id === undefined ? {} : { id }), data: data.join('\n') })
          id = undefined
          data = []
          return
        }
        if (text.startsWith(':')) {
          comments.push(text.slice(1).replace(/^ /, ''))
          return
        }
        const colon = text.indexOf(':')
        const field = colon < 0 ? text : text.slice(0, colon)
        const value = colon < 0 ? '' : text.slice(colon + 1).replace(/^ /, '')
        if (field === 'id') id = value
        else if (field === 'data') data.push(value)
        else if (field === 'retry' && /^\d+$/.test(value)) retries.push(Number(value))
      }
      res.on('data', (chunk: Buffer) => {
        chunks.push(chunk)
        pending += decoder.write(chunk)
        // The feed ends lines with LF; CRLF is read too (a lone CR, which SSE allows, is not).
        const lines = pending.split(/\r?\n/)
        pending = lines.pop()!
        for (const text of lines) line(text)
      })
      const finished = new Promise<'end' | 'cut'>((resolve) => {
        res.on('end', () => { outcome ??= 'end'; resolve(outcome) })
        // A response cut short emits 'aborted' and an error, then 'close' without 'end'.
        res.on('error', () => {})
        res.on('close', () => { outcome ??= res.complete ? 'end' : 'cut'; resolve(outcome) })
      })
      if (paused) res.pause()
      resolve({
        status: res.statusCode!,
        headers: res.headers,
        events,
        get lastEventId () { return lastEventId },
        comments,
        retries,
        text: () => Buffer.concat(chunks).toString('utf8'),
        finished,
        get outcome () { return outcome },
        pause: () => { res.pause() },
        resume: () => { res.resume() },
        close: () => { req.destroy() },
        until: async (what, check, timeoutMs = 15_000) => {
          const seen = () => `${events.length} events, the last ${events.at(-1)?.id}; ${comments.length} comments`
          for (const started = Date.now(); !check(); await sleep(20)) {
            // A finished stream gets nothing more: say how it ended rather than wait out the time.
            if (outcome !== undefined) throw new Error(`the stream ${outcome === 'cut' ? 'was cut' : 'ended'} before ${what}: ${seen()}`)
            if (Date.now() - started > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}: ${seen()}`)
          }
        },
        req,
        res
      })
    })
    req.on('error', reject)
    req.end()
  })
}
