package hooks_test

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/sweep"
	"github.com/idemkit/idemkit/txstatus"
)

// TestReconcilerPagesPastRunningTransactions: records of transactions still running keep their lapsed
// lease and head the pending listing; a batch of them must not hide, pass after pass, a newer record
// whose transaction ended. The reconciler goes on listing after them.
func TestReconcilerPagesPastRunningTransactions(t *testing.T) {
	b := setup(t)
	m := &fakeManager{statuses: map[string]txstatus.Status{}}
	gids := []string{"running-1", "running-2", "running-3", "running-4", "running-5", "done-6"}
	for _, gid := range gids {
		tx, _, err := b.lc.Begin(ctxb, "saga", gid, call(gid))
		if err != nil {
			t.Fatal(gid, err)
		}
		b.lc.Detach(ctxb, tx)
		b.clock.Advance(100 * time.Millisecond)
	}
	for _, gid := range gids[:5] {
		m.set(gid, txstatus.Submitted)
	}
	m.set("done-6", txstatus.Succeed)
	b.clock.Advance(2 * time.Second) // every lease ran out

	r := &hooks.Reconciler{Lifecycle: b.lc, Scopes: []string{"create-order"}, Manager: m, TransType: "saga"}
	// A batch of 1: one RunOnce looks at 4 pages of 1, so the first pass passes over 4 running
	// transactions and the second reaches done-6.
	sw, err := sweep.New(&sweep.Options{BatchSize: 1, MaxBatches: 100, Now: b.clock.Now}, r.Task())
	if err != nil {
		t.Fatal(err)
	}
	for pass := 0; pass < 3; pass++ {
		if _, err := sw.RunOnce(ctxb); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(time.Minute)
	}
	if rec := b.status(t, "done-6"); rec.Status != idemkit.StatusSucceeded {
		t.Fatalf("after 3 sweeper passes the record of the succeeded transaction done-6 is %s, want SUCCEEDED", rec.Status)
	}
	for _, gid := range gids[:5] {
		if rec := b.status(t, gid); rec.Status != idemkit.StatusProcessing {
			t.Fatalf("%s, still running, is %s", gid, rec.Status)
		}
	}

	// Once the listing's end was reached it starts again at its head: a running transaction that
	// ends is settled by a later pass.
	m.set("running-1", txstatus.Failed)
	for pass := 0; pass < 3; pass++ {
		if _, err := sw.RunOnce(ctxb); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(time.Minute)
	}
	if rec := b.status(t, "running-1"); rec.Status != idemkit.StatusFailed {
		t.Fatalf("running-1, failed since, is %s, want FAILED", rec.Status)
	}
}
