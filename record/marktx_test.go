package record

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
)

// TestMarkTx: the mark commits or rolls back with the business write, in the caller's transaction
// (Guard.MarkTx) and in one the Guard owns (Store.TxMark). A committed key is a duplicate; a failed or
// panicking function leaves neither mark nor business row, and a retry runs; concurrent duplicates on
// separate transactions produce one business row.
func TestMarkTx(t *testing.T) {
	for _, b := range append(backends[:len(backends):len(backends)], multiBackend) {
		for _, owner := range []string{"caller", "guard"} {
			t.Run(b.name+"/"+owner, func(t *testing.T) { testMarkTx(t, b, owner == "guard") })
		}
	}
}

func testMarkTx(t *testing.T, b backend, guardOwned bool) {
	f := newTxFixture(t, b, nil)
	var runs atomic.Int32
	biz := func(tx *gorm.DB, key string, fail any) error {
		runs.Add(1)
		if err := tx.Exec("INSERT INTO "+f.biz+" (k, fence) VALUES (?, 1)", key).Error; err != nil {
			return err
		}
		switch v := fail.(type) {
		case error:
			return v
		case string:
			panic(v)
		}
		return nil
	}
	mark := func(key string, fail any) error {
		call := idemkit.Call{Scope: "marktx", Key: key}
		if guardOwned {
			return f.store.TxMark(ctxb, f.guard, call, func(ctx context.Context, tx *gorm.DB) error { return biz(tx, key, fail) })
		}
		return f.db.Transaction(func(tx *gorm.DB) error {
			return f.guard.MarkTx(ctxb, f.store.WithTx(tx), call, func(ctx context.Context) error { return biz(tx, key, fail) })
		})
	}
	{
		must(t, mark("ok", nil))
		if err := mark("ok", nil); !errors.Is(err, idemkit.ErrDuplicate) {
			t.Fatalf("second mark: %v, want ErrDuplicate", err)
		}
		if n := bizRows(t, f.db, f.biz, "ok"); n != 1 || runs.Load() != 1 {
			t.Fatalf("%d business rows after %d runs, want 1 and 1", n, runs.Load())
		}

		boom := errors.New("boom")
		if err := mark("fails", boom); !errors.Is(err, boom) {
			t.Fatalf("failing mark: %v", err)
		}
		if p := recovered(func() { _ = mark("panics", "kaboom") }); p != "kaboom" {
			t.Fatalf("recovered %v", p)
		}
		for _, key := range []string{"fails", "panics"} {
			if n := bizRows(t, f.db, f.biz, key); n != 0 {
				t.Fatalf("%s: %d business rows after rollback", key, n)
			}
			if _, err := f.store.Get(ctxb, "marktx", key); !errors.Is(err, idemkit.ErrNotFound) {
				t.Fatalf("%s: mark left behind: %v", key, err)
			}
			must(t, mark(key, nil)) // the retry runs
			if n := bizRows(t, f.db, f.biz, key); n != 1 {
				t.Fatalf("%s: %d business rows after the retry", key, n)
			}
		}

		var wg sync.WaitGroup
		var dups atomic.Int32
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				switch err := mark("race", nil); {
				case err == nil:
				case errors.Is(err, idemkit.ErrDuplicate), errors.Is(err, idemkit.ErrInFlight):
					dups.Add(1)
				default:
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if n := bizRows(t, f.db, f.biz, "race"); n != 1 || dups.Load() != 7 {
			t.Fatalf("race: %d business rows, %d duplicates; want 1 and 7", n, dups.Load())
		}
	}
}
