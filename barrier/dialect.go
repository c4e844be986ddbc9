package barrier

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Default table names.
const (
	// DefaultTable is DTM's barrier table, used on MySQL/MariaDB and PostgreSQL.
	DefaultTable = "dtm_barrier.barrier"
	// DefaultSQLiteTable is the barrier table on SQLite, which has no schemas of that kind.
	DefaultSQLiteTable = "barrier"
	// DefaultDeleteBatch is the batch size of Gorm.DeleteOlder when it is given a limit <= 0.
	DefaultDeleteBatch = 1000
)

// tablePart is one part of a table name: an unquoted SQL identifier.
var tablePart = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// dialect holds the SQL of one database family for one table.
type dialect struct {
	table       string
	insert      string // insert-or-ignore of one row: trans_type, gid, branch_id, op, barrier_id, reason
	reason      string // select reason by gid, branch_id, op, barrier_id
	deleteOlder string // delete at most N rows created before T: args T, N
	ddl         []string
	beforeArg   func(time.Time) any
}

// splitTable validates a table name ("table" or "schema.table").
func splitTable(table string) ([]string, error) {
	parts := strings.Split(table, ".")
	if len(parts) > 2 {
		return nil, fmt.Errorf("barrier: table %q: at most schema.table", table)
	}
	for _, p := range parts {
		if !tablePart.MatchString(p) {
			return nil, fmt.Errorf("barrier: table %q: each part must match %s", table, tablePart)
		}
	}
	return parts, nil
}

func quoteParts(parts []string, q string) string {
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = q + p + q
	}
	return strings.Join(out, ".")
}

// newDialect returns the SQL for the gorm dialector name and table.
func newDialect(name, table string) (*dialect, error) {
	if table == "" {
		table = DefaultTable
		if name == "sqlite" {
			table = DefaultSQLiteTable
		}
	}
	d, err := buildDialect(name, table)
	if err != nil {
		return nil, err
	}
	d.table = table
	return d, nil
}

func buildDialect(name, table string) (d *dialect, err error) {
	parts, err := splitTable(table)
	if err != nil {
		return nil, err
	}
	base := parts[len(parts)-1]
	const cols = "trans_type, gid, branch_id, op, barrier_id, reason"
	switch name {
	case "mysql":
		t := quoteParts(parts, "`")
		d = &dialect{
			insert: "INSERT IGNORE INTO " + t + " (" + cols + ") VALUES (?, ?, ?, ?, ?, ?)",
			reason: "SELECT reason FROM " + t + " WHERE gid = ? AND branch_id = ? AND op = ? AND barrier_id = ?",
			// create_time holds the session's local time (DEFAULT now()); compare in that zone.
			deleteOlder: "DELETE FROM " + t + " WHERE create_time < CONVERT_TZ(?, '+00:00', @@session.time_zone) ORDER BY create_time LIMIT ?",
			beforeArg:   utcText,
		}
		if len(parts) == 2 {
			d.ddl = append(d.ddl, "CREATE DATABASE IF NOT EXISTS `"+parts[0]+"` /*!40100 DEFAULT CHARACTER SET utf8mb4 */")
		}
		d.ddl = append(d.ddl, `CREATE TABLE IF NOT EXISTS `+t+` (
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
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4`)
		return d, nil
	case "postgres":
		t := quoteParts(parts, `"`)
		d = &dialect{
			// DTM's PostgreSQL table has no default for create_time: set it so DeleteOlder can see the row.
			insert: "INSERT INTO " + t + " (" + cols + ", create_time, update_time) VALUES ($1, $2, $3, $4, $5, $6, now(), now()) ON CONFLICT DO NOTHING",
			reason: "SELECT reason FROM " + t + " WHERE gid = $1 AND branch_id = $2 AND op = $3 AND barrier_id = $4",
			deleteOlder: "DELETE FROM " + t + " WHERE id IN (SELECT id FROM " + t +
				" WHERE create_time < $1 ORDER BY create_time LIMIT $2)",
			beforeArg: func(t time.Time) any { return t },
		}
		if len(parts) == 2 {
			d.ddl = append(d.ddl, `CREATE SCHEMA IF NOT EXISTS "`+parts[0]+`"`)
		}
		d.ddl = append(d.ddl, `CREATE TABLE IF NOT EXISTS `+t+` (
  id bigserial PRIMARY KEY,
  trans_type varchar(45) default '',
  gid varchar(128) default '',
  branch_id varchar(128) default '',
  op varchar(45) default '',
  barrier_id varchar(45) default '',
  reason varchar(45) default '',
  create_time timestamp(0) with time zone DEFAULT CURRENT_TIMESTAMP,
  update_time timestamp(0) with time zone DEFAULT CURRENT_TIMESTAMP,
  CONSTRAINT "uniq_`+base+`" UNIQUE (gid, branch_id, op, barrier_id)
)`,
			`CREATE INDEX IF NOT EXISTS "`+base+`_create_time" ON `+t+` (create_time)`)
		return d, nil
	case "sqlite":
		t := quoteParts(parts, `"`)
		idx := `"` + base + `_create_time"`
		if len(parts) == 2 {
			idx = `"` + parts[0] + `".` + idx
		}
		return &dialect{
			insert: "INSERT INTO " + t + " (" + cols + ") VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
			reason: "SELECT reason FROM " + t + " WHERE gid = ? AND branch_id = ? AND op = ? AND barrier_id = ?",
			deleteOlder: "DELETE FROM " + t + " WHERE id IN (SELECT id FROM " + t +
				" WHERE create_time < ? ORDER BY create_time LIMIT ?)",
			beforeArg: func(t time.Time) any { return t.UTC().Format("2006-01-02 15:04:05") },
			ddl: []string{`CREATE TABLE IF NOT EXISTS ` + t + ` (
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
)`, `CREATE INDEX IF NOT EXISTS ` + idx + ` ON "` + base + `" (create_time)`},
		}, nil
	}
	return nil, fmt.Errorf("barrier: unsupported gorm dialect %q (want mysql, postgres or sqlite)", name)
}

// utcText formats t in UTC with microseconds, independent of the driver's location setting.
func utcText(t time.Time) any { return t.UTC().Format("2006-01-02 15:04:05.999999") }
