-- DTM branch barrier table for MySQL/MariaDB (package barrier, and DTM's own dtmcli barrier).
-- Same columns, defaults and keys as DTM's sqls/dtmcli.barrier.mysql.sql, but for the types of the
-- unique key's columns: gid, branch_id, op and barrier_id are VARBINARY, so they compare byte for byte
-- as on PostgreSQL, SQLite, Redis and in DTM's own stores. DTM's varchar columns take the default
-- utf8mb4 collation, case- and accent-insensitive and PAD SPACE: gids "Order-A" and "order-a" (or "e"
-- and "é", "g1" and "g1 ") share their rows, and the second transaction's branches are taken for
-- repeated deliveries of the first's and never run. The lengths hold DTM's limits in characters
-- (128 and 45) in bytes, 4 per character. The table name is configurable (barrier.GormOptions.Table),
-- the default is dtm_barrier.barrier.
CREATE DATABASE IF NOT EXISTS dtm_barrier /*!40100 DEFAULT CHARACTER SET utf8mb4 */;

CREATE TABLE IF NOT EXISTS dtm_barrier.barrier (
  id bigint(22) PRIMARY KEY AUTO_INCREMENT,
  trans_type varchar(45) default '',
  gid varbinary(512) default '',
  branch_id varbinary(512) default '',
  op varbinary(180) default '',
  barrier_id varbinary(180) default '',
  reason varchar(45) default '' comment 'the branch type who insert this record',
  create_time datetime DEFAULT now(),
  update_time datetime DEFAULT now(),
  key(create_time),
  key(update_time),
  UNIQUE key(gid, branch_id, op, barrier_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
