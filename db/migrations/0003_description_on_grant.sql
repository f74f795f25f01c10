-- Every order of the list is index-backed, description orders included: each grant carries its
-- permission's description as it carries the name (0002), so a page ordered by description is cut
-- from an index of that client's grants alone, with no join and no sort, from whichever end of the
-- list is nearer. Before this, those orders joined and sorted all of the client's grants.

-- 255 characters, as ids and names: the description now goes into btree entries (below), which hold
-- at most 2,704 bytes. An entry holds five texts (resource, client, permission id, name,
-- description): at 255 single-byte characters each, about 1.3 kB; short ids with a name and a
-- description of 255 four-byte characters each, about 2.1 kB. (Ids of 255 four-byte characters
-- overflow the keys of 0001 and 0002 already, description or not.) A description stored longer
-- than 255 characters stops this migration: shorten it, then migrate.
ALTER TABLE permissions
  ADD CONSTRAINT permission_description_length CHECK (char_length(description) <= 255);

ALTER TABLE grants ADD COLUMN permission_description text COLLATE "C";

-- The statement-level count trigger would collect every updated row in its transition tables to
-- find that no count changes; it is off for this one UPDATE only.
ALTER TABLE grants DISABLE TRIGGER grants_counted_on_update;
UPDATE grants g SET permission_description = p.description
FROM permissions p
WHERE p.resource_id = g.resource_id AND p.id = g.permission_id AND p.description IS NOT NULL;
ALTER TABLE grants ENABLE TRIGGER grants_counted_on_update;

-- A description may be NULL, so it cannot join the name in the MATCH FULL key of 0002 (and a
-- MATCH SIMPLE key never cascades to or from NULL): the copy is kept by triggers instead. The grant
-- takes the description from its permission on every insert and update, whatever the writer gave
-- (the bench loader gives the name only): no statement on grants can make the copy wrong. It also
-- still names the permission when the writer did not, and refuses a missing permission as before.
-- FOR SHARE, not the foreign key's FOR KEY SHARE: it conflicts with an UPDATE of the description,
-- so a grant inserted while its permission's description changes waits for that change and copies
-- the new text, or is committed before it and is then updated by it (granted_descriptions_follow).
CREATE FUNCTION copy_granted_permission() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  granted record;
BEGIN
  SELECT name, description INTO granted FROM permissions
  WHERE resource_id = NEW.resource_id AND id = NEW.permission_id
  FOR SHARE;
  IF NOT FOUND THEN
    -- The key's own error, naming the missing permission (MATCH FULL would only say "null").
    RAISE foreign_key_violation USING
      CONSTRAINT = 'grant_of_resource_permission',
      TABLE = 'grants',
      MESSAGE = 'insert or update on table "grants" violates foreign key constraint "grant_of_resource_permission"',
      DETAIL = format('Key (resource_id, permission_id)=(%s, %s) is not present in table "permissions".', NEW.resource_id, NEW.permission_id);
  END IF;
  -- A name given is left to the key to check (a wrong one is refused, not corrected).
  IF TG_OP = 'INSERT' AND NEW.permission_name IS NULL THEN
    NEW.permission_name := granted.name;
  END IF;
  NEW.permission_description := granted.description;
  RETURN NEW;
END $$;

DROP TRIGGER grants_named ON grants;
DROP FUNCTION name_granted_permission();
CREATE TRIGGER grants_copy_permission BEFORE INSERT OR UPDATE ON grants
  FOR EACH ROW EXECUTE FUNCTION copy_granted_permission();

-- A new description reaches every grant of the permission (one index scan of grants_permission);
-- each updated grant copies it again through grants_copy_permission.
CREATE FUNCTION describe_grants_anew() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE grants SET permission_description = NEW.description
  WHERE resource_id = NEW.resource_id AND permission_id = NEW.id;
  RETURN NULL;
END $$;

CREATE TRIGGER granted_descriptions_follow AFTER UPDATE OF description ON permissions
  FOR EACH ROW WHEN (NEW.description IS DISTINCT FROM OLD.description) EXECUTE FUNCTION describe_grants_anew();

-- Indexes: a page is an index-only scan of one client's entries (resource_id, client_id leading),
-- so every index carries the three columns a page shows. A btree read backwards gives the reverse
-- of its order, NULLs included (ASC puts them last, so backwards they come first, as DESC does),
-- so each order and its reverse share an index. decidingKeys leaves an order's keys up to its
-- first unique one (id, or name: unique per resource), then id: description orders are
-- description then id or name, in the same or the opposite direction. That is four orders of
-- entries within a client, each with its reverse, and so four indexes, none fewer:
--   grants_by_description                description.asc (then id.asc);  backwards description.desc,id.desc
--   grants_by_description_id_desc        description.asc,id.desc;        backwards description.desc (then id.asc)
--   grants_by_description_name           description.asc,name.asc;       backwards description.desc,name.desc
--   grants_by_description_name_desc      description.asc,name.desc;      backwards description.desc,name.asc
-- The two of 0002 now carry the description too, so id and name pages no longer look it up in
-- permissions row by row:
--   grants_pkey                          id.asc (also the DELETE);       backwards id.desc
--   grants_by_name                       name.asc;                       backwards name.desc
-- The DELETE statement itself touches no index (dead entries are removed by VACUUM, from each
-- index); every new grant is one entry in each.
ALTER TABLE grants
  DROP CONSTRAINT grants_pkey,
  ADD CONSTRAINT grants_pkey PRIMARY KEY (resource_id, client_id, permission_id) INCLUDE (permission_name, permission_description);
DROP INDEX grants_by_name;
CREATE UNIQUE INDEX grants_by_name ON grants (resource_id, client_id, permission_name) INCLUDE (permission_id, permission_description);
CREATE INDEX grants_by_description ON grants (resource_id, client_id, permission_description, permission_id)
  INCLUDE (permission_name);
CREATE INDEX grants_by_description_id_desc ON grants (resource_id, client_id, permission_description, permission_id DESC)
  INCLUDE (permission_name);
CREATE INDEX grants_by_description_name ON grants (resource_id, client_id, permission_description, permission_name)
  INCLUDE (permission_id);
CREATE INDEX grants_by_description_name_desc ON grants (resource_id, client_id, permission_description, permission_name DESC)
  INCLUDE (permission_id);
