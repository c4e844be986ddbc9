package record

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/idemkit/idemkit"
)

// CheckKeyColumns returns an error when the Store's table has a scope or idem_key column that does
// not tell every two different keys apart: on MySQL/MariaDB any type but VARBINARY or a VARCHAR of a
// binary NO PAD collation (the utf8mb4 collations, utf8mb4_bin too, ignore trailing spaces, most
// also case), on PostgreSQL any type but VARCHAR or TEXT of a deterministic collation (citext and
// nondeterministic collations ignore case or accents, CHAR trailing spaces), or either column shorter
// than idemkit.MaxStoredLen. On such a table keys like "k1" and "K1 " share one record: a request
// would be answered with another's stored result. The error names the column, its type and collation
// and the ALTER TABLE that gives it the shipped type (see package github.com/idemkit/idemkit/sql). It
// checks nothing on SQLite, and nothing when the table or the columns do not exist. It reads the
// catalog: run it at start-up, not per call ([Store.CreateTable] and admin.Admin.Check run it).
func (s *Store) CheckKeyColumns(ctx context.Context) error {
	var check func(*sql.Rows) (string, error)
	var query string
	var args []any
	switch s.q.dialect {
	case dialectMySQL:
		query = "SELECT column_name, column_type, COALESCE(collation_name, ''), data_type, COALESCE(character_octet_length, 0) " +
			"FROM information_schema.columns WHERE column_name IN ('scope', 'idem_key') AND table_name = ? AND table_schema = "
		args = []any{s.q.table}
		if s.q.schema != "" {
			query += "?"
			args = append(args, s.q.schema)
		} else {
			query += "DATABASE()"
		}
		check = s.checkMySQLKeyColumn
	case dialectPostgres:
		// The base type of a domain; the collation's collisdeterministic read through to_jsonb, so
		// that the query also runs before PostgreSQL 12 (every collation deterministic, no column).
		query = "SELECT a.attname, format_type(a.atttypid, a.atttypmod), COALESCE(co.collname, ''), " +
			"format_type(CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END, NULL), " +
			"CASE WHEN t.typtype = 'd' THEN t.typtypmod ELSE a.atttypmod END, " +
			"COALESCE((to_jsonb(co) ->> 'collisdeterministic')::boolean, true) " +
			"FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid LEFT JOIN pg_collation co ON co.oid = a.attcollation " +
			"WHERE a.attrelid = to_regclass($1::text) AND a.attname IN ('scope', 'idem_key') AND NOT a.attisdropped"
		args = []any{s.q.quoted}
		check = s.checkPostgresKeyColumn
	default:
		return nil
	}
	rows, err := s.c.query(ctx, query, args...)
	if err != nil {
		return s.q.interpretError("inspecting", err)
	}
	defer rows.Close()
	for rows.Next() {
		column, err := check(rows)
		if err != nil {
			return s.q.interpretError("inspecting", err)
		}
		if column != "" {
			return fmt.Errorf("record: table %s: column %s: different keys would share one record (a request "+
				"answered with another's result); give scope and idem_key the shipped types: %s (then restart the processes using the table: their prepared statements keep the old types)", s.q.name, column, s.keyColumnsFix())
		}
	}
	if err := rows.Err(); err != nil {
		return s.q.interpretError("inspecting", err)
	}
	return nil
}

// checkMySQLKeyColumn scans a row of CheckKeyColumns's MySQL query and returns the column and what
// is wrong with it, or "" when it is right.
func (s *Store) checkMySQLKeyColumn(rows *sql.Rows) (string, error) {
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
	switch {
	case !binary:
		return desc + ", whose comparison ignores trailing spaces, trailing 0x00 bytes or case", nil
	case octets < idemkit.MaxStoredLen:
		return fmt.Sprintf("%s, shorter than the %d bytes of a stored key", desc, idemkit.MaxStoredLen), nil
	}
	return "", nil
}

// isNoPadBinCollation reports whether a MySQL/MariaDB collation compares strings byte for byte,
// trailing spaces included: MariaDB's *_nopad_bin, MySQL 8's utf8mb4_0900_bin, binary.
func isNoPadBinCollation(collation string) bool {
	c := strings.ToLower(collation)
	return c == "binary" || strings.HasSuffix(c, "_nopad_bin") || strings.HasSuffix(c, "_0900_bin")
}

// checkPostgresKeyColumn scans a row of CheckKeyColumns's PostgreSQL query and returns the column
// and what is wrong with it, or "" when it is right.
func (s *Store) checkPostgresKeyColumn(rows *sql.Rows) (string, error) {
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
	switch {
	case base != "character varying" && base != "text":
		return desc + ", not VARCHAR or TEXT (citext ignores case, CHAR trailing spaces)", nil
	case !deterministic:
		return desc + ", a nondeterministic collation (equal strings need not be equal bytes)", nil
	case base == "character varying" && typmod >= 0 && typmod-4 < idemkit.MaxStoredLen:
		return fmt.Sprintf("%s, shorter than the %d bytes of a stored key", desc, idemkit.MaxStoredLen), nil
	}
	return "", nil
}

// keyColumnsFix returns the statement that gives the Store's table the shipped key column types.
func (s *Store) keyColumnsFix() string {
	if s.q.dialect == dialectMySQL {
		return fmt.Sprintf("ALTER TABLE %s MODIFY scope VARBINARY(%d) NOT NULL, MODIFY idem_key VARBINARY(%d) NOT NULL",
			s.q.quoted, idemkit.MaxStoredLen, idemkit.MaxStoredLen)
	}
	return fmt.Sprintf("ALTER TABLE %s ALTER COLUMN scope TYPE VARCHAR(%d) COLLATE pg_catalog.\"default\", "+
		"ALTER COLUMN idem_key TYPE VARCHAR(%d) COLLATE pg_catalog.\"default\"", s.q.quoted, idemkit.MaxStoredLen, idemkit.MaxStoredLen)
}
