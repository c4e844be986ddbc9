package record

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Dialect names, as gorm's Dialector.Name() spells them.
const (
	dialectMySQL    = "mysql"
	dialectPostgres = "postgres"
	dialectSQLite   = "sqlite"
)

// maxIdentLen bounds each part of a table name: MySQL's limit. PostgreSQL cuts longer identifiers,
// quoted ones too, to maxPostgresIdentLen bytes: a longer name would address the table named by its
// first 63 bytes, another Store's, so it is refused there.
const (
	maxIdentLen         = 64
	maxPostgresIdentLen = 63
)

var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// validateTable checks name is an identifier, optionally with one schema prefix, each part at most
// maxIdentLen bytes (maxPostgresIdentLen on PostgreSQL, the dialect). It is the only thing standing
// between Options.Table and the SQL text.
func validateTable(dialect, name string) (schema, table string, err error) {
	if !tableName.MatchString(name) {
		return "", "", fmt.Errorf("record: invalid table name %q: want [schema.]name of letters, digits and underscores, not starting with a digit", name)
	}
	schema, table, ok := strings.Cut(name, ".")
	if !ok {
		schema, table = "", name
	}
	limit, why := maxIdentLen, ""
	if dialect == dialectPostgres {
		limit, why = maxPostgresIdentLen, " on PostgreSQL, which cuts longer names (and would address another table)"
	}
	if len(schema) > limit || len(table) > limit {
		return "", "", fmt.Errorf("record: invalid table name %q: each part must be at most %d bytes%s", name, limit, why)
	}
	return schema, table, nil
}

func quoteIdent(dialect, s string) string {
	if dialect == dialectMySQL {
		return "`" + s + "`"
	}
	return `"` + s + `"`
}

// qualified returns the quoted [schema.]table.
func qualified(dialect, schema, table string) string {
	if schema == "" {
		return quoteIdent(dialect, table)
	}
	return quoteIdent(dialect, schema) + "." + quoteIdent(dialect, table)
}

// columns are the record's columns after scope and idem_key, in the order the Store scans them.
const columns = "status, fence, owner, fingerprint, gid, branch_id, response, error, lease_until, expires_at, created_at, updated_at"

// condVersion selects one record at one version (scope, key, fence, owner, status).
const condVersion = "scope = ? AND idem_key = ? AND fence = ? AND owner = ? AND status = ?"

// Conditions of the sweeper's and the reconciler's statements. They lead with status, so the table's
// one secondary index, (status, expires_at), serves each of them: DeleteExpired ranges over
// (status, expires_at <= now) for every status, RecoverStale and Pending over the PROCESSING
// entries only (the claims in flight, a small part of the table). A record tied to a global
// transaction nobody settled yet (PROCESSING with a gid) never expires: the reconciler lists it
// whatever its expiry, and the sweeper leaves it alone until it is settled. Nor does a claim whose
// lease is live (a record written before Extend moved the expiry with the lease): its attempt runs,
// and the Guard answers its duplicates in flight.
const (
	condExpired = "status IN ('SUCCEEDED', 'REJECTED', 'FAILED', 'PROCESSING') AND expires_at <> 0 AND expires_at <= ? " +
		"AND (status <> 'PROCESSING' OR (LENGTH(gid) = 0 AND lease_until <= ?))"
	condStale   = "status = 'PROCESSING' AND lease_until <= ? AND LENGTH(gid) = 0 AND (expires_at = 0 OR expires_at > ?)"
	condPending = "status = 'PROCESSING' AND LENGTH(gid) > 0 AND lease_until <= ?"
)

