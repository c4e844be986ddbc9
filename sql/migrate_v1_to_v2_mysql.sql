-- idemkit record table v1 -> v2, MySQL 5.7+ / MariaDB 10.3+.
--
-- v1: id BIGINT AUTO_INCREMENT PRIMARY KEY, UNIQUE (scope, idem_key), KEY (expires_at),
--     KEY (status, lease_until).
-- v2: PRIMARY KEY (scope, idem_key), KEY (status, expires_at). Same columns otherwise, same values:
--     no row is rewritten by anything but the table rebuild.
--
-- Run it once every process runs idemkit v2 (v2 works on a v1 table; v1 does not work on a v2 table,
-- its statements name the id column). One statement, online: InnoDB rebuilds the table in place while
-- reads and writes go on (ALGORITHM=INPLACE, LOCK=NONE; MySQL and MariaDB refuse the statement rather
-- than take a stronger lock), with a short exclusive metadata lock at its start and end. The rebuild
-- copies the table once: plan for its size in disk and time. Its metadata lock waits for every open
-- transaction that used the table, and every later statement on the table queues behind that wait: the
-- first statement bounds it to 10 seconds (lock_wait_timeout is a day by default), after which the
-- ALTER gives up, changing nothing, and can be run again. record.Store.Migrate runs this file for
-- record.Options.Table and does nothing on a v2 table. On a MariaDB Galera cluster it is not online: the
-- ALTER runs in Total Order Isolation, no write commits anywhere in the cluster until the table is
-- rebuilt, and transactions open on the table are rolled back (error 1213) instead of waited for.
SET SESSION lock_wait_timeout = LEAST(@@session.lock_wait_timeout, 10);
ALTER TABLE idemkit_records
  DROP PRIMARY KEY,
  DROP COLUMN id,
  ADD PRIMARY KEY (scope, idem_key),
  DROP INDEX uk_scope_key,
  DROP INDEX idx_expires_at,
  DROP INDEX idx_status_lease,
  ADD INDEX idx_status_expires (status, expires_at),
  ALGORITHM=INPLACE, LOCK=NONE;
