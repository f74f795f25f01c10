-- The change history (0005) is append-only, and the database itself says so (issue 27): a recorded
-- change is never updated, and changes are deleted only as the prune command deletes them
-- (scripts/db-prune-changes.ts). Privileges cannot say it: the service's user migrates the database,
-- so it owns the table, and an owner or a superuser passes every privilege check; triggers fire for
-- them too. Every refusal is SQLSTATE PH001, a code of this service's own (an implementation-defined
-- class: PostgreSQL raises nothing in it), with TABLE set to permission_changes.
-- What this does not stop (it guards the rows against statements on them, not the table against its
-- owner's DDL): docs/append-only-history.md.

-- UPDATE and TRUNCATE: never. DELETE: only in a transaction that has declared it prunes, with
-- SET LOCAL client_permissions.prune_changes = 'on' (pruneChanges, db/queries/history.ts), so no
-- ordinary statement removes history by mistake. Statement-level: a statement is refused before it
-- reads a row, whatever it would have matched (an INSERT ... ON CONFLICT DO UPDATE or a MERGE that
-- may update fires the UPDATE trigger too).
CREATE FUNCTION refuse_history_rewrite() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF current_setting('client_permissions.prune_changes', true) = 'on' THEN
      RETURN NULL;
    END IF;
    RAISE EXCEPTION USING
      ERRCODE = 'PH001',
      TABLE = TG_TABLE_NAME,
      MESSAGE = 'permission_changes is append-only: changes are deleted only by the prune command',
      HINT = 'npm run -s db:prune-changes -- --older-than DAYS deletes the changes recorded more than DAYS days ago.';
  END IF;
  RAISE EXCEPTION USING
    ERRCODE = 'PH001',
    TABLE = TG_TABLE_NAME,
    MESSAGE = CASE TG_OP
      WHEN 'UPDATE' THEN 'permission_changes is append-only: a recorded change cannot be updated'
      ELSE 'permission_changes is append-only: it cannot be truncated'
    END;
END $$;

CREATE TRIGGER permission_changes_not_updated BEFORE UPDATE ON permission_changes
  FOR EACH STATEMENT EXECUTE FUNCTION refuse_history_rewrite();
CREATE TRIGGER permission_changes_not_truncated BEFORE TRUNCATE ON permission_changes
  FOR EACH STATEMENT EXECUTE FUNCTION refuse_history_rewrite();
CREATE TRIGGER permission_changes_deleted_when_pruning BEFORE DELETE ON permission_changes
  FOR EACH STATEMENT EXECUTE FUNCTION refuse_history_rewrite();

-- What a prune may delete, flag or not: the oldest changes, every one up to some moment, none of
-- them recorded within the last day (the command's least --older-than is 1). So a caller that sets
-- the flag by hand can neither erase recent history nor pick changes out of the middle of it: what
-- remains is always every change since some moment. Checked once per statement, on the rows it
-- deleted; the check of what remains walks permission_changes_by_time up to the newest of them.
CREATE FUNCTION check_pruned_changes() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  newest timestamptz;
  kept record;
BEGIN
  SELECT max(at) INTO newest FROM pruned;
  IF newest IS NULL THEN
    RETURN NULL;
  END IF;
  IF newest >= now() - interval '1 day' THEN
    RAISE EXCEPTION USING
      ERRCODE = 'PH001',
      TABLE = TG_TABLE_NAME,
      MESSAGE = 'permission_changes is append-only: only changes recorded more than a day ago can be pruned',
      DETAIL = format('The statement deletes a change recorded at %s.', newest);
  END IF;
  SELECT id, at INTO kept FROM permission_changes WHERE at <= newest ORDER BY at LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION USING
      ERRCODE = 'PH001',
      TABLE = TG_TABLE_NAME,
      MESSAGE = 'permission_changes is append-only: a prune deletes the oldest changes only',
      DETAIL = format('Change %s, recorded at %s, would remain while one recorded at %s is deleted.', kept.id, kept.at, newest);
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER permission_changes_pruned_oldest_first AFTER DELETE ON permission_changes
  REFERENCING OLD TABLE AS pruned FOR EACH STATEMENT EXECUTE FUNCTION check_pruned_changes();