// queries are a Store's SQL texts, built once by New, in the driver's own placeholder syntax ('?', or
// $1, $2, ... on PostgreSQL). They name no id column, so they run on the v1 table (AUTO_INCREMENT id,
// UNIQUE (scope, idem_key)) as well as on the v2 one (PRIMARY KEY (scope, idem_key)).
type queries struct {
	dialect string
	name    string // the configured table name, unquoted
	schema  string
	table   string // bare table name, unquoted
	quoted  string // quoted [schema.]table

	insert string // insert-first, no error on conflict
	// insertCommitPfx starts the INSERT-and-COMMIT packet of a multi-statement transaction, up to its
	// first value (MySQL; see multi.go).
	insertCommitPfx string
	// beginProbePfx starts the packet of START TRANSACTION and the probe for a record (SELECT 1), up
	// to the scope's value (MySQL; see multi.go).
	beginProbePfx string
	// rollbackGetPfx starts the packet of ROLLBACK and the read of a record the probe found, up to the
	// scope's value (MySQL; see multi.go).
	rollbackGetPfx string
	// readRowsPfx starts the read of several records by primary key, up to the condition (MySQL;
	// see batch.go).
	readRowsPfx string
	// finishPfx starts a finish written with literals, up to the status's value (MySQL; see batch.go).
	finishPfx string
	// valuesPfx starts a multi-row INSERT with bound parameters, up to its first row; finishRowsPfx
	// starts a multi-row finish, up to its first row, and finishRowsSfx ends it (PostgreSQL; see
	// batch_postgres.go).
	valuesPfx     string
	finishRowsPfx string
	finishRowsSfx string

	plainInsert string // INSERT without conflict handling (tests of interpretError)
	get         string
	getLocked   string // get with a locking read, for transaction-bound stores
	update      string
	finish      string // update of a claim's own columns (status, result, times), same fence and owner
	confirm     string // MySQL: does the versioned row exist? (rows changed was 0)
	confirmLock string // confirm with a locking read, for transaction-bound stores
	written     string // does the row hold a claim's own write? (it matched no row; see finishAgain)
	delete      string

	delExpired string // now, limit (MySQL: now, then completed by keyList)
	recover    string // error, updated_at, now, now, [now, now,] limit (MySQL: completed by keyList)
	// expiredKeys and staleKeys read the primary keys of a batch of the records delExpired and
	// recover act on, without a lock (MySQL: now, now, limit; see Store.batchByKey).
	expiredKeys string
	staleKeys   string
	staleList   string // now, now, limit: the version of stale claims (see Store.RecoverStaleClaims)
	recoverOne  string // error, updated_at, now, now, scope, key, fence, owner: recover one stale claim
	pendingPfx  string // followed by a scope list, then pendingSfx
	batch       int    // rows per sweeper statement: maxBatch (tests lower it)
	rebind      bool   // texts built per call need $n placeholders (PostgreSQL)
}

