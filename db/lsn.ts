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

/**
 * The position of the state a statement saw, as a column, read after the statement's snapshot was
 * taken and so never older than what it showed: on a standby what it had replayed; on the primary
 * where its WAL is inserted, which is past every commit the snapshot shows, even one committed
 * asynchronously whose WAL is not written yet. pg_is_in_recovery() decides, not a NULL: a primary
 * that went through recovery (a promoted standby, a restart after a crash) keeps answering its
 * last replayed position, which then never moves.
 */
export const positionColumn = '(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_insert_lsn() END)::text AS position'

/**
 * The primary's position now, past every commit made so far (see positionColumn). It may lie just
 * past a WAL page's header, where no standby reports being until more WAL is written: a token then
 * sends reads to the primary a little longer, never to an older state.
 */
export const primaryPosition = 'pg_current_wal_insert_lsn()::text'
