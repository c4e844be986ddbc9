-- idemkit dedupe records (table v2), MySQL 5.7+ / MariaDB 10.3+ (InnoDB, utf8mb4).
--
-- One row per (scope, idem_key), its clustered primary key; see github.com/idemkit/idemkit/record.
-- One secondary index, (status, expires_at): the sweeper deletes expired records through it, and the
-- stale-claim scan and the transaction reconciler read only its PROCESSING entries. Tx and Mark modes
-- write a record once, in its final state; an Execute-mode finish moves its index entry once (status).
-- The four times are BIGINT Unix milliseconds, 0 meaning none: no DSN flag (parseTime, loc) is needed,
-- no time zone is involved, and MySQL, PostgreSQL and SQLite compare them the same way.
-- scope and idem_key are VARBINARY so keys compare byte for byte: the utf8mb4 collations are
-- case-insensitive or ignore trailing spaces (PAD SPACE), which would make different keys collide.
-- Both hold at most 128 bytes (idemkit hashes longer keys). The other text columns are utf8mb4_bin.
-- record.Store.CreateTable runs this file with the table name of record.Options.Table.
-- A v1 table (AUTO_INCREMENT id) is upgraded by migrate_v1_to_v2_mysql.sql (record.Store.Migrate).
CREATE TABLE IF NOT EXISTS idemkit_records (
  scope       VARBINARY(128) NOT NULL,                -- business type, e.g. a route pattern
  idem_key    VARBINARY(128) NOT NULL,                -- idempotency key
  status      VARCHAR(16)    NOT NULL,                -- PROCESSING, SUCCEEDED, FAILED or REJECTED
  fence       BIGINT         NOT NULL DEFAULT 0,      -- bumped on every claim and takeover
  owner       VARCHAR(64)    NOT NULL DEFAULT '',     -- token of the attempt holding the claim
  fingerprint VARCHAR(128)   NOT NULL DEFAULT '',     -- hash of the request payload
  gid         VARCHAR(128)   NOT NULL DEFAULT '',     -- DTM global transaction id
  branch_id   VARCHAR(128)   NOT NULL DEFAULT '',     -- DTM branch id
  response    MEDIUMBLOB     NULL,                    -- stored result, up to 16 MiB; NULL when empty
  error       TEXT           NOT NULL,                -- last failure message
  lease_until BIGINT         NOT NULL DEFAULT 0,      -- Unix ms: a PROCESSING claim may be taken over from then
  expires_at  BIGINT         NOT NULL DEFAULT 0,      -- Unix ms: the record stops counting; 0 = never
  created_at  BIGINT         NOT NULL DEFAULT 0,      -- Unix ms
  updated_at  BIGINT         NOT NULL DEFAULT 0,      -- Unix ms
  PRIMARY KEY (scope, idem_key),
  KEY idx_status_expires (status, expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
