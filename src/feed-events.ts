// A change of the feed as the API shows it: one entry of a page (JSON text from db/queries/feed.ts),
// or one Server-Sent Event (HTML Living Standard §9.2) whose id is the entry's id and whose data is
// the same JSON (on one line: JSON escapes every line break inside strings).
import type { FeedChange } from '../db/queries/feed.js'

/** A page of the feed, as the JSON array the spec describes. */
export const feedPage = (changes: readonly FeedChange[]): string => `[${changes.map(({ entry }) => entry).join(',')}]`

export const feedEvent = (change: FeedChange): Buffer => Buffer.from(`id: ${change.id}\ndata: ${change.entry}\n\n`)

/**
 * An id without data: EventSource fires no event for it, but keeps the id as its Last-Event-ID
 * (HTML Living Standard §9.2.6, "dispatch the event", steps 1-2), to resume from.
 */
export const cursorEvent = (id: bigint): Buffer => Buffer.from(`id: ${id}\n\n`)

/** A comment line: ignored by EventSource, it keeps a gateway from closing an idle stream. */
export const HEARTBEAT = Buffer.from(': heartbeat\n\n')

/** How long EventSource waits before it reconnects, sent first on every stream. */
export const RECONNECT_AFTER = Buffer.from('retry: 1000\n\n')

/** Changes per read of the feed, by the streams (the most a poll may ask for, too). */
export const FEED_PAGE_SIZE = 500
