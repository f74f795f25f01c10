// Conditional requests (RFC 9110 §13) on a client's grants on a resource. The entity tag is the
// authorization's version (migration 0004), which changes whenever the set of grants changes: not a
// hash of a page, so every page, order and HEAD of the list carries the same tag, and a DELETE or
// POST can name it in If-Match.

/** The strong entity tag of a version. */
export const etagOf = (version: string): string => `"${version}"`

// An entity-tag: optionally weak, then an opaque tag in double quotes (RFC 9110 §8.8.3).
const entityTag = /(W\/)?"([^"]*)"/g

function entityTagsOf (header: string): Array<{ weak: boolean, opaque: string }> {
  return [...header.matchAll(entityTag)].map(([, weak, opaque]) => ({ weak: weak !== undefined, opaque }))
}

/** If-None-Match (weak comparison): true when it names the current version, or is `*`. */
export function noneMatchFails (header: string | undefined, version: string): boolean {
  if (header === undefined) return false
  // Stryker disable next-line MethodExpression: Node's HTTP parser already strips a field value's surrounding whitespace; an injected request may not
  if (header.trim() === '*') return true
  return entityTagsOf(header).some(({ opaque }) => opaque === version)
}

/**
 * The versions an If-Match accepts (strong comparison: weak tags never match); undefined when there
 * is no condition beyond the client being authorized (no header, or `*`). A header that names no
 * version of ours yields an empty list, which nothing matches.
 */
export function ifMatchVersions (header: string | undefined): string[] | undefined {
  // Stryker disable next-line MethodExpression: as in noneMatchFails
  if (header === undefined || header.trim() === '*') return undefined
  return entityTagsOf(header).filter(({ weak, opaque }) => !weak && /^\d{1,19}$/.test(opaque)).map(({ opaque }) => opaque)
}
