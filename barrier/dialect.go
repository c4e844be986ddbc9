package barrier

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	idemsql "github.com/idemkit/idemkit/sql"
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
	reason      string // select reason by gid, branch_id, op, barrier_id, seeing the latest commit
	deleteOlder string // delete at most N rows created before T: args T, N
	ddl         []string
	beforeArg   func(time.Time) any
	noNUL       bool // the database's text refuses NUL bytes (PostgreSQL)
	// originFirst inserts a compensating op's origin row before its own row, as DTM does, whatever
	// the unique key's order (PostgreSQL, which locks no gaps; see Gorm.Enter).
	originFirst bool
	// createRaces: a CREATE ... IF NOT EXISTS racing the same statement of another session fails
	// (PostgreSQL); CreateTable runs it again.
	createRaces bool
	// indexExists, when set, counts the table's indexes named $2, $1 being the quoted table
	// (PostgreSQL, whose CREATE INDEX IF NOT EXISTS locks the table before it looks for the index);
	// CreateTable asks it with quoted and index before it creates the index.
	indexExists string
	index       string
	// quoted is the quoted [schema.]table; schema ("" when unqualified) and base its parts unquoted.
	quoted, schema, base string
}

// maxTableBase bounds the table's own name (without its schema): 63 bytes less "_create_time".
const maxTableBase = 63 - len("_create_time")

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
	if base := parts[len(parts)-1]; len(base) > maxTableBase {
		// Its index is <table>_create_time and its unique constraint uniq_<table>: PostgreSQL cuts
		// names at 63 bytes, so two long tables would share (or silently skip) them.
		return nil, fmt.Errorf("barrier: table %q: at most %d bytes, so the names of its index and constraint fit in 63", base, maxTableBase)
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
	const cols = "trans_type, gid, branch_id, op, barrier_id, reason"
	switch name {
	case "mysql":
		t := quoteParts(parts, "`")
		d = &dialect{
			quoted: t,
			insert: "INSERT IGNORE INTO " + t + " (" + cols + ") VALUES (?, ?, ?, ?, ?, ?)",
			// A locking read sees the row committed last, not the caller's snapshot (REPEATABLE READ
			// after an earlier read): a cancel committed since is Hanging, not "no row".
			reason: "SELECT reason FROM " + t + " WHERE gid = ? AND branch_id = ? AND op = ? AND barrier_id = ? LOCK IN SHARE MODE",
			// create_time holds the session's local time (DEFAULT now()); compare in that zone.
			deleteOlder: "DELETE FROM " + t + " WHERE create_time < CONVERT_TZ(?, '+00:00', @@session.time_zone) ORDER BY create_time LIMIT ?",
			beforeArg:   utcText,
		}
	case "postgres":
		t := quoteParts(parts, `"`)
		d = &dialect{
			quoted: t,
			// DTM's PostgreSQL table has no default for create_time: set it so DeleteOlder can see the row.
			// Only the branch's own unique key is a repeated delivery: any other conflict (the id
			// sequence behind the rows, after a data-only copy or a logical-replication failover)
			// fails the insert, as dtmcli's ON CONFLICT ON CONSTRAINT uniq_barrier does.
			insert: "INSERT INTO " + t + " (" + cols + ", create_time, update_time) VALUES ($1, $2, $3, $4, $5, $6, now(), now()) " +
				"ON CONFLICT (gid, branch_id, op, barrier_id) DO NOTHING",
			// A plain read, not a locking one (FOR SHARE needs UPDATE, a privilege dtmcli's barrier does
			// not): the insert that found the row waited for its transaction to end, and a statement
			// reads what committed before it (READ COMMITTED); in REPEATABLE READ or SERIALIZABLE that
			// insert fails (40001) when the row is not in the transaction's snapshot.
			reason:      "SELECT reason FROM " + t + " WHERE gid = $1 AND branch_id = $2 AND op = $3 AND barrier_id = $4",
			noNUL:       true,
			originFirst: true,
			createRaces: true,
			// A CREATE INDEX IF NOT EXISTS takes a SHARE lock on the table before it finds the index
			// there: it waits for every open branch transaction, and every later insert waits for it.
			indexExists: "SELECT count(*) FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid " +
				"WHERE x.indrelid = to_regclass($1::text) AND c.relname = $2",
			index: parts[len(parts)-1] + "_create_time",
			deleteOlder: "DELETE FROM " + t + " WHERE id IN (SELECT id FROM " + t +
				" WHERE create_time < $1 ORDER BY create_time LIMIT $2)",
			beforeArg: func(t time.Time) any { return t },
		}
	case "sqlite":
		t := quoteParts(parts, `"`)
		d = &dialect{
			quoted: t,
			insert: "INSERT INTO " + t + " (" + cols + ") VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (gid, branch_id, op, barrier_id) DO NOTHING",
			reason: "SELECT reason FROM " + t + " WHERE gid = ? AND branch_id = ? AND op = ? AND barrier_id = ?",
			deleteOlder: "DELETE FROM " + t + " WHERE id IN (SELECT id FROM " + t +
				" WHERE create_time < ? ORDER BY create_time LIMIT ?)",
			beforeArg: func(t time.Time) any { return t.UTC().Format("2006-01-02 15:04:05") },
		}
	default:
		return nil, fmt.Errorf("barrier: unsupported gorm dialect %q (want mysql, postgres or sqlite)", name)
	}
	if d.ddl, err = renderDDL(name, parts); err != nil {
		return nil, err
	}
	d.base = parts[len(parts)-1]
	if len(parts) == 2 {
		d.schema = parts[0]
	}
	return d, nil
}

