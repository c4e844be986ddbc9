package barrier

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/record"
)

// TestTransactionOfABusinessIgnoringADeadlock: on MySQL/MariaDB a deadlock rolls the victim's whole
// transaction back — the branch's barrier row and the business's writes before it — and leaves the
// connection outside any transaction. A business run by Gorm.Transaction (dtmhttp.Gorm's) that
// ignored the deadlock's error and went on had its later writes commit one by one, the COMMIT
// succeeded with nothing in it, and the branch answered success without its barrier row: a
// redelivery ran the business a second time. The business's session now refuses every statement
// after such an error and the transaction fails (record.ErrTxAborted), as a PostgreSQL transaction
// aborted by a failed statement does; the redelivery runs the business once.
func TestTransactionOfABusinessIgnoringADeadlock(t *testing.T) {
	ctx := context.Background()
	db := testsvc.MySQL(t, nil)
	g := newGormTable(t, db)
	rows := testsvc.RowsTable(t, db)
	biz := testsvc.Name("t_biz_")
	testsvc.DropTable(t, db, biz)
	if err := db.Exec("CREATE TABLE " + biz + " (id VARCHAR(64) NOT NULL PRIMARY KEY)").Error; err != nil {
		t.Fatal(err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	gid := testsvc.Name("gid-")
	b, err := NewBranch(TransSaga, gid, "01", OpAction)
	if err != nil {
		t.Fatal(err)
	}
	var deadlocked error
	out, err := g.TransactionOutcome(ctx, b, func(tx *gorm.DB) error {
		if err := tx.Exec("INSERT INTO "+biz+" (id) VALUES (?)", gid+"-early").Error; err != nil {
			return err
		}
		if err := tx.Exec("UPDATE " + rows + " SET v = v + 1 WHERE id = 1").Error; err != nil {
			return err
		}
		var err error
		if deadlocked, err = testsvc.Deadlock(ctx, sqlDB, tx, rows, func(ctx context.Context, other *sql.Tx) error {
			for range 20 {
				if _, err := other.ExecContext(ctx, "INSERT INTO "+biz+" (id) VALUES (?)", testsvc.Name("other-")); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
		// deadlocked ignored: the business's bug. This statement would commit on its own.
		_ = tx.Exec("INSERT INTO "+biz+" (id) VALUES (?)", gid+"-late").Error
		return nil
	})
	t.Logf("deadlock: %v; TransactionOutcome = %s, %v", deadlocked, out, err)
	if deadlocked == nil {
		t.Fatal("no deadlock: the branch's transaction was not the victim")
	}
	count := func(q string, args ...any) int64 {
		t.Helper()
		var n int64
		if err := db.Raw(q, args...).Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count("SELECT COUNT(*) FROM "+biz+" WHERE id LIKE ?", gid+"%"); n != 0 || err == nil {
		t.Fatalf("TransactionOutcome = %s, %v with %d of the business's rows committed: want an error and none", out, err, n)
	}
	if !errors.Is(err, record.ErrTxAborted) {
		t.Fatalf("TransactionOutcome error %v: want one matching record.ErrTxAborted", err)
	}
	// DTM delivers the branch again: the barrier has no row of it, the business runs once.
	runs := 0
	for range 2 {
		b, _ := NewBranch(TransSaga, gid, "01", OpAction)
		if _, err := g.TransactionOutcome(ctx, b, func(tx *gorm.DB) error {
			runs++
			return tx.Exec("INSERT INTO "+biz+" (id) VALUES (?)", gid+"-redelivered").Error
		}); err != nil {
			t.Fatalf("redelivery: %v", err)
		}
	}
	if n := count("SELECT COUNT(*) FROM "+biz+" WHERE id LIKE ?", gid+"%"); runs != 1 || n != 1 {
		t.Fatalf("two redeliveries ran the business %d times, %d rows: want once", runs, n)
	}
}
