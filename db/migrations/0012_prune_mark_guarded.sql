-- The prune mark (0007) says where the change feed's gap is: a consumer whose cursor is below it
-- has missed changes that are gone, and is told so (410). It was a table without triggers, so
-- anyone allowed to write it could lower it (a consumer behind a pruned gap then read past it
-- without a 410, missing changes without knowing) or raise it over changes still kept (every
-- consumer then got 410 for nothing). Now the database holds the mark to what it means, as 0006
-- holds the history: whoever writes it, the service's own user included.
--   - It never goes down, and its row is never deleted: DELETE and TRUNCATE are refused.
--   - It moves only in a transaction that prunes (client_permissions.prune_changes, as a DELETE
--     of the history needs), and only to an id no kept change is at or below. A prune that leaves
--     it where it is passes: a change committed under it late (a prune by hand while an older
--     transaction was open: docs/append-only-history.md) must not stop every prune after it.
-- The prune's own move (check_pruned_changes, 0007) meets all of these. Refusals are PH001 with
-- TABLE permission_changes_pruned. What this does not stop: docs/append-only-history.md.
CREATE FUNCTION guard_prune_mark() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  kept bigint;
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

CREATE TRIGGER permission_changes_pruned_moved_by_prunes BEFORE INSERT OR UPDATE ON permission_changes_pruned
  FOR EACH ROW EXECUTE FUNCTION guard_prune_mark();
CREATE TRIGGER permission_changes_pruned_not_deleted BEFORE DELETE ON permission_changes_pruned
  FOR EACH STATEMENT EXECUTE FUNCTION guard_prune_mark();
CREATE TRIGGER permission_changes_pruned_not_truncated BEFORE TRUNCATE ON permission_changes_pruned
  FOR EACH STATEMENT EXECUTE FUNCTION guard_prune_mark();

-- Its names looked up as 0011 has every trigger function of ours look them up.
DO $$
BEGIN
  EXECUTE format('ALTER FUNCTION %I.guard_prune_mark() SET search_path = pg_catalog, %I, pg_temp', current_schema(), current_schema());
END $$;
