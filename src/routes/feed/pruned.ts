// Retention, visible: a cursor older than the newest change the prune command deleted has missed
// changes that are gone (migration 0007 keeps the mark).
import type { FeedPage } from '../../../db/queries/feed.js'
import { problems } from '../../problems.js'

/** Throws 410 changes-pruned when changes after `after` have been pruned. */
export function assertNotPruned (after: string | undefined, page: Pick<FeedPage, 'prunedThrough'>): void {
  if (after !== undefined && page.prunedThrough !== undefined && BigInt(after) < BigInt(page.prunedThrough)) {
    throw problems.changesPruned(after, page.prunedThrough)
  }
}
