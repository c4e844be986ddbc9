package barrier

import (
	"context"
	"fmt"

	"github.com/idemkit/idemkit/internal/keycolumns"
)

// keyColumns are the columns of the barrier table's unique key, each long enough for DTM's limit in
// characters (see NewBranch): 4 bytes a character on MySQL/MariaDB, whose shipped columns are VARBINARY.
var keyColumns = []keycolumns.Column{
	{Name: "gid", MySQLBytes: 4 * maxGid, PostgresChars: maxGid},
	{Name: "branch_id", MySQLBytes: 4 * maxBranchID, PostgresChars: maxBranchID},
	{Name: "op", MySQLBytes: 4 * maxOp, PostgresChars: maxOp},
	{Name: "barrier_id", MySQLBytes: 4 * maxBarrierID, PostgresChars: maxBarrierID},
}

// maxBarrierID is the length of DTM's barrier_id column, in characters.
const maxBarrierID = 45

// CheckKeyColumns returns an error when the barrier table has a gid, branch_id, op or barrier_id
// column (its unique key) that does not tell every two different values apart: on MySQL/MariaDB any
// type but VARBINARY or a VARCHAR of a binary NO PAD collation — a table made from DTM's own DDL
// (dtmcli's barrier table: VARCHAR in the default utf8mb4 collation, utf8mb4_general_ci, case- and
// accent-insensitive) as well as utf8mb4_bin, which ignores trailing spaces —, on PostgreSQL any type
// but VARCHAR or TEXT of a deterministic collation (citext and nondeterministic collations ignore
// case or accents, CHAR trailing spaces), or a column too short for DTM's limits. On such a table gids
// like "Order-A" and "order-a " share their barrier rows: the second transaction's branch is taken
// for a repeated delivery of the first's, and its business never runs. The error names the column,
// its type and collation and the ALTER TABLE that gives the four columns the shipped types (a table
// rebuild on MySQL/MariaDB: see the repository's docs/DTM.md). The shipped table (package
// github.com/idemkit/idemkit/sql) and DTM's own PostgreSQL table pass.
//
// On MySQL/MariaDB it also returns an error when the table's engine has no transactions (MyISAM,
// Aria, MEMORY: the barrier rows would stay when the business's transaction rolls back, and its
// redelivery be taken for a duplicate, the business never run), naming the ALTER TABLE that moves it
// to InnoDB; and when the table has no unique key on exactly gid, branch_id, op and barrier_id, whole
// columns (a plain index made by hand or by a migration tool, a prefix of gid, a wider key): the
// barrier's INSERT IGNORE would store every delivery's row anew, a repeated delivery running its
// business again. That error names the ALTER TABLE that adds the key. (On PostgreSQL and SQLite the
// barrier's insert itself fails without that key.)
//
// On SQLite it returns an error when the table's unique key compares a column with another collation
// than BINARY (a column declared COLLATE NOCASE or RTRIM). It checks nothing when the table or the
// columns do not exist. It reads the catalog: run it at start-up, not per call ([Gorm.CreateTable]
// runs it).
func (g *Gorm) CheckKeyColumns(ctx context.Context) error {
	query := g.db.Statement.ConnPool.QueryContext
	var column string
	var err error
	switch g.db.Dialector.Name() {
	case "mysql":
		column, err = keycolumns.MySQL(ctx, query, g.d.schema, g.d.base, keyColumns)
		if err == nil && column == "" {
			engine, transactional, err := keycolumns.MySQLEngine(ctx, query, g.d.schema, g.d.base)
			if err != nil {
				return fmt.Errorf("barrier: inspecting table %s: %w", g.d.table, err)
			}
			if !transactional {
				return fmt.Errorf("barrier: table %s: engine %s has no transactions: its barrier rows would not roll back "+
					"with the business's writes (a redelivery after a failed business taken for a duplicate, the business "+
					"never run); move it: ALTER TABLE %s ENGINE = InnoDB", g.d.table, engine, g.d.quoted)
			}
			var ok bool
			if ok, err = keycolumns.MySQLUniqueKey(ctx, query, g.d.schema, g.d.base, keyColumns); err == nil && !ok {
				return fmt.Errorf("barrier: table %s: no unique key on exactly (gid, branch_id, op, barrier_id), whole "+
					"columns: the barrier's INSERT IGNORE would store a repeated delivery's row anew, and run its business "+
					"again (a late try after its cancel too); add it: ALTER TABLE %s ADD UNIQUE KEY (gid, branch_id, op, barrier_id)",
					g.d.table, g.d.quoted)
			}
		}
	case "postgres":
		column, err = keycolumns.Postgres(ctx, query, g.d.quoted, keyColumns)
	case "sqlite":
		column, err = keycolumns.SQLite(ctx, query, g.d.schema, g.d.base, keyColumns)
	default:
		return nil
	}
	if err != nil {
		return fmt.Errorf("barrier: inspecting table %s: %w", g.d.table, err)
	}
	if column != "" {
		return fmt.Errorf("barrier: table %s: column %s: the branches of different transactions would share "+
			"barrier rows (one taken for a repeated delivery of another, its business never run); give gid, "+
			"branch_id, op and barrier_id the shipped types: %s (then restart the processes using the table: the "+
			"statements their connections prepared keep the old types)", g.d.table, column, g.keyColumnsFix())
	}
	return nil
}

// keyColumnsFix returns the statement that gives the barrier table the shipped key column types.
func (g *Gorm) keyColumnsFix() string {
	switch g.db.Dialector.Name() {
	case "sqlite":
		return "SQLite cannot change a column's collation: create a table from the shipped DDL, copy the rows " +
			"into it and give it the old one's name (ALTER TABLE ... RENAME TO)"
	case "mysql":
		return fmt.Sprintf("ALTER TABLE %s MODIFY gid varbinary(%d) DEFAULT '', MODIFY branch_id varbinary(%d) DEFAULT '', "+
			"MODIFY op varbinary(%d) DEFAULT '', MODIFY barrier_id varbinary(%d) DEFAULT ''",
			g.d.quoted, 4*maxGid, 4*maxBranchID, 4*maxOp, 4*maxBarrierID)
	}
	return fmt.Sprintf("ALTER TABLE %[1]s ALTER COLUMN gid TYPE varchar(%[2]d) COLLATE pg_catalog.\"default\", "+
		"ALTER COLUMN branch_id TYPE varchar(%[3]d) COLLATE pg_catalog.\"default\", "+
		"ALTER COLUMN op TYPE varchar(%[4]d) COLLATE pg_catalog.\"default\", "+
		"ALTER COLUMN barrier_id TYPE varchar(%[5]d) COLLATE pg_catalog.\"default\"",
		g.d.quoted, maxGid, maxBranchID, maxOp, maxBarrierID)
}