func buildQueries(dialect, schema, table string) *queries {
	q := &queries{dialect: dialect, schema: schema, table: table, quoted: qualified(dialect, schema, table), batch: maxBatch}
	q.name = table
	if schema != "" {
		q.name = schema + "." + table
	}
	t := q.quoted
	cols := "scope, idem_key, " + columns
	q.plainInsert = "INSERT INTO " + t + " (" + cols + ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
	switch dialect {
	case dialectMySQL:
		// A duplicate sets a column to itself: no change, so zero rows affected (without
		// clientFoundRows, which New refuses).
		q.insert = q.plainInsert + " ON DUPLICATE KEY UPDATE scope = scope"
		q.insertCommitPfx = "INSERT INTO " + t + " (" + cols + ") VALUES ("
		q.beginProbePfx = "START TRANSACTION; SELECT 1 FROM " + t + " WHERE scope = "
		q.rollbackGetPfx = "ROLLBACK; SELECT " + columns + " FROM " + t + " WHERE scope = "
		q.finishPfx = "UPDATE " + t + " SET status = "
		q.readRowsPfx = "SELECT scope, idem_key, " + columns + " FROM " + t + " WHERE "
	default:
		q.insert = q.plainInsert + " ON CONFLICT (scope, idem_key) DO NOTHING"
		q.valuesPfx = "INSERT INTO " + t + " (" + cols + ") VALUES "
		q.finishRowsPfx = "UPDATE " + t + " AS t SET status = v.status, response = v.response, error = v.error, " +
			"lease_until = v.lease_until, expires_at = v.expires_at, updated_at = v.updated_at FROM (VALUES "
		q.finishRowsSfx = ") AS v (scope, idem_key, fence, owner, prev_status, status, response, error, lease_until, expires_at, updated_at) " +
			"WHERE t.scope = v.scope AND t.idem_key = v.idem_key AND t.fence = v.fence AND t.owner = v.owner AND t.status = v.prev_status " +
			"RETURNING t.scope, t.idem_key"
	}
	q.get = "SELECT " + columns + " FROM " + t + " WHERE scope = ? AND idem_key = ?"
	q.getLocked = q.get
	if dialect != dialectSQLite { // SQLite has no row locks: its writers are serialised anyway
		q.getLocked += " FOR UPDATE"
	}
	q.update = "UPDATE " + t + " SET status = ?, fence = ?, owner = ?, fingerprint = ?, gid = ?, branch_id = ?, " +
		"response = ?, error = ?, lease_until = ?, expires_at = ?, created_at = ?, updated_at = ? " +
		"WHERE " + condVersion
	q.finish = "UPDATE " + t + " SET status = ?, response = ?, error = ?, lease_until = ?, expires_at = ?, updated_at = ? " +
		"WHERE " + condVersion
	q.confirm = "SELECT 1 FROM " + t + " WHERE " + condVersion
	q.confirmLock = q.confirm
	if dialect == dialectMySQL {
		q.confirmLock += " FOR UPDATE" // read the row the UPDATE saw, not an older snapshot
	}
	q.delete = "DELETE FROM " + t + " WHERE " + condVersion
	sameResponse := "response IS ?" // NULL-safe equality: an empty result is NULL
	switch dialect {
	case dialectMySQL:
		sameResponse = "response <=> ?"
	case dialectPostgres:
		sameResponse = "response IS NOT DISTINCT FROM ?"
	}
	q.written = "SELECT 1 FROM " + t + " WHERE " + condVersion + " AND " + sameResponse +
		" AND error = ? AND lease_until = ? AND expires_at = ? AND updated_at = ?"

	recoverCols := "UPDATE " + t + " SET status = 'FAILED', fence = fence + 1, owner = '', error = ?, updated_at = ? WHERE "
	recoverSet := recoverCols + condStale
	switch dialect {
	case dialectMySQL:
		// Not DELETE (UPDATE) ... WHERE cond LIMIT ?: that walks the (status, expires_at) index and
		// locks its entries — the rows it acts on and the ones its range scan passes — before the
		// rows, while every other writer locks a row (the primary key) and then its index entry:
		// a Guard.Tx taking over an expired or stale record deadlocked with the sweeper (error 1213).
		// A plain read lists a batch's primary keys, locking nothing; the statement then finds its
		// rows by primary key, re-checking the condition on each (a row taken over between the two
		// is left alone), and locks each row before its index entry, as the other writers do. The
		// re-check is wrapped in IF() so that no index range is made of it: a planner weighing the
		// keys against a status index range of about as many rows (the v1 table's (status,
		// lease_until) does) would otherwise take the index, and its locks, again. Index hints would
		// name indexes a v1 table and a v2 one do not share.
		q.expiredKeys = "SELECT scope, idem_key FROM " + t + " WHERE " + condExpired + " LIMIT ?"
		q.staleKeys = "SELECT scope, idem_key FROM " + t + " WHERE " + condStale + " LIMIT ?"
		q.delExpired = "DELETE FROM " + t + " WHERE IF(" + condExpired + ", 1, 0) = 1 AND ("
		q.recover = recoverCols + "IF(" + condStale + ", 1, 0) = 1 AND ("
	default:
		// Select a batch by primary key and act on it, re-checking the condition on each row (a row
		// taken over between the two is left alone: PostgreSQL re-evaluates the outer condition on
		// the row's latest version).
		q.delExpired = "DELETE FROM " + t + " WHERE " + condExpired + " AND (scope, idem_key) IN " +
			"(SELECT scope, idem_key FROM " + t + " WHERE " + condExpired + " LIMIT ?)"
		q.recover = recoverSet + " AND (scope, idem_key) IN (SELECT scope, idem_key FROM " + t + " WHERE " + condStale + " LIMIT ?)"
	}
	q.staleList = "SELECT scope, idem_key, fence, owner FROM " + t + " WHERE " + condStale + " LIMIT ?"
	q.recoverOne = recoverSet + " AND scope = ? AND idem_key = ? AND fence = ? AND owner = ?"
	q.pendingPfx = "SELECT scope, idem_key, " + columns + " FROM " + t + " WHERE " + condPending + " AND scope IN ("

	if dialect == dialectPostgres {
		for _, s := range []*string{&q.insert, &q.plainInsert, &q.get, &q.getLocked, &q.update, &q.finish, &q.confirm, &q.confirmLock, &q.written, &q.delete,
			&q.delExpired, &q.recover, &q.staleList, &q.recoverOne} {
			*s = rebind(*s)
		}
		q.rebind = true // pendingPfx is completed per call, then rebound as a whole
	}
	return q
}

