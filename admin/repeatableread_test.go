package admin_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestCheckedWriteRacingARecoveryUnderRepeatableRead: on PostgreSQL whose sessions default to
// REPEATABLE READ (default_transaction_isolation, which the record Store supports), a release or purge
// of a stuck claim locks the record's row, and while it waits for that lock another write of the
// record commits — here a sweeper's recovery, as likely the holder's late finish. PostgreSQL then
// fails the locking read with a serialization failure: the operator got "could not serialize access
// due to concurrent update" (idemctl exit 1) instead of being told the record changed since it was
// read (idemkit.ErrFenced, exit 4). The transaction runs again and finds the record changed.
func TestCheckedWriteRacingARecoveryUnderRepeatableRead(t *testing.T) {
	ctx := context.Background()
	db := testsvc.PostgresWith(t, nil, " default_transaction_isolation='repeatable read'")
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	st, tbl := table(t, db)
	adm, err := admin.New(db, &admin.Options{Table: tbl})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, op := range []string{"release", "purge"} {
		if err := st.Insert(ctx, &idemkit.Record{Scope: "s", Key: op, Status: idemkit.StatusProcessing, Fence: 1, Owner: "dead",
			LeaseUntil: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour), CreatedAt: now, UpdatedAt: now}); err != nil {
			t.Fatal(err)
		}
		rec, err := adm.Get(ctx, "s", op)
		if err != nil {
			t.Fatal(err)
		}
		// The recovery holds the row while the operator's write waits for it.
		recovery, err := sqlDB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := recovery.ExecContext(ctx, "UPDATE "+tbl+" SET status = 'FAILED', fence = fence + 1, owner = '' WHERE scope = 's' AND idem_key = $1", op); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			if op == "release" {
				_, err := adm.Release(ctx, rec, admin.ReleaseOptions{By: "test"})
				done <- err
				return
			}
			done <- adm.Purge(ctx, rec, admin.PurgeOptions{})
		}()
		waitForRowLock(t, sqlDB, tbl)
		if err := recovery.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; !errors.Is(err, idemkit.ErrFenced) {
			t.Fatalf("%s racing a recovery: %v; want idemkit.ErrFenced (the record changed since it was read)", op, err)
		}
		if got, err := st.Get(ctx, "s", op); err != nil || got.Status != idemkit.StatusFailed || got.Fence != 2 {
			t.Fatalf("%s: the record after the race: %+v, %v; want the recovery's, FAILED at fence 2", op, got, err)
		}
	}
}

// waitForRowLock waits until a session waits for a row lock in a locking read of table.
func waitForRowLock(t *testing.T, db interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, table string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		err := db.QueryRowContext(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "+
			"AND query LIKE '%FOR UPDATE%' AND strpos(query, $1) > 0", table).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the operator's write never waited for the row lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
