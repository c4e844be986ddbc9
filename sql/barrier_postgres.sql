-- DTM branch barrier table for PostgreSQL (package barrier, and DTM's own dtmcli barrier).
-- Same columns and unique constraint as DTM's sqls/dtmcli.barrier.postgres.sql (dtmcli needs the
-- constraint to be named uniq_barrier). Differences: create_time/update_time default to the current
-- time and create_time is indexed, so the sweeper (barrier.Gorm.DeleteOlder) can find old rows.
CREATE SCHEMA IF NOT EXISTS dtm_barrier;

CREATE TABLE IF NOT EXISTS dtm_barrier.barrier (
  id bigserial PRIMARY KEY,
  trans_type varchar(45) default '',
  gid varchar(128) default '',
  branch_id varchar(128) default '',
  op varchar(45) default '',
  barrier_id varchar(45) default '',
  reason varchar(45) default '',
  create_time timestamp(0) with time zone DEFAULT CURRENT_TIMESTAMP,
  update_time timestamp(0) with time zone DEFAULT CURRENT_TIMESTAMP,
  CONSTRAINT uniq_barrier UNIQUE (gid, branch_id, op, barrier_id)
);

CREATE INDEX IF NOT EXISTS barrier_create_time ON dtm_barrier.barrier (create_time);
