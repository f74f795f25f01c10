-- The change history: one row per request that changed a client's grants on a resource, written
-- in the same statement (so the same transaction) as the change. No foreign keys: the history
-- outlives the grants, permissions, clients and resources it describes. Rows are only inserted by
-- the service and deleted by the prune command (scripts/db-prune-changes.ts).
CREATE TABLE permission_changes (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  at timestamptz NOT NULL DEFAULT now(),
  resource_id text COLLATE "C" NOT NULL,
  client_id text COLLATE "C" NOT NULL,
  action text NOT NULL CHECK (action IN ('granted', 'unauthorized')),
  -- Only the ids the request actually changed, in request order, each once.
  permission_ids text[] COLLATE "C" NOT NULL CHECK (cardinality(permission_ids) BETWEEN 1 AND 500),
  actor_sub text,
  actor_client_id text,
  request_id text NOT NULL
);

-- Serves the history of one client on one resource, newest first, from a cursor.
CREATE INDEX permission_changes_by_target ON permission_changes (resource_id, client_id, id DESC);
-- Serves pruning by age.
CREATE INDEX permission_changes_by_time ON permission_changes (at);