// keyList returns prefix followed by n primary keys, (scope = ? AND idem_key = ?) joined by OR,
// and a closing parenthesis: the rows of a batch, which a MySQL statement finds by primary key.
func keyList(prefix string, n int) string {
	const one = "(scope = ? AND idem_key = ?)"
	var b strings.Builder
	b.Grow(len(prefix) + n*(len(one)+4) + 1)
	b.WriteString(prefix)
	for i := range n {
		if i > 0 {
			b.WriteString(" OR ")
		}
		b.WriteString(one)
	}
	b.WriteByte(')')
	return b.String()
}

// pendingSfx completes a pending query after its scope list.
const pendingSfx = " ORDER BY lease_until, scope, idem_key LIMIT ?"

// pendingAfter restricts a pending query to the records after a given one in its order.
const pendingAfter = " AND (lease_until > ? OR (lease_until = ? AND (scope > ? OR (scope = ? AND idem_key > ?))))"

// inList returns prefix followed by n placeholders and a closing parenthesis.
func inList(prefix string, n int) string {
	var b strings.Builder
	b.Grow(len(prefix) + 2*n)
	b.WriteString(prefix)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('?')
	}
	b.WriteByte(')')
	return b.String()
}

// rebind rewrites '?' placeholders as $1, $2, ... (PostgreSQL). The texts it is given have no '?'
// inside literals or identifiers.
func rebind(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 16)
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ddlName matches the table name of the DDL files and the index names derived from it.
var ddlName = regexp.MustCompile(`\bidemkit_records(_\w+)?\b`)

// renderDDL rewrites the record table DDL for q's table: the table name becomes q's quoted name and
// each index name idemkit_records_<suffix> becomes <table>_<suffix> (bounded to PostgreSQL's 63 bytes).
func (q *queries) renderDDL(ddl string) string {
	var b strings.Builder
	last := 0
	for _, m := range ddlName.FindAllStringSubmatchIndex(ddl, -1) {
		b.WriteString(ddl[last:m[0]])
		last = m[1]
		if m[2] < 0 { // the table
			// SQLite wants "CREATE INDEX schema.index ON table" and "ALTER TABLE ... RENAME TO table":
			// the table is not qualified there.
			before := strings.ToUpper(strings.TrimRight(ddl[:m[0]], " \t\n"))
			if q.dialect == dialectSQLite && q.schema != "" && (strings.HasSuffix(before, " ON") || strings.HasSuffix(before, " RENAME TO")) {
				b.WriteString(quoteIdent(q.dialect, q.table))
			} else {
				b.WriteString(q.quoted)
			}
			continue
		}
		idx := indexName(q.table, ddl[m[2]:m[3]])
		// PostgreSQL creates an index in its table's schema (CREATE INDEX takes no schema), but finds
		// one to drop through search_path: DROP INDEX names the table's schema, or it would miss the
		// index, or drop another table's of the same name.
		if q.schema != "" && (q.dialect == dialectSQLite || q.dialect == dialectPostgres && dropsIndex(ddl[:m[0]])) {
			b.WriteString(quoteIdent(q.dialect, q.schema) + ".")
		}
		b.WriteString(quoteIdent(q.dialect, idx))
	}
	b.WriteString(ddl[last:])
	return b.String()
}

// dropsIndex reports whether the statement ddl ends in, up to a name, is a DROP INDEX.
func dropsIndex(ddl string) bool {
	stmt := ddl[strings.LastIndexByte(ddl, ';')+1:]
	return strings.Contains(strings.ToUpper(stmt), "DROP INDEX")
}

// maxIndexName is PostgreSQL's identifier limit; longer names would be truncated and could collide.
const maxIndexName = 63

// indexName returns table+suffix, or, when that is too long, a prefix of table, a hash of the whole
// table name and suffix, so that different tables never share index names.
func indexName(table, suffix string) string {
	if len(table)+len(suffix) <= maxIndexName {
		return table + suffix
	}
	sum := sha256.Sum256([]byte(table))
	h := "_" + hex.EncodeToString(sum[:4])
	keep := max(maxIndexName-len(suffix)-len(h), 1)
	return table[:min(keep, len(table))] + h + suffix
}
