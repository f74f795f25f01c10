-- Resources (APIs), clients (OAuth applications), the permissions each resource defines, the
-- authorization of a client on a resource, and the permissions granted within that authorization.
-- The keys make the invariants structural: a grant references its authorization and a permission
-- of the same resource, so neither can be broken by any statement. Identifiers use the "C"
-- collation so ordering is byte order on every server, whatever its locale, and indexes serve it.

CREATE TABLE resources (
  id text COLLATE "C" PRIMARY KEY CHECK (char_length(id) BETWEEN 1 AND 255),
  name text
);

CREATE TABLE clients (
  id text COLLATE "C" PRIMARY KEY CHECK (char_length(id) BETWEEN 1 AND 255),
  name text
);

CREATE TABLE permissions (
  id text COLLATE "C" PRIMARY KEY CHECK (char_length(id) BETWEEN 1 AND 255),
  resource_id text COLLATE "C" NOT NULL REFERENCES resources (id) ON DELETE CASCADE,
  name text COLLATE "C" NOT NULL
    -- The spec's ^[^\s:]+:[^\s:]+$: JavaScript's \s is Unicode whitespace, while [:space:] under
    -- the "C" collation is ASCII only, so the other whitespace characters are listed.
    CONSTRAINT permission_name_is_verb_colon_noun
    CHECK (char_length(name) <= 255 AND name ~
      '^[^:[:space:]\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]+:[^:[:space:]\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]+$'),
  description text COLLATE "C",
  CONSTRAINT permission_name_unique_per_resource UNIQUE (resource_id, name),
  -- Target of the grants' composite key: a grant's permission belongs to the grant's resource.
  CONSTRAINT permission_of_resource UNIQUE (resource_id, id)
);

CREATE TABLE authorizations (
  resource_id text COLLATE "C" NOT NULL REFERENCES resources (id) ON DELETE CASCADE,
  client_id text COLLATE "C" NOT NULL REFERENCES clients (id) ON DELETE CASCADE,
  PRIMARY KEY (resource_id, client_id)
);

-- Serves the cascade when a client is deleted.
CREATE INDEX authorizations_client_id ON authorizations (client_id);

CREATE TABLE grants (
  resource_id text COLLATE "C" NOT NULL,
  client_id text COLLATE "C" NOT NULL,
  permission_id text COLLATE "C" NOT NULL,
  -- Serves listing a client's grants on a resource (ordered by permission id) and the DELETE.
  PRIMARY KEY (resource_id, client_id, permission_id),
  CONSTRAINT grant_within_authorization FOREIGN KEY (resource_id, client_id)
    REFERENCES authorizations (resource_id, client_id) ON DELETE CASCADE,
  CONSTRAINT grant_of_resource_permission FOREIGN KEY (resource_id, permission_id)
    REFERENCES permissions (resource_id, id) ON DELETE CASCADE
);

-- Serves the cascade when a permission is deleted.
CREATE INDEX grants_permission ON grants (resource_id, permission_id);
