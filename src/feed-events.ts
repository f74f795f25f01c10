// A change of the feed as the API shows it: one JSON entry of a page, or one Server-Sent Event
// (HTML Living Standard §9.2) whose id is the entry's id and whose data is the same JSON.
import type { FeedChange } from '../db/queries/feed.js'

/** The entry, as in the spec's FeedChange. */
export function feedEntry (change: FeedChange) {
  return {
    id: change.id,
    at: change.at.toISOString(),
    resource_id: change.resourceId,
    client_id: change.clientId,
    action: change.action,
    permission_ids: change.permissionIds,
    // A claim the token did not carry is undefined here, and the serializer leaves it out.
    actor: { sub: change.actor.sub, client_id: change.actor.clientId },
    request_id: change.requestId
  }
}

// JSON.stringify escapes every line break inside strings, so the data fits on one `data:` line.
export const feedEvent = (change: FeedChange): Buffer => Buffer.from(`id: ${change.id}\ndata: ${JSON.stringify(feedEntry(change))}\n\n`)

/** A comment line: ignored by EventSource, it keeps a gateway from closing an idle stream. */
export const HEARTBEAT = Buffer.from(': heartbeat\n\n')

/** How long EventSource waits before it reconnects, sent first on every stream. */
export const RECONNECT_AFTER = Buffer.from('retry: 1000\n\n')

/** Changes per read of the feed, by the streams (the most a poll may ask for, too). */
export const FEED_PAGE_SIZE = 500
