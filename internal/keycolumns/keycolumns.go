// Package keycolumns reads from the catalog of MySQL/MariaDB or PostgreSQL the types and collations
// of the columns of a table's unique key, and tells those that do not tell every two different values
// apart: the packages whose tables are looked up by such a key (record's scope and idem_key, the
// barrier's gid, branch_id, op and barrier_id) refuse a table made by hand, by another tool's DDL or
// changed by a migration tool, on which values like "k1" and "K1 " would share one row. CREATE TABLE
// IF NOT EXISTS keeps such a table.
//
// On MySQL/MariaDB only VARBINARY, or VARCHAR of a binary NO PAD collation, compares byte for byte (the
// utf8mb4 collations, utf8mb4_bin too, ignore trailing spaces, most also case and accents); on
// PostgreSQL VARCHAR or TEXT of a deterministic collation (citext and nondeterministic collations ignore
// case or accents, CHAR trailing spaces); on SQLite a unique index comparing with BINARY (NOCASE
// ignores case, RTRIM trailing spaces).
package keycolumns

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// Query runs a query on the table's database: the QueryContext of a *sql.DB, a connection or a
// gorm.ConnPool.
type Query func(ctx context.Context, query string, args ...any) (*sql.Rows, error)

// Column is a key column and the length a value must fit.
type Column struct {
	Name string // an SQL identifier
	// MySQLBytes is the fewest bytes its MySQL/MariaDB column must hold (character_octet_length).
	MySQLBytes int64
	// PostgresChars is the fewest characters its PostgreSQL VARCHAR must hold.
	PostgresChars int64
}

// MySQL returns the first column of cols in table, in table order, that does not compare byte for
// byte or is shorter than its Column.MySQLBytes, described with its type and collation and what is
// wrong ("gid is VARCHAR(128) COLLATE utf8mb4_general_ci, whose comparison ignores ..."), or "" when
// they are right, the table does not exist or has none of them. schema "" is the session's database.
func MySQL(ctx context.Context, query Query, schema, table string, cols []Column) (string, error) {
	q := "SELECT column_name, column_type, COALESCE(collation_name, ''), data_type, COALESCE(character_octet_length, 0) " +
		"FROM information_schema.columns WHERE column_name IN (" + names(cols) + ") AND table_name = ? AND table_schema = "
	in, args := schemaOf(schema, table)
	q += in
	return check(ctx, query, q+" ORDER BY ordinal_position", args, func(rows *sql.Rows) (string, error) {
		var name, typ, collation, dataType string
		var octets int64
		if err := rows.Scan(&name, &typ, &collation, &dataType, &octets); err != nil {
			return "", err
		}
		desc := name + " is " + strings.ToUpper(typ)
		if collation != "" {
			desc += " COLLATE " + collation
		}
		binary := strings.EqualFold(dataType, "varbinary") ||
			strings.EqualFold(dataType, "varchar") && isNoPadBinCollation(collation)
		switch want := column(cols, name).MySQLBytes; {
		case !binary:
			return desc + ", whose comparison ignores trailing spaces, trailing 0x00 bytes or case", nil
		case octets < want:
			return fmt.Sprintf("%s, shorter than the %d bytes of a stored value", desc, want), nil
		}
		return "", nil
	})
}

