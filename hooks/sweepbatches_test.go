package hooks_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/sweep"
	"github.com/idemkit/idemkit/txstatus"
)

// TestOneStuckRecordDoesNotThrottleTheReconciler: a Reconciler reports the records it must leave to an
// operator (an old claim DTM has no record of) as an error on every pass, by design, after settling
// the others. Under a sweeper, whose pass runs a task batch after batch while batches come back full
// (up to MaxBatches), that error ended the task's pass after its first batch: with one such record at
// the head of the listing, a backlog of transactions that had ended was settled one batch per
// Interval (500 a minute by default) instead of MaxBatches batches per pass, every key of it in
// flight meanwhile. A batch that settled a full batch goes on, its error reported all the same.
func TestOneStuckRecordDoesNotThrottleTheReconciler(t *testing.T) {
	b := setup(t)
	claim := func(key, gid string) {
		t.Helper()
		cl, _, err := b.g.Begin(ctxb, idemkit.Call{Scope: "create-order", Key: key, GID: gid})
		if err != nil {
			t.Fatal(err)
		}
		cl.Detach(ctxb)
	}
	m := &fakeManager{statuses: map[string]txstatus.Status{}}
	claim("stuck", "g-stuck") // DTM will have no record of it: left to an operator once old
	b.clock.Advance(13 * time.Hour)
	const done = 6
	for i := range done {
		gid := fmt.Sprintf("g-done-%d", i)
		claim(fmt.Sprintf("k%d", i), gid)
		m.set(gid, txstatus.Succeed)
	}
	b.clock.Advance(2 * time.Second) // past the leases
	r := &hooks.Reconciler{Lifecycle: b.lc, Scopes: []string{"create-order"}, Manager: m, TransType: "saga"}
	s, err := sweep.New(&sweep.Options{BatchSize: 2, MaxBatches: 10, Now: b.clock.Now}, r.Task())
	if err != nil {
		t.Fatal(err)
	}
	stats, err := s.RunOnce(ctxb)
	if err == nil {
		t.Fatal("the stuck record was not reported")
	}
	if stats["reconcile"] != done {
		t.Fatalf("one pass settled %d of the %d ended transactions (%v); want all of them, the stuck record reported", stats["reconcile"], done, err)
	}
	if rec := b.status(t, "stuck"); rec.Status != idemkit.StatusProcessing {
		t.Fatalf("stuck record %s; want it left PROCESSING", rec.Status)
	}
}
