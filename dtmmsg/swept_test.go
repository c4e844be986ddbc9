package dtmmsg_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/dtmmsg"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/chaosdtmmsg"
	"github.com/idemkit/idemkit/txstatus"
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

// TestReconcilerDoesNotBackCheckAnOldMessageDTMForgot: DTM has no record of a message whose record was
// claimed long ago (DTM's Redis store drops a finished transaction a day after it ended), and the
// barrier sweeper has deleted its local transaction's row. While the row was there the Reconciler
// reported the message for an operator; once it was swept, the back-check found no row and the
// record was rolled back FAILED, so the key's next call ran its local transaction and published a
// second time. As hooks.Reconciler does with FenceWithin, a record older than FenceWithin whose
// message DTM has no record of is reported and left PROCESSING, not back-checked.
func TestReconcilerDoesNotBackCheckAnOldMessageDTMForgot(t *testing.T) {
	e := setup(t)
	pub := e.w.Publisher(e.dtm.URL(), e.svc, 0)
	e.delivered(t, pub, "forgot1", 5)
	if _, err := e.w.Barrier.DeleteOlder(ctxb, time.Now().Add(time.Hour), 0); err != nil {
		t.Fatal(err)
	}
	r := &dtmmsg.Reconciler{Lifecycle: &hooks.Lifecycle{Guard: e.w.Guard}, Barrier: e.w.Barrier,
		Scopes: []string{chaosdtmmsg.Scope},
		Status: func(context.Context, string) (txstatus.Status, error) { return txstatus.Unknown, nil }} // DTM forgot it
	n, err := r.RunOnce(ctxb, time.Now().Add(2*hooks.DefaultFenceWithin), 10)
	if n != 0 || err == nil || !strings.Contains(err.Error(), "no record") {
		t.Errorf("RunOnce = %d, %v; want an error naming the message DTM has no record of", n, err)
	}
	if err != nil && !strings.Contains(err.Error(), "idemctl release --force") {
		t.Errorf("RunOnce error %q does not give the release that works on a claim with a gid", err)
	}
	if rec, err := e.w.Guard.Get(ctxb, chaosdtmmsg.Scope, "forgot1"); err != nil || rec.Status != idemkit.StatusProcessing {
		t.Fatalf("record %+v, %v; want it left PROCESSING for an operator: the message may have been delivered", rec, err)
	}
}

// TestReconcilerDoesNotBackCheckAnOldPreparedMessage: DTM still holds a message prepared long after its
// claim (its back-check cannot reach the service: a wrong QueryPrepared URL, DTM retrying it for ever),
// its local transaction committed, and the barrier sweeper has deleted that transaction's row. The
// Reconciler passed over it silently while the row was there; once it was swept, the back-check found
// no row, wrote the "rollback" row and rolled the record back FAILED: DTM then failed the message
// (never delivered) and the key's next call ran its local transaction a second time. A record older
// than FenceWithin whose message DTM still holds prepared is reported and left PROCESSING.
func TestReconcilerDoesNotBackCheckAnOldPreparedMessage(t *testing.T) {
	e := setup(t)
	pub := e.w.Publisher(e.dtm.URL(), e.svc, 0)
	e.delivered(t, pub, "stuck1", 6)
	if _, err := e.w.Barrier.DeleteOlder(ctxb, time.Now().Add(time.Hour), 0); err != nil {
		t.Fatal(err)
	}
	r := &dtmmsg.Reconciler{Lifecycle: &hooks.Lifecycle{Guard: e.w.Guard}, Barrier: e.w.Barrier,
		Scopes: []string{chaosdtmmsg.Scope},
		Status: func(context.Context, string) (txstatus.Status, error) { return txstatus.Prepared, nil }} // never back-checked
	n, err := r.RunOnce(ctxb, time.Now().Add(2*hooks.DefaultFenceWithin), 10)
	if n != 0 || err == nil || !strings.Contains(err.Error(), "prepared") {
		t.Errorf("RunOnce = %d, %v; want an error naming the message DTM still holds prepared", n, err)
	}
	if rec, err := e.w.Guard.Get(ctxb, chaosdtmmsg.Scope, "stuck1"); err != nil || rec.Status != idemkit.StatusProcessing {
		t.Fatalf("record %+v, %v; want it left PROCESSING for an operator: its local transaction committed", rec, err)
	}
}
