-- The authorization's version (0004) changes whenever a page of its grants would read differently:
-- when the set changes, as before, and now also when a granted permission is renamed (0002's
-- cascade) or described anew (0003). The list's ETag is then a strong validator of every page, as
-- RFC 9110 §8.8.1 asks, and a page kept by the version (the list's page cache) is never stale.
-- Renames and new descriptions come from seeds or SQL, rarely: each bumps the version of every
-- authorization that holds the permission, in the statement that updates their grants.

-- An UPDATE of grants bumps the authorizations whose rows it changed in what a page shows (key,
-- name, description). EXCEPT compares NULLs as equal, so a description that stays NULL is no change,
-- and an UPDATE that changes nothing (the check of 0008, usually) bumps nothing.
CREATE FUNCTION version_shown_grants() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE authorizations a SET version = nextval('authorization_versions')
  FROM (
    SELECT DISTINCT resource_id, client_id FROM (
      SELECT resource_id, client_id, permission_id, permission_name, permission_description FROM new_grants
      EXCEPT
      SELECT resource_id, client_id, permission_id, permission_name, permission_description FROM old_grants
    ) changed
  ) shown
  WHERE a.resource_id = shown.resource_id AND a.client_id = shown.client_id;
  RETURN NULL;
END $$;

CREATE TRIGGER grants_shown_versioned AFTER UPDATE ON grants
  REFERENCING OLD TABLE AS old_grants NEW TABLE AS new_grants FOR EACH STATEMENT EXECUTE FUNCTION version_shown_grants();
