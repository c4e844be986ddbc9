package hooks_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/txstatus"
)

// TestReconcilerWithoutAGuardSettlesNothing: a Reconciler given its records through Pending and a
// Lifecycle without a Guard (the Guard keeps the records: without one, Lifecycle.Commit and Rollback
// write nothing) ran the Commit hook of every listed record and reported it settled, while the
// record stayed PROCESSING: the next pass listed it again and ran the hook again, pass after pass,
// the key in flight for ever, the reconciler's count and Observe saying it was settled. Such a
// Reconciler is refused, as one without a Lifecycle is.
func TestReconcilerWithoutAGuardSettlesNothing(t *testing.T) {
	b := setup(t)
	cl, _, err := b.g.Begin(ctxb, idemkit.Call{Scope: "create-order", Key: "k", GID: "g-ng"})
	if err != nil {
		t.Fatal(err)
	}
	cl.Detach(ctxb)
	b.clock.Advance(2 * time.Second) // past the lease
	commits := 0
	r := &hooks.Reconciler{
		Lifecycle: &hooks.Lifecycle{OnCommit: hooks.CommitFunc(func(context.Context, *hooks.Txn, []byte) error { commits++; return nil })},
		Pending: func(ctx context.Context, now time.Time, limit int) ([]*idemkit.Record, error) {
			return b.g.Pending(ctx, now, limit, "create-order")
		},
		Manager: &fakeManager{statuses: map[string]txstatus.Status{"g-ng": txstatus.Succeed}},
	}
	for range 2 {
		n, err := r.RunOnce(ctxb, b.clock.Now(), 10)
		if rec := b.status(t, "k"); n != 0 || err == nil || rec.Status != idemkit.StatusProcessing {
			t.Fatalf("RunOnce with a Lifecycle without a Guard = %d, %v (record %s, Commit hook run %d times); want it refused, nothing run nor reported settled",
				n, err, rec.Status, commits)
		}
	}
	if commits != 0 {
		t.Fatalf("the Commit hook ran %d times for a record nothing settled", commits)
	}
}
