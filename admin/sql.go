package admin

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Every SQL text of the package is in this file, so that a change of the record table's layout is
// made in one place. The statements address records by (scope, idem_key) only — never by a surrogate
// id — and read expires_at = 0 as "no expiry". Placeholders are '?': gorm rewrites them for
// PostgreSQL.
//
// The v2 table has its primary key (scope, idem_key) and one secondary index, (status, expires_at)
// (record's DDL); InnoDB appends the primary key to it, so it is ordered (status, expires_at, scope,
// idem_key). Every condition on a state leads with status, so that index serves it:
//
//   - the claims gauge (Claims, on every Prometheus scrape) reads the PROCESSING entries only — the
//     claims in flight — never the table (TestPlansUseStatusIndex checks the plans on MariaDB,
//     PostgreSQL and SQLite);
//   - a listing of one status pages in the index's order (expiry, then scope and key): each page
//     starts where the last one ended and stops after its rows, however many records the table and
//     the status hold;
//   - the sweeper's conditions are record.Store's own (status first), and the expired records are
//     listed in the index's order, the order MySQL's sweeper reads a batch's keys in.
//
// Listings without a status page through the primary key; aggregates over every state (Stats) and
// filters on gid or updated_at, which no index holds, read the table (or the scope's part of it).
//
// The sweeper's conditions below must select what record.Store.DeleteExpired, RecoverStale and
// Pending select; TestSweepPlanMatchesSweeper runs both on the same records and compares.
const (
	// condExpired: records the sweeper deletes. A PROCESSING record with a gid never expires, nor
	// does one whose lease is live. The status list covers every state; it is there for the index.
	condExpired = "status IN ('SUCCEEDED', 'REJECTED', 'FAILED', 'PROCESSING') AND expires_at <> 0 AND expires_at <= ? " +
		"AND (status <> 'PROCESSING' OR (LENGTH(gid) = 0 AND lease_until <= ?))"
	// condStale: claims the sweeper recovers (FAILED, fence + 1): lease run out, no gid, not expired.
	condStale = "status = 'PROCESSING' AND lease_until <= ? AND LENGTH(gid) = 0 AND (expires_at = 0 OR expires_at > ?)"
	// condPending: claims tied to a global transaction whose lease ran out: the reconciler's.
	condPending = "status = 'PROCESSING' AND LENGTH(gid) > 0 AND lease_until <= ?"
	// condStuck: every PROCESSING record whose lease ran out, gid or not.
	condStuck = "status = 'PROCESSING' AND lease_until <= ?"
	// condAfter: keyset pagination in (scope, idem_key) order, the primary key.
	condAfter = "(scope > ? OR (scope = ? AND idem_key > ?))"
	// condAfterExpiry: keyset pagination in (expires_at, scope, idem_key) order within one status,
	// the (status, expires_at) index's. The first comparison gives the index range its start.
	condAfterExpiry = "expires_at >= ? AND (expires_at > ? OR (expires_at = ? AND (scope > ? OR (scope = ? AND idem_key > ?))))"
)

// entryColumns are the columns of an [Entry], in scan order; the response is read as its size only.
func (q *sqlTexts) entryColumns() string {
	return "scope, idem_key, status, fence, owner, fingerprint, gid, branch_id, " +
		q.octetLength + "(response), error, lease_until, expires_at, created_at, updated_at"
}

// sqlTexts builds the statements for one table and dialect.
type sqlTexts struct {
	dialect     string
	table       string // quoted [schema.]table
	octetLength string // the byte length function of the dialect
}

func newSQLTexts(dialect, table string) *sqlTexts {
	q := &sqlTexts{dialect: dialect, table: quoteTable(dialect, table), octetLength: "LENGTH"}
	if dialect == "postgres" {
		q.octetLength = "OCTET_LENGTH"
	}
	return q
}

// quoteTable quotes a [schema.]table name already validated by record.New (letters, digits and
// underscores only).
func quoteTable(dialect, name string) string {
	q := `"`
	if dialect == "mysql" {
		q = "`"
	}
	parts := strings.Split(name, ".")
	for i, p := range parts {
		parts[i] = q + p + q
	}
	return strings.Join(parts, ".")
}

// probe selects every column the package reads and no row: it fails when the table is missing or is
// not a record table.
func (q *sqlTexts) probe() string {
	return "SELECT scope, idem_key, status, fence, owner, fingerprint, gid, branch_id, response, error, " +
		"lease_until, expires_at, created_at, updated_at FROM " + q.table + " WHERE 1 = 0"
}

// scopeExists finds one record of a stored scope (the unique key's prefix).
func (q *sqlTexts) scopeExists() string {
	return "SELECT 1 FROM " + q.table + " WHERE scope = ? LIMIT 1"
}

// scopes lists distinct stored scopes, in order, for error messages.
func (q *sqlTexts) scopes(w where) (string, []any) {
	return "SELECT DISTINCT scope FROM " + q.table + w.sql() + " ORDER BY scope LIMIT ?", w.args
}

