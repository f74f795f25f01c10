// The orders a list can be read in: the sort keys, and how `sort_by` names them.
export type SortProperty = 'id' | 'name' | 'description'
export type SortDirection = 'asc' | 'desc'
export interface SortKey { property: SortProperty, direction: SortDirection }

/**
 * Parses a `sort_by` the schema's pattern has already accepted (`name.desc,id`). A property named
 * twice keeps its first direction.
 */
export function parseSortBy (sortBy: string): SortKey[] {
  const keys = new Map<SortProperty, SortDirection>()
  for (const part of sortBy.split(',')) {
    const [property, direction = 'asc'] = part.split('.') as [SortProperty, SortDirection?]
    if (!keys.has(property)) keys.set(property, direction)
  }
  return [...keys].map(([property, direction]) => ({ property, direction }))
}
