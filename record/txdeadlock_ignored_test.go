package record

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestTxIgnoredDeadlockCommitsNothing: on MariaDB a deadlock rolls the victim's whole transaction
// back and leaves its connection outside any transaction. A function guarded by Store.Tx that ignored
// the deadlock's error and returned nil had its later writes, and its record, commit one by one: the
// call succeeded, its earlier writes lost, and every duplicate was answered from that record (found by
// a defect hunt). The function's session and the Store now refuse every statement after the
// deadlock: the call fails with ErrTxAborted, nothing is written, and a retry runs again.
func TestTxIgnoredDeadlockCommitsNothing(t *testing.T) {
	for _, b := range []backend{backends[0], multiBackend} {
		t.Run(b.name, func(t *testing.T) {
			f := newTxFixture(t, b, nil)
			rows := testsvc.RowsTable(t, f.db)
			sqlDB, err := f.db.DB()
			must(t, err)
			var deadlocked error
			c := idemkit.Call{Scope: "deadlock", Key: "k1"}
			_, err = f.store.Tx(ctxb, f.guard, c, func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
				if err := tx.Exec("INSERT INTO "+f.biz+" (k, fence) VALUES (?, 1)", "k1").Error; err != nil {
					return nil, err
				}
				if err := tx.Exec("UPDATE " + rows + " SET v = v + 1 WHERE id = 1").Error; err != nil {
					return nil, err
				}
				var err error
				deadlocked, err = testsvc.Deadlock(ctx, sqlDB, tx, rows, func(ctx context.Context, other *sql.Tx) error {
					for i := range 20 {
						if _, err := other.ExecContext(ctx, "INSERT INTO "+f.biz+" (k, fence) VALUES ('other', ?)", i); err != nil {
							return err
						}
					}
					return nil
				}) // deadlocked ignored: the bug
				if err != nil {
					return nil, err
				}
				_ = tx.Exec("INSERT INTO "+f.biz+" (k, fence) VALUES (?, 2)", "k1").Error // would commit on its own
				return []byte("ok"), nil
			})
			if deadlocked == nil {
				t.Fatal("no deadlock: the function's transaction was not the victim")
			}
			var n int
			must(t, f.db.Raw("SELECT count(*) FROM "+f.biz+" WHERE k = 'k1'").Row().Scan(&n))
			_, gerr := f.guard.Get(ctxb, c.Scope, c.Key)
			if err == nil || n != 0 || gerr == nil {
				t.Fatalf("call error %v, %d business rows, record read %v: want an error, no rows, no record", err, n, gerr)
			}
			if !errors.Is(err, ErrTxAborted) {
				t.Fatalf("error %v does not match ErrTxAborted", err)
			}
		})
	}
}
