-- The change feed (GET /permission_changes, db/queries/feed.ts): every recorded change, in an order
-- in which no reader can miss one. docs/change-feed.md tells the whole argument; in short:
--
-- A sequence hands out ids before commit, so rows commit out of id order, and a reader that has
-- seen id N could later meet a smaller one. Transaction ids (xid8) are ordered the same way, but
-- PostgreSQL says which of them may still commit: every transaction older than a snapshot's xmin
-- has ended. So a change's id is its transaction's id, times 65536, plus its number within that
-- transaction; a reader is given only ids below xmin × 65536, a set no later commit can add to;
-- and the next reader's xmin is never smaller. A transaction still open holds back the changes
-- after it, never loses them.

-- Ids are the database's to give, to every writer: this trigger replaces the identity, and
-- overwrites an id a writer supplies.
ALTER TABLE permission_changes ALTER COLUMN id DROP IDENTITY;

CREATE FUNCTION number_permission_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  -- How many changes this transaction has recorded so far: a setting local to the transaction
  -- (a rolled-back savepoint takes back its numbers with its rows).
  recorded integer := coalesce(nullif(current_setting('client_permissions.changes_recorded', true), '')::integer, 0);
BEGIN
  -- The setting is the session's to change too: a value out of range would number this change
  -- outside its transaction's ids.
  IF recorded < 0 THEN
    RAISE EXCEPTION USING
      ERRCODE = 'PH001',
      TABLE = TG_TABLE_NAME,
      MESSAGE = 'permission_changes: client_permissions.changes_recorded is the trigger''s to set';
  END IF;
  IF recorded >= 65536 THEN
    RAISE EXCEPTION USING
      ERRCODE = 'PH001',
      TABLE = TG_TABLE_NAME,
      MESSAGE = 'permission_changes: one transaction records at most 65536 changes',
      HINT = 'Commit between batches of at most 65536 changes.';
  END IF;
  PERFORM set_config('client_permissions.changes_recorded', (recorded + 1)::text, true);
  NEW.id := pg_current_xact_id()::text::bigint * 65536 + recorded;
  RETURN NEW;
END $$;

CREATE TRIGGER permission_changes_numbered BEFORE INSERT ON permission_changes
  FOR EACH ROW EXECUTE FUNCTION number_permission_change();

-- Every id given before this migration is smaller than any given after it (this transaction's id,
-- and so every later one, times 65536 is above them), so the feed keeps them first.
DO $$
BEGIN
  IF (SELECT max(id) FROM permission_changes) >= pg_current_xact_id()::text::bigint * 65536 THEN
    RAISE EXCEPTION 'permission_changes holds ids above the ones this migration begins numbering from';
  END IF;
END $$;

-- The feed filtered to one resource, in feed order.
CREATE INDEX permission_changes_by_resource ON permission_changes (resource_id, id);

-- Each change is announced at commit on the channel permission_changes, whoever records it, with
-- the payload the change statement used to send itself: {"id", "resource_id", "client_id", "action"}.
-- The service's streams (plugins/feed.ts) wake on it; what they send they read from the table.
CREATE FUNCTION announce_permission_changes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('permission_changes', json_build_object(
    'id', id::text, 'resource_id', resource_id, 'client_id', client_id, 'action', action)::text)
  FROM recorded ORDER BY id;
  RETURN NULL;
END $$;

CREATE TRIGGER permission_changes_announced AFTER INSERT ON permission_changes
  REFERENCING NEW TABLE AS recorded FOR EACH STATEMENT EXECUTE FUNCTION announce_permission_changes();

-- Retention, visible: the largest id a prune has deleted. A reader whose cursor is below it has
-- missed changes that are gone, and is told so (410) instead of continuing past the gap. One row.
-- A prune deletes the first changes of the feed, every one up to some id (the check below), so
-- every change kept is above the mark, and a reader starting from the oldest kept never meets it.
CREATE TABLE permission_changes_pruned (
  only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
  through_id bigint NOT NULL
);

-- 0006's check of a prune, now in feed order: the changes deleted are every change up to the
-- largest id deleted (what remains is the feed from some point on, whatever `at` another writer
-- gave), none recorded within the last day; and the mark moves up to it.
CREATE OR REPLACE FUNCTION check_pruned_changes() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  newest timestamptz;
  last bigint;
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
  SELECT max(id) INTO last FROM pruned;
  SELECT id, at INTO kept FROM permission_changes WHERE id < last ORDER BY id LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION USING
      ERRCODE = 'PH001',
      TABLE = TG_TABLE_NAME,
      MESSAGE = 'permission_changes is append-only: a prune deletes the oldest changes only',
      DETAIL = format('Change %s, recorded at %s, would remain while change %s, after it in the feed, is deleted.', kept.id, kept.at, last);
  END IF;
  INSERT INTO permission_changes_pruned (through_id) VALUES (last)
  ON CONFLICT (only_row) DO UPDATE SET through_id = greatest(permission_changes_pruned.through_id, excluded.through_id);
  RETURN NULL;
END $$;
