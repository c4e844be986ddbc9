-- idemkit dedupe records (table v2), PostgreSQL 10+.
--
-- One row per (scope, idem_key), its primary key; see github.com/idemkit/idemkit/record.
-- One secondary index, (status, expires_at): the sweeper deletes expired records through it, and the
-- stale-claim scan and the transaction reconciler read only its PROCESSING entries.
-- The four times are BIGINT Unix milliseconds, 0 meaning none: no time zone is involved, and MySQL,
-- PostgreSQL and SQLite compare them the same way.
-- scope and idem_key hold at most 128 bytes (idemkit hashes longer keys).
-- record.Store.CreateTable runs this file with the table name of record.Options.Table; the index names
-- are derived from it. A v1 table (id column) is upgraded by migrate_v1_to_v2_postgres.sql
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
  response    BYTEA        NULL,                      -- stored result; NULL when empty
  error       TEXT         NOT NULL DEFAULT '',       -- last failure message
  lease_until BIGINT       NOT NULL DEFAULT 0,        -- Unix ms: a PROCESSING claim may be taken over from then
  expires_at  BIGINT       NOT NULL DEFAULT 0,        -- Unix ms: the record stops counting; 0 = never
  created_at  BIGINT       NOT NULL DEFAULT 0,        -- Unix ms
  updated_at  BIGINT       NOT NULL DEFAULT 0,        -- Unix ms
  PRIMARY KEY (scope, idem_key)
);
CREATE INDEX IF NOT EXISTS idemkit_records_status_expires_idx ON idemkit_records (status, expires_at);
