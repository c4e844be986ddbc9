package dtmmsg_test

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/dtmmsg"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/chaosdtmmsg"
)

// TestSagaReconcilerLeavesMessagesAlone: dtmmsg.Reconciler leaves the records of sagas and TCCs to
// hooks.Reconciler, so both may run over the same scopes (one Lifecycle starting sagas and publishing
// messages). hooks.Reconciler must then leave the messages' records alone: a saga Reconciler that
// took a delivered message (DTM's "msg", not a "saga") for a transaction that ran nothing rolled its
// record back, and a retry with the key published the message a second time.
func TestSagaReconcilerLeavesMessagesAlone(t *testing.T) {
	e := setup(t)
	pub := e.w.Publisher(e.dtm.URL(), e.svc, 0)
	status := e.delivered(t, pub, "shared", 3)
	later := time.Now().Add(time.Hour) // every lease ran out
	for _, tt := range []string{"saga", "tcc", ""} {
		rc := &hooks.Reconciler{Lifecycle: pub.Lifecycle, Scopes: []string{chaosdtmmsg.Scope}, Manager: status, TransType: tt}
		if _, err := rc.RunOnce(ctxb, later, 10); err != nil {
			t.Fatalf("hooks.Reconciler (%q): %v", tt, err)
		}
		if rec, err := e.w.Guard.Get(ctxb, chaosdtmmsg.Scope, "shared"); err != nil || rec.Status != idemkit.StatusProcessing {
			t.Fatalf("hooks.Reconciler (%q) settled the message's record: %+v %v", tt, rec, err)
		}
	}
	mr := &dtmmsg.Reconciler{Lifecycle: pub.Lifecycle, Barrier: e.w.Barrier, Scopes: []string{chaosdtmmsg.Scope}, Status: status.Status}
	if n, err := mr.RunOnce(ctxb, later, 10); n != 1 || err != nil {
		t.Fatalf("dtmmsg.Reconciler = %d, %v", n, err)
	}
	dup, err := e.w.PublishOrder(ctxb, pub, e.svc, "shared", 3, nil)
	if err != nil || !dup.Replayed {
		t.Fatalf("retry: %+v %v", dup, err)
	}
	if n := e.count(t, e.w.Tables.Orders, "idem_key = ?", "shared"); n != 1 {
		t.Fatalf("local transaction ran %d times", n)
	}
}
