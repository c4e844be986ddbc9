package record

import (
	"context"
	"fmt"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/keycolumns"
)

// keyColumns are the columns of the record table's unique key.
var keyColumns = []keycolumns.Column{
	{Name: "scope", MySQLBytes: idemkit.MaxStoredLen, PostgresChars: idemkit.MaxStoredLen},
	{Name: "idem_key", MySQLBytes: idemkit.MaxStoredLen, PostgresChars: idemkit.MaxStoredLen},
}

// CheckKeyColumns returns an error when the Store's table has a scope or idem_key column that does
// not tell every two different keys apart: on MySQL/MariaDB any type but VARBINARY or a VARCHAR of a
// binary NO PAD collation (the utf8mb4 collations, utf8mb4_bin too, ignore trailing spaces, most
// also case), on PostgreSQL any type but VARCHAR or TEXT of a deterministic collation (citext and
// nondeterministic collations ignore case or accents, CHAR trailing spaces), on SQLite a unique key
// comparing them with another collation than BINARY (COLLATE NOCASE or RTRIM), or either column
// shorter than idemkit.MaxStoredLen. On such a table keys like "k1" and "K1 " share one record: a
// request would be answered with another's stored result. The error names the column, its type and
// collation and the ALTER TABLE that gives it the shipped type (see package
// github.com/idemkit/idemkit/sql). On MySQL/MariaDB it also returns an error when the table has no
// unique key on exactly (scope, idem_key), whole columns (two claims of one key would both be written,
// and both run), or is in an engine without transactions (MyISAM, Aria: a Tx-mode record would stay
// when its transaction rolls back, and a retry be answered with an outcome that never committed); on
// PostgreSQL and SQLite the Store's inserts fail without that key. It checks nothing when the table
// or the columns do not exist. It reads the catalog: run it at start-up, not per call
// ([Store.CreateTable] and admin.Admin.Check run it).
func (s *Store) CheckKeyColumns(ctx context.Context) error {
	var column string
	var err error
	switch s.q.dialect {
	case dialectMySQL:
		column, err = keycolumns.MySQL(ctx, s.c.query, s.q.schema, s.q.table, keyColumns)
		if err == nil && column == "" {
			if err := s.checkMySQLTable(ctx); err != nil {
				return err
			}
		}
	case dialectPostgres:
		column, err = keycolumns.Postgres(ctx, s.c.query, s.q.quoted, keyColumns)
	case dialectSQLite:
		column, err = keycolumns.SQLite(ctx, s.c.query, s.q.schema, s.q.table, keyColumns)
	default:
		return nil
	}
	if err != nil {
		return s.q.interpretError("inspecting", err)
	}
	if column != "" {
		return fmt.Errorf("record: table %s: column %s: different keys would share one record (a request "+
			"answered with another's result); give scope and idem_key the shipped types: %s (then restart the processes using the table: their prepared statements keep the old types)", s.q.name, column, s.keyColumnsFix())
	}
	return nil
}

// checkMySQLTable returns an error when the Store's MySQL/MariaDB table cannot tell a duplicate:
// no unique key on exactly (scope, idem_key), or an engine without transactions.
func (s *Store) checkMySQLTable(ctx context.Context) error {
	engine, transactional, err := keycolumns.MySQLEngine(ctx, s.c.query, s.q.schema, s.q.table)
	if err != nil {
		return s.q.interpretError("inspecting", err)
	}
	if !transactional {
		return fmt.Errorf("record: table %s: engine %s has no transactions: a Tx-mode record would not roll back with "+
			"its function's writes (a retry answered with an outcome that never committed); move it: ALTER TABLE %s ENGINE = InnoDB",
			s.q.name, engine, s.q.quoted)
	}
	ok, err := keycolumns.MySQLUniqueKey(ctx, s.c.query, s.q.schema, s.q.table, keyColumns)
	if err != nil {
		return s.q.interpretError("inspecting", err)
	}
	if !ok {
		return fmt.Errorf("record: table %s: no unique key on exactly (scope, idem_key), whole columns: two claims of "+
			"one key would both be written, and both run; add it: ALTER TABLE %s ADD PRIMARY KEY (scope, idem_key) "+
			"(DROP PRIMARY KEY first when the table has another)", s.q.name, s.q.quoted)
	}
	return nil
}

// keyColumnsFix returns the statement that gives the Store's table the shipped key column types.
func (s *Store) keyColumnsFix() string {
	if s.q.dialect == dialectSQLite {
		return "SQLite cannot change a column's collation: create a table from the shipped DDL (Store.DDL), copy the " +
			"rows into it and give it the old one's name (ALTER TABLE ... RENAME TO)"
	}
	if s.q.dialect == dialectMySQL {
		return fmt.Sprintf("ALTER TABLE %s MODIFY scope VARBINARY(%d) NOT NULL, MODIFY idem_key VARBINARY(%d) NOT NULL",
			s.q.quoted, idemkit.MaxStoredLen, idemkit.MaxStoredLen)
	}
	return fmt.Sprintf("ALTER TABLE %s ALTER COLUMN scope TYPE VARCHAR(%d) COLLATE pg_catalog.\"default\", "+
		"ALTER COLUMN idem_key TYPE VARCHAR(%d) COLLATE pg_catalog.\"default\"", s.q.quoted, idemkit.MaxStoredLen, idemkit.MaxStoredLen)
}
