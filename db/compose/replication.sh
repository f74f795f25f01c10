#!/usr/bin/env bash
# The primary's side of docker-compose.yml's streaming replica (postgres-replica): a role that may
# replicate, and a pg_hba.conf line letting it in from the compose network (the image's own line,
# `host all all all`, does not match replication connections). The postgres image runs this once,
# when it initializes an empty data volume; it may be run again. On a volume made before the replica
# existed: `docker compose exec -u postgres postgres bash /docker-entrypoint-initdb.d/replication.sh`.
# The entrypoint's own shell options: it sources this file instead of running it when not executable.
set -Eeo pipefail

# The password comes from the environment (\getenv), not from psql's command line.
psql -v ON_ERROR_STOP=1 --no-psqlrc --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" <<'SQL'
\getenv user POSTGRES_REPLICATION_USER
\getenv password POSTGRES_REPLICATION_PASSWORD
SELECT format('CREATE ROLE %I', :'user') WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'user') \gexec
ALTER ROLE :"user" WITH REPLICATION LOGIN PASSWORD :'password';
SQL

# samenet: the subnets this server is on, that is the compose network (172.28.64.0/24).
line="host replication $POSTGRES_REPLICATION_USER samenet scram-sha-256"
grep -qxF "$line" "$PGDATA/pg_hba.conf" || printf '%s\n' "$line" >> "$PGDATA/pg_hba.conf"
psql -v ON_ERROR_STOP=1 --no-psqlrc --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" --quiet --command 'SELECT pg_reload_conf()' > /dev/null
