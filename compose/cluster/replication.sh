#!/bin/bash
# Run once by the postgres image on the primary's first start (/docker-entrypoint-initdb.d):
# the role the standby streams WAL as, and the pg_hba.conf entry that lets it in by password
# (the image's own `host all all all` line does not cover replication connections).
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
  --set=password="$REPLICATION_PASSWORD" <<'SQL'
CREATE ROLE replicator WITH REPLICATION LOGIN PASSWORD :'password';
SQL
echo "host replication replicator all scram-sha-256" >> "$PGDATA/pg_hba.conf"
