-- A version for each authorization, behind the list's ETag and If-Match (RFC 9110 §13): a new value
-- whenever the set of the client's grants on the resource changes, whoever changes it (the API, a
-- seed, a permission deleted in cascade). It follows grant_count, which every change of the set
-- moves (0002's statement triggers). The values come from one sequence, so a tag is never reused,
-- not even by an authorization deleted and created again.
CREATE SEQUENCE authorization_versions AS bigint;

-- A volatile default: every existing authorization gets a value of its own.
ALTER TABLE authorizations ADD COLUMN version bigint NOT NULL DEFAULT nextval('authorization_versions');
ALTER SEQUENCE authorization_versions OWNED BY authorizations.version;

CREATE FUNCTION next_authorization_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.version := nextval('authorization_versions');
  RETURN NEW;
END $$;

CREATE TRIGGER authorizations_versioned BEFORE UPDATE OF grant_count ON authorizations
  FOR EACH ROW WHEN (OLD.grant_count IS DISTINCT FROM NEW.grant_count)
  EXECUTE FUNCTION next_authorization_version();
