-- idemkit dedupe records, SQLite 3.24+.
--
-- One row per (scope, idem_key); see github.com/idemkit/idemkit/record.
-- The four times are INTEGER (BIGINT) Unix milliseconds, 0 meaning none: no time zone is involved, and
-- MySQL, PostgreSQL and SQLite compare them the same way.
-- SQLite does not enforce the VARCHAR lengths; idemkit keeps scope and idem_key within 128 bytes.
-- id is an INTEGER PRIMARY KEY, the auto-assigned rowid.
-- record.Store.CreateTable runs this file with the table name of record.Options.Table; the index names
-- are derived from it.
CREATE TABLE IF NOT EXISTS idemkit_records (
  id          INTEGER      PRIMARY KEY,
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
  UNIQUE (scope, idem_key)
);
CREATE INDEX IF NOT EXISTS idemkit_records_expires_at_idx ON idemkit_records (expires_at);
CREATE INDEX IF NOT EXISTS idemkit_records_status_lease_idx ON idemkit_records (status, lease_until);
