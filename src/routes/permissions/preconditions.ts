// Conditional requests (RFC 9110 §13) on a client's grants on a resource. The entity tag is the
// authorization's version (migration 0004), which changes whenever the set of grants changes: not a
// hash of a page, so every page, order and HEAD of the list carries the same tag, and a DELETE or
// POST can name it in If-Match.

import { entityTagsOf } from '../../entity-tags.js'

/** The strong entity tag of a version. */
export const etagOf = (version: string): string => `"${version}"`

// A version as PostgreSQL writes it. Versions come from a bigint sequence that starts at 1, so a
// tag with a leading zero, "0", or a number past bigint (which the database would refuse with an
// error) names no version, and is never sent.
const versionText = /^[1-9][0-9]{0,18}$/
const LARGEST_BIGINT = 9223372036854775807n
const isVersion = (opaque: string) => versionText.test(opaque) && BigInt(opaque) <= LARGEST_BIGINT

/**
 * The versions an If-Match accepts (strong comparison: weak tags never match); undefined when there
 * is no condition beyond the client being authorized (no header, or `*`). A header that names no
 * version yields an empty list, which nothing matches.
 */
export function ifMatchVersions (header: string | undefined): string[] | undefined {
  if (header === undefined || header === '*') return undefined
  return entityTagsOf(header).filter(({ weak, opaque }) => !weak && isVersion(opaque)).map(({ opaque }) => opaque)
}

/** What an If-None-Match on a change names: `*`, or the versions it names (versionsNamed; none without the header). */
export function ifNoneMatchVersions (header: string | undefined): string[] | '*' {
  return header === '*' ? header : versionsNamed(header)
}

/** The versions an If-None-Match names (weak comparison: weak tags too), as the database writes them; `*` names none. */
export function versionsNamed (header: string | undefined): string[] {
  if (header === undefined) return []
  return entityTagsOf(header).filter(({ opaque }) => isVersion(opaque)).map(({ opaque }) => opaque)
}

/**
 * The newest of the versions an If-None-Match names (versionsNamed), if any: the state that decides
 * it must be at least that new (a replica behind it could answer 200 for a tag the caller already
 * holds, or worse).
 */
export function newestOf (versions: string[]): bigint | undefined {
  let newest: bigint | undefined
  for (const opaque of versions) {
    const version = BigInt(opaque)
    // Stryker disable next-line EqualityOperator: equivalent: when equal, the assignment changes nothing
    if (newest === undefined || version > newest) newest = version
  }
  return newest
}
