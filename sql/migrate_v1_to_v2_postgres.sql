-- idemkit record table v1 -> v2, PostgreSQL 11+.
--
-- v1: id BIGINT identity PRIMARY KEY, UNIQUE (scope, idem_key), indexes on (expires_at) and
--     (status, lease_until).
-- v2: PRIMARY KEY (scope, idem_key), index on (status, expires_at). Same columns otherwise, same values.
--
-- Run it once every process runs idemkit v2 (v2 works on a v1 table; v1 does not work on a v2 table,
-- its statements name the id column). Run the statements one by one, outside a transaction block
-- (CREATE/DROP INDEX CONCURRENTLY refuse one); the file is idempotent, so a failed run can be run
-- again (its first block drops the INVALID index a cancelled CREATE INDEX CONCURRENTLY leaves).
-- Locks: the CONCURRENTLY statements build and drop indexes without blocking reads or writes (an
-- index build, once built, waits for every transaction of the database holding an older snapshot to
-- end, on any table: a REPEATABLE READ transaction, a running pg_dump; run it outside them); the
-- DO block swaps the primary key in one short transaction that holds an ACCESS EXCLUSIVE lock for
-- the time of a few catalog updates (no table scan or rewrite: the new primary key's index exists,
-- its columns are NOT NULL, and DROP COLUMN only marks the column dropped). Getting that lock waits
-- for every transaction open on the table, 10s at most, with every later statement on the table
-- queued behind the wait; the block then fails and can be run again. record.Store.Migrate runs
-- this file for record.Options.Table and does nothing on a v2 table.
DO $$ -- a failed run (a CREATE INDEX CONCURRENTLY cancelled or timed out) leaves its index INVALID,
     -- which IF NOT EXISTS below would keep and the swap could not use: drop it, to build it again
     -- (a plain DROP INDEX: a short ACCESS EXCLUSIVE lock, only when there is one; do not run two
     -- migrations of a table at once, the second would drop the index the first is building:
     -- record.Store.Migrate takes an advisory lock so that its runs do not)
DECLARE
  i record;
BEGIN
  SET LOCAL lock_timeout = '10s';
  FOR i IN SELECT x.indexrelid::regclass AS idx FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
      WHERE x.indrelid = 'idemkit_records'::regclass AND NOT x.indisvalid
      AND c.relname IN (trim(both '"' from 'idemkit_records_pk_v2'), trim(both '"' from 'idemkit_records_status_expires_idx')) LOOP
    EXECUTE format('DROP INDEX %s', i.idx);
  END LOOP;
END $$;
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS idemkit_records_pk_v2 ON idemkit_records (scope, idem_key);
CREATE INDEX CONCURRENTLY IF NOT EXISTS idemkit_records_status_expires_idx ON idemkit_records (status, expires_at);
DO $$
DECLARE
  tbl regclass := 'idemkit_records';
  c   record;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = tbl AND attname = 'id' AND NOT attisdropped) THEN
    RETURN; -- already v2
  END IF;
  SET LOCAL lock_timeout = '10s'; -- give up rather than queue every query behind a long transaction
  FOR c IN SELECT conname FROM pg_constraint WHERE conrelid = tbl
      AND (contype = 'p' OR contype = 'u' AND pg_get_constraintdef(oid) = 'UNIQUE (scope, idem_key)') LOOP
    EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', tbl, c.conname);
  END LOOP;
  EXECUTE 'ALTER TABLE idemkit_records ADD CONSTRAINT idemkit_records_pkey PRIMARY KEY USING INDEX idemkit_records_pk_v2';
  EXECUTE format('ALTER TABLE %s DROP COLUMN id', tbl);
END $$;
DROP INDEX CONCURRENTLY IF EXISTS idemkit_records_expires_at_idx;
DROP INDEX CONCURRENTLY IF EXISTS idemkit_records_status_lease_idx;
DROP INDEX CONCURRENTLY IF EXISTS idemkit_records_pk_v2; -- left by a run on a table already migrated