// page lists one page of entries after the last entry read (nil for the first page): in the
// (status, expires_at) index's order when w pins one status, else in primary key order.
func (q *sqlTexts) page(w where, after *Entry, limit int) (string, []any) {
	order := "scope, idem_key"
	if w.status != "" {
		order = "expires_at, scope, idem_key"
		if after != nil {
			e := millis(after.ExpiresAt)
			w.add(condAfterExpiry, e, e, e, after.Scope, after.Scope, after.Key)
		}
	} else if after != nil {
		w.add(condAfter, after.Scope, after.Scope, after.Key)
	}
	return "SELECT " + q.entryColumns() + " FROM " + q.table + w.sql() + " ORDER BY " + order + " LIMIT ?",
		append(w.args, limit)
}

// sweepList lists the entries matching a sweeper condition in the sweeper's order.
func (q *sqlTexts) sweepList(w where, order string, limit int) (string, []any) {
	return "SELECT " + q.entryColumns() + " FROM " + q.table + w.sql() + " ORDER BY " + order + " LIMIT ?",
		append(w.args, limit)
}

// count counts the rows matching w.
func (q *sqlTexts) count(w where) (string, []any) {
	return "SELECT COUNT(*) FROM " + q.table + w.sql(), w.args
}

// stats aggregates records per scope; now is passed for the stuck and expired columns. The columns
// are: scope, total, PROCESSING, SUCCEEDED, FAILED, REJECTED, stuck, taken-over records, fence bumps,
// expired, oldest PROCESSING created_at (NULL when none).
func (q *sqlTexts) stats(w where, nowMS int64) (string, []any) {
	s := "SELECT scope, COUNT(*)," +
		" SUM(CASE WHEN status = 'PROCESSING' THEN 1 ELSE 0 END)," +
		" SUM(CASE WHEN status = 'SUCCEEDED' THEN 1 ELSE 0 END)," +
		" SUM(CASE WHEN status = 'FAILED' THEN 1 ELSE 0 END)," +
		" SUM(CASE WHEN status = 'REJECTED' THEN 1 ELSE 0 END)," +
		" SUM(CASE WHEN " + condStuck + " THEN 1 ELSE 0 END)," +
		" SUM(CASE WHEN fence > 1 THEN 1 ELSE 0 END)," +
		" SUM(CASE WHEN fence > 1 THEN fence - 1 ELSE 0 END)," +
		" SUM(CASE WHEN " + condExpired + " THEN 1 ELSE 0 END)," +
		" MIN(CASE WHEN status = 'PROCESSING' THEN created_at END)" +
		" FROM " + q.table + w.sql() + " GROUP BY scope ORDER BY scope"
	return s, append([]any{nowMS, nowMS, nowMS}, w.args...) // condStuck's, condExpired's two
}

// claims aggregates the PROCESSING records per scope: count, stuck, oldest created_at. It reads the
// PROCESSING entries of the (status, expires_at) index and their rows: the claims in flight, not the
// table.
func (q *sqlTexts) claims(w where, nowMS int64) (string, []any) {
	w.add("status = 'PROCESSING'")
	s := "SELECT scope, COUNT(*), SUM(CASE WHEN lease_until <= ? THEN 1 ELSE 0 END), MIN(created_at) FROM " +
		q.table + w.sql() + " GROUP BY scope ORDER BY scope"
	return s, append([]any{nowMS}, w.args...)
}

// where is a conjunction of conditions and their arguments.
type where struct {
	conds  []string
	args   []any
	status string // the one status the conditions pin, if any: listings then follow the status index
}

func (w *where) add(cond string, args ...any) {
	w.conds = append(w.conds, cond)
	w.args = append(w.args, args...)
}

func (w where) sql() string {
	if len(w.conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(w.conds, " AND ")
}

// namespace restricts w to the stored scopes starting with prefix ("ns/"), exactly (case and all).
// On MySQL (scope is VARBINARY: LIKE compares bytes) and PostgreSQL it is a LIKE prefix pattern,
// escaped with '!' (no backslash, whose meaning in literals differs between servers): MySQL reads it
// as a range of the primary key, and PostgreSQL's planner estimates it from the scope's statistics —
// a SUBSTR comparison there is estimated at 0.5% of the rows whatever they hold, which makes a scan of
// the table look cheaper than the status index for a listing of a common status. SQLite's LIKE
// ignores ASCII case, so there it compares the scope's first characters.
func (q *sqlTexts) namespace(w *where, prefix string) {
	if q.dialect == "sqlite" {
		w.add("SUBSTR(scope, 1, "+strconv.Itoa(utf8.RuneCountInString(prefix))+") = ?", prefix)
		return
	}
	w.add("scope LIKE ? ESCAPE '!'", likeEscape(prefix)+"%")
}

// gid restricts w to the records of gid, exactly. MySQL's gid column is utf8mb4_bin, a PAD SPACE
// collation that compares "g1" equal to "g1 ": there the byte lengths must match too.
func (q *sqlTexts) gid(w *where, gid string) {
	if q.dialect == "mysql" {
		w.add("gid = ? AND LENGTH(gid) = ?", gid, len(gid))
		return
	}
	w.add("gid = ?", gid)
}

// likeEscape escapes LIKE's wildcards and its escape character '!' in s.
func likeEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == '!' || r == '%' || r == '_' {
			b.WriteByte('!')
		}
		b.WriteRune(r)
	}
	return b.String()
}