// SQLite returns the first column of cols, in the order of table's unique index on exactly those
// columns, that the index compares with another collation than BINARY (NOCASE ignores case, RTRIM
// trailing spaces), described as MySQL describes it, or "" when they are right, the table does not
// exist or has no such index (the insert's ON CONFLICT clause then fails). schema "" is "main".
func SQLite(ctx context.Context, query Query, schema, table string, cols []Column) (string, error) {
	if schema == "" {
		schema = "main"
	}
	var unique []string
	rows, err := query(ctx, `SELECT name FROM pragma_index_list(?, ?) WHERE "unique" = 1`, table, schema)
	if err != nil {
		return "", err
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return "", err
		}
		unique = append(unique, name)
	}
	if err := rows.Close(); err != nil {
		return "", err
	}
	for _, index := range unique {
		var names, colls []string
		rows, err := query(ctx, "SELECT COALESCE(name, ''), COALESCE(coll, '') FROM pragma_index_xinfo(?, ?) WHERE key = 1 ORDER BY seqno", index, schema)
		if err != nil {
			return "", err
		}
		for rows.Next() {
			var name, coll string
			if err := rows.Scan(&name, &coll); err != nil {
				rows.Close()
				return "", err
			}
			names, colls = append(names, name), append(colls, coll)
		}
		if err := rows.Close(); err != nil {
			return "", err
		}
		if !sameColumns(names, cols) {
			continue
		}
		for i, coll := range colls {
			if !strings.EqualFold(coll, "BINARY") {
				return fmt.Sprintf("%s is COLLATE %s in the unique key, whose comparison ignores case or trailing spaces", names[i], coll), nil
			}
		}
		return "", nil
	}
	return "", nil
}

// schemaOf returns what a MySQL catalog query's "table_name = ? AND table_schema = " is completed
// with for schema ("" being the session's database), and the arguments of both.
func schemaOf(schema, table string) (string, []any) {
	if schema == "" {
		return "DATABASE()", []any{table}
	}
	return "?", []any{table, schema}
}

// MySQLUniqueKey reports whether table has a unique key (PRIMARY or UNIQUE) on exactly the columns
// of cols, in any order, each whole (no prefix length): without one, an INSERT IGNORE or an INSERT
// ... ON DUPLICATE KEY UPDATE finds no duplicate and stores a repeated row anew. It also reports true
// when the table does not exist or has none of the columns (nothing to check). schema "" is the
// session's database.
func MySQLUniqueKey(ctx context.Context, query Query, schema, table string, cols []Column) (bool, error) {
	in, args := schemaOf(schema, table)
	where := " WHERE table_name = ? AND table_schema = " + in
	var present int
	err := scanOne(ctx, query, &present, "SELECT COUNT(*) FROM information_schema.columns"+where+" AND column_name IN ("+names(cols)+")", args...)
	if err != nil || present == 0 {
		return true, err
	}
	rows, err := query(ctx, "SELECT index_name, column_name, sub_part IS NOT NULL FROM information_schema.statistics"+where+
		" AND non_unique = 0 ORDER BY index_name, seq_in_index", args...)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	indexes := map[string][]string{} // column names of each unique index; "" for a prefix
	for rows.Next() {
		var index, column string
		var prefix bool
		if err := rows.Scan(&index, &column, &prefix); err != nil {
			return false, err
		}
		if prefix {
			column = ""
		}
		indexes[index] = append(indexes[index], column)
	}
	if err := rows.Err(); err != nil {
		return false, err
	}
	for _, columns := range indexes {
		if sameColumns(columns, cols) {
			return true, nil
		}
	}
	return false, nil
}

// MySQLEngine returns the storage engine of table and whether it has transactions (information_schema
// ENGINES), or "" and true when the table does not exist or its engine is not listed there. schema
// "" is the session's database. A table in an engine without transactions (MyISAM, Aria, MEMORY)
// keeps its rows when the transaction that wrote them rolls back.
func MySQLEngine(ctx context.Context, query Query, schema, table string) (engine string, transactional bool, err error) {
	q := "SELECT COALESCE(t.engine, ''), COALESCE(e.transactions, '') FROM information_schema.tables t " +
		"LEFT JOIN information_schema.engines e ON e.engine = t.engine WHERE t.table_name = ? AND t.table_schema = "
	in, args := schemaOf(schema, table)
	q += in
	rows, err := query(ctx, q, args...)
	if err != nil {
		return "", false, err
	}
	defer rows.Close()
	if !rows.Next() {
		return "", true, rows.Err()
	}
	var transactions string
	if err := rows.Scan(&engine, &transactions); err != nil {
		return "", false, err
	}
	return engine, !strings.EqualFold(transactions, "NO"), rows.Close()
}

