package idemkit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/record"
)

// TestWatchdogGivesUpWhileARenewalHangs: the watchdog cancels the function half a period before the
// lease lapses when it cannot renew — but it waited for each renewal to return first. A renewal that
// ignores its deadline (on SQLite a write waits the whole busy timeout for another connection's write
// lock, whatever its context says) kept it from giving up: the function ran on seconds after its
// lease lapsed, while a duplicate could take the key over and run beside it (a storm with several
// Guards on one SQLite file and a short lease saw two runs of one key at once, and two effects). It
// now gives up on time however long the renewal it is waiting for takes.
func TestWatchdogGivesUpWhileARenewalHangs(t *testing.T) {
	db := testsvc.SQLite(t, nil) // busy_timeout 5000, WAL: the embedded defaults
	st, err := record.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateTable(ctxb); err != nil {
		t.Fatal(err)
	}
	g, err := idemkit.New(st, &idemkit.Options{Lease: 3 * time.Second, Watchdog: true})
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	call := idemkit.Call{Scope: "s", Key: "k"}
	_, err = g.Do(ctxb, call, func(ctx context.Context) ([]byte, error) {
		// Another connection takes the file's write lock and keeps it until the function learns it
		// lost its claim (20s at most): every renewal waits behind it.
		holder, err := sqlDB.Conn(ctxb)
		if err != nil {
			return nil, err
		}
		defer holder.Close()
		if _, err := holder.ExecContext(ctxb, "BEGIN IMMEDIATE"); err != nil {
			return nil, err
		}
		defer holder.ExecContext(ctxb, "ROLLBACK")
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Second):
			t.Error("the watchdog did not cancel the function within 20s (its lease is 3s)")
			return nil, errors.New("not cancelled")
		}
		now := g.Now()
		rec, err := g.Get(ctxb, call.Scope, call.Key) // WAL: reads go on beside the write lock
		if err != nil {
			t.Errorf("reading the record: %v", err)
		} else if !now.Before(rec.LeaseUntil) {
			t.Errorf("the function learned it lost its claim at %s, %s after its lease lapsed (%s): a duplicate could have taken the key over and run beside it",
				now.Format(time.StampMilli), now.Sub(rec.LeaseUntil), rec.LeaseUntil.Format(time.StampMilli))
		}
		return nil, context.Cause(ctx)
	})
	if !errors.Is(err, idemkit.ErrLockLost) {
		t.Errorf("the call answered %v, want ErrLockLost", err)
	}
}
