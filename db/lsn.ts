// PostgreSQL's write-ahead log positions (pg_lsn, "16/B374D848"): how far a server has written or
// replayed. They order the states a caller can see: a replica that has replayed position P shows
// every change committed at or before P.

const LSN_TEXT = /^([0-9A-Fa-f]{1,8})\/([0-9A-Fa-f]{1,8})$/

/** A position as a number, for comparing; undefined when the text is not a pg_lsn. */
export function parseLsn (text: string): bigint | undefined {
  const match = LSN_TEXT.exec(text)
  if (!match) return undefined
  return (BigInt(`0x${match[1]}`) << 32n) | BigInt(`0x${match[2]}`)
}

/** A position as PostgreSQL writes it. */
export function formatLsn (lsn: bigint): string {
  return `${(lsn >> 32n).toString(16).toUpperCase()}/${(lsn & 0xFFFFFFFFn).toString(16).toUpperCase()}`
}

/**
 * The position of the state a statement saw, as a column: on a replica what it had replayed, on the
 * primary what it had written, both read after the statement's snapshot was taken, so never older
 * than the state it read. (COALESCE stops at the first value: the primary's function is not called
 * on a replica, where it fails.)
 */
export const positionColumn = 'coalesce(pg_last_wal_replay_lsn(), pg_current_wal_lsn())::text AS position'