// sameColumns reports whether columns names each column of cols once and nothing else.
func sameColumns(columns []string, cols []Column) bool {
	if len(columns) != len(cols) {
		return false
	}
	for _, c := range cols {
		n := 0
		for _, name := range columns {
			if strings.EqualFold(name, c.Name) {
				n++
			}
		}
		if n != 1 {
			return false
		}
	}
	return true
}

// scanOne scans the single value the query q returns into dest.
func scanOne(ctx context.Context, query Query, dest any, q string, args ...any) error {
	rows, err := query(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := rows.Scan(dest); err != nil {
		return err
	}
	return rows.Close()
}

// isNoPadBinCollation reports whether a MySQL/MariaDB collation compares strings byte for byte,
// trailing spaces included: MariaDB's *_nopad_bin, MySQL 8's utf8mb4_0900_bin, binary.
func isNoPadBinCollation(collation string) bool {
	c := strings.ToLower(collation)
	return c == "binary" || strings.HasSuffix(c, "_nopad_bin") || strings.HasSuffix(c, "_0900_bin")
}

// Postgres returns the first column of cols in table, in table order, that is not VARCHAR or TEXT of
// a deterministic collation or is a VARCHAR shorter than its Column.PostgresChars, described as MySQL
// describes it, or "" when they are right, the table does not exist or has none of them. table is
// the quoted [schema.]table, found as to_regclass finds it (through the search_path when unqualified).
func Postgres(ctx context.Context, query Query, table string, cols []Column) (string, error) {
	// The base type of a domain; the collation's collisdeterministic read through to_jsonb, so that
	// the query also runs before PostgreSQL 12 (every collation deterministic, no column).
	q := "SELECT a.attname, format_type(a.atttypid, a.atttypmod), COALESCE(co.collname, ''), " +
		"format_type(CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END, NULL), " +
		"CASE WHEN t.typtype = 'd' THEN t.typtypmod ELSE a.atttypmod END, " +
		"COALESCE((to_jsonb(co) ->> 'collisdeterministic')::boolean, true) " +
		"FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid LEFT JOIN pg_collation co ON co.oid = a.attcollation " +
		"WHERE a.attrelid = to_regclass($1::text) AND a.attname IN (" + names(cols) + ") AND NOT a.attisdropped ORDER BY a.attnum"
	return check(ctx, query, q, []any{table}, func(rows *sql.Rows) (string, error) {
		var name, typ, collation, base string
		var typmod int64
		var deterministic bool
		if err := rows.Scan(&name, &typ, &collation, &base, &typmod, &deterministic); err != nil {
			return "", err
		}
		desc := name + " is " + typ
		if collation != "" && collation != "default" {
			desc += fmt.Sprintf(" COLLATE %q", collation)
		}
		switch want := column(cols, name).PostgresChars; {
		case base != "character varying" && base != "text":
			return desc + ", not VARCHAR or TEXT (citext ignores case, CHAR trailing spaces)", nil
		case !deterministic:
			return desc + ", a nondeterministic collation (equal strings need not be equal bytes)", nil
		case base == "character varying" && typmod >= 0 && typmod-4 < want:
			return fmt.Sprintf("%s, shorter than the %d characters of a stored value", desc, want), nil
		}
		return "", nil
	})
}

// check runs q and returns the first description describe makes of its rows.
func check(ctx context.Context, query Query, q string, args []any, describe func(*sql.Rows) (string, error)) (string, error) {
	rows, err := query(ctx, q, args...)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	for rows.Next() {
		desc, err := describe(rows)
		if err != nil || desc != "" {
			return desc, err
		}
	}
	return "", rows.Err()
}

// names returns the SQL list of the columns' names as string literals.
func names(cols []Column) string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = "'" + c.Name + "'"
	}
	return strings.Join(out, ", ")
}

// column returns the Column of cols named name.
func column(cols []Column, name string) Column {
	for _, c := range cols {
		if c.Name == name {
			return c
		}
	}
	return Column{Name: name}
}
