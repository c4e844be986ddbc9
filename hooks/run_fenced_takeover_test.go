package hooks_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/txstatus"
)

// TestBeforeHookOutlivingLeaseIsRolledBackAfterATakeover: as TestBeforeHookOutlivingLeaseIsRolledBack,
// the Before hook outlives the claim's lease and a Reconciler fences the gid and rolls the record back
// before the hook's row lands; but the client's retry then takes the key over under a new gid before
// Run renews its claim. Run's renewal is fenced, and its gid still never started: the Rollback hook
// must run for it again, or its row stays PENDING for ever — the record no longer naming that gid
// changes nothing of that. Run's error says the record was settled by another and claimed again.
func TestBeforeHookOutlivingLeaseIsRolledBackAfterATakeover(t *testing.T) {
	b := setup(t)
	var mu sync.Mutex
	orders := map[string]string{} // gid → status: the user's table
	lc := *b.lc
	r := &hooks.Reconciler{Lifecycle: &lc, Scopes: []string{"create-order"}, Manager: &fakeManager{statuses: map[string]txstatus.Status{}}, TransType: "saga"}
	lc.OnRollback = hooks.RollbackFunc(func(_ context.Context, t *hooks.Txn, _ error) error {
		mu.Lock()
		defer mu.Unlock()
		if orders[t.GID] == "PENDING" {
			orders[t.GID] = "FAILED"
		}
		return nil
	})
	// The retry comes through another process, whose Guard does not see this one's lock (no Locker,
	// as when Redis failed open or the lock ran out too).
	other, err := idemkit.New(b.store, &idemkit.Options{Lease: time.Second, Now: b.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	lc.Before = hooks.BeforeTransactionFunc(func(ctx context.Context, txn *hooks.Txn) error {
		b.clock.Advance(2 * time.Second) // the INSERT waits past the lease; a reconciler pass runs
		if n, err := r.RunOnce(ctx, b.clock.Now(), 10); n != 1 || err != nil {
			t.Errorf("reconciler settled %d, %v", n, err)
		}
		retry := call("k")
		retry.GID = "gid-of-the-retry"
		if cl, _, err := other.Begin(ctx, retry); err != nil {
			t.Errorf("the retry did not take the key over: %v", err)
		} else {
			cl.Detach(ctx)
		}
		mu.Lock()
		orders[txn.GID] = "PENDING" // the INSERT lands
		mu.Unlock()
		return nil
	})
	out, err := lc.Run(ctxb, hooks.RunParams{TransType: "saga", Call: call("k"),
		Status: &txstatus.Client{Server: "http://127.0.0.1:1"}, // never asked
		Start: func(context.Context, string) error {
			t.Error("started a transaction whose claim was settled")
			return nil
		}})
	if !errors.Is(err, idemkit.ErrFenced) {
		t.Fatalf("Run = %+v, %v; want an error matching ErrFenced", out, err)
	}
	// A record with a gid is never taken over when its lease runs out: the error must say what
	// happened — settled by another (the reconciler) and claimed again — not "the lease ran out and
	// another attempt took over" (found by a defect hunt).
	if msg := err.Error(); strings.Contains(msg, "lease ran out") || !strings.Contains(msg, "settled by another") || !strings.Contains(msg, "claimed again") {
		t.Errorf("Run's error %q: want it to say the record was settled by another (a reconciler) and claimed again, not that its lease ran out", msg)
	}
	mu.Lock()
	defer mu.Unlock()
	if rec := b.status(t, "k"); rec.GID != "gid-of-the-retry" || orders[out.GID] != "FAILED" {
		t.Fatalf("record of gid %s, order row of %s %q; want the retry's and FAILED", rec.GID, out.GID, orders[out.GID])
	}
}
