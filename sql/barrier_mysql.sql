-- DTM branch barrier table for MySQL/MariaDB (package barrier, and DTM's own dtmcli barrier).
-- Same schema as DTM's sqls/dtmcli.barrier.mysql.sql; the table name is configurable
-- (barrier.GormOptions.Table), the default is dtm_barrier.barrier.
CREATE DATABASE IF NOT EXISTS dtm_barrier /*!40100 DEFAULT CHARACTER SET utf8mb4 */;

CREATE TABLE IF NOT EXISTS dtm_barrier.barrier (
  id bigint(22) PRIMARY KEY AUTO_INCREMENT,
  trans_type varchar(45) default '',
  gid varchar(128) default '',
  branch_id varchar(128) default '',
  op varchar(45) default '',
  barrier_id varchar(45) default '',
  reason varchar(45) default '' comment 'the branch type who insert this record',
  create_time datetime DEFAULT now(),
  update_time datetime DEFAULT now(),
  key(create_time),
  key(update_time),
  UNIQUE key(gid, branch_id, op, barrier_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
