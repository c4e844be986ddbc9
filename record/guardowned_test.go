package record

import (
	"context"
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
)

// TestTxFunctionCannotEndTheTransaction: the transaction of Store.Tx and Store.TxMark is the Guard's on
// every backend, not only on a multi-statement pool: the function's db.Commit() and db.Rollback() are
// refused, so its writes cannot commit without the record (a retry would then run the business again).
func TestTxFunctionCannotEndTheTransaction(t *testing.T) {
	eachTxBackend(t, func(t *testing.T, b backend) {
		f := newTxFixture(t, b, nil)
		var commitErr, rollbackErr error
		fn := func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
			f.runs.Add(1)
			if err := tx.Exec("INSERT INTO "+f.biz+" (k, fence) VALUES (?, ?)", "k1", 1).Error; err != nil {
				return nil, err
			}
			commitErr, rollbackErr = tx.Commit().Error, tx.Rollback().Error
			return []byte("ok"), nil
		}
		call := idemkit.Call{Scope: "owned", Key: "k1"}
		if _, err := f.store.Tx(ctxb, f.guard, call, fn); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(commitErr, errGuardOwned) || !errors.Is(rollbackErr, errGuardOwned) {
			t.Fatalf("the function's Commit returned %v and Rollback %v; want both refused", commitErr, rollbackErr)
		}
		res, err := f.store.Tx(ctxb, f.guard, call, fn)
		if err != nil || !res.Replayed {
			t.Fatalf("duplicate: %+v, %v; want a replay", res, err)
		}
		if n := bizRows(t, f.db, f.biz, "k1"); n != 1 || f.runs.Load() != 1 {
			t.Fatalf("%d business rows after %d runs; want 1 and 1", n, f.runs.Load())
		}

		err = f.store.TxMark(ctxb, f.guard, idemkit.Call{Scope: "owned", Key: "m1"}, func(ctx context.Context, tx *gorm.DB) error {
			if err := tx.Exec("INSERT INTO "+f.biz+" (k, fence) VALUES (?, ?)", "m1", 1).Error; err != nil {
				return err
			}
			if err := tx.Commit().Error; !errors.Is(err, errGuardOwned) {
				t.Errorf("TxMark: the function's Commit returned %v", err)
			}
			return errors.New("boom")
		})
		if err == nil || bizRows(t, f.db, f.biz, "m1") != 0 {
			t.Fatalf("TxMark: %v, and the failed function's writes committed", err)
		}
	})
}

// TestTxNestedTransactionIsSavepoint: a db.Transaction inside the function is a savepoint of the
// Guard's transaction, with and without gorm's PrepareStmt: rolling it back keeps the writes before it.
func TestTxNestedTransactionIsSavepoint(t *testing.T) {
	eachTxBackend(t, func(t *testing.T, b backend) {
		for _, cfg := range []*gorm.Config{nil, {PrepareStmt: true}} {
			f := newTxFixture(t, b, cfg)
			_, err := f.store.Tx(ctxb, f.guard, idemkit.Call{Scope: "owned", Key: "n1"}, func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
				if err := tx.Exec("INSERT INTO "+f.biz+" (k, fence) VALUES (?, ?)", "n1", 1).Error; err != nil {
					return nil, err
				}
				_ = tx.Transaction(func(tx2 *gorm.DB) error {
					if err := tx2.Exec("INSERT INTO "+f.biz+" (k, fence) VALUES (?, ?)", "n1", 2).Error; err != nil {
						return err
					}
					return context.Canceled // back to the savepoint
				})
				return []byte("ok"), nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if n := bizRows(t, f.db, f.biz, "n1"); n != 1 {
				t.Fatalf("%d rows, want 1 (the savepoint rolled back)", n)
			}
		}
	})
}

// TestTxFunctionGetsItsDB: the function of Store.Tx and Store.TxMark can ask its session for the
// database handle (tx.DB(), for stats or a driver-level call), as in a gorm transaction of its own;
// the session whose Commit and Rollback are refused answered gorm.ErrInvalidDB.
func TestTxFunctionGetsItsDB(t *testing.T) {
	eachTxBackend(t, func(t *testing.T, b backend) {
		f := newTxFixture(t, b, nil)
		want, err := f.db.DB()
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.store.Tx(ctxb, f.guard, idemkit.Call{Scope: "db", Key: "k1"}, func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
			got, err := tx.DB()
			if err != nil || got != want {
				t.Errorf("Tx: the function's tx.DB() = %p, %v; want the pool %p", got, err, want)
			}
			return []byte("ok"), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		err = f.store.TxMark(ctxb, f.guard, idemkit.Call{Scope: "db", Key: "m1"}, func(ctx context.Context, tx *gorm.DB) error {
			if got, err := tx.DB(); err != nil || got != want {
				t.Errorf("TxMark: the function's tx.DB() = %p, %v; want the pool %p", got, err, want)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