// Names in the DDL files of package sql, which create the default tables.
var (
	ddlDefaultQualified = regexp.MustCompile(`\bdtm_barrier\.barrier\b`)
	ddlDefaultSchema    = regexp.MustCompile(`\bdtm_barrier\b`)
	ddlUnique           = regexp.MustCompile(`\buniq_barrier\b`)
	ddlIndex            = regexp.MustCompile(`\bbarrier_create_time\b`)
	ddlIndexedTable     = regexp.MustCompile(`\bON barrier\b`)
	ddlBareTable        = regexp.MustCompile(`\bbarrier\b`)
)

// renderDDL returns the statements of the barrier DDL file of package sql for dialect name, renamed
// for the table of parts: the file is the single source of the schema (DTM's columns; see the file).
// The schema statement is dropped for an unqualified table; column names such as barrier_id are word
// matches apart and never renamed.
func renderDDL(name string, parts []string) ([]string, error) {
	file, err := idemsql.File("barrier", name)
	if err != nil {
		return nil, fmt.Errorf("barrier: %w", err)
	}
	q := `"`
	if name == "mysql" {
		q = "`"
	}
	quote := func(s string) string { return q + s + q }
	base := parts[len(parts)-1]
	table := quoteParts(parts, q)
	index := quote(base + "_create_time")
	indexed := table // the table an index is ON: SQLite wants it unqualified, the index qualified
	if name == "sqlite" && len(parts) == 2 {
		index, indexed = quote(parts[0])+"."+index, quote(base)
	}
	names := strings.NewReplacer("\x00", table, "\x01", quote("uniq_"+base), "\x02", index, "\x03", indexed)
	var out []string
	for _, st := range idemsql.Statements(file) {
		if strings.HasPrefix(st, "CREATE DATABASE") || strings.HasPrefix(st, "CREATE SCHEMA") {
			if len(parts) < 2 {
				continue
			}
			out = append(out, ddlDefaultSchema.ReplaceAllLiteralString(st, quote(parts[0])))
			continue
		}
		// Mark every default name first, then put the new names in: a new name may contain "barrier".
		for _, r := range []struct {
			re   *regexp.Regexp
			mark string
		}{{ddlDefaultQualified, "\x00"}, {ddlUnique, "\x01"}, {ddlIndex, "\x02"}, {ddlIndexedTable, "ON \x03"}, {ddlBareTable, "\x00"}} {
			st = r.re.ReplaceAllLiteralString(st, r.mark)
		}
		out = append(out, names.Replace(st))
	}
	return out, nil
}

// utcText formats t in UTC with microseconds, independent of the driver's location setting.
func utcText(t time.Time) any { return t.UTC().Format("2006-01-02 15:04:05.999999") }
