-- A change's `at` is shown as RFC 3339 (the feed's entries, made by PostgreSQL with to_char, and
-- the history's toISOString): a four-digit year, and a time at all. The column took any timestamptz
-- from a writer other than the service: 'infinity' made to_char answer NULL, so the feed's entry
-- was NULL and every page holding it was not JSON (a stream sent `data: null`), for every consumer,
-- until it was pruned, which it never was (it is never old). A year past 9999, or BC, came out as a
-- date-time that is not one, or another date. Now such a change is refused (23514), whoever writes
-- it. NOT VALID: the rows already recorded are not checked (the history is append-only: a row found
-- wrong could not be mended, and the service would not start).
ALTER TABLE permission_changes ADD CONSTRAINT permission_changes_at_shown
  CHECK (at >= '0001-01-01 00:00:00+00' AND at < '10000-01-01 00:00:00+00') NOT VALID;
