// Entity tags as If-Match and If-None-Match list them (RFC 9110 §8.8.3, §13.1): `*`, or quoted
// tags, each maybe weak (W/), separated by commas. Shared by the list's preconditions and the
// served spec's ETag (plugins/docs.ts).

// In a header that passed the spec's pattern (components/schemas/EntityTags) every quoted string is
// one tag, and a `"` can only open or close one; in any other the tags are the quoted strings found.
const entityTag = /(W\/)?"([^"]*)"/g

/** The tags a header lists, each with whether it is weak and its opaque text (between the quotes). */
export function entityTagsOf (header: string): Array<{ weak: boolean, opaque: string }> {
  return [...header.matchAll(entityTag)].map(([, weak, opaque]) => ({ weak: weak !== undefined, opaque }))
}

/** If-None-Match (weak comparison): whether it names the tag whose opaque text is `opaque`, or is `*`. */
export function noneMatchNames (header: string | undefined, opaque: string): boolean {
  if (header === undefined) return false
  if (header === '*') return true
  return entityTagsOf(header).some((tag) => tag.opaque === opaque)
}
