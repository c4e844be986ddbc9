package record

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idemkit"
)

// TestGuardTxFunctionCannotEndTheTransaction: the TxStore Guard.Tx and Guard.TxMark hand their
// function refuses Commit and Rollback while the function runs. A function that committed it
// committed its writes without their record (the Guard writes it after the function): the call then
// failed with "record store unavailable" and every retry ran the business again.
func TestGuardTxFunctionCannotEndTheTransaction(t *testing.T) {
	eachTxBackend(t, func(t *testing.T, b backend) {
		f := newTxFixture(t, b, nil)
		insert := "INSERT INTO " + f.biz + " (k, fence) VALUES (?, ?)"
		for _, end := range []string{"Commit", "Rollback"} {
			t.Run(end, func(t *testing.T) {
				endTx := func(tx idemkit.TxStore) error {
					if end == "Commit" {
						return tx.Commit()
					}
					return tx.Rollback()
				}
				key := "seal-tx-" + end
				for i := range 2 {
					res, err := f.guard.Tx(ctxb, f.store, idemkit.Call{Scope: "gtx", Key: key}, func(ctx context.Context, tx idemkit.TxStore) ([]byte, error) {
						f.runs.Add(1)
						if err := GormTx(tx).Exec(insert, key, 1).Error; err != nil {
							return nil, err
						}
						if err := endTx(tx); !errors.Is(err, errGuardOwned) {
							t.Errorf("the function's tx.%s(): %v, want it refused", end, err)
						}
						return []byte("done"), nil // the refusal ignored, as careless code would
					})
					if err != nil || string(res.Value) != "done" || res.Replayed != (i == 1) {
						t.Fatalf("call %d: %+v, %v; want the result, replayed on the second call", i, res, err)
					}
				}
				f.wantRecord(t, key, 1, idemkit.StatusSucceeded)

				mark := "seal-mark-" + end
				for i := range 2 {
					err := f.guard.TxMark(ctxb, f.store, idemkit.Call{Scope: "gtx", Key: mark}, func(ctx context.Context, tx idemkit.TxStore) error {
						if err := GormTx(tx).Exec(insert, mark, 1).Error; err != nil {
							return err
						}
						if err := endTx(tx); !errors.Is(err, errGuardOwned) {
							t.Errorf("TxMark: the function's tx.%s(): %v, want it refused", end, err)
						}
						return nil
					})
					if want := i == 1; errors.Is(err, idemkit.ErrDuplicate) != want || (!want && err != nil) {
						t.Fatalf("TxMark call %d: %v", i, err)
					}
				}
				if n := bizRows(t, f.db, f.biz, mark); n != 1 {
					t.Fatalf("TxMark: %d business rows, want 1", n)
				}
			})
		}
	})
}

// TestSQLTxFunctionEndingTheTransactionIsNamed: Store.SQLTx hands its function the *sql.Tx itself,
// which cannot refuse Commit. A function that ends it gets an error naming that mistake, not only a
// closed transaction.
func TestSQLTxFunctionEndingTheTransactionIsNamed(t *testing.T) {
	eachTxBackend(t, func(t *testing.T, b backend) {
		f := newTxFixture(t, b, nil)
		_, err := f.store.SQLTx(ctxb, f.guard, idemkit.Call{Scope: "gtx", Key: "sqltx-commit"}, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
			return []byte("done"), tx.Commit()
		})
		if !errors.Is(err, sql.ErrTxDone) || !strings.Contains(err.Error(), "must not commit or roll back its *sql.Tx") {
			t.Fatalf("SQLTx whose function committed: %v; want an error naming the mistake", err)
		}
	})
}
