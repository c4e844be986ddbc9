package barrier

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestGormCallRetryWithTheSameBranch: a caller that runs Call (Enter) in its own transaction and
// retries that transaction with the same Branch after an error — fn's, or Enter's own, such as
// PostgreSQL's serialization failure (40001) in REPEATABLE READ when the branch's row was committed
// after the transaction's snapshot — uses the same barrier id, as TransactionOutcome's retry does. The
// failed call had counted its id, so the retry committed its rows under the next one and a
// redelivery (a new Branch, from the first id) ran the business again; a late try retried so ran
// after its cancel instead of being Hanging.
func TestGormCallRetryWithTheSameBranch(t *testing.T) {
	ctx := context.Background()
	t.Run("fn fails", func(t *testing.T) {
		eachDialect(t, func(t *testing.T, db *gorm.DB) {
			g := newGormTable(t, db)
			gid := testsvc.Name("gid-")
			runs := 0
			b, _ := NewBranch(TransSaga, gid, "01", OpAction)
			transient := errors.New("deadlock, try again")
			tx := db.Begin()
			defer func() { tx.Rollback() }()
			if err := g.Call(ctx, tx, b, func(*gorm.DB) error { return transient }); !errors.Is(err, transient) {
				t.Fatal(err)
			}
			tx.Rollback()
			tx = db.Begin()
			if err := g.Call(ctx, tx, b, func(*gorm.DB) error { runs++; return nil }); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit().Error; err != nil {
				t.Fatal(err)
			}
			redelivery, _ := NewBranch(TransSaga, gid, "01", OpAction)
			out, err := g.TransactionOutcome(ctx, redelivery, func(*gorm.DB) error { runs++; return nil })
			if err != nil || out != Duplicate || runs != 1 {
				t.Fatalf("redelivery after a retried Call: %s, %v, business ran %d times; want Duplicate, once", out, err, runs)
			}
		})
	})
	for _, iso := range []sql.IsolationLevel{sql.LevelRepeatableRead, sql.LevelSerializable} {
		t.Run("postgres "+iso.String(), func(t *testing.T) {
			db := testsvc.Postgres(t, nil)
			g := newGormTable(t, db)
			gid := testsvc.Name("gid-")
			try, _ := NewBranch(TransTCC, gid, "01", OpTry)
			tx := db.Begin(&sql.TxOptions{Isolation: iso})
			defer func() { tx.Rollback() }()
			var n int64
			if err := tx.Raw("SELECT COUNT(*) FROM " + g.Table()).Scan(&n).Error; err != nil { // the snapshot
				t.Fatal(err)
			}
			cancel, _ := NewBranch(TransTCC, gid, "01", OpCancel)
			if out, err := g.TransactionOutcome(ctx, cancel, func(*gorm.DB) error { return nil }); err != nil || out != NullCompensation {
				t.Fatalf("cancel first: %s, %v", out, err)
			}
			ran := false
			out, err := g.CallOutcome(ctx, tx, try, func(*gorm.DB) error { ran = true; return nil })
			if err == nil {
				// Not this database's serialization failure: nothing to retry.
				if out != Hanging || ran {
					t.Fatalf("the late try: %s, ran %v; want Hanging", out, ran)
				}
				return
			}
			tx.Rollback()
			tx = db.Begin(&sql.TxOptions{Isolation: iso})
			first := err
			out, err = g.CallOutcome(ctx, tx, try, func(*gorm.DB) error { ran = true; return nil })
			if err != nil || out != Hanging || ran {
				t.Fatalf("the late try retried with the same Branch after %v: %s, %v, ran %v; want Hanging", first, out, err, ran)
			}
		})
	}
}

// TestGormCallRetryAfterAFailedCommit: a transaction holding Call fails at its COMMIT (here a deferred
// constraint on PostgreSQL; a serialization failure in SERIALIZABLE, or a Galera certification
// conflict, fail there too) after Call returned nil, so the call counted its barrier id. Run again with
// b restored as it was before the transaction, as Gorm.Enter's documentation says, the retry writes
// the first id's rows, and a redelivery (a new Branch) is a Duplicate. Run again with b as it was
// left, the retry committed under the next id and the redelivery ran the business a second time.
func TestGormCallRetryAfterAFailedCommit(t *testing.T) {
	ctx := context.Background()
	db := testsvc.Postgres(t, nil)
	g := newGormTable(t, db)
	effects := testsvc.Name("effects_")
	testsvc.DropTable(t, db, effects)
	if err := db.Exec("CREATE TABLE " + effects + " (id int, CONSTRAINT " + effects + "_once UNIQUE (id) DEFERRABLE INITIALLY DEFERRED)").Error; err != nil {
		t.Fatal(err)
	}
	if err := db.Exec("INSERT INTO " + effects + " VALUES (1)").Error; err != nil { // makes the first COMMIT fail
		t.Fatal(err)
	}
	gid := testsvc.Name("gid-")
	runs := 0
	business := func(tx *gorm.DB) error {
		runs++
		return tx.Exec("INSERT INTO " + effects + " VALUES (1)").Error
	}
	b, _ := NewBranch(TransSaga, gid, "01", OpAction)
	saved := *b
	err := db.Transaction(func(tx *gorm.DB) error { return g.Call(ctx, tx, b, business) })
	if err == nil {
		t.Fatal("the first transaction committed; want its COMMIT to fail on the deferred constraint")
	}
	if err := db.Exec("DELETE FROM " + effects).Error; err != nil {
		t.Fatal(err)
	}
	*b = saved
	if err := db.Transaction(func(tx *gorm.DB) error { return g.Call(ctx, tx, b, business) }); err != nil {
		t.Fatalf("retry: %v", err)
	}
	redelivery, _ := NewBranch(TransSaga, gid, "01", OpAction)
	out, err := g.TransactionOutcome(ctx, redelivery, business)
	if err != nil || out != Duplicate || runs != 2 {
		t.Fatalf("redelivery after the retried transaction: %s, %v, business ran %d times; want Duplicate, twice (the failed COMMIT and its retry)", out, err, runs)
	}
}
