package record

import (
	"context"
	"sync/atomic"
	"testing"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// countStatements counts every statement db runs through gorm, by a callback after each processor.
func countStatements(t testing.TB, db *gorm.DB) *atomic.Int64 {
	t.Helper()
	n := new(atomic.Int64)
	inc := func(*gorm.DB) { n.Add(1) }
	const name = "idemkit_test:count"
	cb := db.Callback()
	must(t, cb.Create().After("gorm:create").Register(name, inc))
	must(t, cb.Query().After("gorm:query").Register(name, inc))
	must(t, cb.Update().After("gorm:update").Register(name, inc))
	must(t, cb.Delete().After("gorm:delete").Register(name, inc))
	must(t, cb.Raw().After("gorm:raw").Register(name, inc)) // db.Exec
	must(t, cb.Row().After("gorm:row").Register(name, inc)) // db.Raw(...).Row() and .Rows()
	return n
}

// delta returns how many statements f ran.
func delta(n *atomic.Int64, f func()) int64 {
	before := n.Load()
	f()
	return n.Load() - before
}

func TestStatementBudget(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		t.Run("Default", func(t *testing.T) { statementBudget(t, b, nil) })
		t.Run("PrepareStmt", func(t *testing.T) {
			statementBudget(t, b, &gorm.Config{PrepareStmt: true, Logger: logger.Discard})
		})
	})
}

func statementBudget(t *testing.T, b backend, cfg *gorm.Config) {
	f := newTxFixture(t, b, cfg)
	n := countStatements(t, f.db)

	// The counter sees what the Store uses: Exec (raw processor) and Raw(...).Rows (row processor).
	if d := delta(n, func() {
		must(t, f.db.Exec("SELECT 1").Error)
		rows, err := f.db.Raw("SELECT 1").Rows()
		must(t, err)
		must(t, rows.Close())
		var one int
		must(t, f.db.Raw("SELECT 1").Row().Scan(&one))
	}); d != 3 {
		t.Fatalf("counter saw %d of 3 statements", d)
	}

	fn := func(context.Context) ([]byte, error) { return []byte("r"), nil }
	call := idemkit.Call{Scope: "budget", Key: "execute"}
	if d := delta(n, func() { _, err := f.guard.Do(ctxb, call, fn); must(t, err) }); d != 2 {
		t.Errorf("Execute mode, new key: %d statements, want 2 (insert-claim, fenced finish)", d)
	}
	if d := delta(n, func() {
		res, err := f.guard.Do(ctxb, call, fn)
		must(t, err)
		if !res.Replayed {
			t.Error("second call was not a replay")
		}
	}); d != 2 {
		t.Errorf("uncached replay: %d statements, want 2 (conflicting insert, read)", d)
	} else {
		t.Logf("uncached replay without a Locker: 2 statements (conflicting insert, read)")
	}

	// Tx mode: the business's own insert plus exactly two.
	var inTx int64
	must(t, f.db.Transaction(func(tx *gorm.DB) error {
		inTx = delta(n, func() {
			_, err := f.guard.DoTx(ctxb, f.store.WithTx(tx), idemkit.Call{Scope: "budget", Key: "tx"}, func(ctx context.Context) ([]byte, error) {
				return []byte("r"), tx.Exec("INSERT INTO "+f.biz+" (k, fence) VALUES (?, ?)", "tx", 1).Error
			})
			must(t, err)
		})
		return nil
	}))
	if inTx != 1+2 {
		t.Errorf("Tx mode: %d statements in the transaction, want 1 (business) + 2 (claim, finish)", inTx)
	}

	// MarkTx: the business's own insert plus exactly one.
	must(t, f.db.Transaction(func(tx *gorm.DB) error {
		inTx = delta(n, func() {
			err := f.guard.MarkTx(ctxb, f.store.WithTx(tx), idemkit.Call{Scope: "budget", Key: "marktx"}, func(ctx context.Context) error {
				return tx.Exec("INSERT INTO "+f.biz+" (k, fence) VALUES (?, ?)", "marktx", 1).Error
			})
			must(t, err)
		})
		return nil
	}))
	if inTx != 1+1 {
		t.Errorf("MarkTx: %d statements in the transaction, want 1 (business) + 1 (mark)", inTx)
	}

	// A replay served by the Locker's cache touches no database.
	cached, err := idemkit.New(f.store, &idemkit.Options{Locker: memory.NewLocker(nil)})
	must(t, err)
	call = idemkit.Call{Scope: "budget", Key: "cached"}
	if d := delta(n, func() { _, err := cached.Do(ctxb, call, fn); must(t, err) }); d != 2 {
		t.Errorf("Execute mode with a Locker, new key: %d statements, want 2", d)
	}
	if d := delta(n, func() {
		res, err := cached.Do(ctxb, call, fn)
		must(t, err)
		if !res.Replayed || string(res.Value) != "r" {
			t.Errorf("cached replay: %+v", res)
		}
	}); d != 0 {
		t.Errorf("cached replay: %d statements, want 0", d)
	}
}

// TestUpdateNoOpIsNotFenced: an Update that writes exactly what is stored succeeds on every database
// (MySQL reports the row as unchanged; one more SELECT confirms it), also inside a transaction; the
// extra statement is only spent on that rare path.
func TestUpdateNoOpIsNotFenced(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s, db := setup(t, b)
		n := countStatements(t, db)
		rec := &idemkit.Record{Scope: "s", Key: "k", Status: idemkit.StatusSucceeded, Fence: 3, Owner: "o", Response: []byte("x")}
		must(t, s.Insert(ctxb, rec))
		want := int64(1)
		if s.Dialect() == dialectMySQL {
			want = 2
		}
		if d := delta(n, func() { must(t, s.Update(ctxb, rec, rec.Version())) }); d != want {
			t.Errorf("no-op update: %d statements, want %d", d, want)
		}
		must(t, db.Transaction(func(tx *gorm.DB) error { return s.WithTx(tx).Update(ctxb, rec, rec.Version()) }))
		stale := *rec
		stale.Fence = 2
		if err := s.Update(ctxb, &stale, stale.Version()); err != idemkit.ErrFenced {
			t.Fatalf("update of a stale version = %v, want ErrFenced", err)
		}
	})
}
