package dtmmsg_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/dtmmsg"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/chaosdtmmsg"
	"github.com/idemkit/idemkit/txstatus"
)

// TestReconcilerObservesEachMessage: dtmmsg.Reconciler had no Observe, so the message records it
// settled, or could not settle, never reached the metrics and dashboards hooks.Reconciler's events
// feed (only a sweep error counted them). It now reports one hooks.ReconcileEvent per message record
// it looks at, as hooks.Reconciler does (found by a defect hunt).
func TestReconcilerObservesEachMessage(t *testing.T) {
	e := setup(t)
	pub := e.w.Publisher(e.dtm.URL(), e.svc, 0)
	e.delivered(t, pub, "obs1", 3)
	var events []hooks.ReconcileEvent
	answer := txstatus.Unknown // DTM forgot it: reported, not settled
	r := &dtmmsg.Reconciler{Lifecycle: &hooks.Lifecycle{Guard: e.w.Guard}, Barrier: e.w.Barrier, Scopes: []string{chaosdtmmsg.Scope},
		Status:  func(context.Context, string) (txstatus.Status, error) { return answer, nil },
		Observe: func(_ context.Context, ev *hooks.ReconcileEvent) { events = append(events, *ev) }}
	later := time.Now().Add(time.Hour) // the claim's lease ran out
	if _, err := r.RunOnce(ctxb, later, 10); err == nil {
		t.Fatal("RunOnce reported nothing for a message DTM has no record of")
	}
	if len(events) != 1 || events[0].Err == nil || events[0].Settled || events[0].Record.Key != "obs1" || events[0].Scope != chaosdtmmsg.Scope {
		t.Fatalf("events %+v; want one, for obs1 in scope %q, with its error, not settled", events, chaosdtmmsg.Scope)
	}
	events, answer = nil, txstatus.Succeed
	if n, err := r.RunOnce(ctxb, later, 10); n != 1 || err != nil {
		t.Fatalf("RunOnce = %d, %v; want the message settled", n, err)
	}
	if len(events) != 1 || events[0].Err != nil || !events[0].Settled || events[0].Status != txstatus.Succeed {
		t.Fatalf("events %+v; want one, settled, status succeed", events)
	}
	if rec, _ := e.w.Guard.Get(ctxb, chaosdtmmsg.Scope, "obs1"); rec == nil || rec.Status != idemkit.StatusSucceeded {
		t.Fatalf("record %+v; want SUCCEEDED", rec)
	}
}
