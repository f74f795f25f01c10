// The change feed's streams on this instance (`fastify.feed`): one LISTEN connection, opened with
// the first stream, and one shared reader (src/feed-hub.ts), however many consumers; the count
// bounded by FEED_MAX_STREAMS; a heartbeat to every stream each FEED_HEARTBEAT_MS; and, when the
// server closes, every stream ended first, so that none holds the close up.
import fp from 'fastify-plugin'
import { ChangeListener } from '../db/change-listener.js'
import { databaseErrorSummary } from '../db/errors.js'
import { afterIo } from '../db/after-io.js'
import type { FeedInput, FeedPage } from '../db/queries/feed.js'
import { FEED_PAGE_SIZE, feedEvent } from '../src/feed-events.js'
import { FeedHub } from '../src/feed-hub.js'
import { problems } from '../src/problems.js'

/** What the feed needs of an open stream. */
export interface OpenStream {
  heartbeat: () => void
  /** Ends the stream cleanly. */
  end: () => void
}

export interface ChangeFeed {
  readonly hub: FeedHub
  /** A page of the feed from the primary, as the streams read it. */
  read: (input: FeedInput) => Promise<FeedPage>
  /** Streams open now. */
  readonly streams: number
  /** Whether the LISTEN connection (opened with the first stream) is up and listening: else streams get changes by the poll only. */
  readonly listening: boolean
  /** Streams cut since the start because their consumer read too slowly. */
  readonly cut: number
  /** Counts a stream cut for its consumer's slowness. */
  tooSlow: () => void
  /** Counts a new stream in; throws 503 when the instance has its fill of them or is closing. */
  admit: (stream: OpenStream) => void
  /** Counts a stream out (closed by either side). */
  release: (stream: OpenStream) => void
}

declare module 'fastify' {
  interface FastifyInstance {
    feed: ChangeFeed
  }
}

export default fp(async function feed (fastify) {
  const { config } = fastify
  // Behind a transaction pooler a LISTEN does not stay on one server connection: the direct
  // connection the migrations use, when given. Without one, the reader's own polling (each
  // second) still brings every change.
  const listener = new ChangeListener({ connectionString: config.MIGRATIONS_DATABASE_URL ?? config.DATABASE_URL! })
  const read = fastify.queries.readFeedFromPrimary
  const hub = new FeedHub({
    read,
    encode: feedEvent,
    pageSize: FEED_PAGE_SIZE,
    heldBackRetryMs: 100,
    pollMs: 1000,
    onError: (error) => fastify.log.warn(databaseErrorSummary(error as Error), 'change feed: reading new changes failed; trying again')
  })
  // Stryker disable next-line StringLiteral,ArrowFunction: equivalent but for timing: without the wake, the poll (pollMs) brings each change within a second
  listener.on('change', () => hub.wake())
  // Stryker disable next-line StringLiteral,ArrowFunction: equivalent but for timing: the poll (pollMs) reads what was announced to nobody while no connection listened, the wake only sooner
  listener.on('listening', () => hub.wake())
  listener.on('lost', (error) => fastify.log.warn(databaseErrorSummary(error), 'change feed: listening connection lost; polling until it is back'))

  const streams = new Set<OpenStream>()
  let cut = 0
  let closing = false
  // Each tick once the loop has read its I/O (afterIo): after a stall of the event loop (a long
  // synchronous task, a GC pause), the timer runs before the sockets are told that their consumers
  // took what waited meanwhile, and a consumer that read all along would be cut as stopped.
  const heartbeat = setInterval(() => { afterIo(() => { for (const stream of streams) stream.heartbeat() }) }, config.FEED_HEARTBEAT_MS).unref()

  fastify.decorate('feed', {
    hub,
    read,
    get streams () { return streams.size },
    get listening () { return listener.listening },
    get cut () { return cut },
    tooSlow () { cut++ },
    admit (stream: OpenStream) {
      if (closing) throw problems.shuttingDown()
      if (streams.size >= config.FEED_MAX_STREAMS) throw problems.tooManyStreams(config.FEED_MAX_STREAMS)
      streams.add(stream)
      listener.start()
    },
    release (stream: OpenStream) {
      streams.delete(stream)
    }
  })

  // Before the server stops taking connections and waits for those open: a stream would never end.
  fastify.addHook('preClose', async () => {
    closing = true
    for (const stream of streams) stream.end()
  })
  fastify.addHook('onClose', async () => {
    clearInterval(heartbeat)
    hub.close()
    await listener.close()
  })
}, { name: 'feed', dependencies: ['db', 'env'] })
