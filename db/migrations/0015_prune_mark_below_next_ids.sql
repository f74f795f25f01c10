-- The prune mark (0012) could still be put above every id issued so far, by a flagged write by
-- hand on a history with no change kept (after a prune of all of it, or before the first change):
-- no kept change was at or below it, so 0012 let it pass. Every change recorded after it was then
-- numbered below the mark, which never goes down: a consumer whose cursor was below it (all of
-- them) got 410 at every read, for changes that are there, for good (DDL alone could lower it). A
-- prune deletes only changes that exist, numbered from transactions that have begun, so every id
-- it deletes is below the next transaction id × 65536 (migration 0007): the mark may not move to
-- that or above (PH001, TABLE permission_changes_pruned). 0012's guard, with that check added.
CREATE OR REPLACE FUNCTION guard_prune_mark() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  kept bigint;
  next bigint;
BEGIN
  IF TG_OP IN ('DELETE', 'TRUNCATE') THEN
    RAISE EXCEPTION USING
      ERRCODE = 'PH001',
      TABLE = TG_TABLE_NAME,
      MESSAGE = 'permission_changes_pruned moves only with a prune: the mark cannot be removed';
  END IF;
  IF current_setting('client_permissions.prune_changes', true) IS DISTINCT FROM 'on' THEN
    RAISE EXCEPTION USING
      ERRCODE = 'PH001',
      TABLE = TG_TABLE_NAME,
      MESSAGE = 'permission_changes_pruned moves only with a prune: the mark is written by the prune command',
      HINT = 'npm run -s db:prune-changes -- --older-than DAYS deletes the changes recorded more than DAYS days ago and moves the mark.';
  END IF;
  IF TG_OP = 'UPDATE' AND NEW.through_id < OLD.through_id THEN
    RAISE EXCEPTION USING
      ERRCODE = 'PH001',
      TABLE = TG_TABLE_NAME,
      MESSAGE = 'permission_changes_pruned moves only with a prune: the mark never goes down',
      DETAIL = format('The mark is %s; the statement sets %s.', OLD.through_id, NEW.through_id);
  END IF;
  -- A prune that leaves the mark where it was (it deleted only changes below it) moves nothing.
  IF TG_OP = 'UPDATE' AND NEW.through_id = OLD.through_id THEN
    RETURN NEW;
  END IF;
  -- The first id of the next transaction to begin: every change recorded so far, committed or not,
  -- is below it.
  next := pg_snapshot_xmax(pg_current_snapshot())::text::bigint * 65536;
  IF NEW.through_id >= next THEN
    RAISE EXCEPTION USING
      ERRCODE = 'PH001',
      TABLE = TG_TABLE_NAME,
      MESSAGE = 'permission_changes_pruned moves only with a prune: the mark cannot be above every change recorded so far',
      DETAIL = format('Changes recorded from now on are numbered from %s; the statement sets the mark to %s.', next, NEW.through_id);
  END IF;
  SELECT id INTO kept FROM permission_changes WHERE id <= NEW.through_id ORDER BY id LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION USING
      ERRCODE = 'PH001',
      TABLE = TG_TABLE_NAME,
      MESSAGE = 'permission_changes_pruned moves only with a prune: a kept change cannot be under the mark',
      DETAIL = format('Change %s is kept; the statement sets the mark to %s.', kept, NEW.through_id);
  END IF;
  RETURN NEW;
END $$;

-- CREATE OR REPLACE cleared 0012's setting: its names looked up as 0011 has every trigger function
-- of ours look them up.
DO $$
BEGIN
  EXECUTE format('ALTER FUNCTION %I.guard_prune_mark() SET search_path = pg_catalog, %I, pg_temp', current_schema(), current_schema());
END $$;
