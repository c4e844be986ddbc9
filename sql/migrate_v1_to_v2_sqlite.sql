-- idemkit record table v1 -> v2, SQLite 3.24+.
--
-- v1: id INTEGER PRIMARY KEY, UNIQUE (scope, idem_key), indexes on (expires_at) and
--     (status, lease_until).
-- v2: WITHOUT ROWID, PRIMARY KEY (scope, idem_key), index on (status, expires_at).
--
-- SQLite cannot change a table's primary key in place: the table is copied into a new one, in one
-- transaction, during which writers wait (busy_timeout) — a short pause for a table of the size
-- SQLite serves. Run it once every process runs idemkit v2; record.Store.Migrate runs this file for
-- record.Options.Table (on one connection) and does nothing on a v2 table.
BEGIN IMMEDIATE;
CREATE TABLE idemkit_records_v2 (
  scope       VARCHAR(128) NOT NULL,
  idem_key    VARCHAR(128) NOT NULL,
  status      VARCHAR(16)  NOT NULL,
  fence       BIGINT       NOT NULL DEFAULT 0,
  owner       VARCHAR(64)  NOT NULL DEFAULT '',
  fingerprint VARCHAR(128) NOT NULL DEFAULT '',
  gid         VARCHAR(128) NOT NULL DEFAULT '',
  branch_id   VARCHAR(128) NOT NULL DEFAULT '',
  response    BLOB         NULL,
  error       TEXT         NOT NULL DEFAULT '',
  lease_until BIGINT       NOT NULL DEFAULT 0,
  expires_at  BIGINT       NOT NULL DEFAULT 0,
  created_at  BIGINT       NOT NULL DEFAULT 0,
  updated_at  BIGINT       NOT NULL DEFAULT 0,
  PRIMARY KEY (scope, idem_key)
) WITHOUT ROWID;
INSERT INTO idemkit_records_v2 (scope, idem_key, status, fence, owner, fingerprint, gid, branch_id, response, error,
    lease_until, expires_at, created_at, updated_at)
  SELECT scope, idem_key, status, fence, owner, fingerprint, gid, branch_id, response, error,
    lease_until, expires_at, created_at, updated_at
  FROM idemkit_records;
DROP TABLE idemkit_records;
ALTER TABLE idemkit_records_v2 RENAME TO idemkit_records;
CREATE INDEX idemkit_records_status_expires_idx ON idemkit_records (status, expires_at);
COMMIT;
