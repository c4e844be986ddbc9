package barrier

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestGormWaitersOfARolledBackDelivery: a delivery holds the row of an op uncommitted — a slow
// action, try or confirm — while two other deliveries of the branch wait for that row: two
// deliveries of its compensation (DTM calls it again after its request timeout), the compensation
// and a redelivery of the op, or two redeliveries of the op. The holder then rolls back (its
// business failed, or its caller gave up and cancelled it).
// Every waiter must then be decided by the barrier: the rows are inserted once, the other waiter
// finds them. On MySQL/MariaDB both waiters held a shared lock on the key after the rollback and
// both asked to insert it, and InnoDB rolled one of them back as a deadlock victim (error 1213): that
// delivery failed, answered 500 by dtmhttp, although nothing was wrong.
func TestGormWaitersOfARolledBackDelivery(t *testing.T) {
	for _, sc := range []struct {
		name, trans, holder string
		waiters             [2]string
	}{
		{"two compensates", TransSaga, OpAction, [2]string{OpCompensate, OpCompensate}},
		{"compensate and action", TransSaga, OpAction, [2]string{OpCompensate, OpAction}},
		{"two cancels", TransTCC, OpTry, [2]string{OpCancel, OpCancel}},
		{"cancel and try", TransTCC, OpTry, [2]string{OpCancel, OpTry}},
		{"two actions", TransSaga, OpAction, [2]string{OpAction, OpAction}},
		{"two confirms", TransTCC, OpConfirm, [2]string{OpConfirm, OpConfirm}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			for _, d := range dialects[:2] { // the dialects with row locks
				t.Run(d.name, func(t *testing.T) {
					db := d.open(t, nil)
					g := newGormTable(t, db)
					for round := range 3 {
						testWaitersOfARolledBackDelivery(t, db, g, round, sc.trans, sc.holder, sc.waiters)
					}
				})
			}
		})
	}
}

func testWaitersOfARolledBackDelivery(t *testing.T, db *gorm.DB, g *Gorm, round int, trans, holder string, waiters [2]string) {
	ctx := context.Background()
	gid := testsvc.Name("gid-")
	tx := db.Begin()
	defer tx.Rollback()
	hb, _ := NewBranch(trans, gid, "01", holder)
	if out, err := g.Enter(ctx, tx, hb); err != nil || out != Proceed {
		t.Fatalf("round %d: holder %s: %s, %v", round, holder, out, err)
	}
	outs := make([]Outcome, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, op := range waiters {
		wg.Go(func() {
			b, _ := NewBranch(trans, gid, "01", op)
			outs[i], errs[i] = g.TransactionOutcome(ctx, b, func(*gorm.DB) error { return nil })
		})
		waitLockWaits(t, db, g, i+1)
	}
	if err := tx.Rollback().Error; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, op := range waiters {
		if errs[i] != nil {
			t.Fatalf("round %d: %s waiting on the %s that rolled back: %v (the other: %s %s, %v)",
				round, op, holder, errs[i], waiters[1-i], outs[1-i], errs[1-i])
		}
	}
	// The first decided runs (a compensation as a null compensation), the other follows it.
	got := map[string][]Outcome{}
	for i, op := range waiters {
		got[op] = append(got[op], outs[i])
	}
	origin := OriginOp(waiters[0])
	switch {
	case waiters[1] == waiters[0] && origin == "":
		if !(outs[0] == Proceed && outs[1] == Duplicate || outs[0] == Duplicate && outs[1] == Proceed) {
			t.Fatalf("round %d: two %s: %v, want one proceed and one duplicate", round, waiters[0], outs)
		}
	case waiters[1] == waiters[0]:
		if !(outs[0] == NullCompensation && outs[1] == Duplicate || outs[0] == Duplicate && outs[1] == NullCompensation) {
			t.Fatalf("round %d: two %s: %v, want one null compensation and one duplicate", round, waiters[0], outs)
		}
	case got[origin][0] == Hanging && got[waiters[0]][0] == NullCompensation,
		got[origin][0] == Proceed && got[waiters[0]][0] == Proceed:
	default:
		t.Fatalf("round %d: %s %s and %s %s", round, waiters[0], got[waiters[0]][0], origin, got[origin][0])
	}
}

// waitLockWaits waits until n statements on g's table wait for a lock (on MySQL/MariaDB: are running).
func waitLockWaits(t *testing.T, db *gorm.DB, g *Gorm, n int) {
	t.Helper()
	// The process list, not information_schema.innodb_trx, which MariaDB refreshes from a cache.
	q := "SELECT count(*) FROM information_schema.processlist WHERE command <> 'Sleep' AND id <> connection_id() AND info LIKE ?"
	if db.Dialector.Name() == "postgres" {
		q = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE ?"
	}
	table := strings.Split(g.Table(), ".")[0] // PostgreSQL: the test's own schema
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting int
		if err := db.Raw(q, "%"+table+"%").Scan(&waiting).Error; err != nil {
			t.Fatal(err)
		}
		if waiting >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d statements on %s wait for a lock after 10s, want %d", waiting, g.Table(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestGormWaiterUnderRepeatableRead: on a PostgreSQL whose transactions run in REPEATABLE READ or
// SERIALIZABLE (default_transaction_isolation), a compensation delivered while its action's
// transaction is still open waits for the action row; once the action commits, the compensation's
// insert fails with a serialization failure (40001): the row is not in its snapshot. Gorm.Transaction
// answered that error (dtmhttp.Gorm a 500, DTM retried with backoff) instead of running the
// compensation, which a new transaction sees is due.
func TestGormWaiterUnderRepeatableRead(t *testing.T) {
	for _, iso := range []string{"repeatable\\ read", "serializable"} {
		t.Run(strings.ReplaceAll(iso, "\\ ", "-"), func(t *testing.T) {
			db := testsvc.PostgresWith(t, nil, " options='-c default_transaction_isolation="+iso+"'")
			g := newGormTable(t, db)
			ctx := context.Background()
			for _, commit := range []bool{true, false} {
				gid := testsvc.Name("gid-")
				tx := db.Begin()
				hb, _ := NewBranch(TransSaga, gid, "01", OpAction)
				if out, err := g.Enter(ctx, tx, hb); err != nil || out != Proceed {
					t.Fatalf("action: %s, %v", out, err)
				}
				var out Outcome
				var err error
				var wg sync.WaitGroup
				wg.Go(func() {
					b, _ := NewBranch(TransSaga, gid, "01", OpCompensate)
					out, err = g.TransactionOutcome(ctx, b, func(*gorm.DB) error { return nil })
				})
				waitLockWaits(t, db, g, 1)
				end, want := tx.Commit, Proceed
				if !commit {
					end, want = tx.Rollback, NullCompensation
				}
				if err := end().Error; err != nil {
					t.Fatal(err)
				}
				wg.Wait()
				if err != nil || out != want {
					t.Fatalf("compensation waiting on an action that ended (committed: %v): %s, %v; want %s", commit, out, err, want)
				}
			}
		})
	}
}
