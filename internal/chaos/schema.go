//go:build unix

package chaos

import (
	"context"
	"database/sql"
	"fmt"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit/record"
)

// setupSchema creates the database, the record table (through record.Store.CreateTable, as users
// do), the business tables and the accounts, then applies a schema sabotage if asked.
func setupSchema(ctx context.Context, d *dialect, serverDSN, dbDSN string, t Tables, c Config) error {
	admin, err := sql.Open(d.driver, serverDSN)
	if err != nil {
		return err
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, d.createDB); err != nil {
		return fmt.Errorf("creating database: %w", err)
	}

	gdb, err := gorm.Open(d.open(dbDSN), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return err
	}
	if sqlDB, err := gdb.DB(); err == nil {
		defer sqlDB.Close()
	}
	store, err := record.New(gdb, &record.Options{Table: t.Records})
	if err != nil {
		return err
	}
	if err := store.CreateTable(ctx); err != nil {
		return err
	}

	db, err := sql.Open(d.driver, dbDSN)
	if err != nil {
		return err
	}
	defer db.Close()
	for _, stmt := range d.businessDDL(t) {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("creating business tables: %w", err)
		}
	}
	if _, err := db.ExecContext(ctx, seedAccounts(t.Accounts, c.Accounts, c.InitialBalance)); err != nil {
		return fmt.Errorf("seeding accounts: %w", err)
	}
	if c.Sabotage == SabotageDropUniqueIndex { // MariaDB only (see Config.withDefaults)
		if err := dropUniqueIndex(ctx, db, t.Records); err != nil {
			return err
		}
	}
	return nil
}

// dropUniqueIndex takes the uniqueness of (scope, idem_key) away from the record table: its primary key
// (the v2 table) becomes a surrogate AUTO_INCREMENT column with a plain index on (scope, idem_key);
// any other unique index is replaced by a plain one on the same columns.
func dropUniqueIndex(ctx context.Context, db *sql.DB, table string) error {
	rows, err := db.QueryContext(ctx, `SELECT index_name, GROUP_CONCAT(column_name ORDER BY seq_in_index)
		FROM information_schema.statistics
		WHERE table_schema = DATABASE() AND table_name = ? AND non_unique = 0
		GROUP BY index_name`, table)
	if err != nil {
		return err
	}
	type idx struct{ name, cols string }
	var idxs []idx
	for rows.Next() {
		var i idx
		if err := rows.Scan(&i.name, &i.cols); err != nil {
			rows.Close()
			return err
		}
		idxs = append(idxs, i)
	}
	rows.Close()
	var stmts []string
	for _, i := range idxs {
		switch {
		case i.name == "PRIMARY" && i.cols == "scope,idem_key":
			stmts = append(stmts, fmt.Sprintf("ALTER TABLE %s DROP PRIMARY KEY, ADD COLUMN sabotage_id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY FIRST, "+
				"ADD INDEX scope_key_plain (scope, idem_key)", table))
		case i.name != "PRIMARY":
			stmts = append(stmts, fmt.Sprintf("ALTER TABLE %s DROP INDEX %s, ADD INDEX %s_plain (%s)", table, i.name, i.name, i.cols))
		}
	}
	if len(stmts) == 0 {
		return fmt.Errorf("sabotage: no unique index on (scope, idem_key) of %s", table)
	}
	for _, stmt := range stmts {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("sabotage: %w", err)
		}
	}
	return nil
}
