-- Listing scales with the page, not with the client's grants (issue 5):
--  * each grant carries its permission's name, kept equal by the foreign key itself (ON UPDATE
--    CASCADE), so the default order (name, unique per resource) is an index scan of the client's
--    grants with no join and no sort;
--  * each authorization counts its grants, kept by statement-level triggers, so X-Total-Count is a
--    primary-key lookup and a page near the end can be read backwards from the end.

ALTER TABLE permissions
  -- Target of the grants' key below; (resource_id, id) alone is unique already.
  ADD CONSTRAINT permission_of_resource_named UNIQUE (resource_id, id, name);

ALTER TABLE grants ADD COLUMN permission_name text COLLATE "C";

UPDATE grants g SET permission_name = p.name
FROM permissions p
WHERE p.resource_id = g.resource_id AND p.id = g.permission_id;

-- The same key as before (same permission, same resource), now with its name. MATCH FULL: a grant
-- without a name is refused like a grant of a permission that does not exist (23503).
ALTER TABLE grants
  DROP CONSTRAINT grant_of_resource_permission,
  ADD CONSTRAINT grant_of_resource_permission FOREIGN KEY (resource_id, permission_id, permission_name)
    REFERENCES permissions (resource_id, id, name) MATCH FULL ON UPDATE CASCADE ON DELETE CASCADE;

-- Writers name the permission only; its name is looked up here (and checked by the key above).
CREATE FUNCTION name_granted_permission() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  SELECT name INTO NEW.permission_name FROM permissions WHERE resource_id = NEW.resource_id AND id = NEW.permission_id;
  IF NEW.permission_name IS NULL THEN
    -- The key's own error, naming the missing permission (MATCH FULL would only say "null").
    RAISE foreign_key_violation USING
      CONSTRAINT = 'grant_of_resource_permission',
      TABLE = 'grants',
      MESSAGE = 'insert or update on table "grants" violates foreign key constraint "grant_of_resource_permission"',
      DETAIL = format('Key (resource_id, permission_id)=(%s, %s) is not present in table "permissions".', NEW.resource_id, NEW.permission_id);
  END IF;
  RETURN NEW;
END $$;

CREATE TRIGGER grants_named BEFORE INSERT ON grants
  FOR EACH ROW WHEN (NEW.permission_name IS NULL) EXECUTE FUNCTION name_granted_permission();

-- ON UPDATE CASCADE is for renames only: a granted permission still cannot change its id or move
-- to another resource (as under the key it replaces).
CREATE FUNCTION keep_granted_permission_in_place() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM grants WHERE resource_id = OLD.resource_id AND permission_id = OLD.id) THEN
    RAISE foreign_key_violation USING
      CONSTRAINT = 'grant_of_resource_permission',
      TABLE = 'grants',
      MESSAGE = format('permission "%s" is granted: its id and resource cannot change', OLD.id);
  END IF;
  RETURN NEW;
END $$;

CREATE TRIGGER granted_permissions_stay BEFORE UPDATE OF id, resource_id ON permissions
  FOR EACH ROW WHEN (NEW.id IS DISTINCT FROM OLD.id OR NEW.resource_id IS DISTINCT FROM OLD.resource_id)
  EXECUTE FUNCTION keep_granted_permission_in_place();

-- Serve ORDER BY id or name (either direction) with LIMIT/OFFSET over just this client's grants,
-- as index-only scans: each index also carries the other column a page needs.
ALTER TABLE grants
  DROP CONSTRAINT grants_pkey,
  ADD CONSTRAINT grants_pkey PRIMARY KEY (resource_id, client_id, permission_id) INCLUDE (permission_name);
CREATE UNIQUE INDEX grants_by_name ON grants (resource_id, client_id, permission_name) INCLUDE (permission_id);

ALTER TABLE authorizations ADD COLUMN grant_count bigint NOT NULL DEFAULT 0 CHECK (grant_count >= 0);

UPDATE authorizations a SET grant_count = counted.n
FROM (SELECT resource_id, client_id, count(*) AS n FROM grants GROUP BY resource_id, client_id) counted
WHERE counted.resource_id = a.resource_id AND counted.client_id = a.client_id;

-- Once per statement, from its transition table: a DELETE of 500 grants updates one row once.
CREATE FUNCTION count_granted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE authorizations a SET grant_count = a.grant_count + delta.n
  FROM (SELECT resource_id, client_id, count(*) AS n FROM new_grants GROUP BY resource_id, client_id) delta
  WHERE a.resource_id = delta.resource_id AND a.client_id = delta.client_id;
  RETURN NULL;
END $$;

CREATE FUNCTION count_ungranted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE authorizations a SET grant_count = a.grant_count - delta.n
  FROM (SELECT resource_id, client_id, count(*) AS n FROM old_grants GROUP BY resource_id, client_id) delta
  WHERE a.resource_id = delta.resource_id AND a.client_id = delta.client_id;
  RETURN NULL;
END $$;

-- A grant moved to another authorization (a permission moved to another resource, cascaded).
CREATE FUNCTION count_regranted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE authorizations a SET grant_count = a.grant_count + delta.n
  FROM (
    SELECT resource_id, client_id, sum(n) AS n
    FROM (SELECT resource_id, client_id, 1 AS n FROM new_grants
          UNION ALL SELECT resource_id, client_id, -1 FROM old_grants) moved
    GROUP BY resource_id, client_id
    HAVING sum(n) <> 0
  ) delta
  WHERE a.resource_id = delta.resource_id AND a.client_id = delta.client_id;
  RETURN NULL;
END $$;

CREATE FUNCTION count_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE authorizations SET grant_count = 0 WHERE grant_count <> 0;
  RETURN NULL;
END $$;

CREATE TRIGGER grants_counted_on_insert AFTER INSERT ON grants
  REFERENCING NEW TABLE AS new_grants FOR EACH STATEMENT EXECUTE FUNCTION count_granted();
CREATE TRIGGER grants_counted_on_delete AFTER DELETE ON grants
  REFERENCING OLD TABLE AS old_grants FOR EACH STATEMENT EXECUTE FUNCTION count_ungranted();
CREATE TRIGGER grants_counted_on_update AFTER UPDATE ON grants
  REFERENCING OLD TABLE AS old_grants NEW TABLE AS new_grants FOR EACH STATEMENT EXECUTE FUNCTION count_regranted();
CREATE TRIGGER grants_counted_on_truncate AFTER TRUNCATE ON grants
  FOR EACH STATEMENT EXECUTE FUNCTION count_truncated();
