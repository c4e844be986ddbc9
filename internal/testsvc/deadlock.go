package testsvc

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"gorm.io/gorm"
)

// RowsTable creates on db (MySQL/MariaDB) an InnoDB table of two rows, ids 1 and 2, for [Deadlock],
// dropped when the test ends, and returns its name.
func RowsTable(t testing.TB, db *gorm.DB) string {
	t.Helper()
	rows := Name("t_rows_")
	DropTable(t, db, rows)
	if err := db.Exec("CREATE TABLE " + rows + " (id INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB").Error; err != nil {
		t.Fatal(err)
	}
	if err := db.Exec("INSERT INTO " + rows + " VALUES (1, 0), (2, 0)").Error; err != nil {
		t.Fatal(err)
	}
	return rows
}

// Deadlock makes tx, a transaction on MySQL/MariaDB that has updated row 1 of rows (see
// [RowsTable]), a deadlock's victim: another transaction on db, made heavier by weigh (InnoDB rolls
// the lighter one back), takes row 2 and waits for row 1, then tx updates row 2. It returns the
// error of tx's update (the deadlock) and an error when the other transaction failed.
func Deadlock(ctx context.Context, db *sql.DB, tx *gorm.DB, rows string, weigh func(context.Context, *sql.Tx) error) (victim, err error) {
	other, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = other.Rollback() }()
	if err := weigh(ctx, other); err != nil {
		return nil, err
	}
	if _, err := other.ExecContext(ctx, "UPDATE "+rows+" SET v = v + 1 WHERE id = 2"); err != nil {
		return nil, err
	}
	waited := make(chan error, 1)
	go func() {
		_, err := other.ExecContext(ctx, "UPDATE "+rows+" SET v = v + 1 WHERE id = 1")
		waited <- err
	}()
	time.Sleep(200 * time.Millisecond) // the other transaction waits for row 1
	victim = tx.Exec("UPDATE " + rows + " SET v = v + 1 WHERE id = 2").Error
	if err := <-waited; err != nil {
		return victim, fmt.Errorf("the other transaction: %w", err)
	}
	return victim, nil
}
