-- A rename or a new description of a granted permission bumps the version of every authorization
-- that holds it (0009), at the end of the statement that updates their grants: the grants locked
-- first, then the authorizations. A change of the service locks in the other order, its
-- authorization first, then its grants, so a rename beside a DELETE of the same grant could
-- deadlock, and PostgreSQL would fail one of the two. The rename now locks those authorizations
-- in client order before it updates their grants (the permission's own row is locked already, as by
-- any UPDATE): a change under way finishes first, and a change that comes later waits for the
-- rename. NO KEY UPDATE is the lock the version's UPDATE takes anyway; it lets another writer's
-- grant check its key (KEY SHARE) meanwhile. This holds for a statement that changes one
-- permission. One that changes several (or a transaction, or a seeding's upserts, which lock every
-- row they name) holds the first permission's row while it waits for the next one's
-- authorizations, and a grant of the first permission by the service reads that row FOR SHARE
-- (0008) while it holds its authorization: that can still deadlock, and PostgreSQL fails one (the
-- service runs a change it failed once more: db/queries/change.ts).
CREATE FUNCTION lock_authorizations_shown() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM FROM authorizations a
  WHERE a.resource_id = OLD.resource_id
    AND a.client_id IN (SELECT g.client_id FROM grants g WHERE g.resource_id = OLD.resource_id AND g.permission_id = OLD.id)
  ORDER BY a.client_id
  FOR NO KEY UPDATE;
  RETURN NEW;
END $$;

CREATE TRIGGER permissions_shown_lock_authorizations BEFORE UPDATE OF name, description ON permissions
  FOR EACH ROW WHEN (NEW.name IS DISTINCT FROM OLD.name OR NEW.description IS DISTINCT FROM OLD.description)
  EXECUTE FUNCTION lock_authorizations_shown();
