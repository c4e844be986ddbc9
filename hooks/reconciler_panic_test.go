package hooks_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/sweep"
	"github.com/idemkit/idemkit/txstatus"
)

// TestReconcilerSurvivesAPanickingHook: a hook (or Observe) that panicked while the Reconciler settled
// one record took down the sweeper's goroutine, and with it the whole process the sweeper runs in —
// and, once restarted, again at the same record, which heads the pending listing: a crash loop, no
// other record ever settled. The panic is now that record's error (with its stack): the pass goes on
// with the other records, the record stays PROCESSING, and a later pass settles it once the hook works
// (found by a defect hunt).
func TestReconcilerSurvivesAPanickingHook(t *testing.T) {
	b := setup(t)
	m := &fakeManager{statuses: map[string]txstatus.Status{}}
	for _, gid := range []string{"boom-1", "ok-2"} {
		tx, _, err := b.lc.Begin(ctxb, "saga", gid, call(gid))
		if err != nil {
			t.Fatal(gid, err)
		}
		b.lc.Detach(ctxb, tx)
		m.set(gid, txstatus.Succeed)
		b.clock.Advance(100 * time.Millisecond)
	}
	b.clock.Advance(2 * time.Second) // every lease ran out
	broken := true
	commit := b.lc.OnCommit
	b.lc.OnCommit = hooks.CommitFunc(func(ctx context.Context, t *hooks.Txn, result []byte) error {
		if broken && t.GID == "boom-1" {
			panic("hook bug")
		}
		return commit.Commit(ctx, t, result)
	})

	r := &hooks.Reconciler{Lifecycle: b.lc, Scopes: []string{"create-order"}, Manager: m, TransType: "saga"}
	sw, err := sweep.New(&sweep.Options{Now: b.clock.Now}, r.Task())
	if err != nil {
		t.Fatal(err)
	}
	stats, err := sw.RunOnce(ctxb)
	if err == nil || !strings.Contains(err.Error(), "hook bug") || !strings.Contains(err.Error(), "boom-1") {
		t.Fatalf("pass with a panicking hook: %v; want an error naming the record and the panic", err)
	}
	if stats["reconcile"] != 1 {
		t.Fatalf("pass settled %d records, want the other one", stats["reconcile"])
	}
	if rec := b.status(t, "ok-2"); rec.Status != idemkit.StatusSucceeded {
		t.Fatalf("ok-2, behind the panicking record, is %s, want SUCCEEDED", rec.Status)
	}
	if rec := b.status(t, "boom-1"); rec.Status != idemkit.StatusProcessing {
		t.Fatalf("boom-1, whose hook panicked, is %s, want PROCESSING for a later pass", rec.Status)
	}

	broken = false
	b.clock.Advance(time.Minute)
	for range 3 { // the listing goes on after the last record looked at, then starts again at its head
		if _, err := sw.RunOnce(ctxb); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(time.Minute)
	}
	if rec := b.status(t, "boom-1"); rec.Status != idemkit.StatusSucceeded {
		t.Fatalf("boom-1 once its hook works is %s, want SUCCEEDED", rec.Status)
	}
}
