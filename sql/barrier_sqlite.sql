-- DTM branch barrier table for SQLite (package barrier). Same columns and unique key as DTM's
-- dtm_barrier.barrier; SQLite has no schemas of that kind, so the default table name is barrier.
CREATE TABLE IF NOT EXISTS barrier (
  id integer PRIMARY KEY AUTOINCREMENT,
  trans_type varchar(45) default '',
  gid varchar(128) default '',
  branch_id varchar(128) default '',
  op varchar(45) default '',
  barrier_id varchar(45) default '',
  reason varchar(45) default '',
  create_time datetime DEFAULT CURRENT_TIMESTAMP,
  update_time datetime DEFAULT CURRENT_TIMESTAMP,
  UNIQUE (gid, branch_id, op, barrier_id)
);

CREATE INDEX IF NOT EXISTS barrier_create_time ON barrier (create_time);
