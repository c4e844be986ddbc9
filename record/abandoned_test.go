package record

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
)

func abandonedMariaStore(t *testing.T) (*Store, string) {
	t.Helper()
	db := testsvc.MySQL(t, nil)
	table := testsvc.Name("t_aband_")
	st, err := New(db, &Options{Table: table})
	must(t, err)
	testsvc.DropTable(t, db, table)
	must(t, st.CreateTable(ctxb))
	return st, table
}

// TestAbandonedClaimLandingAfterFinishTimeout: a claim whose caller left lands whenever the row lock
// its INSERT waits on is freed (innodb_lock_wait_timeout: 50 s by default): here after 6 s, past the
// default FinishTimeout (5 s), which bounded the watch at first. It is released all the same: the
// watch lasts as long as the claim's lease (found by a review).
func TestAbandonedClaimLandingAfterFinishTimeout(t *testing.T) {
	st, table := abandonedMariaStore(t)
	g, err := idemkit.New(st, &idemkit.Options{Lease: time.Hour}) // FinishTimeout: the default 5 s
	must(t, err)
	sqlDB := st.sdb
	blocker, err := sqlDB.BeginTx(ctxb, nil)
	must(t, err)
	_, err = blocker.Exec("INSERT INTO " + table + " (scope, idem_key, status, error) VALUES ('s', 'k', 'SUCCEEDED', '')")
	must(t, err)

	var runs atomic.Int32
	fn := func(context.Context) ([]byte, error) { runs.Add(1); return []byte("v"), nil }
	ctx, cancel := context.WithTimeout(ctxb, 200*time.Millisecond)
	_, err = g.Do(ctx, idemkit.Call{Scope: "s", Key: "k"}, fn)
	cancel()
	t.Logf("first call (caller left): %v", err)
	time.Sleep(6 * time.Second)
	must(t, blocker.Rollback()) // the other transaction rolls back: the waiting INSERT lands now

	var last error
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, last = g.Do(ctxb, idemkit.Call{Scope: "s", Key: "k"}, fn); last == nil {
			return
		}
	}
	rec, _ := st.Get(ctxb, "s", "k")
	t.Fatalf("retries after the abandoned claim landed: %v (function ran %d times); record %s owner %q lease until %v: the claim nobody holds blocks the key for its lease",
		last, runs.Load(), rec.Status, rec.Owner, rec.LeaseUntil)
}

// TestAbandonedClaimBehindDelete: on InnoDB an INSERT waits on a row a transaction is deleting (the
// sweeper's DeleteExpired batch; here an explicit transaction holds the same lock). The watch saw the
// old committed record, took it for another attempt's and stopped; the delete then committed and the
// claim landed unwatched. An insert's watch now lasts to its end (found by a review).
func TestAbandonedClaimBehindDelete(t *testing.T) {
	st, table := abandonedMariaStore(t)
	g, err := idemkit.New(st, &idemkit.Options{Lease: time.Hour})
	must(t, err)
	// An old record of the key, expired: what the sweeper deletes.
	old := &idemkit.Record{Scope: "s", Key: "k", Status: idemkit.StatusSucceeded, Fence: 1, Owner: "old",
		ExpiresAt: time.Now().Add(-time.Minute), CreatedAt: time.Now().Add(-time.Hour), UpdatedAt: time.Now().Add(-time.Hour)}
	must(t, st.Insert(ctxb, old))

	blocker, err := st.sdb.BeginTx(ctxb, nil)
	must(t, err)
	_, err = blocker.Exec("DELETE FROM " + table + " WHERE scope = 's' AND idem_key = 'k'")
	must(t, err)

	var runs atomic.Int32
	fn := func(context.Context) ([]byte, error) { runs.Add(1); return []byte("v"), nil }
	ctx, cancel := context.WithTimeout(ctxb, 300*time.Millisecond)
	_, err = g.Do(ctx, idemkit.Call{Scope: "s", Key: "k"}, fn)
	cancel()
	t.Logf("first call (caller left): %v", err)
	time.Sleep(300 * time.Millisecond) // the goroutine reads the old record meanwhile
	must(t, blocker.Commit())          // the delete commits: the waiting INSERT lands

	var last error
	for deadline := time.Now().Add(7 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, last = g.Do(ctxb, idemkit.Call{Scope: "s", Key: "k"}, fn); last == nil {
			return
		}
		if !errors.Is(last, idemkit.ErrInFlight) {
			break
		}
	}
	rec, _ := st.Get(ctxb, "s", "k")
	t.Fatalf("retries within FinishTimeout (5 s) of the landing: %v (function ran %d times); record %s owner %q: never released",
		last, runs.Load(), rec.Status, rec.Owner)
}
