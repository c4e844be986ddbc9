package record

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
)

// TestGuardTxLazyFenceReadFailureIsRetryable: when FenceFromContext's read of the record fails (here
// in a PostgreSQL transaction the function's failed statement aborted), the call fails with
// ErrStoreUnavailable and its key stays retryable (FAILED), also under an Options.IsPermanent that
// calls every unknown error permanent: an outage of the Store is not the business's permanent failure.
func TestGuardTxLazyFenceReadFailureIsRetryable(t *testing.T) {
	rdb := testsvc.Redis(t)
	f := newTxFixture(t, backend{"PostgreSQL", testsvc.Postgres}, nil)
	g, err := idemkit.New(f.store, &idemkit.Options{
		Locker:      lock.New(rdb, &lock.Options{Prefix: testsvc.Name("readerr") + ":"}),
		IsPermanent: func(error) bool { return true },
	})
	must(t, err)
	call := idemkit.Call{Scope: "gtx", Key: "aborted"}
	_, err = f.store.SQLTx(ctxb, g, call, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
		_, _ = tx.ExecContext(ctx, "SELECT 1/0") // aborts the transaction; the function goes on
		if _, ok := idemkit.FenceFromContext(ctx); ok {
			t.Error("FenceFromContext reported a fence its read could not get")
		}
		return nil, nil
	})
	if !errors.Is(err, idemkit.ErrStoreUnavailable) {
		t.Fatalf("Tx = %v; want ErrStoreUnavailable", err)
	}
	if rec, err := f.store.Get(ctxb, "gtx", "aborted"); err == nil && rec.Status != idemkit.StatusFailed {
		t.Fatalf("record %s (%q); want FAILED (or none): a failed read of the Store is retryable", rec.Status, rec.Error)
	}
}
