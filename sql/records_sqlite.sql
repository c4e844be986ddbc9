-- idemkit dedupe records (table v2), SQLite 3.24+.
--
-- One row per (scope, idem_key), its primary key: a WITHOUT ROWID table, so the primary key is the
-- table's one B-tree; see github.com/idemkit/idemkit/record. One secondary index, (status, expires_at),
-- for the sweeper and the transaction reconciler.
-- The four times are INTEGER (BIGINT) Unix milliseconds, 0 meaning none: no time zone is involved, and
-- MySQL, PostgreSQL and SQLite compare them the same way.
-- SQLite does not enforce the VARCHAR lengths; idemkit keeps scope and idem_key within 128 bytes.
-- record.Store.CreateTable runs this file with the table name of record.Options.Table; the index names
-- are derived from it. A v1 table (id column) is upgraded by migrate_v1_to_v2_sqlite.sql
-- (record.Store.Migrate).
CREATE TABLE IF NOT EXISTS idemkit_records (
  scope       VARCHAR(128) NOT NULL,                  -- business type, e.g. a route pattern
  idem_key    VARCHAR(128) NOT NULL,                  -- idempotency key
  status      VARCHAR(16)  NOT NULL,                  -- PROCESSING, SUCCEEDED, FAILED or REJECTED
  fence       BIGINT       NOT NULL DEFAULT 0,        -- bumped on every claim and takeover
  owner       VARCHAR(64)  NOT NULL DEFAULT '',       -- token of the attempt holding the claim
  fingerprint VARCHAR(128) NOT NULL DEFAULT '',       -- hash of the request payload
  gid         VARCHAR(128) NOT NULL DEFAULT '',       -- DTM global transaction id
  branch_id   VARCHAR(128) NOT NULL DEFAULT '',       -- DTM branch id
  response    BLOB         NULL,                      -- stored result; NULL when empty
  error       TEXT         NOT NULL DEFAULT '',       -- last failure message
  lease_until BIGINT       NOT NULL DEFAULT 0,        -- Unix ms: a PROCESSING claim may be taken over from then
  expires_at  BIGINT       NOT NULL DEFAULT 0,        -- Unix ms: the record stops counting; 0 = never
  created_at  BIGINT       NOT NULL DEFAULT 0,        -- Unix ms
  updated_at  BIGINT       NOT NULL DEFAULT 0,        -- Unix ms
  PRIMARY KEY (scope, idem_key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idemkit_records_status_expires_idx ON idemkit_records (status, expires_at);
