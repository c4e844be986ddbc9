package dtmmsg_test

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/dtmmsg"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/chaosdtmmsg"
)

// TestReconcilerTrustsDTMOverASweptBarrier: a message was delivered (DTM reports it succeeded) but its
// record stayed PROCESSING longer than the barrier rows are kept (the reconciler was down, or the
// Commit hook kept failing), and the barrier sweeper (barrier.Gorm.DeleteOlder) deleted its local
// transaction's row. The Reconciler ran the back-check first, which found no row, wrote the
// "rollback" row and reported the local transaction as never committed: the record was rolled back
// FAILED, and the key's next call ran its local transaction and published a second time. A message
// DTM reports succeeded (or submitted) committed its local transaction, whatever the barrier says now.
func TestReconcilerTrustsDTMOverASweptBarrier(t *testing.T) {
	e := setup(t)
	pub := e.w.Publisher(e.dtm.URL(), e.svc, 0) // the record is left to the Reconciler
	status := e.delivered(t, pub, "swept1", 4)
	if _, err := e.w.Barrier.DeleteOlder(ctxb, time.Now().Add(time.Hour), 0); err != nil { // the sweeper, days later
		t.Fatal(err)
	}
	r := &dtmmsg.Reconciler{Lifecycle: &hooks.Lifecycle{Guard: e.w.Guard}, Barrier: e.w.Barrier,
		Scopes: []string{chaosdtmmsg.Scope}, Status: status.Status}
	if n, err := r.RunOnce(ctxb, time.Now().Add(time.Hour), 10); n != 1 || err != nil {
		t.Errorf("RunOnce = %d, %v; want the delivered message's record settled", n, err)
	}
	if rec, err := e.w.Guard.Get(ctxb, chaosdtmmsg.Scope, "swept1"); err != nil || rec.Status != idemkit.StatusSucceeded {
		t.Fatalf("record %+v, %v; want SUCCEEDED: the message was delivered", rec, err)
	}
	out, err := e.w.PublishOrder(ctxb, pub, e.svc, "swept1", 4, nil)
	if err != nil || !out.Replayed {
		t.Fatalf("retry of the key = %+v, %v; want the stored result", out, err)
	}
	if n := e.count(t, e.w.Tables.Orders, "idem_key = ?", "swept1"); n != 1 {
		t.Fatalf("the key's local transaction committed %d times", n)
	}
}
