package hooks_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/memory"
	"github.com/idemkit/idemkit/txstatus"
)

// TestBeforeHookOutlivingLeaseIsRolledBack: the README's pattern — the Before hook inserts the order row
// PENDING under the gid, the Rollback hook fails a PENDING row. The Before hook outlives the claim's
// lease; meanwhile a Reconciler fences the gid DTM never heard of, runs the Rollback hook (no row
// yet) and records FAILED; then the row lands. Run's renewal is fenced: it runs the Rollback hook
// again, so the row does not stay PENDING for ever (found by a defect hunt).
func TestBeforeHookOutlivingLeaseIsRolledBack(t *testing.T) {
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
	lc.Before = hooks.BeforeTransactionFunc(func(ctx context.Context, txn *hooks.Txn) error {
		b.clock.Advance(2 * time.Second) // the INSERT waits past the lease; a reconciler pass runs
		if n, err := r.RunOnce(ctx, b.clock.Now(), 10); n != 1 || err != nil {
			t.Errorf("reconciler settled %d, %v", n, err)
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
	mu.Lock()
	defer mu.Unlock()
	if rec := b.status(t, "k"); rec.Status != idemkit.StatusFailed || orders[out.GID] != "FAILED" {
		t.Fatalf("record %s, order row %q; want FAILED and FAILED", rec.Status, orders[out.GID])
	}
}

// TestChosenGIDManagerUnreachableIsAnError: with a gid chosen up front, a manager that cannot be asked
// whether the gid is free (a gateway's 502) is an outage, not a rollback: Run returns an error (as it
// does with a fresh gid), and the key is free again, nothing having started and no hook run (found by
// a defect hunt).
func TestChosenGIDManagerUnreachableIsAnError(t *testing.T) {
	b := setup(t)
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "bad gateway", http.StatusBadGateway)
	}))
	defer gw.Close()
	out, err := b.lc.Run(ctxb, hooks.RunParams{TransType: "saga", Call: call("chosen"), Status: &txstatus.Client{Server: gw.URL},
		GID: txstatus.NewGID(), Start: func(context.Context, string) error {
			t.Error("started without knowing whether the gid is free")
			return nil
		}})
	if err == nil {
		t.Fatalf("Run = %+v with no error; want one (the manager is unreachable)", out)
	}
	if rec := b.status(t, "chosen"); rec.Status != idemkit.StatusFailed {
		t.Fatalf("record %s, want FAILED (nothing started, the key free again)", rec.Status)
	}
	// The gid is not known to be free: no hook runs under it (see TestHeldGIDAfterAManagerBlipRunsNoHook).
	if got := b.j.list(); len(got) != 0 {
		t.Fatalf("hooks %v, want none", got)
	}
}

// TestRefusedStartAfterReconcilerFenceAgrees: a Reconciler fences the gid and records FAILED while the
// submit is on its way; DTM then refuses the submit. The record and the Outcome agree (Failed): Run
// reports it without error, as after a wait that outlived the lease (found by a defect hunt).
func TestRefusedStartAfterReconcilerFenceAgrees(t *testing.T) {
	b := setup(t)
	r := &hooks.Reconciler{Lifecycle: b.lc, Scopes: []string{"create-order"}, Manager: &fakeManager{statuses: map[string]txstatus.Status{}}, TransType: "saga"}
	out, err := b.lc.Run(ctxb, hooks.RunParams{TransType: "saga", Call: call("k"),
		Status: dtmAnswering(t, `{"transaction":{"status":"failed","trans_type":"tcc","rollback_reason":"`+txstatus.FenceReason+`"}}`),
		Start: func(ctx context.Context, gid string) error {
			b.clock.Advance(2 * time.Second)
			if n, err := r.RunOnce(ctx, b.clock.Now(), 10); n != 1 || err != nil {
				t.Errorf("reconciler settled %d, %v", n, err)
			}
			return &txstatus.RefusedError{Op: "submit", GID: gid, Message: "current status 'failed', cannot submit"}
		}})
	if err != nil || out.Status != txstatus.Failed {
		t.Fatalf("Run = %+v, %v; want Failed without error", out, err)
	}
	if rec := b.status(t, "k"); rec.Status != idemkit.StatusFailed {
		t.Fatalf("record %s, want FAILED", rec.Status)
	}
}

// TestLockLostAfterReconcilerRolledBackIsFenced: the claim's lock and lease ran out while the Before
// hook ran, and a Reconciler fenced the gid and recorded FAILED. Run's renewal finds the claim
// settled whether or not its lock ran out (the record is the claim: Claim.Extend renews it, fenced,
// when the lock is gone) and returns ErrFenced, as when the lock lived (TestNoStartOnALostClaim in
// saga); nothing starts. Before, a lost lock made Run roll the record back, fenced, and report Failed.
func TestLockLostAfterReconcilerRolledBackIsFenced(t *testing.T) {
	b := setup(t)
	g, err := idemkit.New(b.store, &idemkit.Options{Lease: time.Second, Now: b.clock.Now, Locker: memory.NewLocker(&memory.LockerOptions{Now: b.clock.Now})})
	if err != nil {
		t.Fatal(err)
	}
	lc := *b.lc
	lc.Guard = g
	r := &hooks.Reconciler{Lifecycle: &lc, Scopes: []string{"create-order"}, Manager: &fakeManager{statuses: map[string]txstatus.Status{}}, TransType: "saga"}
	lc.Before = hooks.BeforeTransactionFunc(func(ctx context.Context, _ *hooks.Txn) error {
		b.clock.Advance(2 * time.Second) // the lock and the lease run out; a reconciler pass runs
		if n, err := r.RunOnce(ctx, b.clock.Now(), 10); n != 1 || err != nil {
			t.Errorf("reconciler settled %d, %v", n, err)
		}
		return nil
	})
	out, err := lc.Run(ctxb, hooks.RunParams{TransType: "saga", Call: call("k"),
		Status: &txstatus.Client{Server: "http://127.0.0.1:1"}, // never asked
		Start: func(context.Context, string) error {
			t.Error("started a transaction whose claim was lost")
			return nil
		}})
	if !errors.Is(err, idemkit.ErrFenced) {
		t.Fatalf("Run = %+v, %v; want ErrFenced", out, err)
	}
	if rec := b.status(t, "k"); rec.Status != idemkit.StatusFailed {
		t.Fatalf("record %s, want FAILED", rec.Status)
	}
}
